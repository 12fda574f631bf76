#!/usr/bin/env bash
# One A100: a plain process, no MPI needed.
#   sbatch scripts/slurm/single-gpu.sh pretrain_multiclass [KEY=VALUE...]
#SBATCH --job-name=gnn4c-1gpu
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
exp=${1:-pretrain_multiclass}; shift || true
run_requeued srun "$GNN4C_BIN" train "$exp" environment="$GNN4C_ENVIRONMENT" --device "$GNN4C_DEVICE" "$@"
