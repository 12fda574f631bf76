"""Writes root640-types.root (see README.md) with ROOT: python write_types.py OUT.root"""
import ROOT, sys
out = sys.argv[1]
ROOT.gInterpreter.Declare(r'''
#include <vector>
#include <bitset>
#include "TObject.h"
class Packed : public TObject {
public:
   Double32_t d_range;      //[0,10,12]
   Double32_t d_trunc;      //[0,0,10]
   Double32_t d_plain;
   Float16_t  f_range;      //[-1,1,8]
   Float16_t  f_plain;
   Double32_t d_array[3];   //[-5,5,16]
   std::vector<float> v_float;
   std::vector<int> v_int;
   void set_array(int k, double v) { d_array[k] = v; }
   ClassDefOverride(Packed, 1)
};
''')
f = ROOT.TFile(out, "RECREATE")
t = ROOT.TTree("tree", "packed members, RVec")
obj = ROOT.Packed()
t.Branch("obj", obj, 32000, 99)
rvec = ROOT.ROOT.VecOps.RVec['float']()
t.Branch("rvec", rvec)
rng = ROOT.TRandom3(7)
for i in range(50):
    obj.d_range = rng.Uniform(0, 10)
    obj.d_trunc = rng.Gaus(0, 100)
    obj.d_plain = rng.Gaus(0, 1)
    obj.f_range = rng.Uniform(-1, 1)
    obj.f_plain = rng.Gaus(3, 2)
    for k in range(3):
        obj.set_array(k, rng.Uniform(-5, 5))
    obj.v_float.clear(); obj.v_int.clear()
    for k in range(i % 4):
        obj.v_float.push_back(rng.Gaus(0, 1)); obj.v_int.push_back(int(rng.Integer(100)))
    rvec.clear()
    for k in range((i * 7) % 5):
        rvec.push_back(rng.Gaus(10, 3))
    t.Fill()
t.Write()
f.Close()
print("ok")
