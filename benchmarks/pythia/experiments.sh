#!/usr/bin/env bash
# The Pythia 8 benchmark's table (docs/pythia-benchmark.md): each family pretrained on the 11
# processes, then the CP task at several training-set sizes from scratch, fine-tuned with the
# frozen backbone and fine-tuned fully, several seeds each; test AUC mean and spread.
#
# Usage (from the repository root, with data/pythia written by generate.py):
#   benchmarks/pythia/experiments.sh [RUNS_DIR]        # default runs/pythia
# FAMILIES, SIZES and SEEDS (space-separated) narrow the grid; GNN4C_BIN picks the binary.
# A run whose metrics.json exists is kept, so an interrupted table resumes where it stopped.
set -euo pipefail
runs=${1:-runs/pythia}
# Every registered family (each has configs/model/<name>.yaml), unless FAMILIES names some.
families=${FAMILIES:-$(basename -s .yaml "$(dirname "$0")"/../../configs/model/*.yaml)}
sizes=${SIZES:-300 1000 3000 10000}
seeds=${SEEDS:-7 8 9}
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${GNN4C_BIN:-}" ]; then
  (cd "$here/../.." && cargo build --release -q -p gnn4c-cli)
  GNN4C_BIN=${CARGO_TARGET_DIR:-$here/../../target}/release/gnn4colliders
fi
[ -d data/pythia/pretrain ] && [ -d data/pythia/cp ] \
  || { echo "no data/pythia here: run benchmarks/pythia/generate.py data/pythia first" >&2; exit 2; }
mkdir -p "$runs"
log=$runs/experiments.log

# One run unless it is done: NAME then the command's arguments.
run() {
  local name=$1; shift
  [ -f "$runs/$name/metrics.json" ] && return 0
  echo "== $name: $*" | tee -a "$log"
  local start=$SECONDS
  "$GNN4C_BIN" "$@" --run "$runs/$name" --overwrite --no-progress >> "$log" 2>&1
  echo "   $((SECONDS - start)) s" | tee -a "$log"
}

"$GNN4C_BIN" preprocess configs/data/pythia_pretrain.yaml >> "$log" 2>&1
"$GNN4C_BIN" preprocess configs/data/pythia_cp.yaml >> "$log" 2>&1
for family in $families; do
  run "pretrain_$family" train pythia_pretrain "model=$family"
done
for family in $families; do
  from=$runs/pretrain_$family/best.ckpt
  for size in $sizes; do
    for seed in $seeds; do
      set_size=(subset.train_events="$size")
      run "cp_${family}_${size}_scratch_$seed" train pythia_cp "model=$family" "${set_size[@]}" --seed "$seed"
      run "cp_${family}_${size}_frozen_$seed" finetune pythia_cp "model=$family" --from "$from" \
        --mode frozen_backbone trainer.lr=1e-3 "${set_size[@]}" --seed "$seed"
      run "cp_${family}_${size}_full_$seed" finetune pythia_cp "model=$family" --from "$from" \
        --mode full "${set_size[@]}" --seed "$seed"
    done
  done
done
python3 "$here/summarize.py" "$runs"
