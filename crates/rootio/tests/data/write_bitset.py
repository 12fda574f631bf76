"""Writes root640-bitset.root (see README.md) with ROOT: python write_bitset.py OUT.root"""
import sys

import ROOT

ROOT.gInterpreter.Declare(r'''
#include <array>
#include <bitset>
#include <TRandom3.h>
#include <ROOT/RNTupleModel.hxx>
#include <ROOT/RNTupleWriter.hxx>
void write_bitset(const char *path) {
   TRandom3 rng(5);
   auto model = ROOT::RNTupleModel::Create();
   auto b = model->MakeField<std::bitset<8>>("bits");
   auto h = model->MakeField<std::array<float, 3>>("arr");
   auto w = ROOT::RNTupleWriter::Recreate(std::move(model), "ntuple", path);
   for (int i = 0; i < 30; ++i) {
      b->reset();
      for (int k = 0; k < 8; ++k) if (rng.Rndm() < 0.5) b->set(k);
      for (int k = 0; k < 3; ++k) (*h)[k] = rng.Gaus(0, 1);
      w->Fill();
   }
}
''')
ROOT.write_bitset(sys.argv[1])
print("ok")
