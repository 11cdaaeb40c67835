# Sourced by the batch scripts in this folder (bash). Defines:
#   hybridsim_check_placement LAUNCH...   logs where each rank of LAUNCH would run
#   hybridsim_resume_flag LOG_DIR   prints --resume when LOG_DIR/checkpoint.pt exists
#   hybridsim_budget              prints TOTAL_FRAMES, or the number in $TOTAL_FRAMES_FILE
#   hybridsim_setting OPTION NAME VALUE   appends OPTION VALUE to train_args, unless CONFIG
#                                 (a recipe) is set and the job did not set NAME itself
#                                 (HYBRIDSIM_JOB_SETS, which the template fills first)
#   run_preemptible CMD...        runs CMD in the background; on SIGUSR1 to the batch shell
#                                 forwards SIGUSR1 to CMD and waits for it; if CMD exits
#                                 with 3 (hybridsim wrote a checkpoint and stopped),
#                                 requeues this job (not on 4, a full disk). Returns CMD's
#                                 exit status.
#
# Why the batch shell does this: with `#SBATCH --signal=B:USR1@T` Slurm sends SIGUSR1,
# T seconds (up to 60 s more, sbatch(1)) before the time limit, to the batch shell only,
# none of its children; bash runs a trap only once the foreground command ends, so the
# training runs in the background and the shell sits in `wait`, which a trapped signal
# interrupts (bash(1), SIGNALS). mpiexec (MPICH hydra, Open MPI's mpirun) passes
# SIGUSR1 on to every rank.

HYBRIDSIM_PREEMPTED_EXIT_CODE=3  # hybridsim.cli.PREEMPTED_EXIT_CODE
HYBRIDSIM_STORAGE_EXIT_CODE=4  # hybridsim.cli.STORAGE_EXIT_CODE: disk full, not requeued

# Until the training runs, only note the signal: bash's default action for SIGUSR1 would
# end the batch shell.
_hybridsim_early_signal=0
trap '_hybridsim_early_signal=1' USR1

# MPICH's hydra starts its per-node proxies with srun inside a job; where Slurm binds
# tasks (task/affinity), that one-task step would pin every rank of the node to the
# proxy's core. Leave the proxy unbound: hydra's -bind-to places the ranks.
export HYDRA_LAUNCHER_EXTRA_ARGS="${HYDRA_LAUNCHER_EXTRA_ARGS---cpu-bind=none}"

hybridsim_log() { echo "[$(date -u +%FT%TZ) job ${SLURM_JOB_ID:-?}] $*"; }

# hybridsim_check_placement LAUNCH...: the launch's --check first (hybridsim-mpirun), one line
# per rank (host, cores it may use, threads, GPUs) in the job's output, so a run's log
# shows where its ranks ran. A failed check is only logged: the training's own launch then
# says what is wrong. CHECK_PLACEMENT=0 skips it.
hybridsim_check_placement() {
  [ "${CHECK_PLACEMENT:-1}" = 0 ] && return 0
  hybridsim_log "where the ranks run (hybridsim-mpirun --check):"
  timeout 120 "$@" --check 2>&1 | sed 's/^/  /'
  local status=${PIPESTATUS[0]}
  [ "$status" = 0 ] || hybridsim_log "placement check failed (exit status $status); training anyway"
  return 0
}

hybridsim_resume_flag() {
  if [ -f "$1/checkpoint.pt" ]; then
    hybridsim_log "resuming from $1/checkpoint.pt (restart ${SLURM_RESTART_COUNT:-0})" >&2
    echo --resume
  fi
}

hybridsim_budget() {
  local frames=$TOTAL_FRAMES
  if [ -n "${TOTAL_FRAMES_FILE:-}" ]; then
    if [ ! -e "$TOTAL_FRAMES_FILE" ]; then  # may appear later, for a requeued start: say so
      hybridsim_log "note: TOTAL_FRAMES_FILE=$TOTAL_FRAMES_FILE does not exist (yet): budget TOTAL_FRAMES=$frames" >&2
    elif [ ! -f "$TOTAL_FRAMES_FILE" ] || [ ! -r "$TOTAL_FRAMES_FILE" ]; then
      hybridsim_log "error: TOTAL_FRAMES_FILE=$TOTAL_FRAMES_FILE is not a readable file" >&2
      return 2
    else
      frames=$(tr -d '[:space:]' < "$TOTAL_FRAMES_FILE")
      hybridsim_log "budget from $TOTAL_FRAMES_FILE: $frames frames" >&2
    fi
  fi
  if ! [[ "$frames" =~ ^[0-9]+$ ]]; then
    hybridsim_log "error: total frames must be a number, got '$frames'" >&2
    return 2
  fi
  echo "$frames"
}

hybridsim_extra_args() {
  # EXTRA_ARGS into the array `extra`, split on spaces. Refused: quotes and backslashes
  # (they would reach train as literal characters: a --log-dir named "'/scratch/my"), line
  # breaks (read takes the first line only) and a leading ~ (not expanded here)
  case "${EXTRA_ARGS:-}" in
    *[\"\'\\]*|*$'\n'*)
      echo "error: EXTRA_ARGS='$EXTRA_ARGS' has quotes, backslashes or line breaks; it is split on spaces and not parsed as shell words: pass values without spaces, or settings with spaces in a --config file" >&2
      return 2 ;;
  esac
  case " ${EXTRA_ARGS:-}" in
    *[[:space:]]~*)
      echo "error: EXTRA_ARGS='$EXTRA_ARGS' has a word starting with ~, which is not expanded there: write the full path (\$HOME/...)" >&2
      return 2 ;;
  esac
  # shellcheck disable=SC2034  # the templates use it
  read -r -a extra <<< "${EXTRA_ARGS:-}"
}

# With CONFIG the recipe's settings stand: a template default would override them (the
# command line beats the config file), so only the settings the job itself gives are passed.
hybridsim_setting() {
  if [ -z "${CONFIG:-}" ] || [[ "${HYBRIDSIM_JOB_SETS:-}" == *" $2 "* ]]; then
    train_args+=("$1" "$3")
  fi
}

hybridsim_requeue() {
  # The job must allow it: #SBATCH --requeue (or JobRequeue=1). Slurm then ends this
  # shell and runs the script again from the top, with the same SLURM_JOB_ID and
  # SLURM_RESTART_COUNT one higher, once resources are free.
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    hybridsim_log "not in a Slurm job: nothing to requeue; run again to resume from the checkpoint"
    return 0
  fi
  if ! scontrol requeue "$SLURM_JOB_ID"; then
    hybridsim_log "error: scontrol requeue $SLURM_JOB_ID failed; resubmit to continue from the checkpoint"
  fi
}

run_preemptible() {
  local child rc
  if [ "$_hybridsim_early_signal" = 1 ]; then
    hybridsim_log "SIGUSR1 came before the training started; requeueing without running it"
    hybridsim_requeue
    return "$HYBRIDSIM_PREEMPTED_EXIT_CODE"
  fi
  _hybridsim_signalled=0
  "$@" &
  child=$!
  # shellcheck disable=SC2064  # the pid is fixed now
  trap "_hybridsim_signalled=1; hybridsim_log 'SIGUSR1: asking the training to checkpoint and stop'; kill -USR1 $child 2>/dev/null" USR1
  while :; do
    _hybridsim_signalled=0
    wait "$child"
    rc=$?
    # a trapped signal ends `wait` early with a status above 128: wait again
    if [ "$_hybridsim_signalled" = 1 ] && [ "$rc" -gt 128 ]; then continue; fi
    break
  done
  trap - USR1
  if [ "$rc" -eq "$HYBRIDSIM_PREEMPTED_EXIT_CODE" ]; then
    hybridsim_log "training checkpointed and stopped; requeueing"
    hybridsim_requeue
  elif [ "$rc" -eq "$HYBRIDSIM_STORAGE_EXIT_CODE" ]; then
    # a requeued job would find the same full disk: leave it to a person
    hybridsim_log "training stopped because the run directory could not be written (disk full?); not requeued: free space and resubmit, it resumes from the checkpoint"
  else
    hybridsim_log "training exited with status $rc"
  fi
  return "$rc"
}
