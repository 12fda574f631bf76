"""Prints every function of over 100 lines in the project's sources outside the kernels
(`crates/*/src`, `benchmarks/src`; a function runs from its `fn` line to the closing brace at
its indentation), and every listed function that is no longer over it; exits 1 if there is
any. The functions listed are over the limit today, to be split; the list only shrinks. Run
by scripts/check-layering.sh.
"""

import pathlib
import re
import sys

LIMIT = 100
LISTED = {
    "benchmarks/src/bin/benchmark_dataloader.rs:main",
    "benchmarks/src/bin/benchmark_inference.rs:bench",
    "benchmarks/src/bin/benchmark_model.rs:bench",
    "benchmarks/src/bin/benchmark_preprocessing.rs:main",
    "benchmarks/src/bin/benchmark_transformer.rs:main",
    "crates/data/src/manifest.rs:read_manifest",
    "crates/data/src/read_inputs.rs:fill_chunk",
    "crates/data/src/read_inputs.rs:object_columns",
    "crates/features/src/chunk_features.rs:build_chunk",
    "crates/features/src/inputs.rs:new",
    "crates/features/src/inputs.rs:object_inputs",
    "crates/features/src/expr/parse.rs:call",
    "crates/graphs/src/batch.rs:collate",
    "crates/reference/src/events.rs:assemble",
    "crates/reference/src/features.rs:build_features",
    "crates/reference/src/schemas.rs:builtin_schema",
    "crates/rootio/src/read/interpretation.rs:interpret",
    "crates/rootio/src/rntuple/mod.rs:ntuple",
    "crates/run/src/cache_build.rs:cached_events_give_bitwise_the_graphs_built_from_the_events",
}
FN = re.compile(r"^(\s*)(pub(\([a-z]+\))? )?(const )?(async )?(unsafe )?fn ([A-Za-z_0-9]+)")


def lengths(path):
    """(name, first line, lines) of every function with a body in the file."""
    lines = path.read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
            j += 1
        if j == len(lines) or lines[j].rstrip().endswith(";"):
            continue
        end = j + 1
        while end < len(lines) and lines[end] != m.group(1) + "}":
            end += 1
        yield m.group(7), i + 1, end - i + 1


def main():
    bad = 0
    seen = set()
    sources = [p for p in pathlib.Path("crates").glob("*/src/**/*.rs")]
    sources += pathlib.Path("crates/models").glob("*/src/**/*.rs")
    sources += pathlib.Path("benchmarks/src").glob("**/*.rs")
    for path in sorted(set(sources)):
        if path.parts[:2] == ("crates", "kernels"):
            continue
        for name, first, n in lengths(path):
            key = f"{path.as_posix()}:{name}"
            if n <= LIMIT:
                continue
            seen.add(key)
            if key not in LISTED:
                print(f"{path}:{first}: fn {name} has {n} lines (over {LIMIT}): split it by step")
                bad = 1
    for key in sorted(LISTED - seen):
        print(f"{key} is no longer over {LIMIT} lines: take it off the list in {sys.argv[0]}")
        bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
