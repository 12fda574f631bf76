#!/usr/bin/env bash
# A dataset of many files over a network (docs/performance.md, "A dataset of many files"):
# `preprocess --mode rebuild` of 48 demo files (4 seeds × the 12 pretraining processes, EVENTS
# events each) read locally, over root:// and http:// from a real XRootD (Debian's
# xrootd-server) on localhost, and through a proxy adding RTT_MS of round-trip latency
# (the `latency_proxy` binary), on 1 and 2 threads; ROUNDS rounds, every binary of BINS
# alternated in each (default: this checkout's release build). Then, the same way, a rerun of
# `preprocess` after a fifth seed's 12 files were added to the dataset (60 files, --mode auto).
# Prints one JSON line a run, then the medians.
#
# Usage: BINS="/path/old /path/new" PYTHON=/tmp/rootenv/bin/python \
#          benchmarks/net_dataset.sh DIR [ROUNDS] [EVENTS] [RTT_MS]
# DIR: a folder for the files and caches (kept, so a second run reuses the files). Run as a user
# xrootd may serve DIR to (as root, xrootd runs as the `xrootd` user).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd) rounds=${2:-3} events=${3:-5000} rtt=${4:-20}
py=${PYTHON:-python3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gnn4colliders/target}
if [ -z "${BINS:-}" ]; then
  (cd "$here/.." && cargo build --release -q -p gnn4c-cli)
  BINS=$CARGO_TARGET_DIR/release/gnn4colliders
fi
read -r -a bins <<< "$BINS"
first=${bins[0]}
for seed in 1 2 3 4 5; do
  [ -d "$dir/s$seed/pretrain" ] || "$first" generate --out "$dir/s$seed" --events "$events" --seed "$seed" > /dev/null
done
chmod -R a+rX "$dir"
# shellcheck source=reference/serve_xrootd.sh
. "$here/reference/serve_xrootd.sh"
serve_xrootd "$dir" "$rtt"
# One dataset config per way of reading: 12 samples of 4 files each (VIA.4.yaml), and of 5
# (VIA.5.yaml: a fifth seed added).
for via in local root http root_lat http_lat; do
  case $via in
    local) base=$dir/ ;; root) base=root://127.0.0.1:$xrd// ;; http) base=http://127.0.0.1:$http/ ;;
    root_lat) base=root://127.0.0.1:$lxrd// ;; http_lat) base=http://127.0.0.1:$lhttp/ ;;
  esac
  for seeds in 4 5; do
    "$py" - "$dir" "$base" "$seeds" > "$work/$via.$seeds.yaml" <<'PY'
import glob, os, sys
folder, base, seeds = sys.argv[1], sys.argv[2], int(sys.argv[3])
processes = sorted(os.path.basename(f)[:-5] for f in glob.glob(f"{folder}/s1/pretrain/*.root"))
print(f"name: dataset\ntree: output\nschema: vector\nclasses: [{', '.join(processes)}]\nsamples:")
for label, p in enumerate(processes):
    files = ", ".join(f"'{base}s{seed}/pretrain/{p}.root'" for seed in range(1, seeds + 1))
    print(f"  - {{name: {p}, files: [{files}], label: {label}}}")
PY
  done
done
out=$dir/dataset.jsonl
rm -f "$out"
preprocess() { # BIN VIA SEEDS THREADS MODE: the seconds it took
  local start end
  start=$(date +%s%N)
  "$1" preprocess "$work/$2.$3.yaml" --cache "$dir/cache_$2" --mode "$5" --threads "$4" \
    > "$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
  end=$(date +%s%N)
  echo "$(( (end - start) / 1000000 ))e-3"
}
for round in $(seq "$rounds"); do
  echo "round $round of $rounds" >&2
  for threads in 1 2; do
    for via in local root http root_lat http_lat; do
      for b in "${bins[@]}"; do
        s=$(preprocess "$b" "$via" 4 "$threads" rebuild)
        echo "{\"bin\":\"$b\",\"threads\":$threads,\"via\":\"$via\",\"s\":$s}" >> "$out"
      done
    done
  done
  # 12 files added to a cached dataset of 48: the rerun's time.
  for via in local root_lat http_lat; do
    for b in "${bins[@]}"; do
      preprocess "$b" "$via" 4 2 rebuild > /dev/null
      s=$(preprocess "$b" "$via" 5 2 auto)
      echo "{\"bin\":\"$b\",\"threads\":2,\"via\":\"$via added\",\"s\":$s}" >> "$out"
    done
  done
done
cat "$out"
"$py" - "$out" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    runs[(j["bin"], j["threads"], j["via"])].append(j["s"])
for (b, threads, via), times in sorted(runs.items()):
    print(f"{b}  {threads} thread(s)  {via:9s}  median {statistics.median(times):.3f} s  {times}")
PY
