#!/usr/bin/env bash
# Sourced by the training scripts: `run_requeued CMD...` runs a `gnn4colliders train`/`finetune`
# command so that a job reaching its time limit stops cleanly and continues in a requeued job.
#
# With `#SBATCH --signal=B:USR1@120` Slurm sends SIGUSR1 to this batch shell 120 s before the
# limit; it is forwarded to srun (which forwards it to every rank). gnn4colliders finishes the
# step under way, writes last.ckpt with the loader position and exits 75; the job then requeues
# itself (`#SBATCH --requeue`), and the requeued job (SLURM_RESTART_COUNT > 0) adds --resume.
# `scancel --signal=USR1 --batch JOBID` stops a job the same way by hand. Any other exit code
# ends the job with it.
run_requeued() {
  local cmd=("$@")
  if [[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]]; then
    cmd+=(--resume)
    echo "requeued job (restart ${SLURM_RESTART_COUNT}): resuming from last.ckpt"
  fi
  "${cmd[@]}" &
  local pid=$! rc=0
  trap 'kill -USR1 "$pid" 2>/dev/null || true' USR1 TERM
  # `wait` returns early when a trapped signal arrives: wait again until the command has ended.
  while :; do
    wait "$pid" && rc=0 || rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - USR1 TERM
  if [[ $rc -eq 75 ]]; then
    echo "stopped before the time limit with a checkpoint: requeueing job ${SLURM_JOB_ID}"
    scontrol requeue "${SLURM_JOB_ID}"
    exit 0
  fi
  return $rc
}
