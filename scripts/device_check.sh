#!/usr/bin/env bash
# One prepared command for a fresh GPU machine (docs/GPU.md, "Device session"):
#
#   scripts/device_check.sh OUTDIR [--dry-run]
#
# installs the carried wheels (wheels/: ale-py, gymnasium; scripts/fetch_device_wheels.sh),
# takes the carried prebuilt extensions and cubin (.gpubuild/, scripts/prebuild_device.sh)
# when they load and match the sources (else builds / compiles there), runs the GPU tests,
# checks GPU == CPU bit for bit, benchmarks throughput (kernel designs if asked) and hybrid vs
# CPU-only vs GPU-only, and writes OUTDIR/report.json (+ OUTDIR/check.log, pytest.log).
# Every phase has a time limit inside a global deadline ($DEVICE_CHECK_SECONDS, default
# 470 s); a failing or timed-out phase is recorded and the script goes on.
# $DEVICE_CHECK_PHASES picks phases (default: compile info tests exact streams throughput
# hybrid; designs, measured on 2026-12-04, only when named), $LIMIT_<phase> overrides a
# phase's limit, $DEVICE_CHECK_TESTS the tests' -k.
# --dry-run: no GPU; the phases run on the host-emulated device with tiny sizes
# (checks this script and the report path on a CPU machine).
NAME=check
DEADLINE=${DEVICE_CHECK_SECONDS:-470}
source "$(dirname "$0")/device_lib.sh"
BENCH_FLAGS=()
[ "$DRY" = "--dry-run" ] && BENCH_FLAGS+=(--dry-run)

PHASES=" ${DEVICE_CHECK_PHASES:-compile info tests exact streams throughput hybrid} "
want() { [[ "$PHASES" == *" $1 "* ]]; }

# bench NAME LIMIT [ARGS...]: a benchmarks/gpu_bench.py phase with its own budget (LIMIT or
# $LIMIT_<name>), killed 10 s after it, so the phase writes its JSON itself.
bench() {
  local name=$1 limit; limit=$(limit_of "$1" "$2"); shift 2
  want "$name" || return 0
  local l; l=$(left); l=$((l - 20))
  [ "$limit" -gt "$l" ] && limit=$l
  run_phase "$name" $((limit + 10)) "$PY" benchmarks/gpu_bench.py "$name" --out "$WORK/$name.json" \
    --budget "$limit" "${BENCH_FLAGS[@]}" "$@"
}

log "device_check in $REPO, out $OUT, deadline ${DEADLINE}s ${DRY}"
{ nvidia-smi 2>&1 | head -20; "$PY" --version; uname -a; nproc; free -g; lscpu 2>&1 | head -25; } >>"$LOG" 2>&1

# 1-2. The carried wheels (ale-py has the ROMs) and the Cython extensions (device_lib.sh).
setup_python

# 3. The carried cubin when it was built from these sources (else NVRTC at first use).
if [ "$DRY" != "--dry-run" ]; then
  HASH=$("$PY" -c "from hybridsim.gpu import kernel_source_hash; print(kernel_source_hash())" 2>>"$LOG")
  CUBIN="$REPO/.gpubuild/vector_kernels_sm90.cubin"
  if [ -n "$HASH" ] && [ -f "$CUBIN" ] && [ "$(cat "$CUBIN.hash" 2>/dev/null)" = "$HASH" ]; then
    export HYBRIDSIM_GPU_CUBIN="$CUBIN"
    log "using carried cubin $CUBIN ($HASH)"
  else
    log "no matching carried cubin: NVRTC compiles at first use"
  fi
fi

# 4. NVRTC: one process per module part (base, fused, split, split_shared, materialize), in parallel,
# into CuPy's disk cache, which every later process reuses. Without a cubin this is the
# first compile, in the foreground; with one it runs in the background (NVRTC's time, and
# the exact phase then checks the NVRTC build too).
compile_parts() {
  local pids=() part
  for part in base fused split split_shared materialize; do
    phase "compile_$part" "$1" "$PY" benchmarks/gpu_bench.py compile --part "$part" \
      --out "$WORK/compile_$part.json" --budget "$1" --nvrtc-marker "$WORK/nvrtc_ready" "${BENCH_FLAGS[@]}" &
    pids+=($!)
  done
  wait "${pids[@]}"
}
COMPILE_PID=
if ! want compile; then
  :
elif [ -z "${HYBRIDSIM_GPU_CUBIN:-}" ] && [ "$DRY" != "--dry-run" ]; then
  compile_parts 330
else
  ( compile_parts 300 ) &
  COMPILE_PID=$!
fi

# 5. info: sizes, registers, local memory; the cubin is dropped if it fails to load.
bench info 90
if want info && [ -n "${HYBRIDSIM_GPU_CUBIN:-}" ] && ! grep -q '"status": "ok"' "$WORK/info.json" 2>/dev/null; then
  log "info failed with the cubin: dropping it, NVRTC from here on"
  unset HYBRIDSIM_GPU_CUBIN
  bench info 200
fi

# 6. GPU tests (skip cleanly without a device), then bit-exactness over long runs.
# Not test_gpu_equals_cpu: a step costs one environment's whole frame loop (0.1-0.4 s on
# an H200, BENCHMARKS.md), and the exact phase makes that comparison for more games, in
# lockstep. Not the emulated-device tests (marked `emulated` by tests/conftest.py): they
# build the host-emulation library (minutes on a fresh machine).
export DEVICE_CHECK_TESTS=${DEVICE_CHECK_TESTS:-"(device or balance or step_model) and not emulated_engines \
and not copies_where and not test_gpu_equals_cpu"}
run_tests() {
  cd tests && "$PY" -m pytest -v --durations=0 -rs test_gpu_device.py test_gpu_emulated.py -k "$DEVICE_CHECK_TESTS" \
    -m "not emulated" -p no:cacheprovider >"$OUT/pytest.log" 2>&1
  local rc=$?
  tail -5 "$OUT/pytest.log"
  return $rc
}
export -f run_tests
want tests && phase tests 80 run_tests
# Each game's 3000-step CPU trajectory (4 environments, frame skip 4) compared in 200 segments
# of 15 steps side by side: a device step costs about one environment's frame loop up to
# ~16K environments (BENCHMARKS.md, GPU-only: 0.21 s at 4,096, 0.22 s at 16,384), so the
# segments' 800 environments per run cost about what 128 did (a state of 800 is 160 MB:
# more would spend the phase on set_state/get_state).
bench exact 130 --games pong breakout ms_pacman space_invaders road_runner klax elevator_action \
  montezuma_revenge robotank pitfall2 --exact-segments 200 --nvrtc-marker "$WORK/nvrtc_ready"
bench streams 20 --games pong
# (a throughput read beside the background compile shares the host's cores with it: say so)
[ -n "$COMPILE_PID" ] && kill -0 "$COMPILE_PID" 2>/dev/null &&
  log "throughput starts while the background NVRTC compile still runs"
bench throughput 90 --games pong breakout ms_pacman
REGISTER_CUBINS=()  # prebuilt register-capped cubins from these sources (prebuild_device.sh)
for f in "$REPO"/.gpubuild/vector_kernels_sm90_maxreg*.cubin; do
  [ -n "${HASH:-}" ] && [ -f "$f" ] && [ "$(cat "$f.hash" 2>/dev/null)" = "$HASH" ] &&
    REGISTER_CUBINS+=("$(basename "$f" .cubin | sed 's/.*_//')=$f")
done
bench designs 30 --games breakout ${REGISTER_CUBINS[@]+--register-cubins "${REGISTER_CUBINS[@]}"}

[ -n "$COMPILE_PID" ] && wait "$COMPILE_PID" 2>/dev/null  # bounded by its limit; hybrid wants every core
bench hybrid 100 --games pong
# (limits: tests 80 + exact 130 + streams 20 + throughput 90 + hybrid 100 = 420 s; bench()
# caps a phase at the deadline's time left - 20 s, so the hybrid, last, keeps its 100 s when
# setup and info take 30 s or less: a carried cubin, as prebuild_device.sh makes)

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
  rm -f "$OUT/pong-h200/checkpoint.pt" "$OUT"/pong-h200/checkpoint.pt.*.tmp \
    "$OUT"/pong-h200/.disk_reserve*  # too big to bring back
  return $rc
}
export -f train_recipe
TRAIN_SECONDS=${DEVICE_CHECK_TRAIN_SECONDS:-0}
[ "$TRAIN_SECONDS" -gt 30 ] && phase train "$TRAIN_SECONDS" train_recipe $((TRAIN_SECONDS - 30))

"$PY" benchmarks/gpu_bench.py merge --out "$OUT/report.json" "$WORK"/*.json >>"$LOG" 2>&1 ||
  echo '{"status": "merge failed"}' >"$OUT/report.json"
log "done: $OUT/report.json"
rm -rf "$WORK"
