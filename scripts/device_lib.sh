# Shared by scripts/device_check.sh (issue 6) and scripts/device_scaling.sh (issue 8): the
# output folder and log, time-limited phases, the carried wheels and the Cython extensions.
# Source it after setting NAME (the log's name) and DEADLINE; it reads the script's $1, $2.
set -u
OUT=${1:?usage: $0 OUTDIR [--dry-run]}
DRY=${2:-}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
LOG="$OUT/$NAME.log"
: >"$LOG"
PY=${PYTHON:-python3}
T0=$(date +%s)
export PYTHONUNBUFFERED=1
export OUT DRY REPO WORK PY

log() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }

# A phase's limit: $LIMIT_<name> (e.g. LIMIT_exact=60) when set, else the script's.
limit_of() {
  local var="LIMIT_$1"
  echo "${!var:-$2}"
}

# phase NAME LIMIT CMD...: run_phase with $LIMIT_<name> in place of LIMIT when set.
phase() {
  local name=$1 limit; limit=$(limit_of "$1" "$2"); shift 2
  run_phase "$name" "$limit" "$@"
}

# run_phase NAME LIMIT CMD...: run with min(LIMIT, time left - 15 s); record rc and seconds.
run_phase() {
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

# Python packages missing there (ale-py carries the ROMs; gymnasium for the vector API).
install_wheels() {
  if ls wheels/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/hs_site wheels/*.whl
  else
    echo "no wheels/ (scripts/fetch_device_wheels.sh); using what is installed"
  fi
}
export -f install_wheels

# The Cython extensions: carried prebuilt ones if built from these sources and they
# import, else build here.
source "$REPO/scripts/extension_sources.sh"
# carried_extensions_fit TAG: whether .gpubuild/TAG/sources.hash names these sources.
carried_extensions_fit() {
  [ "$(cat .gpubuild/"$1"/sources.hash 2>/dev/null)" = "$(extension_sources_hash "$REPO")" ]
}
extensions() {
  local tag; tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  if ls .gpubuild/"$tag"/*.so >/dev/null 2>&1 && [ "$DRY" != "--dry-run" ]; then
    if carried_extensions_fit "$tag"; then
      cp .gpubuild/"$tag"/*.so hybridsim/
    else
      echo "the carried .gpubuild/$tag extensions were built from other sources: not used"
    fi
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
export -f extensions extension_sources_hash carried_extensions_fit

# What the machine and this Python show hybridsim (`hybridsim info`): the report's "node".
node_info() {
  "$PY" -m hybridsim info --json >"$WORK/node.json"
}
export -f node_info

# setup_python: the phases `wheels`, `extensions` and `node`; PYTHONPATH puts the wheels first.
setup_python() {
  if [ "$DRY" != "--dry-run" ]; then
    phase wheels 60 install_wheels
    export PYTHONPATH="/tmp/hs_site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
  else
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
  fi
  phase extensions 240 extensions
  phase node 60 node_info
}
