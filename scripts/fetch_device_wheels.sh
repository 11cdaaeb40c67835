#!/usr/bin/env bash
# Download the Python packages scripts/device_check.sh installs on the device machine,
# which has Python 3.12, CuPy, torch, Cython, numpy and h5py but no network, no ale-py
# (the ROMs come from its package) and no gymnasium. Run here, with network; wheels/ is
# gitignored and travels with `run`'s carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p wheels
common=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp)
"$PY" -m pip download "${common[@]}" -d wheels/ --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 ale-py==0.12.1
"$PY" -m pip download "${common[@]}" -d wheels/ gymnasium==1.4.0 farama-notifications==0.0.6
# For scripts/device_scaling.sh: an MPI and the mpi4py built for it, installed there with
# --prefix (wheels/mpi/ is not part of device_check.sh's --target install).
mkdir -p wheels/mpi
"$PY" -m pip download "${common[@]}" -d wheels/mpi/ --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64 \
  --platform manylinux1_x86_64 mpich==5.0.2 mpi4py==4.1.2
ls -l wheels/ wheels/mpi/
