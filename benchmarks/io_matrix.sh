#!/usr/bin/env bash
# The reading matrix of docs/performance.md: the same NanoAOD-like content written by uproot and
# by ROOT 6.40 in every codec, read by this project (`benchmark_io --files`, as `preprocess`
# reads), by the codec alone (the same baskets or pages decompressed, nothing else: the limit),
# by uproot and by ROOT's C++ readers, on 1 and 2 threads; ROUNDS rounds, the four alternated.
#
# Usage: PYTHON=/tmp/rootenv/bin/python benchmarks/io_matrix.sh DIR [ROUNDS] [REPS]
# PYTHON: a venv with `root==0.1a12`, uproot 5.7.7 and awkward (see benchmarks/README.md).
# Writes DIR/*.root once (seeded), then DIR/{ours,uproot,root}.jsonl and prints the table.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$1 rounds=${2:-3} reps=${3:-3}
py=${PYTHON:-python3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gnn4colliders/target}
mkdir -p "$dir"
if [ ! -f "$dir/root_matrix.json" ]; then
  "$py" "$here/reference/nano_like.py" 200000 "$dir"
  "$py" "$here/reference/root_matrix.py" write "$dir/nano_like_ttree.root" "$dir"
fi
"$py" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])) + json.load(open(sys.argv[2]))))' \
  "$dir/nano_like.json" "$dir/root_matrix.json" > "$dir/all.json"
(cd "$here/.." && cargo build --release -q -p gnn4c-benchmarks --bin benchmark_io)
rm -f "$dir"/{ours,uproot,root}.jsonl
for round in $(seq "$rounds"); do
  echo "round $round of $rounds" >&2
  "$CARGO_TARGET_DIR/release/benchmark_io" --files "$dir/all.json" "$reps" 2>> "$dir/ours.jsonl"
  "$py" "$here/reference/uproot_io.py" --files "$dir/all.json" "$reps" >> "$dir/uproot.jsonl"
  "$py" "$here/reference/root_matrix.py" time "$dir/all.json" "$reps" 2>/dev/null | grep '^{' >> "$dir/root.jsonl"
done
"$py" "$here/reference/io_table.py" "$dir"/{ours,uproot,root}.jsonl
