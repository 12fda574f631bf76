"""Writes the tree test files of README.md with ROOT: python write_trees.py OUT_DIR
root640-tntuple.root (TNtuple), root640-tntupled.root (TNtupleD) and root640-recovered.root
(a tree saved with AutoSave by a process that never closed the file: its last baskets are
kept inside the tree object)."""
import os, sys
import ROOT

out = sys.argv[1]
rng = ROOT.TRandom3(7)

f = ROOT.TFile(os.path.join(out, "root640-tntuple.root"), "RECREATE")
nt = ROOT.TNtuple("ntuple", "a TNtuple", "px:py:pz:e")
for i in range(400):
    px, py, pz = rng.Gaus(0, 10), rng.Gaus(0, 10), rng.Gaus(0, 30)
    nt.Fill(px, py, pz, (px * px + py * py + pz * pz) ** 0.5)
nt.Write()
f.Close()

f = ROOT.TFile(os.path.join(out, "root640-tntupled.root"), "RECREATE")
nt = ROOT.TNtupleD("ntupled", "a TNtupleD", "x:w")
for i in range(300):
    nt.Fill(rng.Uniform(-1, 1), rng.Exp(2.0))
nt.Write()
f.Close()

# A process that dies after AutoSave: the file is never closed. The tree's header, written by
# AutoSave("SaveSelf"), holds the baskets not yet flushed; ROOT recovers the keys on opening.
pid = os.fork()
if pid == 0:
    f = ROOT.TFile(os.path.join(out, "root640-recovered.root"), "RECREATE")
    t = ROOT.TTree("events", "recovered")
    import array
    n = array.array("i", [0])
    x = array.array("f", [0.0] * 16)
    e = array.array("d", [0.0])
    t.Branch("n", n, "n/I")
    t.Branch("x", x, "x[n]/F")
    t.Branch("e", e, "e/D")
    t.SetAutoSave(0)
    for i in range(3000):
        n[0] = i % 5
        for k in range(n[0]):
            x[k] = rng.Gaus(50, 10)
        e[0] = rng.Exp(1.0)
        t.Fill()
        if i == 1200:
            t.FlushBaskets()
    t.AutoSave("SaveSelf")
    f.Flush()
    os._exit(0)
os.waitpid(pid, 0)
print("ok", flush=True)
os._exit(0)  # skip the interpreter's teardown, which crashes deleting the TNtupleD
