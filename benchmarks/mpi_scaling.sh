#!/usr/bin/env bash
# 1 vs N MPI ranks at a fixed per-rank batch: demo pretraining, 3 epochs of 8,192 events.
# Run from a folder holding the demo data and configs (after `gnn4colliders generate`):
#   cargo build --release --features mpi
#   benchmarks/mpi_scaling.sh target/release/gnn4colliders [N=2]
# Prints per epoch: setup, ranks, global events/s, training seconds, all-reduce seconds, steps.
set -euo pipefail
bin=$(realpath "${1:?path to a gnn4colliders built with --features mpi}")
n=${2:-2}
common=(pretrain_multiclass subset.train_events=8192 subset.val_events=1000 subset.test_events=1000
        trainer.max_epochs=3 --no-progress --overwrite)
"$bin" train "${common[@]}" --threads "$n" --run runs/bench_1rank_${n}threads > /dev/null
"$bin" train "${common[@]}" --threads 1 --run runs/bench_1rank_1thread > /dev/null
mpirun -np "$n" "$bin" train "${common[@]}" --threads 1 --run runs/bench_${n}ranks_1thread > /dev/null
for r in bench_1rank_${n}threads bench_1rank_1thread bench_${n}ranks_1thread; do
  python3 - "$r" <<'PY'
import json, sys
r = sys.argv[1]
for l in open(f"runs/{r}/history.jsonl"):
    x = json.loads(l)
    print(f"{r:24s} epoch {x['epoch']}  ranks {x.get('ranks', 1)}  {x['events_per_s']:7.1f} ev/s  "
          f"train {x['train_s']:6.2f} s  all-reduce {x.get('allreduce_s', 0):5.3f} s  steps {x['global_step']}")
PY
done
