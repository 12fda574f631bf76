#!/usr/bin/env bash
# Sourced by the training scripts: `run_requeued CMD...` runs a `gnn4colliders train`/`finetune`
# command so that a job reaching its time limit stops cleanly and continues in a requeued job.
#
# With `#SBATCH --signal=B:USR1@120` Slurm sends SIGUSR1 to this batch shell 120 s before the
# limit (up to a minute earlier: it looks at time limits every 30 s or so). It is passed on to
# the command (srun passes it to every rank). gnn4colliders finishes the step under way, writes
# last.ckpt with the loader position and exits 75; the job then requeues itself
# (`#SBATCH --requeue`), and the requeued job (SLURM_RESTART_COUNT > 0) adds --resume.
# `scancel --signal=USR1 --batch JOBID` stops a job the same way by hand.
#
# SIGTERM (a plain `scancel`, or the time limit itself) is sent by Slurm to every process of the
# job: the command stops with a checkpoint on its own (if it can within KillWait; then SIGKILL)
# and this shell only waits for it (passing it on would be a second signal: stop at once). Such
# a job is not requeued: submitting it again with --resume continues from last.ckpt. Any exit
# code other than 75 ends the job with it.
_gnn4c_stop=0 _gnn4c_term=0
trap '_gnn4c_stop=1' USR1   # a warning that comes before the command has started is kept
trap '_gnn4c_term=1' TERM

run_requeued() {
  local cmd=("$@")
  if [[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]]; then
    cmd+=(--resume)
    echo "requeued job (restart ${SLURM_RESTART_COUNT}): resuming from last.ckpt"
  fi
  "${cmd[@]}" &
  local pid=$! rc=0 passed=0
  # Pass the warning on once (a second signal would stop the command at once).
  _gnn4c_pass() {
    if [[ $_gnn4c_stop -eq 1 && $passed -eq 0 ]]; then
      passed=1
      kill -USR1 "$pid" 2>/dev/null || true
    fi
  }
  trap '_gnn4c_stop=1; _gnn4c_pass' USR1
  _gnn4c_pass
  # `wait` returns early when a trapped signal arrives: wait again until the command has ended.
  while :; do
    wait "$pid" && rc=0 || rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  trap '_gnn4c_stop=1' USR1
  if [[ $rc -eq 75 && $_gnn4c_stop -eq 1 && $_gnn4c_term -eq 0 ]]; then
    echo "stopped before the time limit with a checkpoint: requeueing job ${SLURM_JOB_ID}"
    scontrol requeue "${SLURM_JOB_ID}"
    exit 0
  elif [[ $rc -eq 75 ]]; then
    echo "stopped with a checkpoint (scancel or the time limit): not requeued; submit the job again with --resume to continue"
  fi
  return $rc
}
