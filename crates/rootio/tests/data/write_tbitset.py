"""Writes root640-tbitset.root (see README.md) with ROOT: python write_tbitset.py OUT.root"""
import sys

import ROOT
ROOT.gInterpreter.GenerateDictionary("bitset<16>", "bitset")
ROOT.gInterpreter.Declare(r'''
#include <bitset>
#include <TFile.h>
#include <TTree.h>
#include <TRandom3.h>
void write_tbits(const char *path) {
   TFile f(path, "RECREATE");
   TTree t("tree", "bitset");
   std::bitset<16> bits;
   t.Branch("bits", &bits);
   TRandom3 rng(5);
   for (int i = 0; i < 30; ++i) {
      bits.reset();
      for (int k = 0; k < 16; ++k) if (rng.Rndm() < 0.4) bits.set(k);
      t.Fill();
   }
   t.Write();
}
''')
ROOT.write_tbits(sys.argv[1])
print("ok")
