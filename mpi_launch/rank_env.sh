#!/usr/bin/env bash
# Per-rank shim run by the MPI launcher in front of python: picks this rank's GPU, then
# execs the command. hybridsim-mpirun passes its settings in the environment:
#   HYBRIDSIM_GPUS_PER_NODE  unset: leave CUDA_VISIBLE_DEVICES alone; 0: hide all GPUs;
#                            G > 0: local rank L gets GPU (L mod G)
# If CUDA_VISIBLE_DEVICES is already a list (Slurm sets it to the job's GPUs), the rank
# takes the (L mod G)-th entry of that list, so it stays inside the allocation.
set -euo pipefail

# Print the error and end this rank. Under a PMI launcher (MPICH's hydra, Intel MPI) a
# rank that merely exits before MPI_Init leaves the other ranks waiting in MPI_Init for
# ever, but one killed by a signal makes the launcher end the whole job: so take SIGTERM
# there. Open MPI's mpirun ends the job on a non-zero exit anyway; a shell started by
# hand (or a one-rank job) gets plain exit status 2.
fail() {
  echo "rank_env.sh: $*" >&2
  if [ -n "${PMI_RANK:-}" ] && [ "${PMI_SIZE:-2}" != 1 ]; then
    trap - TERM
    kill -TERM "$$"
  fi
  exit 2
}

local_rank_var() {
  # MPICH/Intel MPI (hydra), Open MPI, MVAPICH, then Slurm's srun (its SLURM_LOCALID is
  # the batch step's 0 for every rank under mpiexec, hence last).
  local v
  for v in MPI_LOCALRANKID OMPI_COMM_WORLD_LOCAL_RANK MV2_COMM_WORLD_LOCAL_RANK \
           PMI_LOCAL_RANK SLURM_LOCALID; do
    if [ -n "${!v:-}" ]; then echo "$v"; return 0; fi
  done
  return 1
}

if [ -n "${HYBRIDSIM_GPUS_PER_NODE:-}" ]; then
  gpus=$HYBRIDSIM_GPUS_PER_NODE
  if ! [[ "$gpus" =~ ^(0|[1-9][0-9]{0,5})$ ]]; then
    fail "HYBRIDSIM_GPUS_PER_NODE must be a non-negative integer, got '$gpus'"
  fi
  if [ "$gpus" -eq 0 ]; then
    export CUDA_VISIBLE_DEVICES=""
  else
    var=$(local_rank_var) \
      || fail "no local-rank variable from the MPI launcher (MPI_LOCALRANKID," \
              "OMPI_COMM_WORLD_LOCAL_RANK, ...); cannot pick a GPU"
    slot=$(( ${!var} % gpus ))
    if [ "${CUDA_VISIBLE_DEVICES+set}" = set ] && [ -z "$CUDA_VISIBLE_DEVICES" ]; then
      :  # set and empty: GPUs hidden on purpose; keep them hidden
    elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
      IFS=, read -r -a visible <<< "$CUDA_VISIBLE_DEVICES"
      if [ "$slot" -ge "${#visible[@]}" ] || [ -z "${visible[$slot]}" ]; then
        fail "local rank ${!var} wants GPU slot $slot of CUDA_VISIBLE_DEVICES" \
             "($CUDA_VISIBLE_DEVICES), which has no entry there"
      fi
      export CUDA_VISIBLE_DEVICES=${visible[$slot]}
    else
      export CUDA_VISIBLE_DEVICES=$slot
    fi
  fi
fi
if [ -n "${HYBRIDSIM_RANK_ENV_VERBOSE:-}" ]; then
  echo "rank_env.sh: host $(hostname -s) local rank ${MPI_LOCALRANKID:-${OMPI_COMM_WORLD_LOCAL_RANK:-?}}" \
       "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>} OMP_NUM_THREADS=${OMP_NUM_THREADS-<unset>}" \
       "$(grep -s Cpus_allowed_list /proc/self/status | tr -s '\t' ' ')" >&2
fi
exec "$@"
