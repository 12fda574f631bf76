"""ROOT 6.40's side of the reading matrix: writes the NanoAOD-like content with ROOT itself in
every codec, and times ROOT's own C++ readers on it.

Usage: python root_matrix.py write SOURCE.root OUT_DIR
       python root_matrix.py time LIST.json REPS
`write` reads the uproot-written TTree `nano_like.py` makes (tree `Events`) and writes it again
with ROOT (PyPI `root==0.1a12`): as a TTree through `RDataFrame::Snapshot` (ROOT's default basket
sizes and auto-flush) in ZLIB-1, LZMA-9 (CMS NanoAOD's setting), ZSTD-5 and LZ4-4, and as an
RNTuple through `RNTupleImporter` (`RNTupleWriteOptions::SetCompression`) in ZSTD-5, LZMA-7,
LZ4-4 and ZLIB-1; then OUT_DIR/root_matrix.json, the listing `benchmark_io --files`,
`uproot_io.py --files` and `time` read (every TTree branch; every RNTuple top-level field).
`time` reads every listed file with ROOT's C++ readers, compiled by cling: `TTree::GetEntry`
over every entry with every branch on, `RNTupleReader::LoadEntry` over every entry, on 1
thread and on 2 (`ROOT::EnableImplicitMT(2)`: parallel basket unzipping and page
decompression); one JSON line per (file, threads), the median over REPS, opening the file each
time.
"""

import json
import pathlib
import sys
import time

import ROOT

from timing import print_timing

CODECS = {
    "zlib": ROOT.RCompressionSetting.EAlgorithm.kZLIB,
    "lzma": ROOT.RCompressionSetting.EAlgorithm.kLZMA,
    "zstd": ROOT.RCompressionSetting.EAlgorithm.kZSTD,
    "lz4": ROOT.RCompressionSetting.EAlgorithm.kLZ4,
}
TTREES = [("zlib", 1), ("lzma", 9), ("zstd", 5), ("lz4", 4)]
RNTUPLES = [("zstd", 5), ("lzma", 7), ("lz4", 4), ("zlib", 1)]

CPP = r"""
#include <ROOT/RNTupleReader.hxx>
#include <TFile.h>
#include <TTree.h>
#include <memory>
long long gnn4c_read_ttree(const char *path, const char *name) {
  std::unique_ptr<TFile> f(TFile::Open(path));
  auto *t = f->Get<TTree>(name);
  t->SetBranchStatus("*", 1);
  long long bytes = 0;
  for (Long64_t i = 0, n = t->GetEntries(); i < n; ++i) bytes += t->GetEntry(i);
  return bytes;
}
long long gnn4c_read_rntuple(const char *path, const char *name) {
  auto r = ROOT::RNTupleReader::Open(name, path);
  for (auto i : r->GetEntryRange()) r->LoadEntry(i);
  return r->GetNEntries();
}
"""


def write(source, out):
    out.mkdir(parents=True, exist_ok=True)
    listing = []
    df = ROOT.RDataFrame("Events", str(source))
    columns = df.GetColumnNames()
    for codec, level in TTREES:
        path = out / f"root_ttree_{codec}{level}.root"
        opts = ROOT.RDF.RSnapshotOptions()
        opts.fCompressionAlgorithm = CODECS[codec]
        opts.fCompressionLevel = level
        df.Snapshot("Events", str(path) + ".tmp", columns, opts)
        (out / (path.name + ".tmp")).rename(path)
        f = ROOT.TFile.Open(str(path))
        tree = f.Get("Events")
        branches = [b.GetName() for b in tree.GetListOfBranches()]
        listing.append({"file": str(path), "tree": "Events", "entries": int(tree.GetEntries()), "branches": branches})
        f.Close()
    plain = listing[0]["file"]
    for codec, level in RNTUPLES:
        path = out / f"root_rntuple_{codec}{level}.root"
        tmp = str(path) + ".tmp"
        pathlib.Path(tmp).unlink(missing_ok=True)
        imp = ROOT.Experimental.RNTupleImporter.Create(plain, "Events", tmp)
        opts = ROOT.RNTupleWriteOptions()
        opts.SetCompression(CODECS[codec], level)
        imp.SetWriteOptions(opts)
        imp.SetIsQuiet(True)
        imp.Import()
        pathlib.Path(tmp).rename(path)
        reader = ROOT.RNTupleReader.Open("Events", str(path))
        top = reader.GetDescriptor().GetTopLevelFields()
        fields = [fd.GetFieldName() for fd in top]
        listing.append({"file": str(path), "ntuple": "Events", "entries": int(reader.GetNEntries()), "branches": fields})
    (out / "root_matrix.json").write_text(json.dumps(listing, indent=1))
    print(json.dumps({"files": [pathlib.Path(f["file"]).name for f in listing]}))


def timing(listing, reps):
    ROOT.gInterpreter.Declare(CPP)
    for threads in (1, 2):
        if threads > 1:
            ROOT.EnableImplicitMT(threads)
        for f in listing:
            read = ROOT.gnn4c_read_rntuple if "ntuple" in f else ROOT.gnn4c_read_ttree
            name = f.get("ntuple") or f["tree"]
            read(f["file"], name)  # warm-up: the page cache, cling's compilation
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                read(f["file"], name)
                times.append(time.perf_counter() - t0)
            print_timing(f"ROOT {ROOT.gROOT.GetVersion()} C++", f, threads, times)


def main():
    if sys.argv[1] == "write":
        write(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
    elif sys.argv[1] == "time":
        timing(json.loads(pathlib.Path(sys.argv[2]).read_text()), int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
