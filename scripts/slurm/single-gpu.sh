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
#SBATCH --time=02:00:00
set -euo pipefail
exp=${1:-pretrain_multiclass}; shift || true
srun ./target/release/gnn4colliders train "$exp" environment=perlmutter --device cuda:0 "$@"
