"""Prints the import circles between the files of each crate (a file that uses `crate::a`,
whose `a` uses `crate::b`, …, back to the first), one a line; exits 1 if there is any.

A file is a crate's top-level module (`src/x.rs` with its `src/x/` children); what counts is
`crate::x` in code, outside comments and the `#[cfg(test)] mod tests` block. Run by
scripts/check-layering.sh.
"""

import os
import re
import sys


def modules(src):
    """The crate's files by top-level module name."""
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.join(root, f)
                top = os.path.relpath(path, src)[:-3].split(os.sep)[0]
                out.setdefault(top, []).append(path)
    return out


def uses(path, names):
    """The top-level modules of `names` that the file at `path` names as `crate::x`."""
    text = open(path, encoding="utf-8").read().split("#[cfg(test)]\nmod tests")[0]
    code = "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
    found = set(re.findall(r"crate::([a-z_0-9]+)", code))
    for group in re.findall(r"crate::\{([^}]*)\}", code):
        found |= set(re.findall(r"(?:^|,)\s*([a-z_0-9]+)::", group))
    return found & names


def circles(src):
    mods = modules(src)
    names = set(mods)
    deps = {m: set().union(*(uses(p, names) for p in ps)) - {m} for m, ps in mods.items()}
    state, stack, found = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(deps[m]):
            if state.get(d) == 1:
                found.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(deps):
        if m not in state:
            visit(m)
    return found


def main():
    bad = False
    for crate in sorted(os.listdir("crates")) + [
        "models/" + m for m in sorted(os.listdir("crates/models"))
    ]:
        src = os.path.join("crates", crate, "src")
        if os.path.isdir(src):
            for c in circles(src):
                print(f"crates/{crate}: " + " -> ".join(c))
                bad = True
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
