"""Writes a NanoAOD-like file of N events twice, as a TTree and as an RNTuple (uproot's
`mkrntuple`), for `benchmark_io --files` against `uproot_io.py --files`.

Usage: python nano_like.py N OUT_DIR
Writes OUT_DIR/nano_like_ttree.root (tree `Events`, baskets of 10,000 entries),
OUT_DIR/nano_like_rntuple.root (RNTuple `Events`, clusters of 10,000 entries) and OUT_DIR/nano_like.json (the listing both benchmarks read). Seeded; zstd level 5
for both. Collections: Jet (≈ 6 per event, 6 fields), Electron, Muon (≈ 1 each, 4 fields),
Photon (≈ 0.5, 3 fields); scalars: run, event, MET_pt, MET_phi, genWeight, PV_npvs.
"""

import json
import pathlib
import sys

import awkward as ak
import numpy as np
import uproot


def jagged(rng, counts, scale, kind="f"):
    n = int(counts.sum())
    if kind == "i":
        flat = rng.integers(-1, 2, n).astype(np.int32)
    else:
        flat = (rng.exponential(scale, n)).astype(np.float32)
    return ak.unflatten(flat, counts)


def main():
    n, out = int(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(42)
    data = {
        "run": np.full(n, 1, np.uint32),
        "event": np.arange(n, dtype=np.uint64),
        "MET_pt": rng.exponential(40, n).astype(np.float32),
        "MET_phi": rng.uniform(-np.pi, np.pi, n).astype(np.float32),
        "genWeight": rng.normal(1, 0.1, n).astype(np.float32),
        "PV_npvs": rng.poisson(20, n).astype(np.int32),
    }
    collections = {
        "Jet": (6, ["pt", "eta", "phi", "mass", "btagDeepB", "qgl"]),
        "Electron": (1, ["pt", "eta", "phi", "charge"]),
        "Muon": (1, ["pt", "eta", "phi", "charge"]),
        "Photon": (0.5, ["pt", "eta", "phi"]),
    }
    jagged_fields = {}
    for name, (mean, fields) in collections.items():
        counts = rng.poisson(mean, n)
        for f in fields:
            kind = "i" if f == "charge" else "f"
            jagged_fields[f"{name}_{f}"] = jagged(rng, counts, 30.0, kind)
    chunk = 10_000
    groups = {
        name: ak.zip({x: jagged_fields[f"{name}_{x}"] for x in fields})
        for name, (_, fields) in collections.items()
    }
    columns = {**data, **groups}
    with uproot.recreate(out / "nano_like_ttree.root", compression=uproot.ZSTD(5)) as f:
        tree = f.mktree("Events", {k: v.type if isinstance(v, ak.Array) else v.dtype for k, v in columns.items()})
        for start in range(0, n, chunk):
            tree.extend({k: v[start : start + chunk] for k, v in columns.items()})
    flat = {**data, **jagged_fields}
    with uproot.recreate(out / "nano_like_rntuple.root", compression=uproot.ZSTD(5)) as f:
        ntuple = f.mkrntuple("Events", ak.Array({k: v[:chunk] for k, v in flat.items()}))
        for start in range(chunk, n, chunk):
            ntuple.extend(ak.Array({k: v[start : start + chunk] for k, v in flat.items()}))
    with uproot.open(out / "nano_like_ttree.root") as f:
        tree_branches = [b for b in f["Events"].keys() if not f["Events"][b].branches]
    with uproot.open(out / "nano_like_rntuple.root") as f:
        fields = list(f["Events"].keys())
    listing = [
        {"file": str(out / "nano_like_ttree.root"), "tree": "Events", "entries": n, "branches": tree_branches},
        {"file": str(out / "nano_like_rntuple.root"), "ntuple": "Events", "entries": n, "branches": fields},
    ]
    (out / "nano_like.json").write_text(json.dumps(listing))
    print(json.dumps({"events": n, "ttree_branches": len(tree_branches), "rntuple_fields": len(fields)}))


if __name__ == "__main__":
    main()
