//! The project's own ROOT reader (`gnn4c-rootio`) behind [`TreeReader`]: the TTrees of every
//! file ROOT 5 to 6.40 and uproot write with zlib, LZMA, LZ4, zstd or no compression, split
//! collections (Delphes) and offset-map branches included, and RNTuples (format 1.0), whose
//! leaves read as branches: a collection of numbers as a `Vector` column (its offsets are its
//! own; a cardinality field like `nJet` reads as an integer scalar).
//!
//! The requested columns are read together forward (`gnn4c_rootio::ColumnReader`), a chunk of
//! `step_size` entries at a time: the baskets (TTree) or the clusters' pages (RNTuple) the chunk
//! needs are read and decompressed as one pool of jobs on `EntryRange::threads` threads (0: one
//! per core), each physical column once however many requests name it (a counter that is also a
//! column, an RNTuple collection's shared offsets), so memory holds the chunk's baskets or the
//! clusters it touches, never a whole branch (results do not depend on the thread count). On
//! more than one thread, the next chunk is read, and its values widened and checked, on a
//! thread of its own while the caller works on this one (memory holds two chunks).

use std::path::Path;

use gnn4c_rootio as rio;

use super::{
    BranchInfo, BranchKind, Column, ColumnChunk, ColumnRequest, ColumnValues, ElemType, EntryRange,
    TreeReader,
};
use gnn4c_features::closest_names;

use crate::DataError;

/// What a [`NativeTree`] reads: a TTree, or an RNTuple.
enum Source {
    Tree(rio::TreeInfo),
    Ntuple(rio::NtupleInfo),
}

/// A tree (or RNTuple) opened with the project's reader.
struct NativeTree {
    file: rio::RootFile,
    source: Source,
    name: String,
    branches: Vec<BranchInfo>,
}

/// The reader's error as a [`DataError`] (the file and the place in it are in both).
fn data_error(e: rio::RootError) -> DataError {
    match e {
        rio::RootError::Io { path, source } => {
            if source.kind() == std::io::ErrorKind::NotFound {
                DataError::FileNotFound { path }
            } else {
                DataError::Io { path, source }
            }
        }
        rio::RootError::Corrupt {
            path,
            place,
            message,
        } => DataError::Read {
            path,
            context: place,
            message: format!("{message} (the file is truncated or corrupted)"),
        },
        rio::RootError::Unsupported { path, place, what } => DataError::Unsupported {
            path,
            limit: format!("{place}: {what}"),
        },
        rio::RootError::NotFound {
            path,
            what,
            name,
            hint,
        } => DataError::Read {
            path,
            context: format!("looking up {what} '{name}'"),
            message: format!("not found{hint}"),
        },
    }
}

fn open_file(path: &Path) -> Result<rio::RootFile, DataError> {
    if !rio::is_url(path) && !path.is_file() {
        return Err(DataError::FileNotFound {
            path: path.to_owned(),
        });
    }
    rio::RootFile::open(path).map_err(data_error)
}

/// The trees and RNTuples of a ROOT file, as `(name, entries)`: trees first, in file order.
pub fn list_trees(path: &Path) -> Result<Vec<(String, u64)>, DataError> {
    let file = open_file(path)?;
    let mut out = Vec::new();
    for name in file.tree_paths() {
        let tree = file.tree(&name).map_err(data_error)?;
        out.push((name, tree.entries.max(0) as u64));
    }
    for name in file.ntuple_paths() {
        let ntuple = file.ntuple(&name).map_err(data_error)?;
        out.push((name, ntuple.entries));
    }
    Ok(out)
}

/// Opens tree (or RNTuple) `tree` of the ROOT file at `path`.
pub fn open_tree(path: &Path, tree: &str) -> Result<Box<dyn TreeReader>, DataError> {
    let file = open_file(path)?;
    let trees = file.tree_paths();
    let ntuples = file.ntuple_paths();
    let (source, branches) = if trees.iter().any(|n| n == tree) {
        let info = file.tree(tree).map_err(data_error)?;
        let branches = info.all_branches().into_iter().map(describe).collect();
        (Source::Tree(info), branches)
    } else if ntuples.iter().any(|n| n == tree) {
        let info = file.ntuple(tree).map_err(data_error)?;
        let branches = info
            .fields
            .iter()
            .map(|f| describe_field(f, &info))
            .collect();
        (Source::Ntuple(info), branches)
    } else {
        let names = trees.iter().chain(&ntuples).map(String::as_str);
        return Err(DataError::TreeNotFound {
            path: path.to_owned(),
            tree: tree.to_owned(),
            closest: closest_names(tree, names, 5),
        });
    };
    Ok(Box::new(NativeTree {
        file,
        source,
        name: tree.to_owned(),
        branches,
    }))
}

/// An RNTuple leaf as the data layer sees it: a scalar, a collection of numbers (`Vector`: its
/// offsets are its own), or not readable, with its C++ type.
fn describe_field(f: &rio::NtupleField, ntuple: &rio::NtupleInfo) -> BranchInfo {
    let (kind, type_name) = match &f.read {
        Ok(rio::Interpretation { number, layout, .. }) => {
            let t = ElemType::from(*number);
            match layout {
                rio::Layout::Fixed(1) => (BranchKind::Scalar(t), f.type_name.clone()),
                rio::Layout::Fixed(n) => (BranchKind::Other, format!("{}[{n}]", f.type_name)),
                _ => (BranchKind::Vector(t), format!("{}[]", f.type_name)),
            }
        }
        Err(why) => (BranchKind::Other, format!("{} ({why})", f.type_name)),
    };
    BranchInfo {
        name: f.name.clone(),
        type_name,
        kind,
        entries: ntuple.entries,
    }
}

/// A branch as the data layer sees it: its layout and a C++ type name.
fn describe(b: &rio::BranchInfo) -> BranchInfo {
    let (kind, type_name) = match rio::interpret(b) {
        Ok(rio::Interpretation { number, layout, .. }) => {
            let t = ElemType::from(number);
            let cpp = number.cpp();
            match layout {
                rio::Layout::Fixed(1) => (BranchKind::Scalar(t), cpp.to_owned()),
                rio::Layout::Fixed(n) => (BranchKind::Other, format!("{cpp}[{n}]")),
                rio::Layout::Jagged | rio::Layout::JaggedBits | rio::Layout::Pointer => {
                    (BranchKind::Array(t), format!("{cpp}[]"))
                }
                rio::Layout::Vector => (BranchKind::Vector(t), format!("vector<{cpp}>")),
            }
        }
        Err(_) => {
            let name = b
                .element
                .as_ref()
                .map(|e| e.class_name.clone())
                .filter(|c| !c.is_empty())
                .or_else(|| b.leaves.first().map(|l| l.title.clone()))
                .unwrap_or_else(|| b.class.clone());
            (BranchKind::Other, name)
        }
    };
    BranchInfo {
        name: b.name.clone(),
        type_name,
        kind,
        entries: b.entries.max(0) as u64,
    }
}

/// A chunk's values of one column, widened (floats to f64, integers exactly to i64).
fn values(data: &rio::Values) -> ColumnValues {
    match data.interpretation.number {
        rio::Number::F32 | rio::Number::F64 => ColumnValues::Float(data.to_f64()),
        _ => ColumnValues::Int(data.to_i64()),
    }
}

impl NativeTree {
    fn missing(&self, name: &str) -> DataError {
        DataError::BranchNotFound {
            path: self.file.path().to_owned(),
            tree: self.name.clone(),
            branch: name.to_owned(),
            needed_for: "a requested column".to_owned(),
            closest: closest_names(name, self.branches.iter().map(|b| b.name.as_str()), 5),
        }
    }

    /// The columns `names` read together from entry `start` on `threads` threads.
    fn column_reader(
        &self,
        names: &[&str],
        start: u64,
        threads: usize,
    ) -> Result<rio::ColumnReader<'_>, DataError> {
        match &self.source {
            Source::Tree(tree) => {
                let branches = names
                    .iter()
                    .map(|&n| tree.branch(n).ok_or_else(|| self.missing(n)))
                    .collect::<Result<Vec<_>, _>>()?;
                rio::ColumnReader::tree(&self.file, tree, &branches, start, threads)
            }
            Source::Ntuple(ntuple) => {
                let fields = names
                    .iter()
                    .map(|&n| ntuple.field(n).ok_or_else(|| self.missing(n)))
                    .collect::<Result<Vec<_>, _>>()?;
                rio::ColumnReader::ntuple(&self.file, ntuple, &fields, start, threads)
            }
        }
        .map_err(data_error)
    }

    fn info(&self, name: &str) -> Option<&BranchInfo> {
        self.branches.iter().find(|b| b.name == name)
    }

    fn wrong_type(&self, info: &BranchInfo, expected: &str) -> DataError {
        DataError::BranchType {
            path: self.file.path().to_owned(),
            tree: self.name.clone(),
            branch: info.name.clone(),
            found: info.type_name.clone(),
            expected: expected.to_owned(),
        }
    }

    fn mismatch(&self, branch: &str, detail: String) -> DataError {
        DataError::CounterMismatch {
            path: self.file.path().to_owned(),
            tree: self.name.clone(),
            branch: branch.to_owned(),
            detail,
        }
    }

    /// The kind of a requested column, checked readable; and its counter's, when named.
    fn check(&self, request: &ColumnRequest) -> Result<(BranchKind, Option<&str>), DataError> {
        // `branches` describes every branch of the tree.
        let info = self
            .info(&request.branch)
            .ok_or_else(|| self.missing(&request.branch))?;
        if info.kind == BranchKind::Other {
            return Err(self.wrong_type(
                info,
                "a number, a leaf-count array of numbers or a std::vector of numbers \
                 (objects, strings and fixed-size arrays are not supported)",
            ));
        }
        let counter = match (info.kind, &request.counter) {
            (BranchKind::Array(_), Some(c)) => {
                let ci = self.info(c).ok_or_else(|| self.missing(c))?;
                if !matches!(ci.kind, BranchKind::Scalar(t) if t.is_integer()) {
                    return Err(self.wrong_type(ci, "an integer scalar counter"));
                }
                Some(ci.name.as_str())
            }
            _ => None,
        };
        Ok((info.kind, counter))
    }
}

impl TreeReader for NativeTree {
    fn path(&self) -> &Path {
        self.file.path()
    }

    fn tree_name(&self) -> &str {
        &self.name
    }

    fn entries(&self) -> u64 {
        match &self.source {
            Source::Tree(tree) => tree.entries.max(0) as u64,
            Source::Ntuple(ntuple) => ntuple.entries,
        }
    }

    fn branches(&self) -> &[BranchInfo] {
        &self.branches
    }

    fn clusters(&self) -> Option<usize> {
        match &self.source {
            Source::Tree(_) => None,
            Source::Ntuple(ntuple) => Some(ntuple.n_clusters()),
        }
    }

    fn read(
        &self,
        columns: &[ColumnRequest],
        range: EntryRange,
        on_chunk: &mut dyn FnMut(&ColumnChunk) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let stop = range.entry_stop.min(self.entries());
        let start = range.entry_start.min(stop);
        let step = range.step_size.max(1);
        // The requested columns, then the named counters (to check the arrays against):
        // a column named twice, or a counter also requested, is read once.
        let mut wanted = Wanted {
            columns,
            kinds: Vec::with_capacity(columns.len()),
            counter_at: Vec::with_capacity(columns.len()),
        };
        let mut names: Vec<&str> = columns.iter().map(|r| r.branch.as_str()).collect();
        for request in columns {
            let (kind, counter) = self.check(request)?;
            wanted.kinds.push(kind);
            wanted.counter_at.push(counter.map(|c| {
                names.push(c);
                (c, names.len() - 1)
            }));
        }
        let threads = match range.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        let mut reader = self.column_reader(&names, start, threads)?.ending_at(stop);
        let chunks = (start..stop)
            .step_by(step)
            .map(|entry| (entry, step.min((stop - entry) as usize)));
        let mut next = move |(entry, n): (u64, usize)| {
            let taken = reader.take(n).map_err(data_error)?;
            self.chunk(&wanted, entry, n, &taken)
        };
        if threads <= 1 {
            for at in chunks {
                on_chunk(&next(at)?)?;
            }
            return Ok(());
        }
        // On several threads, the next chunk is read while the caller works on this one.
        std::thread::scope(|s| {
            let (hand_over, handed) = std::sync::mpsc::sync_channel(0);
            s.spawn(move || {
                for at in chunks {
                    let chunk = next(at);
                    let failed = chunk.is_err();
                    // Ends after handing over an error, or once the caller takes no more
                    // chunks (its own error ended the read).
                    if hand_over.send(chunk).is_err() || failed {
                        return;
                    }
                }
            });
            for chunk in handed {
                on_chunk(&chunk?)?;
            }
            Ok(())
        })
    }
}

/// What a read asks for: the requests, each one's kind, and the counter it is checked against
/// (its name and its place among the columns read).
struct Wanted<'a> {
    columns: &'a [ColumnRequest],
    kinds: Vec<BranchKind>,
    counter_at: Vec<Option<(&'a str, usize)>>,
}

impl NativeTree {
    /// The chunk of `n` entries from `entry` that `taken` holds: each request's values widened,
    /// its arrays' offsets, and each array checked against its counter.
    fn chunk(
        &self,
        wanted: &Wanted<'_>,
        entry: u64,
        n: usize,
        taken: &rio::Taken,
    ) -> Result<ColumnChunk, DataError> {
        let mut chunk = ColumnChunk {
            entry_start: entry,
            n_entries: n,
            columns: Vec::with_capacity(wanted.columns.len()),
        };
        // Each counter's values widened once, however many arrays it counts.
        let mut counters: Vec<(usize, Vec<i64>)> = Vec::new();
        for (i, request) in wanted.columns.iter().enumerate() {
            let data = &taken[i];
            if data.counts.len() != n {
                return Err(self.mismatch(
                    &request.branch,
                    format!(
                        "the branch ends at entry {}, before the tree's {} entries",
                        entry + data.counts.len() as u64,
                        self.entries()
                    ),
                ));
            }
            if let Some((name, at)) = &wanted.counter_at[i] {
                let k = match counters.iter().position(|(a, _)| a == at) {
                    Some(k) => k,
                    None => {
                        counters.push((*at, taken[*at].to_i64()));
                        counters.len() - 1
                    }
                };
                let counts = &counters[k].1;
                for (j, &c) in data.counts.iter().enumerate() {
                    let said = counts.get(j).copied().unwrap_or(-1);
                    if i64::from(c) != said {
                        return Err(self.mismatch(
                            &request.branch,
                            format!(
                                "entry {}: {c} values but counter '{name}' says {said}",
                                entry + j as u64
                            ),
                        ));
                    }
                }
            }
            let offsets = matches!(
                wanted.kinds[i],
                BranchKind::Array(_) | BranchKind::Vector(_)
            )
            .then(|| {
                let mut o = Vec::with_capacity(n + 1);
                o.push(0usize);
                for &c in &data.counts {
                    o.push(o[o.len() - 1] + c as usize);
                }
                o
            });
            chunk.columns.push(Column {
                values: values(data),
                offsets,
            });
        }
        Ok(chunk)
    }
}
