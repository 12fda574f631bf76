"""The reading matrix as a Markdown table, from the JSON lines of `benchmark_io --files`,
`uproot_io.py --files` and `root_matrix.py time` (several rounds appended): per file and thread
count, the median over rounds of each reader's median seconds (this project, the codec alone,
the floor: read, codec and one pass), and the ratios the goals in docs/performance.md are
stated in.

Usage: python io_table.py OURS.jsonl UPROOT.jsonl ROOT.jsonl
"""

import collections
import json
import statistics
import sys


def main():
    times = collections.defaultdict(list)
    files = []
    for path in sys.argv[1:]:
        for line in open(path):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            reader = r["reader"].split(" ")[0]
            times[(reader, r["file"], r["threads"])].append(r["median_s"])
            if r["file"] not in files:
                files.append(r["file"])
    med = {k: statistics.median(v) for k, v in times.items()}
    print("| file | threads | this project s | codec alone s | floor s | uproot s | ROOT C++ s | ours / codec | floor / codec | ours / floor | uproot / ours | ROOT / ours | 2-thread speed-up (ours) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for f in files:
        for t in (1, 2):
            ours, codec = med.get(("gnn4c-rootio", f, t)), med.get(("codec", f, t))
            floor = med.get(("floor", f, t))
            up, root = med.get(("uproot", f, t)), med.get(("ROOT", f, t))
            one = med.get(("gnn4c-rootio", f, 1))

            def s(x):
                return f"{x:.3f}" if x is not None else "—"

            def r(a, b):
                return f"{a / b:.2f}×" if a is not None and b else "—"

            print(
                f"| {f} | {t} | {s(ours)} | {s(codec)} | {s(floor)} | {s(up)} | {s(root)} | {r(ours, codec)} | {r(floor, codec)} | {r(ours, floor)} | {r(up, ours)} | {r(root, ours)} | {r(one, ours) if t == 2 else ''} |"
            )
    rounds = max(len(v) for v in times.values()) if times else 0
    print(f"\n(medians over {rounds} rounds)")


if __name__ == "__main__":
    main()
