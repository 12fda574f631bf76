"""Writes root640-bases.root (see README.md) with ROOT: python write_bases.py OUT.root
An RNTuple whose records have base classes: a base's members appear among its class's (uproot
names a member hidden by another of the same name with its class: `Child::base_a1`)."""
import os, sys
import ROOT

here = os.path.dirname(os.path.abspath(sys.argv[1]))
header = os.path.join(here, "gnn4c_bases.h")
with open(header, "w") as h:
    h.write(r'''
#pragma once
#include <vector>
struct BaseA { float base_a1 = 0; int base_a2 = 0; };
struct BaseB { double base_b1 = 0; };
struct Child : BaseA, BaseB { float own = 0; };
struct GrandChild : Child { float base_a1 = 0; std::vector<float> hits; };
''')
ROOT.gInterpreter.GenerateDictionary("BaseA;BaseB;Child;GrandChild", header)
ROOT.gInterpreter.Declare(r'''
#include "HEADER"
#include <ROOT/RNTupleModel.hxx>
#include <ROOT/RNTupleWriter.hxx>
#include <TRandom3.h>
void write_bases(const char *path) {
   auto model = ROOT::RNTupleModel::Create();
   auto child = model->MakeField<Child>("child");
   auto grand = model->MakeField<GrandChild>("multi_grandparent");
   auto writer = ROOT::RNTupleWriter::Recreate(std::move(model), "ntuple", path);
   TRandom3 rng(3);
   for (int i = 0; i < 40; ++i) {
      child->base_a1 = rng.Gaus(0, 1); child->base_a2 = i; child->base_b1 = rng.Exp(1); child->own = i * 0.5f;
      static_cast<Child &>(*grand).base_a1 = rng.Gaus(10, 1);
      grand->base_a2 = -i; grand->base_b1 = rng.Uniform(0, 5); grand->own = 1.5f * i;
      grand->base_a1 = rng.Gaus(-10, 1);
      grand->hits.clear();
      for (int k = 0; k < i % 4; ++k) grand->hits.push_back(rng.Uniform(0, 100));
      writer->Fill();
   }
}
'''.replace("HEADER", header))
ROOT.write_bases(sys.argv[1])
print("ok", flush=True)
os._exit(0)
