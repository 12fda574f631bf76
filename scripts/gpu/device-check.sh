#!/usr/bin/env bash
# One prepared run on a GPU machine: every CUDA number of docs/performance.md.
#
# Build here (CPU machine), then carry the stripped binaries (the device tool carries ignored
# paths of ≤ 64 MiB in all):
#   cargo build --release --features cuda -p gnn4c-cli --bin gnn4colliders
#   cargo build --release --features cuda -p gnn4c-benchmarks --bin benchmark_training --bin benchmark_inference
#   mkdir -p gpu-bin && for b in gnn4colliders benchmark_training benchmark_inference; do
#     strip -o gpu-bin/$b "$CARGO_TARGET_DIR/release/$b"; done
# and on the device: `scripts/gpu/device-check.sh gpu-bin "$OUT"` (about 6 minutes on an H200).
#
# It records: the GPU (nvidia-smi), CUDA training steps at batch 512 and 2048 (forward, backward,
# optimiser split, device synchronised around each part; first step reported apart as setup),
# inference by batch size, device memory sampled every 0.5 s (nvidia-smi), and for each family
# (Edge_Network, ROOT-Transformer, PFN) a short end-to-end training run whose trace and history tell
# whether the GPU waits for data (`wait_for_batch`), `predict` on the GPU, and the ONNX export
# of the GPU-trained model (with its sample batch).
set -uo pipefail
BIN=$(realpath "${1:?usage: device-check.sh BIN_DIR OUT_DIR}")
OUT=${2:?usage: device-check.sh BIN_DIR OUT_DIR}
mkdir -p "$OUT" && OUT=$(realpath "$OUT")
# DEVICE=cpu (or wgpu, on a --features wgpu build) runs the same script without CUDA, to check the
# script itself.
DEVICE=${DEVICE:-cuda}
log() { echo "== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }

log "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee -a "$OUT/summary.txt"
nproc | tee -a "$OUT/summary.txt"

# Device memory in the background for the whole run.
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -lms 500 \
  > "$OUT/gpu_memory.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT

for b in 512 2048; do
  log "benchmark_training batch $b, $DEVICE"
  timeout 120 "$BIN/benchmark_training" "$b" 20 --device "$DEVICE" \
    > "$OUT/training_${DEVICE%%:*}_$b.md" 2> "$OUT/training_${DEVICE%%:*}_$b.jsonl"
  echo "rc=$?" >> "$OUT/summary.txt"; cat "$OUT/training_${DEVICE%%:*}_$b.md" >> "$OUT/summary.txt"
done

log "benchmark_inference, $DEVICE"
timeout 120 "$BIN/benchmark_inference" 16384 --device "$DEVICE" \
  > "$OUT/inference_${DEVICE%%:*}.md" 2> "$OUT/inference_${DEVICE%%:*}.jsonl"
echo "rc=$?" >> "$OUT/summary.txt"; cat "$OUT/inference_${DEVICE%%:*}.md" >> "$OUT/summary.txt"

WORK=$(mktemp -d)
cp -r configs "$WORK/"
(cd "$WORK" && timeout 60 "$BIN/gnn4colliders" generate --out data/demo --events 6000 > "$OUT/generate.log" 2>&1)
# Every registered family: each has its settings in configs/model/<name>.yaml.
for family in $(basename -s .yaml configs/model/*.yaml); do
  log "end to end, $family: 2 epochs of pretraining on $DEVICE with a trace, predict on $DEVICE, ONNX export"
  (
    cd "$WORK" || exit 1
    timeout 200 "$BIN/gnn4colliders" train pretrain_multiclass model=$family --device "$DEVICE" \
      --run "runs/$family" trainer.max_epochs=2 subset.train_events=32768 subset.val_events=8192 \
      --profile-trace "$OUT/train_trace_$family.json" > "$OUT/train_$family.log" 2>&1
    echo "train rc=$?"
    cp "runs/$family/history.jsonl" "$OUT/history_$family.jsonl" 2>/dev/null
    timeout 120 "$BIN/gnn4colliders" predict "runs/$family" --device "$DEVICE" --split test \
      --out "predict_$family" --format npz > "$OUT/predict_$family.log" 2>&1
    echo "predict rc=$?"; tail -2 "$OUT/predict_$family.log"
    timeout 60 "$BIN/gnn4colliders" export "runs/$family" --out "$OUT/$family.onnx" > "$OUT/export_$family.log" 2>&1
    echo "export rc=$?"; cat "$OUT/export_$family.log"
  ) | tee -a "$OUT/summary.txt"
  tail -5 "$OUT/train_$family.log" >> "$OUT/summary.txt"
  # Span totals of the trace: `wait_for_batch` is the training loop waiting for the loader.
  if command -v python3 >/dev/null 2>&1 && [ -f "$OUT/train_trace_$family.json" ]; then
    python3 - "$OUT/train_trace_$family.json" <<'PY' | tee -a "$OUT/summary.txt"
import collections, json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
total, open_at = collections.Counter(), {}
for e in ev:
    key = (e.get("tid"), e.get("name"))
    if e.get("ph") == "X":
        total[e["name"]] += e.get("dur", 0) / 1e6
    elif e.get("ph") == "B":
        open_at.setdefault(key, []).append(e["ts"])
    elif e.get("ph") == "E" and open_at.get(key):
        total[e["name"]] += (e["ts"] - open_at[key].pop()) / 1e6
shown = total.most_common(12)
shown += [(n, total[n]) for n in ("wait_for_batch",) if n not in dict(shown)]
for name, s in shown:
    print(f"span {name:16s} {s:9.3f} s")
PY
  fi
done
rm -rf "$WORK"
log "done"
