//! Folds and splits (contract §7): which events of the cache a split holds, read whole or opened
//! as blocks. Above both the cache's format (`cache.rs`) and its blocks (`blocks.rs`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::DataError;
use crate::blocks::CachedSplit;
use crate::cache::read_cache;
use crate::manifest::{CacheManifest, cache_err, read_manifest};
use crate::records::EventRecord;

/// The fold of an event: `event_number mod n_folds` (contract §7).
pub fn fold_of(event_number: u64, n_folds: u32) -> u8 {
    (event_number % u64::from(n_folds.max(1))) as u8
}

/// Which folds are train, validation and test (contract §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Folds {
    /// Number of folds.
    pub n_folds: u32,
    /// The test fold.
    pub test_fold: u8,
    /// The validation fold.
    pub validation_fold: u8,
}

impl Default for Folds {
    fn default() -> Self {
        Folds {
            n_folds: 5,
            test_fold: 0,
            validation_fold: 1,
        }
    }
}

/// A split of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// Every fold but the validation and test folds.
    Train,
    /// The validation fold.
    Validation,
    /// The test fold.
    Test,
}

impl Folds {
    /// Checks the folds are distinct and in range (at least 3 folds).
    pub fn validate(&self) -> Result<(), DataError> {
        let n = self.n_folds;
        if !(3..=255).contains(&n) {
            return Err(DataError::Config(format!(
                "n_folds must be in 3..=255, got {n}"
            )));
        }
        if u32::from(self.test_fold) >= n || u32::from(self.validation_fold) >= n {
            return Err(DataError::Config(format!(
                "test_fold {} and validation_fold {} must be below n_folds {n}",
                self.test_fold, self.validation_fold
            )));
        }
        if self.test_fold == self.validation_fold {
            return Err(DataError::Config(
                "test_fold and validation_fold must differ".into(),
            ));
        }
        Ok(())
    }

    /// The split fold `fold` belongs to.
    pub fn split_of(&self, fold: u8) -> Split {
        if fold == self.test_fold {
            Split::Test
        } else if fold == self.validation_fold {
            Split::Validation
        } else {
            Split::Train
        }
    }
}

/// Reads the events of one split from the cache in `dir` whole, checking the folds match the
/// cache's (tests and small caches; training streams [`open_split`]).
///
/// An empty split is an error naming the fold: training on nothing is never what was meant.
pub fn read_split(
    dir: &Path,
    folds: &Folds,
    split: Split,
) -> Result<(CacheManifest, Vec<EventRecord>), DataError> {
    let manifest = manifest_for(dir, folds)?;
    let records = read_cache(dir, &manifest, &|f| folds.split_of(f) == split)?;
    if records.is_empty() {
        return Err(empty_split(dir, folds, split, &manifest));
    }
    Ok((manifest, records))
}

/// Opens the events of `splits` in the cache in `dir` for reading in blocks ([`CachedSplit`]),
/// with an optional seeded subset `(n, seed)`; the same checks and errors as [`read_split`].
pub fn open_split(
    dir: &Path,
    folds: &Folds,
    splits: &[Split],
    subset: Option<(usize, u64)>,
) -> Result<(CacheManifest, CachedSplit), DataError> {
    let manifest = manifest_for(dir, folds)?;
    let keep = |f: u8| splits.contains(&folds.split_of(f));
    let opened = CachedSplit::open(dir, &manifest, &keep, subset)?;
    if let Some(&first) = splits.first()
        && opened.events() == 0
    {
        return Err(empty_split(dir, folds, first, &manifest));
    }
    Ok((manifest, opened))
}

/// The manifest of the cache in `dir`, checked against `folds`.
fn manifest_for(dir: &Path, folds: &Folds) -> Result<CacheManifest, DataError> {
    folds.validate()?;
    let manifest = read_manifest(dir)?;
    if manifest.n_folds != folds.n_folds {
        return Err(cache_err(
            dir,
            format!(
                "the cache was made with n_folds {} but {} were asked for: rebuild the cache",
                manifest.n_folds, folds.n_folds
            ),
        ));
    }
    Ok(manifest)
}

/// The error for a split without events, naming its folds.
fn empty_split(dir: &Path, folds: &Folds, split: Split, manifest: &CacheManifest) -> DataError {
    let which = match split {
        Split::Train => format!(
            "the training folds (all but {} and {})",
            folds.test_fold, folds.validation_fold
        ),
        Split::Validation => format!("validation fold {}", folds.validation_fold),
        Split::Test => format!("test fold {}", folds.test_fold),
    };
    cache_err(
        dir,
        format!(
            "{which} holds no events ({} events in the cache)",
            manifest.events()
        ),
    )
}
