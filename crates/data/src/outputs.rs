//! Prediction outputs (contract §10): the NPZ table and per-input-file ROOT friend trees.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ndarray::{Array1, Array2};
use ndarray_npy::{
    NpzReader, NpzWriter, ReadDataError, ReadableElement, WritableElement, WriteDataError,
};
use py_literal::Value as PyValue;

use crate::error::DataError;
use crate::root::{WriteColumn, write_tree};

/// Characters per sample name in the NPZ `samples` array (numpy dtype `<U64`).
pub const SAMPLE_NAME_CHARS: usize = 64;

/// Every scored event of a prediction run, in scoring order (contract §10).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PredictionTable {
    /// Outputs per event.
    pub n_out: usize,
    /// `[n, n_out]` row-major: sigmoid or softmax of the logits.
    pub scores: Vec<f32>,
    /// `[n, n_out]` row-major.
    pub logits: Vec<f32>,
    /// Class index per event (−1 for multilabel targets or unlabelled data).
    pub labels: Vec<i64>,
    /// Event weight as stored.
    pub weights: Vec<f32>,
    /// Entry in the source tree.
    pub entry: Vec<u64>,
    /// Event number.
    pub event_number: Vec<u64>,
    /// `event_number mod n_folds`.
    pub fold: Vec<u8>,
    /// Index into `samples`.
    pub sample_index: Vec<i64>,
    /// Sample names.
    pub samples: Vec<String>,
}

impl PredictionTable {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when no event was scored.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// A fixed-width UTF-32 string, numpy's `<U64`.
#[derive(Debug, Clone, PartialEq)]
struct NpyName([u32; SAMPLE_NAME_CHARS]);

impl WritableElement for NpyName {
    fn type_descriptor() -> PyValue {
        PyValue::String(format!("<U{SAMPLE_NAME_CHARS}"))
    }
    fn write<W: Write>(&self, mut writer: W) -> Result<(), WriteDataError> {
        for c in self.0 {
            writer.write_all(&c.to_le_bytes())?;
        }
        Ok(())
    }
    fn write_slice<W: Write>(slice: &[Self], mut writer: W) -> Result<(), WriteDataError> {
        for s in slice {
            s.write(&mut writer)?;
        }
        Ok(())
    }
}

impl ReadableElement for NpyName {
    fn read_to_end_exact_vec<R: Read>(
        mut reader: R,
        type_desc: &PyValue,
        len: usize,
    ) -> Result<Vec<Self>, ReadDataError> {
        if *type_desc != Self::type_descriptor() {
            return Err(ReadDataError::WrongDescriptor(type_desc.clone()));
        }
        let mut bytes = Vec::new();
        reader.read_to_end(&mut bytes)?;
        let width = 4 * SAMPLE_NAME_CHARS;
        if bytes.len() != len * width {
            return Err(ReadDataError::ParseData(
                format!(
                    "expected {} bytes of names, got {}",
                    len * width,
                    bytes.len()
                )
                .into(),
            ));
        }
        Ok(bytes
            .chunks_exact(width)
            .map(|c| {
                let mut a = [0u32; SAMPLE_NAME_CHARS];
                for (v, b) in a.iter_mut().zip(c.chunks_exact(4)) {
                    *v = u32::from_le_bytes(b.try_into().expect("4 bytes"));
                }
                NpyName(a)
            })
            .collect())
    }
}

fn npy_name(s: &str) -> Result<NpyName, String> {
    let chars: Vec<u32> = s.chars().map(u32::from).collect();
    if chars.len() > SAMPLE_NAME_CHARS {
        return Err(format!(
            "sample name '{s}' is longer than {SAMPLE_NAME_CHARS} characters"
        ));
    }
    let mut a = [0u32; SAMPLE_NAME_CHARS];
    a[..chars.len()].copy_from_slice(&chars);
    Ok(NpyName(a))
}

fn name_of(n: &NpyName) -> String {
    n.0.iter()
        .take_while(|&&c| c != 0)
        .filter_map(|&c| char::from_u32(c))
        .collect()
}

fn write_err(path: &Path, message: impl std::fmt::Display) -> DataError {
    DataError::Write {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Refuses an existing `path` unless `overwrite`.
pub fn check_output_path(path: &Path, overwrite: bool) -> Result<(), DataError> {
    if path.exists() && !overwrite {
        return Err(write_err(
            path,
            "exists: pass --overwrite to replace it, or choose another output",
        ));
    }
    Ok(())
}

/// Writes `table` as an NPZ archive (contract §10): `scores`/`logits` `[N, n_out]` (f32),
/// `labels`, `weights`, `entry`, `event_number`, `fold`, `sample_index`, `samples` (`<U64`).
pub fn write_predictions_npz(
    path: &Path,
    table: &PredictionTable,
    overwrite: bool,
) -> Result<(), DataError> {
    check_output_path(path, overwrite)?;
    let n = table.len();
    let k = table.n_out.max(1);
    let names = table
        .samples
        .iter()
        .map(|s| npy_name(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| write_err(path, m))?;
    crate::error::write_atomically(path, |tmp| {
        let write = || -> Result<(), Box<dyn std::error::Error>> {
            let file = std::fs::File::create(tmp)?;
            let mut z = NpzWriter::new(file);
            z.add_array(
                "scores",
                &Array2::from_shape_vec((n, k), table.scores.clone())?,
            )?;
            z.add_array(
                "logits",
                &Array2::from_shape_vec((n, k), table.logits.clone())?,
            )?;
            z.add_array("labels", &Array1::from_vec(table.labels.clone()))?;
            z.add_array("weights", &Array1::from_vec(table.weights.clone()))?;
            z.add_array("entry", &Array1::from_vec(table.entry.clone()))?;
            z.add_array(
                "event_number",
                &Array1::from_vec(table.event_number.clone()),
            )?;
            z.add_array(
                "fold",
                &Array1::from_iter(table.fold.iter().map(|&f| i64::from(f))),
            )?;
            z.add_array(
                "sample_index",
                &Array1::from_vec(table.sample_index.clone()),
            )?;
            z.add_array("samples", &Array1::from_vec(names))?;
            z.finish()?.sync_all()?;
            Ok(())
        };
        write().map_err(|e| write_err(path, e))
    })
}

/// Reads an NPZ written by [`write_predictions_npz`].
pub fn read_predictions_npz(path: &Path) -> Result<PredictionTable, DataError> {
    let err = |m: String| DataError::Write {
        path: path.to_path_buf(),
        message: format!("reading predictions: {m}"),
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut z = NpzReader::new(file).map_err(|e| err(e.to_string()))?;
    macro_rules! arr1 {
        ($name:literal, $t:ty) => {
            z.by_name::<ndarray::OwnedRepr<$t>, ndarray::Ix1>($name)
                .map_err(|e| err(format!("{}: {e}", $name)))?
                .to_vec()
        };
    }
    let scores: Array2<f32> = z
        .by_name("scores")
        .map_err(|e| err(format!("scores: {e}")))?;
    let logits: Array2<f32> = z
        .by_name("logits")
        .map_err(|e| err(format!("logits: {e}")))?;
    let names: Vec<NpyName> = arr1!("samples", NpyName);
    Ok(PredictionTable {
        n_out: scores.ncols(),
        scores: scores.iter().copied().collect(),
        logits: logits.iter().copied().collect(),
        labels: arr1!("labels", i64),
        weights: arr1!("weights", f32),
        entry: arr1!("entry", u64),
        event_number: arr1!("event_number", u64),
        fold: arr1!("fold", i64).into_iter().map(|f| f as u8).collect(),
        sample_index: arr1!("sample_index", i64),
        samples: names.iter().map(name_of).collect(),
    })
}

/// One friend tree to write: the input file's entry count and the scores of the entries that
/// were scored.
#[derive(Debug, Clone)]
pub struct FriendTree {
    /// Where to write it.
    pub path: PathBuf,
    /// Tree name (the input tree's name, so `AddFriend` lines up).
    pub tree: String,
    /// Entries in the input tree.
    pub entries: u64,
    /// Branch names: `score`, or `score_<class>` per output.
    pub branches: Vec<String>,
    /// `(entry, scores)` of every scored entry.
    pub scored: Vec<(u64, Vec<f32>)>,
}

/// Writes a friend tree aligned 1:1 with the input tree: one entry per input entry, the score
/// branches (NaN where the event was not scored) and `passed` (1 scored, 0 skipped).
pub fn write_friend_tree(friend: &FriendTree, overwrite: bool) -> Result<(), DataError> {
    let path = &friend.path;
    check_output_path(path, overwrite)?;
    let n = usize::try_from(friend.entries).map_err(|_| write_err(path, "too many entries"))?;
    let k = friend.branches.len();
    let mut columns: Vec<Vec<f32>> = vec![vec![f32::NAN; n]; k];
    let mut passed = vec![0i32; n];
    for (entry, scores) in &friend.scored {
        let e = usize::try_from(*entry).unwrap_or(usize::MAX);
        if e >= n || scores.len() != k {
            return Err(write_err(
                path,
                format!(
                    "entry {entry} with {} scores does not fit a tree of {n} entries and {k} branches",
                    scores.len()
                ),
            ));
        }
        passed[e] = 1;
        for (c, &s) in columns.iter_mut().zip(scores) {
            c[e] = s;
        }
    }
    let mut cols: Vec<WriteColumn> = friend
        .branches
        .iter()
        .cloned()
        .zip(columns)
        .map(|(name, v)| WriteColumn::F32(name, v))
        .collect();
    cols.push(WriteColumn::I32("passed".into(), passed));
    // write_tree writes through a temporary file and renames it.
    write_tree(path, &friend.tree, cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npz_round_trip_and_refusals() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.npz");
        let t = PredictionTable {
            n_out: 2,
            scores: vec![0.1, 0.9, 0.7, 0.3],
            logits: vec![-1.0, 1.0, 0.5, -0.5],
            labels: vec![1, 0],
            weights: vec![1.5, -0.25],
            entry: vec![3, 7],
            event_number: vec![103, 107],
            fold: vec![3, 2],
            sample_index: vec![0, 1],
            samples: vec!["ttH_CPeven".into(), "tτ-ü".into()],
        };
        write_predictions_npz(&path, &t, false).expect("write");
        assert_eq!(read_predictions_npz(&path).expect("read"), t);
        let e = write_predictions_npz(&path, &t, false).expect_err("exists");
        assert!(e.to_string().contains("--overwrite"), "{e}");
        write_predictions_npz(&path, &t, true).expect("overwrite");
        let long = PredictionTable {
            samples: vec!["x".repeat(65), "y".into()],
            ..t
        };
        let e = write_predictions_npz(&dir.path().join("q.npz"), &long, false).expect_err("long");
        assert!(e.to_string().contains("longer than 64"), "{e}");
        assert!(!dir.path().join("q.npz").exists(), "no half file");
    }
}
