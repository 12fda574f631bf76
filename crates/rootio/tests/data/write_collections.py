"""Writes root640-collections.root (see README.md) with ROOT: python write_collections.py OUT.root"""
import array, ROOT, sys
out = sys.argv[1]
ROOT.gInterpreter.Declare(r'''
#include <vector>
class Hit {
public:
   Double32_t energy;   //[0,10.24,8]
   Float16_t  time;     //[-1,1,7]
   bool       good;
   int        id;
   virtual ~Hit() {}
   ClassDef(Hit, 1)
};
// A class deriving from a vector, as KM3NeT's time slices do: its split members' leaf titles
// name the base (`id[vector<Hit>_]`).
class Slice : public std::vector<Hit> {
public:
   int run;
   void add(double e, double t, bool g, int i) { Hit h; h.energy = e; h.time = t; h.good = g; h.id = i; push_back(h); }
   virtual ~Slice() {}
   ClassDef(Slice, 1)
};
''')
f = ROOT.TFile(out, "RECREATE")
t = ROOT.TTree("tree", "a split vector of objects with packed members, a vector base, odd bools")
hits = ROOT.std.vector['Hit']()
t.Branch("hits", hits, 32000, 99)
s = ROOT.Slice()
t.Branch("slice", s, 32000, 99)
# A bool branch whose bytes are not only 0 and 1 (as a program that never set them writes).
flag = array.array("B", [0])
t.Branch("flag", flag, "flag/O")
rng = ROOT.TRandom3(11)
for i in range(60):
    hits.clear(); s.clear()
    s.run = 1000 + i
    for k in range(i % 5):
        h = ROOT.Hit(); h.energy = rng.Uniform(0, 10.24); h.time = rng.Uniform(-1, 1)
        h.good = k % 2 == 0; h.id = int(rng.Integer(1000))
        hits.push_back(h)
        s.add(rng.Uniform(0, 10.24), rng.Uniform(-1, 1), k % 3 == 0, k)
    flag[0] = [0, 1, 2, 78, 255][i % 5]
    t.Fill()
t.Write()
f.Close()
print("ok")
