"""uproot's values of every numeric branch (TTree) or field (RNTuple; a top-level record's
members too) of a file, in the layout of ../shared/fixtures: `F:values`, `F:counts`, `_meta`."""
import json, sys
import awkward as ak
import numpy as np
import uproot

path, out = sys.argv[1], sys.argv[2]
f = uproot.open(path)
name, obj = next(iter(f.items(cycle=False)))
arrays, meta = {}, {"entries": int(obj.num_entries), "uproot": uproot.__version__}
is_tree = isinstance(obj, uproot.behaviors.TTree.TTree)
meta["tree" if is_tree else "ntuple"] = name
listing = {}
keys = [k for k in obj.keys(recursive=True)] if is_tree else list(obj.keys())
def rntuple_array(k):
    top, *sub = k.split(".", 1)
    a = obj.arrays([top])[top]
    return a[sub[0]] if sub else a


if not is_tree:
    # A top-level record stands for its members (named as uproot names them: `child.own`,
    # `multi_grandparent.Child::base_a1`).
    keys = [
        s
        for k in keys
        if "." not in k
        for s in ([k] if not obj.arrays([k])[k].fields else [f"{k}.{m}" for m in obj.arrays([k])[k].fields])
    ]
for k in keys:
    try:
        a = obj[k].array(library="ak") if is_tree else rntuple_array(k)
    except Exception:
        continue
    t = ak.type(a).content
    flat = a
    counts = np.ones(len(a), np.int64)
    depth = 0
    while isinstance(t, (ak.types.ListType, ak.types.RegularType)):
        depth += 1
        if depth > 1:
            break
        counts = ak.to_numpy(ak.num(flat, axis=1)).astype(np.int64)
        flat = ak.flatten(flat)
        t = t.content
    if depth > 1 or not isinstance(t, ak.types.NumpyType):
        continue
    short = k.split("/")[-1]
    values = ak.to_numpy(flat)
    if values.dtype == np.bool_:
        values = values.astype(np.uint8)  # as ../shared/fixtures store bools
    arrays[f"{short}:values"] = values
    arrays[f"{short}:counts"] = counts
    listing[short] = {"typename": obj[k].typename if is_tree else str(ak.type(a).content), "type": str(ak.type(a).content)}
meta["branches" if is_tree else "fields"] = listing
arrays["_meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
np.savez_compressed(out, **arrays)
print(out, sorted(listing))
