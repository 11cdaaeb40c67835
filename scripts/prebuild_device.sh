#!/usr/bin/env bash
# Prebuild what scripts/device_check.sh would otherwise build on the device machine
# (device time is scarce; CPU time here is not), into the gitignored .gpubuild/:
#   .gpubuild/cp312/*.so                   the Cython extensions for the device's Python 3.12
#                                          (stripped; device_check.sh rebuilds if they fail to import)
#   .gpubuild/cp312/sources.hash           what they were built from (extension_sources.sh):
#                                          device_check.sh carries them only while it matches
#   .gpubuild/vector_kernels_sm90.cubin    cuda/vector_kernels.cu by nvcc for sm_90 (H100/H200),
#   .gpubuild/vector_kernels_sm90.cubin.hash   the sources' hash it was built from
#                                          (device_check.sh uses it only when the hash matches).
#   .gpubuild/vector_kernels_sm90_maxregR.cubin (+ .hash)   the same with at most R registers
#                                          a thread, R in $PREBUILD_REGISTER_CAPS (default
#                                          "128 168"; the designs phase times them)
# Needs: nvcc, and a Python 3.12 with numpy 2.x, Cython and setuptools ($PY312).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
PY312=${PY312:-python3.12}
mkdir -p .gpubuild/cp312
HASH=$(PYTHONPATH="$REPO" python3 -c "from hybridsim.gpu import kernel_source_hash; print(kernel_source_hash())")
if [ "$(cat .gpubuild/vector_kernels_sm90.cubin.hash 2>/dev/null)" != "$HASH" ]; then
  nice nvcc -std=c++17 -DNDEBUG -arch=sm_90 -cubin -split-compile=0 -Xptxas -v -I cuda cuda/vector_kernels.cu \
    -o .gpubuild/vector_kernels_sm90.cubin 2>.gpubuild/ptxas_sm90.log || { tail -30 .gpubuild/ptxas_sm90.log; exit 1; }
  echo "$HASH" >.gpubuild/vector_kernels_sm90.cubin.hash
fi
# Register-capped builds for the designs phase (device_check.sh passes those whose hash
# matches): every kernel but the fused and split_shared designs', at most R registers a thread.
for R in ${PREBUILD_REGISTER_CAPS-128 168}; do
  f=.gpubuild/vector_kernels_sm90_maxreg$R.cubin
  if [ "$(cat "$f.hash" 2>/dev/null)" != "$HASH" ]; then
    nice nvcc -std=c++17 -DNDEBUG -DHS_VEC_NO_FUSED -DHS_VEC_NO_SPLIT_SHARED -arch=sm_90 -cubin -split-compile=0 -maxrregcount="$R" \
      -Xptxas -v -I cuda cuda/vector_kernels.cu -o "$f" 2>".gpubuild/ptxas_sm90_maxreg$R.log" ||
      { tail -30 ".gpubuild/ptxas_sm90_maxreg$R.log"; exit 1; }
    echo "$HASH" >"$f.hash"
  fi
done
source scripts/extension_sources.sh
EXT_HASH=$(extension_sources_hash "$REPO")
if [ "$(cat .gpubuild/cp312/sources.hash 2>/dev/null)" != "$EXT_HASH" ]; then
  rm -f .gpubuild/cp312/*.so .gpubuild/cp312/sources.hash
  TMP=$(mktemp -d)
  git ls-files | tar cf - -T - | tar xf - -C "$TMP"
  (cd "$TMP" && nice "$PY312" setup.py build_ext --inplace -j "$(nproc)" >build.log 2>&1) || { tail -30 "$TMP/build.log"; exit 1; }
  for f in "$TMP"/hybridsim/*.cpython-312-*.so; do
    strip --strip-debug -o ".gpubuild/cp312/$(basename "$f")" "$f"
  done
  rm -rf "$TMP"
  echo "$EXT_HASH" >.gpubuild/cp312/sources.hash
fi
ls -l .gpubuild .gpubuild/cp312
