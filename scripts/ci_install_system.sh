#!/usr/bin/env bash
# Install the system packages the tests use beyond pip: Slurm (slurmctld, slurmd, client
# commands) and munge for tests/test_slurm.py, Open MPI (Debian's mpirun) for
# tests/test_openmpi.py, shellcheck for the launch scripts' lint test, and btrfs-progs for
# the disk-quota tests (a btrfs qgroup: a real quota, which statvfs does not show).
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$1" >/dev/null 2>&1; }
packages=()
for cmd in slurmctld slurmd sbatch munged; do
  have "$cmd" || { packages+=(slurm-wlm munge); break; }
done
have mpirun.openmpi || packages+=(openmpi-bin)
have shellcheck || packages+=(shellcheck)
have mkfs.btrfs || packages+=(btrfs-progs)
if [ "${#packages[@]}" -eq 0 ]; then
  echo "ci_install_system: slurm-wlm, munge, openmpi-bin, shellcheck and btrfs-progs already installed"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 || { echo "ci_install_system: needs apt-get (Debian/Ubuntu) to install ${packages[*]}" >&2; exit 1; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "ci_install_system: need root or sudo to install ${packages[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends keeps out mail servers and docs; slurm-wlm pulls slurmctld,
# slurmd and slurm-client.
$SUDO apt-get install -y -qq --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  "${packages[@]}" >/dev/null
# The packages may start system services where an init system runs; the tests start
# their own daemons with their own config, so stop those (ignore failures: no systemd).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl stop slurmctld slurmd munge >/dev/null 2>&1 || true
fi
echo "ci_install_system: installed ${packages[*]}"
