#!/usr/bin/env bash
# Preprocessing as a Slurm array on CPU nodes: task K of N reads input files K, K+N, K+2N, …
# (`preprocess --part K/N`); one job without --array then writes the manifest (and reads any file
# a failed task left), giving the cache one process would write:
#   jid=$(sbatch --parsable --array=0-15 scripts/slurm/preprocess-array.sh configs/data/X.yaml \
#         $SCRATCH/gnn4colliders/cache/X)
#   sbatch --dependency=afterany:$jid scripts/slurm/preprocess-array.sh configs/data/X.yaml \
#         $SCRATCH/gnn4colliders/cache/X
# The cache folder must be <environment cache_dir>/<dataset name> for `train` to find it.
# A task killed by the time limit keeps the files it finished: resubmit, only the rest is read.
#SBATCH --job-name=gnn4c-preprocess
#SBATCH --constraint=cpu
#SBATCH --qos=shared
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=16
#SBATCH --mem=32G
#SBATCH --time=02:00:00
set -euo pipefail
source scripts/slurm/site.sh   # the binary (run from the repository root)
data=${1:?dataset config}
cache=${2:?cache folder}
part=()
if [[ -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
  part=(--part "${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}")
fi
"$GNN4C_BIN" preprocess "$data" --cache "$cache" \
  --threads "${SLURM_CPUS_PER_TASK:-1}" "${part[@]}"
