"""uproot's values of every numeric branch (TTree) or field (RNTuple; a top-level record's
members too) of a file, in the layout of ../shared/fixtures: `F:values`, `F:counts`, `_meta`.

    python fixture.py FILE OUT.npz           the file's first tree or RNTuple
    python fixture.py --corpus SRC DEST      every tree of every SRC/*.root, laid out as
                                             ../shared is (DEST/data/real, DEST/fixtures/rootio;
                                             a file's second and later trees as `FILE@TREE`,
                                             linked to the file): run the exactness tests on
                                             it with GNN4C_SHARED=DEST
"""
import glob, json, os, sys
import awkward as ak
import numpy as np
import uproot

TREES = ("TTree", "TNtuple", "TNtupleD")


def flat_numbers(a):
    """A branch's values flattened, and the count per entry; None beyond one level of lists,
    for strings and for what is not numbers."""
    t = ak.type(a).content
    flat, counts, depth = a, np.ones(len(a), np.int64), 0
    while isinstance(t, (ak.types.ListType, ak.types.RegularType)):
        depth += 1
        if depth > 1 or t.parameters.get("__array__") in ("string", "bytestring"):
            return None
        counts = ak.to_numpy(ak.num(flat, axis=1)).astype(np.int64)
        flat = ak.flatten(flat)
        t = t.content
    if not isinstance(t, ak.types.NumpyType):
        return None
    values = ak.to_numpy(flat)
    if values.dtype == np.bool_:
        values = values.astype(np.uint8)  # as ../shared/fixtures store bools
    return values, counts


def archive(obj, name, out):
    """Writes the archive of tree or RNTuple `obj` (called `name` in its file); its entries."""
    is_tree = isinstance(obj, uproot.behaviors.TTree.TTree)
    meta = {"entries": int(obj.num_entries), "uproot": uproot.__version__}
    meta["tree" if is_tree else "ntuple"] = name
    if is_tree:
        keys = list(obj.keys(recursive=True))
    else:
        # A top-level record stands for its members (named as uproot names them: `child.own`,
        # `multi_grandparent.Child::base_a1`).
        keys = [
            s
            for k in obj.keys()
            if "." not in k
            for s in ([k] if not obj.arrays([k])[k].fields else [f"{k}.{m}" for m in obj.arrays([k])[k].fields])
        ]

    def read(k):
        if is_tree:
            return obj[k].array(library="ak")
        top, *sub = k.split(".", 1)
        a = obj.arrays([top])[top]
        return a[sub[0]] if sub else a

    arrays, listing = {}, {}
    for k in keys:
        short = k.split("/")[-1]
        if short in listing:
            continue
        try:
            a = read(k)
        except Exception:
            continue
        got = flat_numbers(a)
        if got is None:
            continue
        arrays[f"{short}:values"], arrays[f"{short}:counts"] = got
        type_name = obj[k].typename if is_tree else str(ak.type(a).content)
        listing[short] = {"typename": type_name, "type": str(ak.type(a).content)}
    meta["branches" if is_tree else "fields"] = listing
    arrays["_meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez_compressed(out, **arrays)
    return sorted(listing)


def corpus(src, dest):
    os.makedirs(f"{dest}/data/real", exist_ok=True)
    os.makedirs(f"{dest}/fixtures/rootio", exist_ok=True)
    for path in sorted(glob.glob(f"{src}/*.root")):
        stem = os.path.basename(path)[: -len(".root")]
        try:
            f = uproot.open(path)
            trees = [k for k, c in f.classnames(cycle=False).items() if c in TREES]
        except Exception as e:
            print(f"{stem}: uproot does not open it ({e})")
            continue
        for i, tree in enumerate(trees):
            name = stem if i == 0 else f"{stem}@{tree.replace('/', '_')}"
            try:
                listed = archive(f[tree], tree, f"{dest}/fixtures/rootio/real__{name}.npz")
            except Exception as e:
                print(f"{name}: uproot does not read it ({type(e).__name__}: {e})")
                continue
            link = f"{dest}/data/real/{name}.root"
            if not os.path.lexists(link):
                os.symlink(os.path.abspath(path), link)
            print(f"{name}: {len(listed)} branches")


if __name__ == "__main__":
    if sys.argv[1] == "--corpus":
        corpus(sys.argv[2], sys.argv[3])
    else:
        path, out = sys.argv[1], sys.argv[2]
        f = uproot.open(path)
        name, obj = next(iter(f.items(cycle=False)))
        print(out, archive(obj, name, out))
