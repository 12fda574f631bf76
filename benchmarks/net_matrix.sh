#!/usr/bin/env bash
# Reading over a network (docs/performance.md, "Reading over a network"): the files of an
# io_matrix.sh folder served by a real XRootD (Debian's xrootd-server) on localhost, read by
# this project over root:// and http://, directly and through a proxy adding RTT_MS of round-trip
# latency (the `latency_proxy` binary), against the local files, and by uproot locally and over
# http:// (both latencies); beside them the link's own floor, each whole file fetched in one
# GET by curl; ROUNDS rounds, everything alternated. A second table gives the CPU seconds per
# read of this project's reader and of the server with the proxy, which share the machine's
# cores, and the least wall time their sum allows.
#
# Usage: PYTHON=/tmp/rootenv/bin/python benchmarks/net_matrix.sh DIR [ROUNDS] [REPS] [RTT_MS] [FILE ...]
# DIR: a folder io_matrix.sh wrote (its *.root and all.json); FILE: names in it (default: the
# uproot-written TTree, ROOT's ZSTD-5 RNTuple and LZMA-9 TTree), each with `:B1,B2,...` to read
# those branches or fields only (as an analysis reads a few columns of many). PYTHON: a venv
# with uproot and aiohttp (uproot reads http:// through fsspec). Run as a user xrootd may serve
# DIR to (as root, xrootd runs as the `xrootd` user: DIR must be readable by it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(cd "$1" && pwd) rounds=${2:-2} reps=${3:-3} rtt=${4:-20}
shift $(( $# < 4 ? $# : 4 ))
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(nano_like_ttree.root root_rntuple_zstd5.root root_ttree_lzma9.root)
py=${PYTHON:-python3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gnn4colliders/target}
(cd "$here/.." && cargo build --release -q -p gnn4c-benchmarks --bin benchmark_io)
# shellcheck source=reference/serve_xrootd.sh
. "$here/reference/serve_xrootd.sh"
serve_xrootd "$dir" "$rtt"
url_of() { # VIA FILE
  case $1 in
    local) echo "$dir/$2" ;; root) echo "root://127.0.0.1:$xrd//$2" ;; http) echo "http://127.0.0.1:$http/$2" ;;
    root_lat) echo "root://127.0.0.1:$lxrd//$2" ;; http_lat) echo "http://127.0.0.1:$lhttp/$2" ;;
  esac
}
# One listing per file and way of reading it.
for f in "${files[@]}"; do
  for via in local root http root_lat http_lat; do
    url=$(url_of "$via" "${f%%:*}")
    "$py" - "$dir/all.json" "$f" "$url" > "$work/$via.$f.json" <<'PY'
import json, os, sys
listing, name, url = sys.argv[1:]
name, _, only = name.partition(":")
entry = [e for e in json.load(open(listing)) if os.path.basename(e["file"]) == name][0]
entry = dict(entry, file=url)
if only:
    entry["branches"] = only.split(",")
print(json.dumps([entry]))
PY
  done
done
# CPU clock ticks (user and system) the server and the proxy have spent so far.
served_ticks() {
  local t=0 p
  for p in $(pgrep -f "$work/xrd.cfg") $proxy; do
    t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo $t
}
out=$dir/net.jsonl
rm -f "$out"
for round in $(seq "$rounds"); do
  echo "round $round of $rounds" >&2
  for f in "${files[@]}"; do
    for via in local root http root_lat http_lat; do
      for t in 1 2; do
        # The server's and the proxy's CPU seconds per read beside the reader's own (REPS reads
        # and a warm-up, which opens the file).
        before=$(served_ticks)
        line=$("$CARGO_TARGET_DIR/release/benchmark_io" --files "$work/$via.$f.json" "$reps" --reader-only --threads "$t" 2>&1 \
          | grep '^{' | grep '"gnn4c-rootio"')
        served=$(awk -v a="$before" -v b="$(served_ticks)" -v n="$reps" 'BEGIN {print (b - a) / 100 / (n + 1)}')
        echo "$line" | sed "s/^{/{\"via\":\"$via\",\"name\":\"$f\",\"served_cpu_s_per_read\":$served,/" >> "$out"
      done
    done
    for via in local http http_lat; do
      "$py" "$here/reference/uproot_io.py" --files "$work/$via.$f.json" "$reps" 2>/dev/null \
        | grep '^{' | sed "s/^{/{\"via\":\"$via\",\"name\":\"$f\",/" >> "$out"
    done
    # The link's own floor: the whole file in one GET (curl), the median of REPS.
    [ "$f" = "${f%%:*}" ] || continue
    for via in http http_lat; do
      secs=$(for _ in $(seq "$reps"); do curl -sf -o /dev/null -w '%{time_total}\n' "$(url_of "$via" "$f")"; done \
        | sort -n | awk '{t[NR] = $1} END {print t[int((NR + 1) / 2)]}')
      echo "{\"via\":\"$via\",\"name\":\"$f\",\"reader\":\"link\",\"threads\":0,\"median_s\":$secs}" >> "$out"
    done
  done
done
"$py" - "$out" "$rtt" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    who = "uproot" if "uproot" in j["reader"] else j["reader"].replace("gnn4c-rootio", "this project")
    runs[(j["name"], j["threads"], who, j["via"])].append(j["median_s"])
rtt = sys.argv[2]
cols = [("this project", v) for v in ("local", "root", "http", "root_lat", "http_lat")]
cols += [("uproot", v) for v in ("local", "http", "http_lat")]
names = {"local": "local", "root": "root://", "http": "http://",
         "root_lat": f"root:// +{rtt} ms", "http_lat": f"http:// +{rtt} ms"}
print("| file | threads | " + " | ".join(f"{w}, {names[v]}" for w, v in cols) + " |")
print("|---|---|" + "---|" * len(cols))
for name in sorted({k[0] for k in runs}):
    for t in (1, 2):
        cells = []
        for who, via in cols:
            got = runs.get((name, t, who, via))
            if not got:
                cells.append("–")
                continue
            m = statistics.median(got)
            base = statistics.median(runs[(name, t, who, "local")])
            cells.append(f"{m:.3f} s" + ("" if via == "local" else f" ({m / base:.2f}×)"))
        print(f"| {name} | {t} | " + " | ".join(cells) + " |")
# Where the reader, the server and the proxy share this machine's cores: the CPU seconds each
# spends per read, and the least wall time their sum allows on all the cores.
cpu = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "cpu_s_per_read" in j:
        cpu[(j["name"], j["threads"], j["via"])].append(
            (j["cpu_s_per_read"], j["served_cpu_s_per_read"], j["cores"]))
print()
print("| file | threads | " + " | ".join(names[v] for v in names) + " |")
print("|---|---|" + "---|" * len(names))
for name in sorted({k[0] for k in cpu}):
    for t in (1, 2):
        cells = []
        for via in names:
            got = cpu.get((name, t, via))
            if not got:
                cells.append("–")
                continue
            ours = statistics.median(g[0] for g in got)
            served = statistics.median(g[1] for g in got)
            cells.append(f"{ours:.3f} + {served:.3f} s (≥ {(ours + served) / got[0][2]:.3f} s)")
        print(f"| {name} | {t} | " + " | ".join(cells) + " |")
for name in sorted({k[0] for k in runs}):
    link = [(names[v], runs.get((name, 0, "link", v))) for v in ("http", "http_lat")]
    print(f"{name}: the whole file in one GET (curl): "
          + ", ".join(f"{n} {statistics.median(g):.3f} s" for n, g in link if g))
PY
