"""Straightforward per-event Python/numpy implementation of contract §2-§4 (features + graphs),
the side-by-side reference for benchmark_preprocessing.

    python benchmarks/reference/features_numpy.py [N_EVENTS] [REPS]

Reads ../shared/data/real/uproot-HZZ.root (or $GNN4C_SHARED) with uproot once (not timed), cycles
its 2,421 events to N_EVENTS (default 50,000) and times building every event's node features,
globals, topology and edge features, one event at a time with numpy. Prints median events/s.
"""
import os
import sys
import time

import numpy as np
import uproot

MIN_PT = [25.0, 10.0, 10.0, 10.0]
MAX_ETA = [4.5, 2.5, 2.5, 2.5]
MAX_OBJ = [12, 4, 4, 4]
MASS = [None, 0.000511, 0.10566, 0.0]


def polar(px, py, pz, e):
    pt = np.hypot(px, py)
    eta = np.arcsinh(pz / pt)
    phi = np.arctan2(py, px)
    mass = np.sqrt(np.maximum(e * e - (px * px + py * py + pz * pz), 0.0))
    return pt, eta, phi, mass


def load(path):
    t = uproot.open(path)["events"]
    cols = {}
    for c in ["Jet", "Electron", "Muon", "Photon"]:
        cols[c] = [t[f"{c}_{x}"].array(library="np") for x in ["Px", "Py", "Pz", "E"]]
    btag = t["Jet_btag"].array(library="np")
    charge = {c: t[f"{c}_Charge"].array(library="np") for c in ["Electron", "Muon"]}
    metx, mety = t["MET_px"].array(library="np"), t["MET_py"].array(library="np")
    events = []
    for i in range(t.num_entries):
        ev = []
        for k, c in enumerate(["Jet", "Electron", "Muon", "Photon"]):
            px, py, pz, e = (np.asarray(a[i], dtype=np.float64) for a in cols[c])
            pt, eta, phi, mass = polar(px, py, pz, e)
            if k > 0:
                mass = np.full_like(pt, MASS[k])
            b = (np.asarray(btag[i]) > 1.74).astype(np.float64) if k == 0 else np.zeros_like(pt)
            q = np.sign(np.asarray(charge[c][i], dtype=np.float64)) if c in charge else np.zeros_like(pt)
            ev.append((pt, eta, phi, mass, b, q))
        met = (float(np.hypot(metx[i], mety[i])), float(np.arctan2(mety[i], metx[i])))
        events.append((ev, met))
    return events


def build(event):
    colls, (met, met_phi) = event
    rows, etas, phis, ht = [], [], [], 0.0
    for k, (pt, eta, phi, mass, b, q) in enumerate(colls):
        sel = (pt >= MIN_PT[k]) & (np.abs(eta) <= MAX_ETA[k])
        idx = np.nonzero(sel)[0]
        idx = idx[np.argsort(-pt[idx], kind="stable")][: MAX_OBJ[k]]
        if k == 0:
            ht += pt[idx].sum()
        energy = np.sqrt((pt[idx] * np.cosh(eta[idx])) ** 2 + mass[idx] ** 2)
        f = np.stack([pt[idx] / 100, eta[idx] / 3, phi[idx] / np.pi, energy / 100, b[idx], q[idx],
                      np.full(len(idx), float(k))], axis=1)
        rows.append(f)
        etas.append(eta[idx])
        phis.append(phi[idx])
    rows.append(np.array([[met / 100, 0.0, met_phi / np.pi, met / 100, 0.0, 0.0, 4.0]]))
    etas.append(np.zeros(1))
    phis.append(np.array([met_phi]))
    x = np.concatenate(rows).astype(np.float32)
    n = len(x)
    if n < 2:
        return None
    eta, phi = np.concatenate(etas), np.concatenate(phis)
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    deta = eta[dst] - eta[src]
    dphi = phi[dst] - phi[src]
    dphi = dphi - 2 * np.pi * np.floor((dphi + np.pi) / (2 * np.pi))
    edges = np.stack([deta, dphi, np.sqrt(deta ** 2 + dphi ** 2)], axis=1).astype(np.float32)
    glob = np.array([n / 10, ht / 1000], dtype=np.float32)
    return x, src, dst, edges, glob


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    shared = os.environ.get("GNN4C_SHARED", "../shared")
    base = load(os.path.join(shared, "data/real/uproot-HZZ.root"))
    events = [base[i % len(base)] for i in range(n)]
    build(events[0])
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        kept = sum(build(ev) is not None for ev in events)
        times.append(time.perf_counter() - t)
    med = sorted(times)[len(times) // 2]
    print(f'{{"benchmark": "features_numpy", "events": {n}, "kept": {kept}, "median_s": {med:.4f}, '
          f'"events_per_s": {n / med:.0f}, "numpy": "{np.__version__}", "reps": {reps}}}')


if __name__ == "__main__":
    main()
