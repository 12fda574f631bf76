//! The oxyroot 0.1.25 implementation of [`TreeReader`]: counter-driven leaf-count reads, panics
//! caught at this boundary, and clear errors for the files it cannot read.
//!
//! Leaf-count arrays are read counter-driven: the counter branch is decoded first and exactly
//! `count[i]` values are taken for entry i through `Branch::get_basket`. oxyroot's own
//! `as_iter::<Slice<_>>` silently puts every value into entry 0 when a basket is embedded in the
//! tree header or holds as many values as entries (see `../shared/data/README.md`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use oxyroot::{Branch, Named, RBuffer, ReaderTree, RootFile};

use super::{
    BranchInfo, BranchKind, Column, ColumnChunk, ColumnRequest, ColumnValues, ElemType, EntryRange,
    TreeReader,
};
use crate::{DataError, closest_names};

/// The files this reader cannot read, for error messages.
const LIMITS: &str = "oxyroot 0.1.25 reads ROOT ≤ 6.32 files with zlib/lzma/lz4 or no compression, \
flat branches (scalars, leaf-count arrays, std::vector of numbers); it cannot read zstd, ROOT ≥ 6.34 \
streamers, offset maps, TClonesArray (real Delphes) or TBranchObject branches";

/// A tree opened through oxyroot.
struct OxyTree {
    path: PathBuf,
    name: String,
    tree: ReaderTree,
    branches: Vec<BranchInfo>,
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

/// Runs `f`, turning a panic inside oxyroot into a `DataError::Read` naming `path` and `context`.
fn guarded<T>(path: &Path, context: &str, f: impl FnOnce() -> T) -> Result<T, DataError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let message = panic_message(payload.as_ref());
        classify_failure(path, context, &message, true)
    })
}

/// Maps an oxyroot error or panic message to the clearest error we can give.
fn classify_failure(path: &Path, context: &str, message: &str, panicked: bool) -> DataError {
    let unsupported = |limit: &str| DataError::Unsupported {
        path: path.to_owned(),
        limit: limit.to_owned(),
    };
    if message.contains("VersionTooHigh") && message.contains("TStreamerInfo") {
        return unsupported(
            "written by ROOT ≥ 6.34 (TStreamerInfo version 10); oxyroot 0.1.25 reads files \
             written by ROOT ≤ 6.32 or uproot: re-write it with uproot or an older ROOT",
        );
    }
    if message.contains("VersionTooHigh") {
        return unsupported(&format!(
            "a streamer version newer than oxyroot 0.1.25 knows ({message}); {LIMITS}"
        ));
    }
    if panicked && context == "opening the file" {
        return unsupported(&format!(
            "oxyroot 0.1.25 cannot parse this file's streamer info (it stopped with: {message}); \
             real Delphes files (TClonesArray branches) fail this way: flatten them into \
             leaf-count arrays first (the delphes_flat schema); {LIMITS}"
        ));
    }
    let message = if panicked {
        format!("oxyroot 0.1.25 panicked: {message}; {LIMITS}")
    } else {
        message.to_owned()
    };
    DataError::Read {
        path: path.to_owned(),
        context: context.to_owned(),
        message,
    }
}

fn open_file(path: &Path) -> Result<RootFile, DataError> {
    if !path.is_file() {
        return Err(DataError::FileNotFound {
            path: path.to_owned(),
        });
    }
    // oxyroot 0.1.25 has no zstd decoder and panics deep inside: check the header's setting first.
    if header_compression(path).is_some_and(|c| c / 100 == 5) {
        return Err(DataError::Unsupported {
            path: path.to_owned(),
            limit: "zstd compression (oxyroot 0.1.25 has no zstd decoder); re-write the file \
                    with zlib, lzma or lz4 (e.g. uproot with compression=uproot.ZLIB(1))"
                .to_owned(),
        });
    }
    let file = guarded(path, "opening the file", || RootFile::open(path))?
        .map_err(|e| classify_failure(path, "opening the file", &e.to_string(), false))?;
    Ok(file)
}

/// The file's compression setting (algorithm × 100 + level) from its header, if readable.
///
/// Header layout: "root", fVersion, fBEGIN, then fEND and fSeekFree as 4-byte offsets (8-byte
/// when fVersion ≥ 1000000), fNbytesFree, nfree, fNbytesName, fUnits (1 byte), fCompress.
fn header_compression(path: &Path) -> Option<i32> {
    use std::io::Read;
    let mut head = [0u8; 45];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    if &head[..4] != b"root" {
        return None;
    }
    let version = i32::from_be_bytes(head[4..8].try_into().ok()?);
    let at = if version >= 1_000_000 { 41 } else { 33 };
    Some(i32::from_be_bytes(head[at..at + 4].try_into().ok()?))
}

/// The trees of a ROOT file, as `(name, entries)`.
pub fn list_trees(path: &Path) -> Result<Vec<(String, u64)>, DataError> {
    let mut file = open_file(path)?;
    let names = tree_names(&file);
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let tree = guarded(path, &format!("opening tree '{name}'"), || {
            file.get_tree(&name)
        })?
        .map_err(|e| {
            classify_failure(
                path,
                &format!("opening tree '{name}'"),
                &e.to_string(),
                false,
            )
        })?;
        out.push((name, tree.entries().max(0) as u64));
    }
    Ok(out)
}

fn tree_names(file: &RootFile) -> Vec<String> {
    let mut names: Vec<String> = file
        .keys()
        .iter()
        .filter(|k| k.class_name() == "TTree")
        .map(|k| k.name().to_owned())
        .collect();
    names.dedup();
    names
}

/// Opens tree `tree` of the ROOT file at `path`.
pub fn open_tree(path: &Path, tree: &str) -> Result<Box<dyn TreeReader>, DataError> {
    let mut file = open_file(path)?;
    let names = tree_names(&file);
    if !names.iter().any(|n| n == tree) {
        return Err(DataError::TreeNotFound {
            path: path.to_owned(),
            tree: tree.to_owned(),
            closest: closest_names(tree, names.iter().map(String::as_str), 5),
        });
    }
    let context = format!("opening tree '{tree}'");
    let reader_tree = guarded(path, &context, || file.get_tree(tree))?
        .map_err(|e| classify_failure(path, &context, &e.to_string(), false))?;
    let branches = guarded(path, "listing branches", || {
        reader_tree
            .branches_r()
            .into_iter()
            .map(|b| {
                let type_name = b.item_type_name();
                BranchInfo {
                    name: b.name().to_owned(),
                    kind: branch_kind(b, &type_name),
                    type_name,
                    entries: b.entries().max(0) as u64,
                }
            })
            .collect::<Vec<_>>()
    })?;
    Ok(Box::new(OxyTree {
        path: path.to_owned(),
        name: tree.to_owned(),
        tree: reader_tree,
        branches,
    }))
}

fn branch_kind(b: &Branch, type_name: &str) -> BranchKind {
    // Split objects (TClonesArray, TBranchObject) have sub-branches; never a plain column.
    if b.branches().next().is_some() {
        return BranchKind::Other;
    }
    BranchInfo::kind_of(type_name)
}

type Entry = Result<ColumnValues, String>;

fn empty_values(t: ElemType, capacity: usize) -> ColumnValues {
    if t.is_integer() {
        ColumnValues::Int(Vec::with_capacity(capacity))
    } else {
        ColumnValues::Float(Vec::with_capacity(capacity))
    }
}

/// Reads `n` big-endian values of type `t` from `r`, appending to `out`.
fn read_values(
    r: &mut RBuffer<'_>,
    t: ElemType,
    n: usize,
    out: &mut ColumnValues,
) -> Result<(), String> {
    let short = |e: &dyn std::fmt::Display| format!("basket ended early: {e}");
    // oxyroot's RBuffer panics (slice index) rather than erroring on a short read: check first.
    let need = n * t.size();
    if (r.len().max(0) as usize) < need {
        return Err(format!(
            "basket ended early: {n} values need {need} bytes, {} left",
            r.len().max(0)
        ));
    }
    match out {
        ColumnValues::Float(v) => {
            for _ in 0..n {
                let x = match t {
                    ElemType::F32 => f64::from(r.read_f32().map_err(|e| short(&e))?),
                    _ => r.read_f64().map_err(|e| short(&e))?,
                };
                v.push(x);
            }
        }
        ColumnValues::Int(v) => {
            for _ in 0..n {
                let x = match t {
                    ElemType::Bool => i64::from(r.read_u8().map_err(|e| short(&e))? != 0),
                    ElemType::I8 => i64::from(r.read_i8().map_err(|e| short(&e))?),
                    ElemType::U8 => i64::from(r.read_u8().map_err(|e| short(&e))?),
                    ElemType::I16 => i64::from(r.read_i16().map_err(|e| short(&e))?),
                    ElemType::U16 => i64::from(r.read_u16().map_err(|e| short(&e))?),
                    ElemType::I32 => i64::from(r.read_i32().map_err(|e| short(&e))?),
                    ElemType::U32 => i64::from(r.read_u32().map_err(|e| short(&e))?),
                    ElemType::I64 => r.read_i64().map_err(|e| short(&e))?,
                    // Bit-for-bit: event numbers above 2^63 survive the round trip through i64.
                    ElemType::U64 => r.read_u64().map_err(|e| short(&e))? as i64,
                    ElemType::F32 | ElemType::F64 => unreachable!("float type in an int column"),
                };
                v.push(x);
            }
        }
    }
    Ok(())
}

/// True when oxyroot hands one entry per buffer (baskets with an offset table); then the buffer
/// must be exhausted after the entry's values.
fn per_entry_buffer(r: &RBuffer<'_>) -> bool {
    r.skip_header().is_some()
}

impl OxyTree {
    fn find(&self, name: &str) -> Option<&Branch> {
        self.tree.branch(name)
    }

    fn info(&self, name: &str) -> Option<&BranchInfo> {
        self.branches.iter().find(|b| b.name == name)
    }

    fn missing(&self, branch: &str) -> DataError {
        DataError::BranchNotFound {
            path: self.path.clone(),
            tree: self.name.clone(),
            branch: branch.to_owned(),
            needed_for: "a requested column".to_owned(),
            closest: closest_names(branch, self.branches.iter().map(|b| b.name.as_str()), 5),
        }
    }

    fn wrong_type(&self, info: &BranchInfo, expected: &str) -> DataError {
        DataError::BranchType {
            path: self.path.clone(),
            tree: self.name.clone(),
            branch: info.name.clone(),
            found: info.type_name.clone(),
            expected: expected.to_owned(),
        }
    }

    /// A lazy per-entry iterator over one column.
    fn column_iter<'a>(
        &'a self,
        request: &ColumnRequest,
    ) -> Result<Box<dyn Iterator<Item = Entry> + 'a>, DataError> {
        let info = self
            .info(&request.branch)
            .ok_or_else(|| self.missing(&request.branch))?;
        let branch = self
            .find(&request.branch)
            .ok_or_else(|| self.missing(&request.branch))?;
        match info.kind {
            BranchKind::Scalar(t) => Ok(Box::new(branch.get_basket(move |r| {
                let mut v = empty_values(t, 1);
                read_values(r, t, 1, &mut v)?;
                Ok(v)
            }))),
            BranchKind::Vector(t) => Ok(Box::new(branch.get_basket(move |r| {
                r.do_skip_header().map_err(|e| e.to_string())?;
                if r.len() < 4 {
                    return Err("basket ended before a std::vector's size".to_owned());
                }
                let n = r
                    .read_i32()
                    .map_err(|e| format!("basket ended early: {e}"))?;
                let n = usize::try_from(n).map_err(|_| format!("negative vector size {n}"))?;
                let mut v = empty_values(t, n);
                read_values(r, t, n, &mut v)?;
                Ok(v)
            }))),
            BranchKind::Array(t) => {
                let counter_name = request.counter.as_deref().ok_or_else(|| {
                    DataError::Config(format!(
                        "branch '{}' is a leaf-count array: its counter branch must be named",
                        info.name
                    ))
                })?;
                let counter_info = self
                    .info(counter_name)
                    .ok_or_else(|| self.missing(counter_name))?;
                let ct = match counter_info.kind {
                    BranchKind::Scalar(ct) if ct.is_integer() => ct,
                    _ => return Err(self.wrong_type(counter_info, "an integer scalar counter")),
                };
                let counter = self
                    .find(counter_name)
                    .ok_or_else(|| self.missing(counter_name))?;
                let mut counts = counter.get_basket(move |r| {
                    let mut v = empty_values(ct, 1);
                    read_values(r, ct, 1, &mut v)?;
                    Ok::<i64, String>(match v {
                        ColumnValues::Int(v) => v[0],
                        ColumnValues::Float(_) => unreachable!("integer counter"),
                    })
                });
                let counter_name = counter_name.to_owned();
                Ok(Box::new(branch.get_basket(move |r| {
                    let n = counts.next().ok_or_else(|| {
                        format!("counter '{counter_name}' has fewer entries than the array branch")
                    })??;
                    let n = usize::try_from(n)
                        .map_err(|_| format!("counter '{counter_name}' is negative ({n})"))?;
                    let mut v = empty_values(t, n);
                    read_values(r, t, n, &mut v).map_err(|e| {
                        format!("counter '{counter_name}' says {n} values: {e}")
                    })?;
                    if per_entry_buffer(r) && !r.is_empty() {
                        return Err(format!(
                            "counter '{counter_name}' says {n} values but the entry holds {} more bytes",
                            r.len()
                        ));
                    }
                    Ok(v)
                })))
            }
            BranchKind::Other => Err(self.wrong_type(
                info,
                "a number, a leaf-count array of numbers or a std::vector of numbers \
                 (objects, strings and fixed-size arrays are not supported)",
            )),
        }
    }
}

impl TreeReader for OxyTree {
    fn path(&self) -> &Path {
        &self.path
    }

    fn tree_name(&self) -> &str {
        &self.name
    }

    fn entries(&self) -> u64 {
        self.tree.entries().max(0) as u64
    }

    fn branches(&self) -> &[BranchInfo] {
        &self.branches
    }

    fn read(
        &self,
        columns: &[ColumnRequest],
        range: EntryRange,
        on_chunk: &mut dyn FnMut(&ColumnChunk) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let stop = range.entry_stop.min(self.entries());
        let step = range.step_size.max(1);
        let mut iters = Vec::with_capacity(columns.len());
        for c in columns {
            let context = format!("reading branch '{}' of tree '{}'", c.branch, self.name);
            iters.push(guarded(&self.path, &context, || self.column_iter(c))??);
        }
        let mut pull = |k: usize, entry: u64| -> Result<ColumnValues, DataError> {
            let branch = &columns[k].branch;
            let context = format!("reading branch '{branch}' of tree '{}'", self.name);
            match guarded(&self.path, &context, || iters[k].next())? {
                Some(Ok(v)) => Ok(v),
                Some(Err(detail)) => Err(DataError::CounterMismatch {
                    path: self.path.clone(),
                    tree: self.name.clone(),
                    branch: branch.clone(),
                    detail: format!("entry {entry}: {detail}"),
                }),
                None => Err(DataError::CounterMismatch {
                    path: self.path.clone(),
                    tree: self.name.clone(),
                    branch: branch.clone(),
                    detail: format!(
                        "the branch ends at entry {entry}, before the tree's {} entries",
                        self.entries()
                    ),
                }),
            }
        };
        // oxyroot has no random access to baskets: decode and drop the entries before the range.
        let mut entry = 0u64;
        while entry < range.entry_start.min(stop) {
            for (k, _) in columns.iter().enumerate() {
                pull(k, entry)?;
            }
            entry += 1;
        }
        while entry < stop {
            let n = step.min((stop - entry) as usize);
            let mut chunk = ColumnChunk {
                entry_start: entry,
                n_entries: n,
                columns: Vec::with_capacity(columns.len()),
            };
            for (k, request) in columns.iter().enumerate() {
                let first = pull(k, entry)?;
                let jagged = !matches!(
                    self.info(&request.branch).map(|i| i.kind),
                    Some(BranchKind::Scalar(_))
                );
                let mut offsets = jagged.then(|| {
                    let mut o = Vec::with_capacity(n + 1);
                    o.push(0);
                    o
                });
                let mut values = first;
                if let Some(o) = offsets.as_mut() {
                    o.push(values.len());
                }
                for i in 1..n {
                    let v = pull(k, entry + i as u64)?;
                    append(&mut values, v);
                    if let Some(o) = offsets.as_mut() {
                        o.push(values.len());
                    }
                }
                chunk.columns.push(Column { values, offsets });
            }
            on_chunk(&chunk)?;
            entry += n as u64;
        }
        Ok(())
    }
}

fn append(into: &mut ColumnValues, from: ColumnValues) {
    match (into, from) {
        (ColumnValues::Float(a), ColumnValues::Float(b)) => a.extend(b),
        (ColumnValues::Int(a), ColumnValues::Int(b)) => a.extend(b),
        _ => unreachable!("one column has one element type"),
    }
}
