#!/usr/bin/env bash
# Sourced by the scripts in scripts/slurm/: what differs from site to site, with NERSC
# Perlmutter's values as the defaults. Set any of these in the shell you call sbatch from (sbatch
# passes the environment on); the #SBATCH lines (constraint, QOS, GPUs and CPUs per task, time)
# are overridden by sbatch's own options, e.g. `sbatch -A m1234 --qos=debug --time=00:30:00 …`.
GNN4C_BIN=${GNN4C_BIN:-./target/release/gnn4colliders}  # the binary (build-perlmutter.sh builds it)
GNN4C_DEVICE=${GNN4C_DEVICE:-cuda:0}       # each rank's device: Slurm shows a rank its own GPU as cuda:0
GNN4C_ENVIRONMENT=${GNN4C_ENVIRONMENT:-perlmutter}   # configs/environment/<name>.yaml
