#!/usr/bin/env bash
# One prepared command for a fresh GPU machine (docs/GPU.md, "Device session"):
#
#   scripts/device_check.sh OUTDIR [--dry-run]
#
# installs the carried wheels (wheels/: ale-py, gymnasium; scripts/fetch_device_wheels.sh),
# takes the carried prebuilt extensions and cubin (.gpubuild/, scripts/prebuild_device.sh)
# when they load and match the sources (else builds / compiles there), runs the GPU tests,
# checks GPU == CPU bit for bit, benchmarks throughput, kernel designs and hybrid vs
# CPU-only vs GPU-only, and writes OUTDIR/report.json (+ OUTDIR/check.log, pytest.log).
# Every phase has a time limit inside a global deadline ($DEVICE_CHECK_SECONDS, default
# 450 s); a failing or timed-out phase is recorded and the script goes on.
# --dry-run: no GPU; the phases run on the host-emulated device with tiny sizes
# (checks this script and the report path on a CPU machine).
set -u
OUT=${1:?usage: scripts/device_check.sh OUTDIR [--dry-run]}
DRY=${2:-}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
LOG="$OUT/check.log"
: >"$LOG"
PY=${PYTHON:-python3}
T0=$(date +%s)
DEADLINE=${DEVICE_CHECK_SECONDS:-450}
export PYTHONUNBUFFERED=1
export OUT DRY REPO WORK PY
BENCH_FLAGS=()
[ "$DRY" = "--dry-run" ] && BENCH_FLAGS+=(--dry-run)

log() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }

# phase NAME LIMIT CMD...: run with min(LIMIT, time left - 15 s); record rc and seconds.
phase() {
  local name=$1 limit=$2; shift 2
  local l; l=$(left); l=$((l - 15))
  [ "$limit" -gt "$l" ] && limit=$l
  if [ "$limit" -lt 5 ]; then
    log "phase $name: skipped (out of time)"
    echo "{\"status\": \"skipped: out of time\"}" >"$WORK/status_$name.json"
    return 0
  fi
  log "phase $name: start (limit ${limit}s)"
  local s; s=$(date +%s)
  # bash -c: a phase may be one of this script's (exported) functions
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" >>"$LOG" 2>&1
  local rc=$?
  local d=$(($(date +%s) - s))
  log "phase $name: rc=$rc after ${d}s"
  echo "{\"rc\": $rc, \"seconds\": $d, \"limit\": $limit, \"timed_out\": $([ $rc -eq 124 ] && echo true || echo false)}" \
    >"$WORK/status_$name.json"
  return 0
}
# bench NAME LIMIT [ARGS...]: a benchmarks/gpu_bench.py phase with its own budget.
bench() {
  local name=$1 limit=$2; shift 2
  local l; l=$(left); l=$((l - 20))
  [ "$limit" -gt "$l" ] && limit=$l
  phase "$name" $((limit + 10)) "$PY" benchmarks/gpu_bench.py "$name" --out "$WORK/$name.json" \
    --budget "$limit" "${BENCH_FLAGS[@]}" "$@"
}

log "device_check in $REPO, out $OUT, deadline ${DEADLINE}s ${DRY}"
{ nvidia-smi 2>&1 | head -20; "$PY" --version; uname -a; nproc; free -g; } >>"$LOG" 2>&1

# 1. Python packages missing there (ale-py carries the ROMs; gymnasium for the vector API).
install_wheels() {
  if ls wheels/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/hs_site wheels/*.whl
  else
    echo "no wheels/ (scripts/fetch_device_wheels.sh); using what is installed"
  fi
}
export -f install_wheels
if [ "$DRY" != "--dry-run" ]; then
  phase wheels 60 install_wheels
  export PYTHONPATH="/tmp/hs_site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi

# 2. The Cython extensions: carried prebuilt ones if they import, else build here.
extensions() {
  local tag; tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  if ls .gpubuild/"$tag"/*.so >/dev/null 2>&1 && [ "$DRY" != "--dry-run" ]; then
    cp .gpubuild/"$tag"/*.so hybridsim/
  fi
  if "$PY" -c "import hybridsim._vector, hybridsim._console, hybridsim._core, hybridsim._games, hybridsim._preprocess" \
      2>/dev/null; then
    echo "extensions import"
  else
    echo "building extensions"
    "$PY" setup.py build_ext --inplace -j "$(nproc)" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; return 1; }
    "$PY" -c "import hybridsim._vector"
  fi
}
export -f extensions
phase extensions 240 extensions

# 3. The carried cubin when it was built from these sources (else NVRTC at first use).
if [ "$DRY" != "--dry-run" ]; then
  HASH=$("$PY" -c "from hybridsim.gpu import kernel_source_hash; print(kernel_source_hash())" 2>>"$LOG")
  CUBIN="$REPO/.gpubuild/vector_kernels_sm90.cubin"
  if [ -f "$CUBIN" ] && [ "$(cat "$CUBIN.hash" 2>/dev/null)" = "$HASH" ]; then
    export HYBRIDSIM_GPU_CUBIN="$CUBIN"
    log "using carried cubin $CUBIN ($HASH)"
  else
    log "no matching carried cubin: NVRTC compiles at first use"
  fi
fi

# 4. NVRTC: one process per module part (base, fused, split, materialize), in parallel,
# into CuPy's disk cache, which every later process reuses. Without a cubin this is the
# first compile, in the foreground; with one it runs in the background (NVRTC's time, and
# the exact phase then checks the NVRTC build too).
compile_parts() {
  local pids=() part
  for part in base fused split materialize; do
    phase "compile_$part" "$1" "$PY" benchmarks/gpu_bench.py compile --part "$part" \
      --out "$WORK/compile_$part.json" --budget "$1" --nvrtc-marker "$WORK/nvrtc_ready" "${BENCH_FLAGS[@]}" &
    pids+=($!)
  done
  wait "${pids[@]}"
}
COMPILE_PID=
if [ -z "${HYBRIDSIM_GPU_CUBIN:-}" ] && [ "$DRY" != "--dry-run" ]; then
  compile_parts 330
else
  ( compile_parts 300 ) &
  COMPILE_PID=$!
fi

# 5. info: sizes, registers, local memory; the cubin is dropped if it fails to load.
bench info 90
if [ -n "${HYBRIDSIM_GPU_CUBIN:-}" ] && ! grep -q '"status": "ok"' "$WORK/info.json" 2>/dev/null; then
  log "info failed with the cubin: dropping it, NVRTC from here on"
  unset HYBRIDSIM_GPU_CUBIN
  bench info 200
fi

# 6. GPU tests (skip cleanly without a device), then bit-exactness over long runs.
run_tests() {
  cd tests && "$PY" -m pytest -q -rs test_gpu_device.py test_gpu_emulated.py -k "device or balance" \
    -p no:cacheprovider >"$OUT/pytest.log" 2>&1
  local rc=$?
  tail -5 "$OUT/pytest.log"
  return $rc
}
export -f run_tests
phase tests 120 run_tests
bench exact 75 --games pong breakout ms_pacman space_invaders --nvrtc-marker "$WORK/nvrtc_ready"
bench throughput 100 --games pong breakout ms_pacman
bench designs 35 --games breakout

[ -n "$COMPILE_PID" ] && wait "$COMPILE_PID" 2>/dev/null  # bounded by its limit; hybrid wants every core
bench hybrid 60 --games pong

# 8. Optional, when $DEVICE_CHECK_TRAIN_SECONDS > 0 (raise DEVICE_CHECK_SECONDS with it):
# the pong-h200 training recipe for that long; a SIGTERM at the limit ends it with a
# checkpoint, and OUTDIR/pong-h200/ keeps metrics.csv and the learning curve (issue 7).
train_recipe() {
  local extra=()
  [ "$DRY" = "--dry-run" ] && extra=(--gpu-emulate --device cpu --num-envs 4 --num-steps 5
    --num-minibatches 2 --total-frames 1600 --num-threads 1)
  # SIGTERM 30 s before the phase's limit: the run stops after its iteration and checkpoints
  timeout -s TERM "$1" "$PY" -m hybridsim train --config pong-h200 --log-dir "$OUT/pong-h200" "${extra[@]}"
  local rc=$?
  rm -f "$OUT/pong-h200/checkpoint.pt" "$OUT"/pong-h200/.disk_reserve*  # too big to bring back
  return $rc
}
export -f train_recipe
TRAIN_SECONDS=${DEVICE_CHECK_TRAIN_SECONDS:-0}
[ "$TRAIN_SECONDS" -gt 30 ] && phase train "$TRAIN_SECONDS" train_recipe $((TRAIN_SECONDS - 30))

"$PY" benchmarks/gpu_bench.py merge --out "$OUT/report.json" "$WORK"/*.json >>"$LOG" 2>&1 ||
  echo '{"status": "merge failed"}' >"$OUT/report.json"
log "done: $OUT/report.json"
rm -rf "$WORK"
