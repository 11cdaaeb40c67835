#!/usr/bin/env bash
# Install Slurm (slurmctld, slurmd, client commands) and munge for tests/test_slurm.py.
# Idempotent: does nothing when the commands are already there. Needs root (or sudo).
set -euo pipefail

need=()
for cmd in slurmctld slurmd sbatch munged; do
  command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if [ "${#need[@]}" -eq 0 ]; then
  echo "ci_install_slurm: slurm-wlm and munge already installed"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 || { echo "ci_install_slurm: needs apt-get (Debian/Ubuntu) to install ${need[*]}" >&2; exit 1; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "ci_install_slurm: need root or sudo to install ${need[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends keeps out mail servers and docs; slurm-wlm pulls slurmctld,
# slurmd and slurm-client.
$SUDO apt-get install -y -qq --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  slurm-wlm munge >/dev/null
# The packages may start system services where an init system runs; the tests start
# their own daemons with their own config, so stop those (ignore failures: no systemd).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl stop slurmctld slurmd munge >/dev/null 2>&1 || true
fi
echo "ci_install_slurm: installed slurm-wlm and munge"
