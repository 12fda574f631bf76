"""The JSON line a reference reader prints per (file, threads): what `io_table.py` and
`io_matrix.sh` read beside `benchmark_io`'s own lines."""

import json
import pathlib
import statistics


def print_timing(reader, listed, threads, times):
    """One line for `reader` on the listed file (`file`, `entries`, `branches`), the median
    of `times` in seconds."""
    med = statistics.median(times)
    print(
        json.dumps(
            {
                "reader": reader,
                "file": pathlib.Path(listed["file"]).name,
                "threads": threads,
                "entries": listed["entries"],
                "branches": len(listed["branches"]),
                "median_s": med,
                "entries_per_s": listed["entries"] / med,
            }
        ),
        flush=True,
    )
