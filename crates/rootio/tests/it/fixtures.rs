//! The uproot fixtures: one archive per test file, with the tree name, entries and per branch
//! the values and per-entry counts uproot reads.

use std::path::PathBuf;

use ndarray::Array1;
use ndarray_npy::{ReadNpyExt, ReadableElement};

/// One test file and what uproot reads from it.
pub(crate) struct Fixture {
    /// `real/uproot-HZZ.root`.
    pub(crate) rel: String,
    /// The ROOT file.
    pub(crate) file: PathBuf,
    /// The first tree's name.
    pub(crate) tree: String,
    /// Its entries.
    pub(crate) entries: i64,
    /// `(branch, ROOT type name)` of every branch uproot reads as numbers.
    pub(crate) branches: Vec<(String, String)>,
    archive: zip::ZipArchive<std::fs::File>,
}

/// Array `name` of a (deflate-compressed) NPZ archive, if it has that element type.
fn array<T: ReadableElement>(
    archive: &mut zip::ZipArchive<std::fs::File>,
    name: &str,
) -> Option<Array1<T>> {
    let entry = archive.by_name(&format!("{name}.npy")).ok()?;
    Array1::<T>::read_npy(entry).ok()
}

impl Fixture {
    /// `branch`'s values (as f64, integers exactly where they fit) and per-entry counts.
    pub(crate) fn values(&mut self, branch: &str) -> (Vec<f64>, Vec<i64>) {
        let counts: Array1<i64> = array(&mut self.archive, &format!("{branch}:counts"))
            .unwrap_or_else(|| panic!("{}: {branch}:counts", self.rel));
        let name = format!("{branch}:values");
        macro_rules! any {
            ($($t:ty),*) => {{
                $(if let Some(v) = array::<$t>(&mut self.archive, &name) {
                    return (v.iter().map(|&x| x as f64).collect(), counts.to_vec());
                })*
                panic!("{}: {name}: no numeric array", self.rel)
            }};
        }
        any!(f32, f64, i8, u8, i16, u16, i32, u32, i64, u64)
    }
}

/// Every fixture archive of `fixtures/rootio` with its ROOT file, in name order.
pub(crate) fn all() -> Vec<Fixture> {
    from("fixtures/rootio", "tree", "branches", "typename")
}

/// Every fixture archive of `fixtures/rootio-types` (branch types beyond plain numbers).
pub(crate) fn types() -> Vec<Fixture> {
    from("fixtures/rootio-types", "tree", "branches", "typename")
}

/// Every fixture archive of `fixtures/rntuple` with its ROOT file, in name order: `tree` is the
/// RNTuple's name and `branches` its fields.
pub(crate) fn rntuples() -> Vec<Fixture> {
    from("fixtures/rntuple", "ntuple", "fields", "type")
}

/// The crate's own test files written by ROOT 6.40 (`tests/data`, see its README): those
/// holding a tree.
pub(crate) fn local_trees() -> Vec<Fixture> {
    local("tree", "branches", "typename")
}

/// The crate's own RNTuple test files (`tests/data`).
pub(crate) fn local_ntuples() -> Vec<Fixture> {
    local("ntuple", "fields", "type")
}

fn local(tree_key: &str, fields_key: &str, type_key: &str) -> Vec<Fixture> {
    // The crate's folder as `cargo test` names it when running (a test binary reused from a
    // checkout elsewhere keeps its build-time path), else as it was built.
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let dir = crate_dir.join("tests/data");
    archives(&dir, tree_key, fields_key, type_key, &|_, file| {
        dir.join(format!("{file}.root"))
    })
}

/// The archives of folder `folder` of the shared data, their metadata read with these keys.
fn from(folder: &str, tree_key: &str, fields_key: &str, type_key: &str) -> Vec<Fixture> {
    let dir = gnn4c_testkit::shared(folder);
    archives(&dir, tree_key, fields_key, type_key, &|d, file| {
        gnn4c_testkit::shared(&format!("data/{d}/{file}.root"))
    })
}

/// The `<dir>__<file>.npz` archives in `dir` whose metadata has `tree_key`, with the ROOT file
/// `root_file(dir, file)` names.
fn archives(
    dir: &std::path::Path,
    tree_key: &str,
    fields_key: &str,
    type_key: &str,
    root_file: &dyn Fn(&str, &str) -> PathBuf,
) -> Vec<Fixture> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixtures folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "npz"))
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|npz| {
            let stem = npz
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("utf-8 name");
            let (dir, file) = stem.split_once("__").expect("<dir>__<file>.npz");
            let rel = format!("{dir}/{file}.root");
            let mut archive =
                zip::ZipArchive::new(std::fs::File::open(&npz).expect("archive")).expect("npz");
            let meta: Array1<u8> = array(&mut archive, "_meta").expect("_meta");
            let meta: serde_json::Value =
                serde_json::from_slice(meta.as_slice().expect("contiguous")).expect("json");
            let tree = meta[tree_key].as_str()?.to_owned();
            let branches = meta[fields_key]
                .as_object()
                .expect("fields")
                .iter()
                .map(|(k, v)| (k.clone(), v[type_key].as_str().unwrap_or("").to_owned()))
                .collect();
            Some(Fixture {
                file: root_file(dir, file),
                rel,
                tree,
                entries: meta["entries"].as_i64().expect("entries"),
                branches,
                archive,
            })
        })
        .collect()
}

/// Reads a column again in chunks of 7 entries (`take` gives the next chunk, empty at the
/// end), as the streaming loader reads, and checks the result equals `whole` from entry 5 on
/// (where the chunked cursor started).
pub(crate) fn chunks_agree(
    whole: &gnn4c_rootio::BranchData,
    take: &mut dyn FnMut(usize) -> gnn4c_rootio::BranchData,
) -> bool {
    let (mut bytes, mut counts) = (Vec::new(), Vec::new());
    loop {
        let part = take(7);
        if part.counts.is_empty() {
            break;
        }
        bytes.extend_from_slice(&part.bytes);
        counts.extend_from_slice(&part.counts);
    }
    let skip: usize = whole.counts.iter().take(5).map(|&c| c as usize).sum();
    let size = whole.interpretation.number.size();
    counts == whole.counts[5.min(whole.counts.len())..] && bytes == whole.bytes[skip * size..]
}

/// How `data` differs from uproot's `want_counts` and `want` values (bitwise; NaN equals NaN):
/// the counts, or the first value that differs; `None` when they agree.
pub(crate) fn difference(
    data: &gnn4c_rootio::BranchData,
    want: &[f64],
    want_counts: &[i64],
) -> Option<String> {
    let counts: Vec<i64> = data.counts.iter().map(|&c| i64::from(c)).collect();
    if counts != want_counts {
        return Some(format!(
            "counts differ: {:?} vs uproot {:?}",
            &counts[..counts.len().min(5)],
            &want_counts[..want_counts.len().min(5)]
        ));
    }
    let got = data.to_f64();
    if got.len() != want.len() {
        return Some(format!("{} values, uproot {}", got.len(), want.len()));
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()))?;
    Some(format!(
        "values differ at {at}: {} vs uproot {}",
        got[at], want[at]
    ))
}
