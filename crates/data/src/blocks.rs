//! One split of the cache read in blocks (Parquet row groups of [`crate::ROW_GROUP_EVENTS`]
//! events), never whole: what a streaming loader needs.
//!
//! [`CachedSplit::open`] reads only the shards' footers; a block is decoded when asked for.
//! A seeded subset is chosen from the manifest's counts alone, and its blocks read only the rows
//! it keeps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int32Type};
use arrow_array::{BooleanArray, RecordBatch};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
};

use crate::DataError;
use crate::manifest::{CacheManifest, ShardInfo, cache_err};
use crate::records::{EventRecord, column, decode};

/// One row group of one shard, and which of its rows a subset keeps.
#[derive(Debug, Clone)]
struct Block {
    shard: usize,
    row_group: usize,
    rows: usize,
    /// `None`: every row.
    keep: Option<Vec<bool>>,
}

/// The events of some folds of a cache, as blocks read one at a time.
///
/// Holds the shards' names and the blocks' row counts only (a shard's footer is read again with
/// each block), so its memory is tens of bytes per block whatever the cache's size.
#[derive(Debug, Clone)]
pub struct CachedSplit {
    dir: PathBuf,
    shards: Vec<ShardInfo>,
    blocks: Vec<Block>,
    sizes: Vec<usize>,
    fold_events: u64,
}

/// A shard's file and footer.
fn open_shard(path: &Path) -> Result<(std::fs::File, ArrowReaderMetadata), DataError> {
    let file = std::fs::File::open(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            cache_err(
                path,
                "shard listed in the manifest is missing; rebuild the cache (`preprocess --mode rebuild`)",
            )
        } else {
            DataError::Io {
                path: path.to_owned(),
                source,
            }
        }
    })?;
    let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
        .map_err(|e| cache_err(path, format!("truncated or corrupted Parquet shard: {e}")))?;
    Ok((file, meta))
}

impl CachedSplit {
    /// Opens the shards of the folds `keep_fold` passes, checking each against the manifest (size,
    /// readable footer, event count). With `subset = Some((n, seed))` and `n` below the folds'
    /// events, keeps a seeded random `n` of them (the same events for the same seed and cache).
    pub fn open(
        dir: &Path,
        manifest: &CacheManifest,
        keep_fold: &dyn Fn(u8) -> bool,
        subset: Option<(usize, u64)>,
    ) -> Result<CachedSplit, DataError> {
        let mut shards = Vec::new();
        let mut blocks = Vec::new();
        let mut rows = Vec::new();
        for info in manifest.shards.iter().filter(|s| keep_fold(s.fold)) {
            let path = dir.join(&info.file);
            let (file, meta) = open_shard(&path)?;
            let bytes = file
                .metadata()
                .map_err(|source| DataError::Io {
                    path: path.clone(),
                    source,
                })?
                .len();
            if bytes != info.bytes {
                return Err(cache_err(
                    &path,
                    format!(
                        "shard is {bytes} bytes but the manifest says {} (truncated or replaced); \
                         rebuild the cache (`preprocess --mode rebuild`)",
                        info.bytes
                    ),
                ));
            }
            let groups = meta.metadata().row_groups();
            let n: u64 = groups.iter().map(|g| g.num_rows() as u64).sum();
            if n != info.events {
                return Err(cache_err(
                    &path,
                    format!(
                        "shard holds {n} events but the manifest says {}; rebuild the cache (`preprocess --mode rebuild`)",
                        info.events
                    ),
                ));
            }
            for (k, g) in groups.iter().enumerate() {
                blocks.push(Block {
                    shard: shards.len(),
                    row_group: k,
                    rows: g.num_rows() as usize,
                    keep: None,
                });
                rows.push(g.num_rows() as usize);
            }
            shards.push(info.clone());
        }
        let fold_events: u64 = rows.iter().map(|&r| r as u64).sum();
        let mut sizes = rows.clone();
        if let Some((n, seed)) = subset.filter(|&(n, _)| (n as u64) < fold_events) {
            use rand::SeedableRng;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut keep = rand::seq::index::sample(&mut rng, fold_events as usize, n).into_vec();
            keep.sort_unstable();
            let mut kept = keep.into_iter().peekable();
            let mut start = 0usize;
            for (k, b) in blocks.iter_mut().enumerate() {
                let r = rows[k];
                let mut mask = vec![false; r];
                let mut count = 0;
                while let Some(&i) = kept.peek().filter(|&&i| i < start + r) {
                    mask[i - start] = true;
                    count += 1;
                    kept.next();
                }
                b.keep = Some(mask);
                start += r;
                sizes[k] = count;
            }
        }
        Ok(CachedSplit {
            dir: dir.to_owned(),
            shards,
            blocks,
            sizes,
            fold_events,
        })
    }

    /// Events per block (after any subset), in cache order.
    pub fn block_sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Events in the split (after any subset).
    pub fn events(&self) -> usize {
        self.sizes.iter().sum()
    }

    /// Events in the split's folds, before any subset.
    pub fn fold_events(&self) -> u64 {
        self.fold_events
    }

    /// A reader of `block`'s kept rows, with only the columns `projection` names (all: `None`).
    fn reader(
        &self,
        block: usize,
        projection: Option<&[&str]>,
    ) -> Result<
        (
            PathBuf,
            parquet::arrow::arrow_reader::ParquetRecordBatchReader,
        ),
        DataError,
    > {
        let b = &self.blocks[block];
        let path = self.dir.join(&self.shards[b.shard].file);
        let (file, meta) = open_shard(&path)?;
        let corrupt =
            |e: &dyn std::fmt::Display| cache_err(&path, format!("corrupted Parquet shard: {e}"));
        let groups = meta.metadata().row_groups();
        if groups.get(b.row_group).map(|g| g.num_rows() as usize) != Some(b.rows) {
            return Err(cache_err(
                &path,
                "the shard changed since the split was opened; rebuild the cache (`preprocess --mode rebuild`)",
            ));
        }
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
            .with_row_groups(vec![b.row_group])
            .with_batch_size(b.rows.max(1));
        if let Some(names) = projection {
            let fields = meta.schema().fields();
            let roots = names
                .iter()
                .map(|n| {
                    fields.iter().position(|f| f.name() == n).ok_or_else(|| {
                        cache_err(&path, format!("column {n} is missing: rebuild the cache"))
                    })
                })
                .collect::<Result<Vec<usize>, DataError>>()?;
            let mask = ProjectionMask::roots(meta.parquet_schema(), roots);
            builder = builder.with_projection(mask);
        }
        if let Some(keep) = &b.keep {
            builder =
                builder.with_row_selection(RowSelection::from_filters(&[BooleanArray::from(
                    keep.clone(),
                )]));
        }
        let reader = builder.build().map_err(|e| corrupt(&e))?;
        Ok((path, reader))
    }

    /// The record batches of `block`'s kept rows.
    fn batches(
        &self,
        block: usize,
        projection: Option<&[&str]>,
    ) -> Result<(PathBuf, Vec<RecordBatch>), DataError> {
        let (path, reader) = self.reader(block, projection)?;
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| cache_err(&path, format!("corrupted Parquet shard: {e}")))?;
        let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if n != self.sizes[block] {
            return Err(cache_err(
                &path,
                format!(
                    "row group {} gave {n} events where {} were expected; rebuild the cache",
                    self.blocks[block].row_group, self.sizes[block]
                ),
            ));
        }
        Ok((path, batches))
    }

    /// The kept events of `block`, in cache order.
    pub fn read_block(&self, block: usize) -> Result<Vec<EventRecord>, DataError> {
        let (path, batches) = self.batches(block, None)?;
        let mut names = BTreeMap::new();
        let mut paths = BTreeMap::new();
        let mut out = Vec::with_capacity(self.sizes[block]);
        for batch in &batches {
            decode(batch, &mut names, &mut paths, &|_| true, &mut out)
                .map_err(|e| cache_err(&path, e))?;
        }
        Ok(out)
    }

    /// The label (−1: multilabel) and weight of each kept event of `block`, reading those two
    /// columns only.
    pub fn read_targets(&self, block: usize) -> Result<Vec<(i32, f32)>, DataError> {
        let (path, batches) = self.batches(block, Some(&["label", "weight"]))?;
        let mut out = Vec::with_capacity(self.sizes[block]);
        for batch in &batches {
            let label = column(batch, "label")
                .map_err(|e| cache_err(&path, e))?
                .as_primitive::<Int32Type>();
            let weight = column(batch, "weight")
                .map_err(|e| cache_err(&path, e))?
                .as_primitive::<Float32Type>();
            out.extend(
                label
                    .values()
                    .iter()
                    .copied()
                    .zip(weight.values().iter().copied()),
            );
        }
        Ok(out)
    }
}
