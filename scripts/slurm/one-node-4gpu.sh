#!/usr/bin/env bash
# One node, 4 A100s, one MPI rank per GPU (Slurm binds each rank to its own GPU, so every rank
# sees its GPU as cuda:0; with all GPUs visible, `--device cuda` picks cuda:<local rank>).
# Global batch = trainer.batch_size × 4: scale the learning rate yourself if you keep the
# per-rank batch (it is not changed for you).
#   sbatch scripts/slurm/one-node-4gpu.sh pretrain_multiclass [KEY=VALUE...]
#SBATCH --job-name=gnn4c-4gpu
#SBATCH --constraint=gpu
#SBATCH --qos=regular
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=32
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --time=02:00:00
set -euo pipefail
source scripts/slurm/site.sh              # binary, device, environment (run from the repository root)
source scripts/slurm/requeue-on-stop.sh   # stop at the time limit, requeue, resume
exp=${1:-pretrain_multiclass}; shift || true
export MPICH_GPU_SUPPORT_ENABLED=0   # gradients travel through host memory
run_requeued srun --cpu-bind=cores "$GNN4C_BIN" train "$exp" environment="$GNN4C_ENVIRONMENT" --device "$GNN4C_DEVICE" "$@"
