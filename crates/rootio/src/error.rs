//! What can go wrong reading a ROOT file, always with the file and the place in it.

use std::path::PathBuf;

/// A ROOT file could not be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// The operating system refused (missing file, permissions, a read past the end).
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not what the format says at this place: truncated, corrupted or not ROOT.
    #[error("{path}: {place}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where: `file header`, `key 'Events'`, `basket 3 of branch 'Jet_pt'`, ….
        place: String,
        /// What was wrong.
        message: String,
    },
    /// A valid file uses something this reader does not read (a codec, a class, a layout).
    #[error("{path}: {place}: unsupported: {what}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// Where.
        place: String,
        /// What is not supported.
        what: String,
    },
    /// No object of that name.
    #[error("{path}: no {what} '{name}'{hint}")]
    NotFound {
        /// The file.
        path: PathBuf,
        /// `key`, `tree`, `branch`.
        what: &'static str,
        /// The name asked for.
        name: String,
        /// The names there are, or nothing.
        hint: String,
    },
}

/// Errors of one place in a buffer, before the file path is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BufError {
    /// Read past the end of the buffer (`at`, `want` bytes, `len` in all).
    Short { at: usize, want: usize, len: usize },
    /// A value that cannot be right.
    Bad(String),
}

impl std::fmt::Display for BufError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BufError::Short { at, want, len } => write!(
                f,
                "truncated: {want} bytes wanted at offset {at} of a {len}-byte buffer"
            ),
            BufError::Bad(m) => f.write_str(m),
        }
    }
}
