#!/usr/bin/env bash
# N nodes × 4 A100s, one MPI rank per GPU:  sbatch --nodes=N scripts/slurm/multi-node.sh EXP [KEY=VALUE...]
# Build the cache once first (`gnn4colliders preprocess configs/data/X.yaml`, or
# scripts/slurm/preprocess-array.sh on CPU nodes): rank 0 validates it and the others only read.
# Long runs: the job stops before its time limit with a checkpoint and requeues itself
# (requeue-on-stop.sh); trainer.checkpoint_every_steps=N also bounds what a crash loses.
#SBATCH --job-name=gnn4c-multinode
#SBATCH --constraint=gpu
#SBATCH --qos=regular
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=32
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --time=04:00:00
set -euo pipefail
source scripts/slurm/site.sh              # binary, device, environment (run from the repository root)
source scripts/slurm/requeue-on-stop.sh   # stop at the time limit, requeue, resume
exp=${1:-pretrain_multiclass}; shift || true
export MPICH_GPU_SUPPORT_ENABLED=0
run_requeued srun --cpu-bind=cores "$GNN4C_BIN" train "$exp" environment="$GNN4C_ENVIRONMENT" --device "$GNN4C_DEVICE" "$@"
