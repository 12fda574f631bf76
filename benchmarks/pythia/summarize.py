"""The Pythia 8 benchmark's tables from the runs experiments.sh wrote: pretraining per family,
and the CP task's test AUC (mean ± sample standard deviation over seeds, and each seed's) per
family, training-set size and mode. Markdown on stdout, and RUNS/summary.csv.

Usage: python benchmarks/pythia/summarize.py RUNS_DIR
"""

import csv
import json
import os
import re
import statistics
import sys

MODES = [("scratch", "from scratch"), ("frozen", "frozen backbone"), ("full", "fine-tuned fully")]
# Every registered family (each has configs/model/<name>.yaml), with the paper's names where a
# family has one, in this order first.
LABELS = {"root_gnn": "Edge_Network", "root_transformer": "ROOT-Transformer", "pfn": "PFN"}
_MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "model")
_NAMES = sorted(f[: -len(".yaml")] for f in os.listdir(_MODELS) if f.endswith(".yaml"))
FAMILIES = [(n, LABELS[n]) for n in LABELS if n in _NAMES] + [
    (n, n) for n in _NAMES if n not in LABELS
]


def metrics(path):
    with open(os.path.join(path, "metrics.json")) as f:
        return json.load(f)


def main():
    runs = sys.argv[1]
    names = sorted(os.listdir(runs))
    print("Pretraining (test split):\n")
    print("| family | best epoch | test macro AUC | test accuracy |")
    print("|---|---|---|---|")
    for family, label in FAMILIES:
        path = os.path.join(runs, f"pretrain_{family}")
        if os.path.exists(os.path.join(path, "metrics.json")):
            m = metrics(path)
            print(f"| {label} | {m['best_epoch']} | {m['test']['auc_macro']:.4f} "
                  f"| {m['test']['accuracy']:.4f} |")
    cells = {}
    pattern = re.compile(r"cp_(.+)_(\d+)_(scratch|frozen|full)_(\d+)$")
    for name in names:
        hit = pattern.match(name)
        if not hit or not os.path.exists(os.path.join(runs, name, "metrics.json")):
            continue
        family, size, mode, seed = hit.group(1), int(hit.group(2)), hit.group(3), int(hit.group(4))
        auc = metrics(os.path.join(runs, name))["test"]["auc_macro"]
        cells.setdefault((family, size, mode), []).append((seed, auc))
    rows = []
    print("\nThe CP task, test AUC: mean ± spread over seeds (each seed's in brackets):\n")
    print("| family | training events | " + " | ".join(m[1] for m in MODES) + " |")
    print("|---|---|" + "---|" * len(MODES))
    sizes = sorted({k[1] for k in cells})
    for family, label in FAMILIES:
        for size in sizes:
            out = []
            for mode, _ in MODES:
                got = sorted(cells.get((family, size, mode), []))
                aucs = [a for _, a in got if a is not None]
                if not aucs:
                    out.append("–")
                    continue
                mean = statistics.mean(aucs)
                spread = statistics.stdev(aucs) if len(aucs) > 1 else 0.0
                each = ", ".join(f"{a:.3f}" for a in aucs)
                out.append(f"{mean:.3f} ± {spread:.3f} ({each})")
                rows.append({"family": family, "training_events": size, "mode": mode,
                             "seeds": " ".join(str(s) for s, _ in got),
                             "auc_mean": round(mean, 5), "auc_std": round(spread, 5)})
            if any(c != "–" for c in out):
                print(f"| {label} | {size:,} | " + " | ".join(out) + " |")
    with open(os.path.join(runs, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, ["family", "training_events", "mode", "seeds", "auc_mean", "auc_std"])
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
