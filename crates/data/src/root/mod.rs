//! ROOT input behind our own reader trait: branch descriptions, column requests and chunks.
//!
//! Everything above this module sees only [`TreeReader`], so the ROOT library can be swapped
//! (or a second one added) without touching schemas or event assembly.

mod native;
mod write;

use std::path::Path;

use crate::DataError;

pub use native::{list_trees, open_tree};
pub use write::{WriteColumn, write_tree};

/// Element type of a branch's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemType {
    /// `bool`
    Bool,
    /// `int8_t`
    I8,
    /// `uint8_t`
    U8,
    /// `int16_t`
    I16,
    /// `uint16_t`
    U16,
    /// `int32_t`
    I32,
    /// `uint32_t`
    U32,
    /// `int64_t`
    I64,
    /// `uint64_t`
    U64,
    /// `float`
    F32,
    /// `double`
    F64,
}

impl ElemType {
    /// Parses a C++ type name (`float`, `int32_t`, `unsigned int`, `Float_t`, …).
    pub fn from_cpp(name: &str) -> Option<ElemType> {
        gnn4c_rootio::Number::from_cpp(name).map(ElemType::from)
    }

    /// Bytes per value on disk.
    pub fn size(self) -> usize {
        match self {
            ElemType::Bool | ElemType::I8 | ElemType::U8 => 1,
            ElemType::I16 | ElemType::U16 => 2,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
        }
    }

    /// True for the integer types and bool (read exactly into `i64`).
    pub fn is_integer(self) -> bool {
        !matches!(self, ElemType::F32 | ElemType::F64)
    }
}

impl From<gnn4c_rootio::Number> for ElemType {
    fn from(n: gnn4c_rootio::Number) -> ElemType {
        use gnn4c_rootio::Number;
        match n {
            Number::Bool => ElemType::Bool,
            Number::I8 => ElemType::I8,
            Number::U8 => ElemType::U8,
            Number::I16 => ElemType::I16,
            Number::U16 => ElemType::U16,
            Number::I32 => ElemType::I32,
            Number::U32 => ElemType::U32,
            Number::I64 => ElemType::I64,
            Number::U64 => ElemType::U64,
            Number::F32 => ElemType::F32,
            Number::F64 => ElemType::F64,
        }
    }
}

/// How a branch stores its values per entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BranchKind {
    /// One value per entry.
    Scalar(ElemType),
    /// A leaf-count array (`float[]`): `count[i]` values per entry, with a counter branch.
    Array(ElemType),
    /// A `std::vector<T>`: the length is stored with each entry.
    Vector(ElemType),
    /// Anything else (objects, strings, fixed-size or nested arrays): not readable as a column.
    Other,
}

/// One branch of a tree as the reader sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchInfo {
    /// Full branch name (`Jet_pt`, `Jet.PT`).
    pub name: String,
    /// The C++ type as the file declares it (`float[]`, `vector<float>`, `int32_t`).
    pub type_name: String,
    /// How its values are laid out.
    pub kind: BranchKind,
    /// Entries in the branch.
    pub entries: u64,
}

impl BranchInfo {
    /// Classifies a C++ type name.
    pub fn kind_of(type_name: &str) -> BranchKind {
        let t = type_name.trim();
        if let Some(inner) = t.strip_suffix("[]") {
            return ElemType::from_cpp(inner).map_or(BranchKind::Other, BranchKind::Array);
        }
        if let Some(inner) = t
            .strip_prefix("vector<")
            .or_else(|| t.strip_prefix("std::vector<"))
            .and_then(|s| s.strip_suffix('>'))
        {
            return ElemType::from_cpp(inner).map_or(BranchKind::Other, BranchKind::Vector);
        }
        ElemType::from_cpp(t).map_or(BranchKind::Other, BranchKind::Scalar)
    }
}

/// One column to read: a branch and, for a leaf-count array, its counter branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnRequest {
    /// Branch name.
    pub branch: String,
    /// Counter branch (required for [`BranchKind::Array`], ignored otherwise).
    pub counter: Option<String>,
}

/// Which entries to read, and in chunks of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRange {
    /// First entry (inclusive).
    pub entry_start: u64,
    /// Last entry (exclusive); clamped to the tree's entries.
    pub entry_stop: u64,
    /// Entries per chunk handed to the caller.
    pub step_size: usize,
    /// Threads that read and decompress the chunk's baskets or pages (0: one per core).
    pub threads: usize,
}

/// Values of one column for the entries of a chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnValues {
    /// Floating-point branches, widened to f64.
    Float(Vec<f64>),
    /// Integer and bool branches, exact (`uint64_t` stored bit-for-bit).
    Int(Vec<i64>),
}

impl ColumnValues {
    /// Value `i` as f64.
    pub fn f64_at(&self, i: usize) -> f64 {
        match self {
            ColumnValues::Float(v) => v[i],
            ColumnValues::Int(v) => v[i] as f64,
        }
    }

    /// Value `i` as u64 (integers exactly, floats truncated).
    pub fn u64_at(&self, i: usize) -> u64 {
        match self {
            ColumnValues::Float(v) => v[i] as u64,
            ColumnValues::Int(v) => v[i] as u64,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            ColumnValues::Float(v) => v.len(),
            ColumnValues::Int(v) => v.len(),
        }
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One column of a chunk: values, and per-entry offsets for arrays and vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// All values of the chunk, entries concatenated.
    pub values: ColumnValues,
    /// `offsets[i]..offsets[i + 1]` are entry i's values; `None` for scalar branches.
    pub offsets: Option<Vec<usize>>,
}

impl Column {
    /// The value range of entry `i` of the chunk.
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        match &self.offsets {
            Some(o) => o[i]..o[i + 1],
            None => i..i + 1,
        }
    }
}

/// A run of consecutive entries, one [`Column`] per requested column, in request order.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnChunk {
    /// Entry index of the chunk's first entry.
    pub entry_start: u64,
    /// Number of entries in the chunk.
    pub n_entries: usize,
    /// The columns, in the order they were requested.
    pub columns: Vec<Column>,
}

/// A tree in a file, read column by column in bounded chunks.
///
/// Implementations never hold the whole tree in memory: they decode basket by basket and hand
/// the caller `step_size` entries at a time.
pub trait TreeReader {
    /// The file.
    fn path(&self) -> &Path;
    /// The tree's name.
    fn tree_name(&self) -> &str;
    /// Number of entries.
    fn entries(&self) -> u64;
    /// An RNTuple's clusters; `None` for a TTree.
    fn clusters(&self) -> Option<usize> {
        None
    }
    /// Every branch, nested ones included.
    fn branches(&self) -> &[BranchInfo];
    /// Streams `columns` over `range`, calling `on_chunk` for each chunk in entry order.
    fn read(
        &self,
        columns: &[ColumnRequest],
        range: EntryRange,
        on_chunk: &mut dyn FnMut(&ColumnChunk) -> Result<(), DataError>,
    ) -> Result<(), DataError>;

    /// The branch named `name`, if the tree has it.
    fn branch(&self, name: &str) -> Option<&BranchInfo> {
        self.branches().iter().find(|b| b.name == name)
    }
}

/// The counter of leaf-count array `branch` a tree holds: `X_size`, `nX` or `NX` for a branch
/// `X.y` or `X_y`; the error names those tried and where to name one (`name_it`: "in the
/// schema").
pub fn infer_counter(
    reader: &dyn TreeReader,
    branch: &str,
    name_it: &str,
) -> Result<String, DataError> {
    let prefix = branch
        .split_once('.')
        .or_else(|| branch.split_once('_'))
        .map_or(branch, |(p, _)| p);
    let candidates = [
        format!("{prefix}_size"),
        format!("n{prefix}"),
        format!("N{prefix}"),
    ];
    candidates
        .iter()
        .find(|c| reader.branch(c).is_some())
        .cloned()
        .ok_or_else(|| {
            DataError::Config(format!(
                "{}: tree '{}': cannot find the counter of leaf-count array '{branch}' \
                 (tried {}); name it with `counter:` {name_it}",
                reader.path().display(),
                reader.tree_name(),
                candidates.join(", ")
            ))
        })
}

/// A branch that holds no numbers the reader can read, for `needed_for`.
pub fn not_numbers(reader: &dyn TreeReader, info: &BranchInfo, needed_for: &str) -> DataError {
    DataError::BranchType {
        path: reader.path().to_owned(),
        tree: reader.tree_name().to_owned(),
        branch: info.name.clone(),
        found: info.type_name.clone(),
        expected: format!(
            "numbers for {needed_for}: a scalar, a leaf-count array or a std::vector \
             (TClonesArray, TBranchObject, strings and fixed-size arrays are not supported)"
        ),
    }
}

/// The index of `branch`'s request in `requests`, added once.
pub fn request(requests: &mut Vec<ColumnRequest>, branch: &str, counter: Option<String>) -> usize {
    if let Some(k) = requests.iter().position(|r| r.branch == branch) {
        return k;
    }
    requests.push(ColumnRequest {
        branch: branch.to_owned(),
        counter,
    });
    requests.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_cpp_names() {
        assert_eq!(
            BranchInfo::kind_of("float[]"),
            BranchKind::Array(ElemType::F32)
        );
        assert_eq!(
            BranchInfo::kind_of("vector<int32_t>"),
            BranchKind::Vector(ElemType::I32)
        );
        assert_eq!(
            BranchInfo::kind_of("uint64_t"),
            BranchKind::Scalar(ElemType::U64)
        );
        assert_eq!(BranchInfo::kind_of("float[3]"), BranchKind::Other);
        assert_eq!(BranchInfo::kind_of("TClonesArray"), BranchKind::Other);
        assert_eq!(
            BranchInfo::kind_of("vector<vector<float>>"),
            BranchKind::Other
        );
    }
}
