//! The project's own ROOT reader (`gnn4c-rootio`) behind [`TreeReader`]: the TTrees of every
//! file ROOT 5 to 6.40 and uproot write with zlib, LZMA, LZ4, zstd or no compression, split
//! collections (Delphes) and offset-map branches included, and RNTuples (format 1.0), whose
//! leaves read as branches: a collection of numbers as a `Vector` column (its offsets are its
//! own; a cardinality field like `nJet` reads as an integer scalar).
//!
//! Each requested column is read forward one basket (TTree) or one cluster (RNTuple) at a time,
//! so memory holds a chunk of entries and one basket or cluster per column, never a whole
//! branch; the columns are decompressed and decoded on as many threads as the machine has cores
//! (results do not depend on the count).

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

/// A column read forward: a TTree branch's cursor or an RNTuple field's.
trait Forward: Send {
    fn take(&mut self, n: usize) -> Result<rio::BranchData, rio::RootError>;
}

impl Forward for rio::BranchCursor<'_> {
    fn take(&mut self, n: usize) -> Result<rio::BranchData, rio::RootError> {
        rio::BranchCursor::take(self, n)
    }
}

impl Forward for rio::FieldCursor<'_> {
    fn take(&mut self, n: usize) -> Result<rio::BranchData, rio::RootError> {
        rio::FieldCursor::take(self, n)
    }
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
    if !path.is_file() {
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
fn values(data: &rio::BranchData) -> ColumnValues {
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

    /// A cursor over column `name` from entry `start`.
    fn cursor(&self, name: &str, start: u64) -> Result<Box<dyn Forward + '_>, DataError> {
        match &self.source {
            Source::Tree(tree) => {
                let b = tree.branch(name).ok_or_else(|| self.missing(name))?;
                let c = self
                    .file
                    .branch_cursor(tree, b, start)
                    .map_err(data_error)?;
                Ok(Box::new(c))
            }
            Source::Ntuple(ntuple) => {
                let f = ntuple.field(name).ok_or_else(|| self.missing(name))?;
                let c = self
                    .file
                    .field_cursor(ntuple, f, start)
                    .map_err(data_error)?;
                Ok(Box::new(c))
            }
        }
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
    fn check(&self, request: &ColumnRequest) -> Result<(BranchKind, Option<String>), DataError> {
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
                Some(c.clone())
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
        // One cursor per column (and per named counter, to check the arrays against it).
        let mut cursors = Vec::with_capacity(columns.len());
        for request in columns {
            let (kind, counter) = self.check(request)?;
            let cursor = self.cursor(&request.branch, start)?;
            let counter = match counter {
                Some(c) => {
                    let cc = self.cursor(&c, start)?;
                    Some((c, cc))
                }
                None => None,
            };
            cursors.push(ColumnCursor {
                kind,
                cursor,
                counter,
            });
        }
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let mut entry = start;
        while entry < stop {
            let n = step.min((stop - entry) as usize);
            let mut chunk = ColumnChunk {
                entry_start: entry,
                n_entries: n,
                columns: Vec::with_capacity(columns.len()),
            };
            let taken = take_all(&mut cursors, n, threads);
            for ((request, column), taken) in columns.iter().zip(&cursors).zip(taken) {
                let (data, counts) = taken.map_err(data_error)?;
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
                if let (Some((name, _)), Some(counts)) = (&column.counter, counts) {
                    for (i, &c) in data.counts.iter().enumerate() {
                        let said = counts.i64_at(i);
                        if i64::from(c) != said {
                            return Err(self.mismatch(
                                &request.branch,
                                format!(
                                    "entry {}: {c} values but counter '{name}' says {said}",
                                    entry + i as u64
                                ),
                            ));
                        }
                    }
                }
                let offsets = matches!(column.kind, BranchKind::Array(_) | BranchKind::Vector(_))
                    .then(|| {
                        let mut o = Vec::with_capacity(n + 1);
                        o.push(0usize);
                        for &c in &data.counts {
                            o.push(o[o.len() - 1] + c as usize);
                        }
                        o
                    });
                chunk.columns.push(Column {
                    values: values(&data),
                    offsets,
                });
            }
            on_chunk(&chunk)?;
            entry += n as u64;
        }
        Ok(())
    }
}

/// One requested column being read: its layout, its cursor and its named counter's.
struct ColumnCursor<'f> {
    kind: BranchKind,
    cursor: Box<dyn Forward + 'f>,
    counter: Option<(String, Box<dyn Forward + 'f>)>,
}

/// A column's next entries, and its counter's.
type Taken = Result<(rio::BranchData, Option<rio::BranchData>), rio::RootError>;

/// The next `n` entries of every column, their baskets decompressed and decoded on up to
/// `threads` threads (each a contiguous run of columns); results in column order.
fn take_all(cursors: &mut [ColumnCursor<'_>], n: usize, threads: usize) -> Vec<Taken> {
    let take = |c: &mut ColumnCursor<'_>| -> Taken {
        let data = c.cursor.take(n)?;
        let counts = match &mut c.counter {
            Some((_, cc)) => Some(cc.take(n)?),
            None => None,
        };
        Ok((data, counts))
    };
    let threads = threads.min(cursors.len()).max(1);
    if threads == 1 {
        return cursors.iter_mut().map(take).collect();
    }
    let per = cursors.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = cursors
            .chunks_mut(per)
            .map(|part| s.spawn(move || part.iter_mut().map(take).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}
