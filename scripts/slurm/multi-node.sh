#!/usr/bin/env bash
# N nodes × 4 A100s, one MPI rank per GPU:  sbatch --nodes=N scripts/slurm/multi-node.sh EXP [KEY=VALUE...]
# Build the cache once first (`gnn4colliders preprocess configs/data/X.yaml`, or
# scripts/slurm/preprocess-array.sh on CPU nodes): rank 0 validates it and the others only read.
# Long runs: add trainer.checkpoint_every_steps=N and resubmit with --resume after the time limit.
#SBATCH --job-name=gnn4c-multinode
#SBATCH --constraint=gpu
#SBATCH --qos=regular
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=32
#SBATCH --time=04:00:00
set -euo pipefail
exp=${1:-pretrain_multiclass}; shift || true
export MPICH_GPU_SUPPORT_ENABLED=0
srun --cpu-bind=cores ./target/release/gnn4colliders train "$exp" environment=perlmutter --device cuda:0 "$@"
