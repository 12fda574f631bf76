"""Prints every function of over 100 lines in the project's sources outside the kernels
(`crates/*/src`, `benchmarks/src`; a function runs from its `fn` line to the closing brace at
its indentation); exits 1 if there is any: split it by step. Run by scripts/check-layering.sh.
"""

import pathlib
import re
import sys

LIMIT = 100
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
    sources = [p for p in pathlib.Path("crates").glob("*/src/**/*.rs")]
    sources += pathlib.Path("crates/models").glob("*/src/**/*.rs")
    sources += pathlib.Path("benchmarks/src").glob("**/*.rs")
    for path in sorted(set(sources)):
        if path.parts[:2] == ("crates", "kernels"):
            continue
        for name, first, n in lengths(path):
            if n > LIMIT:
                print(f"{path}:{first}: fn {name} has {n} lines (over {LIMIT}): split it by step")
                bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
