#!/usr/bin/env bash
# Issue 8's measurements for a GPU machine (docs/SCALING.md), a second prepared command:
#
#   scripts/device_scaling.sh OUTDIR [--dry-run]
#
# weak scaling of `hybridsim train` (CPU engine and learner, one core per rank) over
# 1, 2, 4, 8, 16 ranks, as many as the machine has cores; then one gradient allreduce of the
# Nature CNN between 2 ranks over MPI, gloo and NCCL (NCCL needs a GPU per rank: with one
# GPU it falls back to MPI, and the JSON's gradient_path says what ran). Writes OUTDIR/scaling.json
# (+ scaling.log). Needs mpiexec and a matching mpi4py: the carried wheels/mpi/ (mpich and
# mpi4py for cp312, scripts/fetch_device_wheels.sh), else what the machine has. Meant to
# follow scripts/device_check.sh on the same machine; it installs and builds what is missing.
# Deadline $DEVICE_SCALING_SECONDS, default 300 s. --dry-run: this machine, 1 and 2 ranks.
# $DEVICE_SCALING_ALLREDUCE: training's gradient path in the weak-scaling runs (default mpi;
# gloo's allreduce was the faster on 2026-12-04, training over it not measured yet).
NAME=scaling
DEADLINE=${DEVICE_SCALING_SECONDS:-300}
source "$(dirname "$0")/device_lib.sh"

log "device_scaling in $REPO, out $OUT, deadline ${DEADLINE}s ${DRY}"
{ nvidia-smi -L 2>&1; "$PY" --version; uname -a; nproc; free -g; lscpu 2>&1 | head -25; } >>"$LOG" 2>&1
setup_python

# mpich's wheel keeps libmpi in PREFIX/lib, which pip's --target drops: install with --prefix
# (--ignore-installed, not --force-reinstall, which would uninstall the image's mpi4py first).
MPI_PREFIX=/tmp/hs_mpi
install_mpi() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed \
    --prefix "$MPI_PREFIX" wheels/mpi/*.whl
}
export -f install_mpi
export MPI_PREFIX
if [ "$DRY" != "--dry-run" ] && ls wheels/mpi/*.whl >/dev/null 2>&1; then
  phase mpi_wheels 60 install_mpi
  # where pip put it under the prefix (lib/ or lib64/, site- or dist-packages, by distribution)
  MPI4PY_INIT=$(find "$MPI_PREFIX" -path '*/mpi4py/__init__.py' -print -quit)
  [ -n "$MPI4PY_INIT" ] && export PYTHONPATH="$(dirname "$(dirname "$MPI4PY_INIT")"):$PYTHONPATH"
  log "mpi4py from: ${MPI4PY_INIT:-not found under $MPI_PREFIX}"
  export LD_LIBRARY_PATH="$MPI_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export MPIEXEC="$MPI_PREFIX/bin/mpiexec"
else
  MPIEXEC=$(dirname "$(command -v "$PY")")/mpiexec  # pip's mpich puts it beside Python
  [ -x "$MPIEXEC" ] || MPIEXEC=mpiexec
  export MPIEXEC
fi
log "mpiexec: $MPIEXEC"

mpi_hello() {
  "$MPIEXEC" -n 2 "$PY" -c 'from mpi4py import MPI; c = MPI.COMM_WORLD; assert c.size == 2, c.size
print(c.rank, MPI.Get_library_version().splitlines()[0])'
}
export -f mpi_hello
phase mpi 30 mpi_hello

RANKS=1
for k in 2 4 8 16; do [ "$k" -le "$(nproc)" ] && RANKS="$RANKS,$k"; done
FRAMES=20000
[ "$DRY" = "--dry-run" ] && { RANKS=1,2; FRAMES=1600; }
phase weak_scaling 200 "$PY" benchmarks/weak_scaling.py --ranks "$RANKS" --backend cpu --device cpu \
  --num-envs 8 --frames-per-rank "$FRAMES" --repeats 1 --allreduce "${DEVICE_SCALING_ALLREDUCE:-mpi}" \
  --json "$WORK/weak_scaling.json"

paths="mpi gloo"
[ "$DRY" != "--dry-run" ] && paths="$paths nccl"
for path in $paths; do
  phase "allreduce_$path" 40 "$MPIEXEC" -n 2 "$PY" benchmarks/allreduce.py --allreduce "$path" \
    --repeats 30 --json "$WORK/allreduce_$path.json"
done

"$PY" benchmarks/gpu_bench.py merge --out "$OUT/scaling.json" "$WORK"/*.json >>"$LOG" 2>&1 ||
  echo '{"status": "merge failed"}' >"$OUT/scaling.json"
grep -h -A8 "weak scaling," "$LOG" | head -9
log "done: $OUT/scaling.json"
rm -rf "$WORK"
