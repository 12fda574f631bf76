"""uproot's side of `benchmark_io --files`: the same branches of the same files, side by side.

Usage: python uproot_io.py SHARED_DIR LIST.json REPS
       python uproot_io.py --files LIST.json REPS
The first writes LIST.json (every file of SHARED_DIR/data with its first tree and the branches
uproot reads as numbers, from the fixtures in SHARED_DIR/fixtures/rootio); the second reads an
existing listing, whose entries name a `tree` or an `ntuple` (RNTuple; `nano_like.py` writes
one). Both time `arrays(branches)` on 1 and 2 decompression/interpretation threads and print one
JSON line per (file, threads) with the median seconds over REPS, opening the file each time.
"""

import concurrent.futures
import json
import pathlib
import sys
import time
import zipfile

import numpy as np
import uproot

from timing import print_timing


def fixtures(shared):
    out = []
    for npz in sorted((shared / "fixtures" / "rootio").glob("*.npz")):
        with zipfile.ZipFile(npz) as z:
            meta = json.loads(np.load(z.open("_meta.npy")).tobytes())
        d, f = npz.stem.split("__", 1)
        out.append(
            {
                "file": str(shared / "data" / d / f"{f}.root"),
                "tree": meta["tree"],
                "entries": meta["entries"],
                # TObject bits of referenced objects: uproot misreads them (see crates/rootio's
                # tests), and `arrays` refuses some; neither side reads them here.
                "branches": [b for b in meta["branches"] if not b.endswith(".fBits")],
            }
        )
    return out


def main():
    if sys.argv[1] == "--files":
        files, reps = json.loads(pathlib.Path(sys.argv[2]).read_text()), int(sys.argv[3])
    else:
        shared, listing, reps = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
        files = fixtures(shared)
        pathlib.Path(listing).write_text(json.dumps(files))
    for threads in (1, 2):
        for f in files:
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                if threads == 1:
                    ex = uproot.source.futures.TrivialExecutor()
                else:
                    ex = concurrent.futures.ThreadPoolExecutor(threads)
                with uproot.open(f["file"]) as root:
                    root[f.get("tree") or f["ntuple"]].arrays(
                        f["branches"],
                        decompression_executor=ex,
                        interpretation_executor=ex,
                    )
                times.append(time.perf_counter() - t0)
            print_timing(f"uproot {uproot.__version__}", f, threads, times)


if __name__ == "__main__":
    main()
