#!/usr/bin/env bash
# A sweep (`--multirun`) as a Slurm array, one point per task on one A100. Written for you by
#   gnn4colliders train EXP KEY=A,B OTHER=C,D … --multirun --slurm   (or finetune)
# as <run>/multirun/submit.sh, which runs
#   sbatch --array=0-<points - 1> scripts/slurm/sweep-array.sh EXP KEY=A,B … --run RUN
# Task K trains point K into <run>/multirun/<K>-<overrides>/ (resuming it if it has a checkpoint,
# nothing if it is finished) and rewrites <run>/multirun/summary.{csv,md} from the finished
# points. A task at its time limit stops with a checkpoint and requeues itself.
#SBATCH --job-name=gnn4c-sweep
#SBATCH --constraint=gpu
#SBATCH --qos=regular
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=32
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --time=02:00:00
set -euo pipefail
source scripts/slurm/site.sh              # binary, device, environment (run from the repository root)
source scripts/slurm/requeue-on-stop.sh   # stop at the time limit, requeue, resume
exp=${1:?the run config}; shift
point=${SLURM_ARRAY_TASK_ID:?submit as an array job: sbatch --array=0-N …}
# `train` or `finetune`: GNN4C_SWEEP_COMMAND, as submit.sh sets it.
run_requeued srun "$GNN4C_BIN" "${GNN4C_SWEEP_COMMAND:-train}" "$exp" environment="$GNN4C_ENVIRONMENT" --device "$GNN4C_DEVICE" --no-progress "$@" --multirun --point "$point"
