"""The Pythia 8 benchmark samples: 13 TeV pp events from Pythia's own matrix elements, a
parametrised detector response, written as NanoAOD-like ROOT files by uproot.

    python benchmarks/pythia/generate.py OUT_DIR [--events N] [--cp-events N] [--files K]
                                         [--jobs J] [--seed S] [--only pretrain|cp]

Writes OUT_DIR/pretrain/<process>_<k>.root (the pretraining classes, `PROCESSES`) and
OUT_DIR/cp/ttH_CP{even,odd}_<k>.root (the downstream CP task, `CP_PROCESSES`), each file N/K
(or the CP events/K) events of tree `Events`, and OUT_DIR/samples.json (settings, per-file
seeds, cross sections, times). Every file's events follow from (--seed, process, file index)
alone: a rerun keeps the files already there with the same settings, seed and event count, and
writes the others as a run from nothing would. Files are
written under a temporary name and renamed, so an interrupted run leaves no partial file.
The detector response and where each number comes from: docs/pythia-benchmark.md.

Needs PyPI `pythia8mc` (8.317.2, `pip install --only-binary=:all: pythia8mc`), `fastjet`,
`uproot`, `awkward` and `numpy` (benchmarks/pythia/requirements.txt).
"""

import argparse
import json
import math
import multiprocessing
import os
import sys
import time

import awkward as ak
import numpy as np

# The pretraining classes (label = position) and the Pythia settings of each.
PROCESSES = [
    ("ggF", ["HiggsSM:gg2H = on"]),
    ("VBF", ["HiggsSM:ff2Hff(t:ZZ) = on", "HiggsSM:ff2Hff(t:WW) = on"]),
    ("WH", ["HiggsSM:ffbar2HW = on"]),
    ("ZH", ["HiggsSM:ffbar2HZ = on"]),
    ("ttH", ["HiggsSM:gg2Httbar = on", "HiggsSM:qqbar2Httbar = on"]),
    ("single_top", ["Top:qq2tq(t:W) = on", "Top:ffbar2tqbar(s:W) = on"]),
    ("ttbar", ["Top:gg2ttbar = on", "Top:qqbar2ttbar = on"]),
    ("diboson", ["WeakDoubleBoson:all = on"]),
    ("W_jets", ["WeakBosonAndParton:qqbar2Wg = on", "WeakBosonAndParton:qg2Wq = on",
                "PhaseSpace:pTHatMin = 30."]),
    ("Z_jets", ["WeakBosonAndParton:qqbar2gmZg = on", "WeakBosonAndParton:qg2gmZq = on",
                "WeakZ0:gmZmode = 2", "PhaseSpace:pTHatMin = 30."]),
    ("multijet", ["HardQCD:all = on", "PhaseSpace:pTHatMin = 50."]),
]

# The downstream task: ttH with a CP-even Higgs (H1) against a CP-odd one (A3), both at
# 125 GeV and both decaying to Z Z* -> 4 leptons. Pythia's g g -> A3 t tbar uses the same matrix
# element as the CP-even one (the two give the same events from the same seed), so the CP
# difference lies in the decay: the angular correlations of A3 -> Z Z* -> 4 leptons as a pure
# pseudoscalar (HiggsA3:parity = 2) against H1's as a scalar. The A3's couplings to W and Z,
# zero by default, are set as the H1's so that it decays to Z Z* at all.
FOUR_LEPTONS = ["23:onMode = off", "23:onIfAny = 11 13"]
CP_PROCESSES = [
    ("ttH_CPeven", ["Higgs:useBSM = on", "HiggsBSM:gg2H1ttbar = on",
                    "HiggsBSM:qqbar2H1ttbar = on", "25:m0 = 125.0", "HiggsH1:parity = 1",
                    "25:onMode = off", "25:onIfMatch = 23 23"] + FOUR_LEPTONS),
    ("ttH_CPodd", ["Higgs:useBSM = on", "HiggsBSM:gg2A3ttbar = on",
                   "HiggsBSM:qqbar2A3ttbar = on", "36:m0 = 125.0", "HiggsA3:parity = 2",
                   "HiggsA3:coup2Z = 1.", "HiggsA3:coup2W = 1.",
                   "36:onMode = off", "36:onIfMatch = 23 23"] + FOUR_LEPTONS),
]

COMMON = [
    "Beams:eCM = 13000.",
    "Print:quiet = on",
    "Random:setSeed = on",
]

# The detector response (docs/pythia-benchmark.md gives each number's source).
JET_R = 0.4
JET_INPUT_ETA = 5.0
JET_RAW_PT_MIN = 15.0
JET_PT_MIN = 20.0
JET_ETA_MAX = 4.7
BTAG_ETA_MAX = 2.5
BTAG_THRESHOLD = 0.6321  # the `nanoaod` declaration's Jet_btagDeepB working point
FLAVOUR_DR = 0.4
ISOLATION_DR = 0.5
ISOLATION_PT_MIN = 0.5
LEPTON_PT_MIN = 10.0
PHOTON_PT_MIN = 10.0


def efficiency(kind, pt, eta):
    """Reconstruction and identification efficiency of an isolated e, mu or photon."""
    a = abs(eta)
    if pt <= 10.0:
        return 0.0
    if kind == "mu":
        if a > 2.4:
            return 0.0
        return 0.95 if pt <= 1000.0 else 0.95 * math.exp(0.5 - pt * 5.0e-4)
    if a > 2.5:
        return 0.0
    return 0.95 if a <= 1.5 else 0.85


def isolation_max(kind):
    return 0.25 if kind == "mu" else 0.12


def relative_pt_resolution(kind, pt, eta):
    """sigma(pT)/pT of electron and muon tracks."""
    a = abs(eta)
    if kind == "e":
        c, s = ((0.03, 1.3e-3) if a <= 0.5 else (0.05, 1.7e-3) if a <= 1.5 else (0.15, 3.1e-3))
    else:
        c, s = ((0.01, 1.0e-4) if a <= 0.5 else (0.015, 1.5e-4) if a <= 1.5 else (0.025, 3.5e-4))
    return math.sqrt(c * c + (pt * s) ** 2)


def photon_energy_resolution(e, eta):
    """sigma(E) of the electromagnetic calorimeter, GeV."""
    a = abs(eta)
    base = math.sqrt(e * e * 0.008**2 + e * 0.11**2 + 0.40**2)
    if a <= 1.5:
        return (1 + 0.64 * eta * eta) * base
    if a <= 2.5:
        return (2.16 + 5.6 * (a - 2) ** 2) * base
    return math.sqrt(e * e * 0.107**2 + e * 2.08**2)


def jet_energy_resolution(e, eta):
    """sigma(E) of the hadron calorimeter, GeV, applied to whole jets."""
    if abs(eta) <= 3.0:
        return math.sqrt(e * e * 0.050**2 + e * 1.50**2)
    return math.sqrt(e * e * 0.130**2 + e * 2.70**2)


def btag_efficiency(flavour, pt):
    """Probability that a jet of true flavour 5 (b), 4 (c) or 0 (light) is tagged."""
    if flavour == 5:
        return 0.85 * math.tanh(0.0025 * pt) * (25.0 / (1 + 0.063 * pt))
    if flavour == 4:
        return 0.25 * math.tanh(0.018 * pt) * (1 / (1 + 0.0013 * pt))
    return 0.01 + 0.000038 * pt


def heavy_flavour(pid):
    """5 for a b hadron, 4 for a c hadron, else 0 (from the PDG code's quark digits)."""
    a = abs(pid)
    digits = ((a // 1000) % 10, (a // 100) % 10)
    if a < 100:
        return 0
    if 5 in digits:
        return 5
    if 4 in digits:
        return 4
    return 0


def delta_r(eta1, phi1, eta2, phi2):
    dphi = (phi1 - phi2 + math.pi) % (2 * math.pi) - math.pi
    return math.hypot(eta1 - eta2, dphi)


def reconstruct(event, rng, fastjet, jet_def):
    """One Pythia event through the detector response: the NanoAOD-like collections."""
    visible = []  # (px, py, pz, e, pt, eta, phi, id)
    hadrons = []  # (flavour, eta, phi)
    for p in event:
        if not p.isFinal():
            f = heavy_flavour(p.id()) if p.isHadron() else 0
            if f and p.pT() > 5.0:
                hadrons.append((f, p.eta(), p.phi()))
            continue
        if not p.isVisible():
            continue
        pt = p.pT()
        if pt <= 0:
            continue
        visible.append((p.px(), p.py(), p.pz(), p.e(), pt, p.eta(), p.phi(), p.id()))

    # Isolated electrons, muons and photons.
    taken = set()
    out = {"Electron": [], "Muon": [], "Photon": []}
    for i, (px, py, pz, e, pt, eta, phi, pid) in enumerate(visible):
        kind = {11: "e", 13: "mu", 22: "gamma"}.get(abs(pid))
        threshold = PHOTON_PT_MIN if kind == "gamma" else LEPTON_PT_MIN
        if kind is None or pt <= threshold:
            continue
        eff = efficiency("e" if kind == "gamma" else kind, pt, eta)
        if eff == 0.0:
            continue
        iso = sum(
            q[4]
            for j, q in enumerate(visible)
            if j != i and q[4] > ISOLATION_PT_MIN and delta_r(eta, phi, q[5], q[6]) < ISOLATION_DR
        )
        if iso / pt >= isolation_max(kind) or rng.random() >= eff:
            continue
        taken.add(i)
        if kind == "gamma":
            scale = max(0.0, 1 + rng.normal() * photon_energy_resolution(e, eta) / e)
            out["Photon"].append((pt * scale, eta, phi))
        else:
            scale = max(0.0, 1 + rng.normal() * relative_pt_resolution(kind, pt, eta))
            charge = -1 if pid > 0 else 1  # e-, mu- have positive PDG codes
            out["Electron" if kind == "e" else "Muon"].append((pt * scale, eta, phi, charge))

    # Jets of the other visible particles, smeared, with their true flavour and a b-tag.
    inputs = [
        fastjet.PseudoJet(px, py, pz, e)
        for i, (px, py, pz, e, pt, eta, phi, pid) in enumerate(visible)
        if i not in taken and abs(eta) < JET_INPUT_ETA
    ]
    sequence = fastjet.ClusterSequence(inputs, jet_def)
    jets = []
    met_x = -sum(v[0] for v in visible if abs(v[5]) < JET_INPUT_ETA)
    met_y = -sum(v[1] for v in visible if abs(v[5]) < JET_INPUT_ETA)
    for j in sequence.inclusive_jets(JET_RAW_PT_MIN):
        e, eta, phi = j.e(), j.eta(), j.phi_std()
        scale = max(0.0, 1 + rng.normal() * jet_energy_resolution(e, eta) / e)
        met_x -= (scale - 1) * j.px()
        met_y -= (scale - 1) * j.py()
        pt = j.pt() * scale
        if pt <= JET_PT_MIN or abs(eta) >= JET_ETA_MAX:
            continue
        near = [f for f, h_eta, h_phi in hadrons if delta_r(eta, phi, h_eta, h_phi) < FLAVOUR_DR]
        flavour = max(near, default=0)
        tagged = abs(eta) <= BTAG_ETA_MAX and rng.random() < btag_efficiency(flavour, pt)
        score = rng.uniform(BTAG_THRESHOLD, 1.0) if tagged else rng.uniform(0.0, BTAG_THRESHOLD)
        jets.append((pt, eta, phi, max(0.0, j.m()) * scale, score, flavour))
    jets.sort(key=lambda x: -x[0])
    for name in out:
        out[name].sort(key=lambda x: -x[0])
    out["Jet"] = jets
    out["MET"] = (math.hypot(met_x, met_y), math.atan2(met_y, met_x))
    return out


FIELDS = {
    "Jet": [("pt", np.float32), ("eta", np.float32), ("phi", np.float32),
            ("mass", np.float32), ("btagDeepB", np.float32), ("hadronFlavour", np.int32)],
    "Electron": [("pt", np.float32), ("eta", np.float32), ("phi", np.float32),
                 ("charge", np.int32)],
    "Muon": [("pt", np.float32), ("eta", np.float32), ("phi", np.float32),
             ("charge", np.int32)],
    "Photon": [("pt", np.float32), ("eta", np.float32), ("phi", np.float32)],
}


def columns(events, first_event, file_index, weights):
    """The events' branches as uproot writes them (`nJet`, `Jet_pt`, ...)."""
    n = len(events)
    tree = {
        "run": np.ones(n, np.uint32),
        "luminosityBlock": np.full(n, file_index, np.uint32),
        "event": np.arange(first_event, first_event + n, dtype=np.uint64),
        "genWeight": np.asarray(weights, np.float32),
        "MET_pt": np.array([e["MET"][0] for e in events], np.float32),
        "MET_phi": np.array([e["MET"][1] for e in events], np.float32),
    }
    for name, fields in FIELDS.items():
        counts = np.array([len(e[name]) for e in events], np.int64)
        flat = [x for e in events for x in e[name]]
        record = {
            f: ak.unflatten(np.array([x[k] for x in flat], dtype), counts)
            for k, (f, dtype) in enumerate(fields)
        }
        tree[name] = ak.zip(record)
    return tree


def seed_of(base, group, process, file_index):
    """Pythia's seed for one file: from the run's seed, the sample group, the process and
    the file index alone (1 to 900,000,000, as Random:seed takes)."""
    key = f"{base}/{group}/{process}/{file_index}".encode()
    h = 1469598103934665603
    for b in key:
        h = ((h ^ b) * 1099511628211) % (1 << 64)
    return 1 + h % 899_999_999


def generate_file(task):
    """Generates one file; returns its record for samples.json."""
    import fastjet
    import pythia8mc as pythia8
    import uproot

    path, group, process, settings, file_index, events, seed, first_event = task
    start = time.time()
    pythia = pythia8.Pythia("", False)
    for s in COMMON + settings + [f"Random:seed = {seed}"]:
        if not pythia.readString(s):
            raise SystemExit(f"{process}: Pythia does not take the setting '{s}'")
    if not pythia.init():
        raise SystemExit(f"{process}: Pythia's initialisation failed")
    rng = np.random.default_rng(seed)
    jet_def = fastjet.JetDefinition(fastjet.antikt_algorithm, JET_R)
    out, weights, failed = [], [], 0
    while len(out) < events:
        if not pythia.next():
            failed += 1
            if failed > 10 * events + 100:
                raise SystemExit(f"{process}: Pythia failed {failed} events in a row")
            continue
        out.append(reconstruct(pythia.event, rng, fastjet, jet_def))
        weights.append(pythia.infoPython().weight())
    sigma_pb = pythia.infoPython().sigmaGen() * 1e9
    tmp = path + ".partial"
    branches = columns(out, first_event, file_index, weights)
    with uproot.recreate(tmp) as f:
        # A TTree, as NanoAOD is (assigning the dict would write an RNTuple).
        types = {k: v.type if isinstance(v, ak.Array) else v.dtype for k, v in branches.items()}
        f.mktree("Events", types).extend(branches)
    os.replace(tmp, path)
    return {
        "file": os.path.relpath(path, os.path.dirname(os.path.dirname(path))),
        "group": group, "process": process, "file_index": file_index, "events": events,
        "seed": seed, "first_event": first_event, "settings": COMMON + settings,
        "sigma_pb": sigma_pb, "seconds": round(time.time() - start, 2),
        "jets_per_event": sum(len(e["Jet"]) for e in out) / max(1, events),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=10000, help="per pretraining process")
    ap.add_argument("--cp-events", type=int, default=20000, help="per CP hypothesis")
    ap.add_argument("--files", type=int, default=2, help="files per process")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--only", choices=["pretrain", "cp"])
    args = ap.parse_args()
    if args.events < 1 or args.cp_events < 1 or args.files < 1 or args.jobs < 1:
        ap.error("--events, --cp-events, --files and --jobs must be positive")

    tasks = []
    groups = [("pretrain", PROCESSES, args.events), ("cp", CP_PROCESSES, args.cp_events)]
    for group, processes, total in groups:
        if args.only and args.only != group:
            continue
        os.makedirs(os.path.join(args.out, group), exist_ok=True)
        for p, (name, settings) in enumerate(processes):
            per_file = [total // args.files + (k < total % args.files) for k in range(args.files)]
            first = (p + (100 if group == "cp" else 0)) << 32
            for k, n in enumerate(per_file):
                path = os.path.join(args.out, group, f"{name}_{k}.root")
                seed = seed_of(args.seed, group, name, k)
                tasks.append((path, group, name, settings, k, n, seed, first))
                first += n

    manifest_path = os.path.join(args.out, "samples.json")
    done = {}
    if os.path.exists(manifest_path):
        for r in json.load(open(manifest_path))["files"]:
            done[r["file"]] = r
    todo = []
    for t in tasks:
        rel = os.path.relpath(t[0], args.out)
        r = done.get(rel)
        same = r and (r["events"], r["seed"], r["settings"]) == (t[5], t[6], COMMON + t[3])
        if same and os.path.exists(t[0]):
            continue
        todo.append(t)
    todo.sort(key=lambda t: -t[5])
    start = time.time()
    print(f"{len(todo)} of {len(tasks)} files to generate on {args.jobs} processes",
          file=sys.stderr)
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for r in pool.imap_unordered(generate_file, todo):
            done[r["file"]] = r
            print(f"  {r['file']}: {r['events']} events in {r['seconds']} s "
                  f"({r['jets_per_event']:.2f} jets/event)", file=sys.stderr)
            write_manifest(manifest_path, args, done)
    write_manifest(manifest_path, args, done)
    print(f"done in {time.time() - start:.1f} s: {manifest_path}", file=sys.stderr)


def write_manifest(path, args, done):
    manifest = {
        "generator": "Pythia 8 (pythia8mc) + FastJet, benchmarks/pythia/generate.py",
        "seed": args.seed,
        "classes": [name for name, _ in PROCESSES],
        "cp_classes": [name for name, _ in CP_PROCESSES],
        "files": sorted(done.values(), key=lambda r: r["file"]),
    }
    tmp = path + ".partial"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
