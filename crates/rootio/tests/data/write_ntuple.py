"""Writes root640-extended.root (see README.md) with ROOT: python write_ntuple.py OUT.root"""
import ROOT, sys
out = sys.argv[1]
ROOT.gInterpreter.Declare(r'''
#include <ROOT/RNTupleModel.hxx>
#include <ROOT/RNTupleWriter.hxx>
#include <ROOT/RNTupleWriteOptions.hxx>
#include <TRandom3.h>
void write_extended(const char *path) {
   auto model = ROOT::RNTupleModel::Create();
   auto x = model->MakeField<float>("x");
   auto jets = model->MakeField<std::vector<float>>("jets");
   ROOT::RNTupleWriteOptions opts;
   opts.SetApproxZippedClusterSize(2000);
   auto writer = ROOT::RNTupleWriter::Recreate(std::move(model), "ntuple", path, opts);
   TRandom3 rng(11);
   for (int i = 0; i < 300; ++i) {
      *x = rng.Gaus(0, 1);
      jets->clear();
      for (int k = 0; k < i % 4; ++k) jets->push_back(rng.Uniform(20, 200));
      writer->Fill();
      if (i == 120) writer->CommitCluster();
   }
   // Fields added after entries were written: a schema extension, deferred columns.
   auto updater = writer->CreateModelUpdater();
   updater->BeginUpdate();
   auto late = updater->MakeField<double>("late");
   auto late_vec = updater->MakeField<std::vector<int>>("late_vec");
   updater->CommitUpdate();
   for (int i = 300; i < 500; ++i) {
      *x = rng.Gaus(0, 1);
      jets->clear();
      for (int k = 0; k < i % 3; ++k) jets->push_back(rng.Uniform(20, 200));
      *late = rng.Gaus(5, 2);
      late_vec->clear();
      for (int k = 0; k < i % 5; ++k) late_vec->push_back(int(rng.Integer(50)));
      writer->Fill();
   }
}
''')
ROOT.write_extended(out)
print("ok")
