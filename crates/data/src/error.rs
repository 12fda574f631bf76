//! `DataError`: everything that can go wrong reading or writing a file, with what a physicist needs
//! to find the problem.

use std::path::PathBuf;

/// An error from reading or writing data files, or from a dataset config.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file does not exist.
    #[error("file not found: {path}")]
    FileNotFound {
        /// The path looked at.
        path: PathBuf,
    },
    /// A glob in a sample's file list matched nothing.
    #[error("sample '{sample}': no file matches '{pattern}'")]
    NoFileMatches {
        /// Sample name.
        sample: String,
        /// The glob pattern.
        pattern: String,
    },
    /// The file uses a feature the ROOT reader cannot read.
    #[error("{path}: unsupported ROOT file: {limit}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What it uses that cannot be read, and what to do instead.
        limit: String,
    },
    /// The tree is not in the file.
    #[error("{path}: no tree or RNTuple '{tree}'{}", trees_hint(closest))]
    TreeNotFound {
        /// The file.
        path: PathBuf,
        /// The tree asked for.
        tree: String,
        /// The trees and RNTuples the file has, closest first.
        closest: Vec<String>,
    },
    /// A branch the schema needs is not in the tree.
    #[error(
        "{path}: tree '{tree}' has no branch '{branch}' (needed for {needed_for}){}",
        did_you_mean(closest, "closest branches")
    )]
    BranchNotFound {
        /// The file.
        path: PathBuf,
        /// The tree.
        tree: String,
        /// The missing branch.
        branch: String,
        /// The schema field that needs it (`jets.pt`, `weight`, …).
        needed_for: String,
        /// The closest existing branch names.
        closest: Vec<String>,
    },
    /// A branch has a type the schema cannot use.
    #[error("{path}: tree '{tree}', branch '{branch}' has type '{found}', expected {expected}")]
    BranchType {
        /// The file.
        path: PathBuf,
        /// The tree.
        tree: String,
        /// The branch.
        branch: String,
        /// The C++ type found.
        found: String,
        /// What would have worked.
        expected: String,
    },
    /// Array lengths disagree with their counter (or with each other) in an entry.
    #[error("{path}: tree '{tree}', branch '{branch}': {detail}")]
    CounterMismatch {
        /// The file.
        path: PathBuf,
        /// The tree.
        tree: String,
        /// The branch whose values do not line up.
        branch: String,
        /// Entry and counts.
        detail: String,
    },
    /// The ROOT library failed (an error or a caught panic) reading this file.
    #[error("{path}: {context}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What was being done: `opening the file`, `reading branch 'Jet_pt' of tree 'Events'`, ….
        context: String,
        /// The underlying message.
        message: String,
    },
    /// A dataset config or schema is invalid.
    #[error("invalid dataset config: {0}")]
    Config(String),
    /// An I/O error on a path. The OS error is the error's source (printed after the path by
    /// `{:#}`), not repeated in the message.
    #[error("{path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An event cache is missing, half-written, stale, truncated or corrupted.
    #[error("cache {path}: {message}")]
    Cache {
        /// The cache folder or the file in it.
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// Writing a ROOT file failed.
    #[error("{path}: writing failed: {message}")]
    Write {
        /// The file being written (its final name).
        path: PathBuf,
        /// The underlying message.
        message: String,
    },
}

fn trees_hint(closest: &[String]) -> String {
    if closest.is_empty() {
        "; the file holds neither a TTree nor an RNTuple".to_owned()
    } else {
        did_you_mean(closest, "trees and RNTuples in the file")
    }
}

fn did_you_mean(closest: &[String], what: &str) -> String {
    if closest.is_empty() {
        String::new()
    } else {
        format!("; {what}: {}", closest.join(", "))
    }
}

/// Runs `write` on a temporary sibling of `path` (`.tmp-<pid>.<name>`, so the extension stays
/// last for writers that read it) and renames it over `path` on success: a failed or killed
/// write never leaves a half file under `path`. On failure the temporary file is removed.
pub fn write_atomically(
    path: &std::path::Path,
    write: impl FnOnce(&std::path::Path) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".tmp-{}.{name}", std::process::id()));
    let result = write(&tmp).and_then(|()| {
        std::fs::rename(&tmp, path).map_err(|source| DataError::Io {
            path: path.to_owned(),
            source,
        })
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
