//! Writing flat ROOT trees (scalars and `std::vector` of numbers) with oxyroot's writer, atomically.

use std::path::Path;

use oxyroot::{RootFile, WriterTree};

use crate::DataError;

/// One branch to write: a name and one value per entry.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteColumn {
    /// `float` scalar.
    F32(String, Vec<f32>),
    /// `double` scalar.
    F64(String, Vec<f64>),
    /// `int32_t` scalar.
    I32(String, Vec<i32>),
    /// `uint64_t` scalar.
    U64(String, Vec<u64>),
    /// `std::vector<float>`.
    VecF32(String, Vec<Vec<f32>>),
    /// `std::vector<int32_t>`.
    VecI32(String, Vec<Vec<i32>>),
}

impl WriteColumn {
    /// Branch name.
    pub fn name(&self) -> &str {
        match self {
            WriteColumn::F32(n, _)
            | WriteColumn::F64(n, _)
            | WriteColumn::I32(n, _)
            | WriteColumn::U64(n, _)
            | WriteColumn::VecF32(n, _)
            | WriteColumn::VecI32(n, _) => n,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            WriteColumn::F32(_, v) => v.len(),
            WriteColumn::F64(_, v) => v.len(),
            WriteColumn::I32(_, v) => v.len(),
            WriteColumn::U64(_, v) => v.len(),
            WriteColumn::VecF32(_, v) => v.len(),
            WriteColumn::VecI32(_, v) => v.len(),
        }
    }

    /// True when the column has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Writes one tree of `columns` (all of equal length) to a new ROOT file at `path`.
///
/// The file is written under a temporary name in the same folder and renamed into place, so a
/// killed or failed write never leaves a half file under `path`.
pub fn write_tree(path: &Path, tree: &str, columns: Vec<WriteColumn>) -> Result<(), DataError> {
    let write_err = |message: String| DataError::Write {
        path: path.to_owned(),
        message,
    };
    if let Some(first) = columns.first()
        && let Some(bad) = columns.iter().find(|c| c.len() != first.len())
    {
        {
            return Err(write_err(format!(
                "branch '{}' has {} entries but '{}' has {}",
                bad.name(),
                bad.len(),
                first.name(),
                first.len()
            )));
        }
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = dir.unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).map_err(|source| DataError::Io {
        path: dir.to_owned(),
        source,
    })?;
    if path.file_name().is_none() {
        return Err(write_err("the path has no file name".to_owned()));
    }
    crate::error::write_atomically(path, |tmp| {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut file = RootFile::create(tmp).map_err(|e| e.to_string())?;
            let mut writer = WriterTree::new(tree);
            for column in columns {
                match column {
                    WriteColumn::F32(n, v) => writer.new_branch(n, v.into_iter()),
                    WriteColumn::F64(n, v) => writer.new_branch(n, v.into_iter()),
                    WriteColumn::I32(n, v) => writer.new_branch(n, v.into_iter()),
                    WriteColumn::U64(n, v) => writer.new_branch(n, v.into_iter()),
                    WriteColumn::VecF32(n, v) => writer.new_branch(n, v.into_iter()),
                    WriteColumn::VecI32(n, v) => writer.new_branch(n, v.into_iter()),
                }
            }
            writer.write(&mut file).map_err(|e| e.to_string())?;
            file.close().map_err(|e| e.to_string())
        }));
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(write_err(message)),
            Err(_) => Err(write_err("oxyroot's writer panicked".to_owned())),
        }
    })
}
