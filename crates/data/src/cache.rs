//! The Parquet event cache: sharded zstd Parquet files plus a JSON manifest written last. It
//! holds events (node features, raw η/φ, globals), not graphs: edges are built when it is read.
//!
//! Layout of a cache folder: `part-f<fold>-u<unit>-<index>.parquet` (the events of one fold of
//! one input file each, at most `shard_events`, in row groups of [`ROW_GROUP_EVENTS`]; a split
//! reads only its folds' files) and `manifest.json` (schema and contract versions, the
//! preprocessing fingerprint and its inputs, shards with event counts, sizes and SHA-256 content
//! hashes, per-sample and per-reason counts), beside each unit's marker (`unit-<unit>.json`: its
//! input file's sample, counts and shards, what a later build of a changed dataset takes as it
//! is when that file did not change). A cache is built unit by unit in a sibling folder
//! ([`CacheBuilder`]) and moved into place with its manifest, so a folder without one was never
//! completed and is never read. A shard is checked against its hash whenever it is read whole and
//! by the up-to-date check, so a corrupted one is refused by name rather than served.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gnn4c_features::AutoColumns;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use crate::DataError;
use crate::error::write_atomically;
use crate::manifest::{
    CacheManifest, MANIFEST, SampleCounts, ShardInfo, SkippedFile, building_dir, cache_err,
    check_content, check_shard, missing_shard, sha256_hex,
};
use crate::records::{EventRecord, decode, parquet_bytes, to_batch};

/// What a finished unit of a cache build left: its shards and counts. Written as
/// `unit-<unit>.json` after the unit's shards, so a unit without one was never completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitDone {
    /// The fingerprint of the cache it belongs to.
    pub fingerprint: String,
    /// The unit's number (one input file each, in config order).
    pub unit: u32,
    /// The sample the input file belongs to.
    pub sample: String,
    /// What reading the file gave.
    pub counts: SampleCounts,
    /// Its shards.
    pub shards: Vec<ShardInfo>,
    /// Set when the file could not be read and the dataset skips bad files
    /// (`on_bad_file: skip`): then it has no shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<SkippedFile>,
}

/// A cache being built, one unit (input file) at a time, in `.<name>.building` beside the
/// target folder.
///
/// Units are independent: processes (threads, MPI ranks, array tasks) may each write their own,
/// and a killed build keeps every unit it finished. [`CacheBuilder::finish`] writes the manifest
/// once every unit is done and swaps the folder into place: an existing valid cache is only
/// replaced by a complete one.
#[derive(Debug)]
pub struct CacheBuilder {
    target: PathBuf,
    dir: PathBuf,
    fingerprint: String,
    shard_events: usize,
    auto: AutoColumns,
    files: UnitFiles,
}

fn unit_marker(unit: u32) -> String {
    format!("unit-{unit:06}.json")
}

/// A build folder's files by the unit they belong to (markers, shards): those there when the
/// build opened and those it wrote since, so that a unit's files are removed without listing
/// the folder for each unit (which made a build of thousands of files quadratic).
#[derive(Debug, Clone, Default)]
struct UnitFiles(Arc<Mutex<BTreeMap<u32, Vec<String>>>>);

impl UnitFiles {
    /// The unit files in `dir`.
    fn of(dir: &Path) -> Result<UnitFiles, DataError> {
        let files = UnitFiles::default();
        for e in std::fs::read_dir(dir).map_err(io_err(dir))?.flatten() {
            files.add(&e.file_name().to_string_lossy());
        }
        Ok(files)
    }

    /// Notes `name` under its unit (a name of no unit is not noted).
    fn add(&self, name: &str) {
        let unit = name
            .strip_prefix("unit-")
            .and_then(|n| n.strip_suffix(".json"))
            .or_else(|| {
                let shard = name.strip_prefix("part-f")?.strip_suffix(".parquet")?;
                shard.split('-').find_map(|part| part.strip_prefix('u'))
            })
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(unit) = unit {
            let mut files = self.0.lock().unwrap_or_else(|p| p.into_inner());
            files.entry(unit).or_default().push(name.to_owned());
        }
    }

    /// The files noted under `unit`, forgotten.
    fn take(&self, unit: u32) -> Vec<String> {
        let mut files = self.0.lock().unwrap_or_else(|p| p.into_inner());
        files.remove(&unit).unwrap_or_default()
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> DataError + '_ {
    move |source| DataError::Io {
        path: path.to_owned(),
        source,
    }
}

impl CacheBuilder {
    /// Opens the build of `target` for `fingerprint`: a new one with `fresh`, else continuing
    /// any interrupted build of the same fingerprint (units of another fingerprint are removed).
    pub fn open(
        target: &Path,
        fingerprint: &str,
        shard_events: usize,
        fresh: bool,
    ) -> Result<CacheBuilder, DataError> {
        if shard_events == 0 {
            return Err(DataError::Config(
                "cache shard_events must be at least 1".into(),
            ));
        }
        if target.file_name().is_none() {
            return Err(DataError::Config(format!(
                "cache path {} has no folder name",
                target.display()
            )));
        }
        let dir = building_dir(target);
        if fresh && dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let builder = CacheBuilder {
            target: target.to_owned(),
            files: UnitFiles::of(&dir)?,
            dir,
            fingerprint: fingerprint.to_owned(),
            shard_events,
            auto: AutoColumns::default(),
        };
        for (unit, done) in builder.markers()? {
            if done.as_ref().is_none_or(|d| d.fingerprint != fingerprint) {
                builder.clear_unit(unit)?;
            }
        }
        Ok(builder)
    }

    /// Records in each shard the moments of the `auto` features `auto` (what
    /// [`CacheManifest::auto_scales`] gives a training split's standardisation from).
    pub fn with_auto(mut self, auto: AutoColumns) -> CacheBuilder {
        self.auto = auto;
        self
    }

    /// The folder being built.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every unit marker in the folder (`None`: unreadable, from a write cut short).
    fn markers(&self) -> Result<BTreeMap<u32, Option<UnitDone>>, DataError> {
        read_markers(&self.dir)
    }

    /// The units already finished for this fingerprint whose shards are all there.
    pub fn done(&self) -> Result<BTreeMap<u32, UnitDone>, DataError> {
        Ok(self
            .markers()?
            .into_iter()
            .filter_map(|(unit, done)| {
                done.filter(|d| d.fingerprint == self.fingerprint && shards_intact(&self.dir, d))
                    .map(|d| (unit, d))
            })
            .collect())
    }

    /// Removes a unit's marker and shards.
    fn clear_unit(&self, unit: u32) -> Result<(), DataError> {
        for name in self.files.take(unit) {
            let path = self.dir.join(name);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_err(&path)(e));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Starts writing unit `unit`, removing what an earlier, unfinished attempt left of it.
    pub fn unit(&self, unit: u32) -> Result<UnitWriter, DataError> {
        self.clear_unit(unit)?;
        Ok(UnitWriter {
            dir: self.dir.clone(),
            files: self.files.clone(),
            fingerprint: self.fingerprint.clone(),
            unit,
            shard_events: self.shard_events,
            auto: self.auto.clone(),
            pending: BTreeMap::new(),
            shards: Vec::new(),
        })
    }

    /// Takes unit `done` of the finished cache `from` as unit `unit` of this build (its shards
    /// linked under the unit's names, or copied where they cannot be linked): the same input
    /// file, read the same way, for a cache that differs in other files.
    pub fn adopt_unit(&self, from: &Path, unit: u32, done: &UnitDone) -> Result<(), DataError> {
        self.clear_unit(unit)?;
        let (was, now) = (format!("-u{:06}-", done.unit), format!("-u{unit:06}-"));
        let mut shards = Vec::with_capacity(done.shards.len());
        for shard in &done.shards {
            let file = shard.file.replacen(&was, &now, 1);
            let (src, dst) = (from.join(&shard.file), self.dir.join(&file));
            self.files.add(&file);
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).map_err(io_err(&src))?;
            }
            shards.push(ShardInfo {
                file,
                ..shard.clone()
            });
        }
        write_marker(
            &self.dir,
            &self.files,
            &UnitDone {
                fingerprint: self.fingerprint.clone(),
                unit,
                shards,
                ..done.clone()
            },
        )
    }

    /// Marks unit `unit` done without shards: its input file could not be read (`error`) and
    /// the dataset skips bad files.
    pub fn skip_unit(&self, unit: u32, skipped: SkippedFile) -> Result<UnitDone, DataError> {
        self.clear_unit(unit)?;
        let done = UnitDone {
            fingerprint: self.fingerprint.clone(),
            unit,
            sample: skipped.sample.clone(),
            counts: SampleCounts::default(),
            shards: Vec::new(),
            skipped: Some(skipped),
        };
        write_marker(&self.dir, &self.files, &done)?;
        Ok(done)
    }

    /// Writes the manifest of units `0..n_units` (every one must be done) and swaps the finished
    /// cache into place. `manifest` gives everything but the shards and per-sample counts, which
    /// come from the units in unit order.
    pub fn finish(
        self,
        n_units: u32,
        mut manifest: CacheManifest,
    ) -> Result<CacheManifest, DataError> {
        let done = self.done()?;
        if let Some(missing) = (0..n_units).find(|u| !done.contains_key(u)) {
            return Err(cache_err(
                &self.dir,
                format!(
                    "preprocessing is not complete: {} of {n_units} input files are done (input file {} is not); \
                     rerun `gnn4colliders preprocess` without --part to finish it",
                    done.len(),
                    missing + 1
                ),
            ));
        }
        let mut shards = Vec::new();
        for d in done.values().filter(|d| d.unit < n_units) {
            let c = manifest.samples.entry(d.sample.clone()).or_default();
            c.read += d.counts.read;
            c.cached += d.counts.cached;
            for (reason, n) in &d.counts.skipped {
                *c.skipped.entry(reason.clone()).or_default() += n;
            }
            shards.extend(d.shards.iter().cloned());
            manifest.skipped_files.extend(d.skipped.iter().cloned());
        }
        // Shards in (fold, unit, index) order: a split's events come in input-file order.
        shards.sort_by(|a, b| (a.fold, &a.file).cmp(&(b.fold, &b.file)));
        manifest.shards = shards;
        // Nothing but the manifest's shards goes into the cache, and the units' markers, so that
        // a later build of a changed dataset reads only the files that changed
        // ([`finished_units`]).
        let keep: std::collections::BTreeSet<&str> =
            manifest.shards.iter().map(|s| s.file.as_str()).collect();
        for e in std::fs::read_dir(&self.dir)
            .map_err(io_err(&self.dir))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let marker = name.starts_with("unit-") && name.ends_with(".json");
            if !keep.contains(name.as_str()) && !marker {
                std::fs::remove_file(e.path()).map_err(io_err(&e.path()))?;
            }
        }
        let path = self.dir.join(MANIFEST);
        let text =
            serde_json::to_string_pretty(&manifest).map_err(|e| cache_err(&path, e.to_string()))?;
        write_atomically(&path, |tmp| std::fs::write(tmp, text).map_err(io_err(tmp)))?;
        // Swap: the old cache (if any) moves aside, the new one moves in, the old one goes.
        let old = self.dir.with_file_name(format!(
            ".{}.old-{}",
            self.target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let had_old = self.target.exists();
        if had_old {
            std::fs::rename(&self.target, &old).map_err(io_err(&self.target))?;
        }
        if let Err(e) = std::fs::rename(&self.dir, &self.target) {
            if had_old {
                let _ = std::fs::rename(&old, &self.target);
            }
            return Err(io_err(&self.target)(e));
        }
        if had_old {
            let _ = std::fs::remove_dir_all(&old);
        }
        Ok(manifest)
    }
}

/// Writes the events of one unit (input file) into shards of at most `shard_events` events of
/// one fold each, then its marker.
#[derive(Debug)]
pub struct UnitWriter {
    dir: PathBuf,
    files: UnitFiles,
    fingerprint: String,
    unit: u32,
    shard_events: usize,
    auto: AutoColumns,
    /// Records waiting for a shard, per fold.
    pending: BTreeMap<u8, Vec<EventRecord>>,
    shards: Vec<ShardInfo>,
}

impl UnitWriter {
    /// Adds one record; writes a shard of its fold when `shard_events` of that fold are pending.
    pub fn push(&mut self, record: EventRecord) -> Result<(), DataError> {
        let fold = record.fold;
        let pending = self.pending.entry(fold).or_default();
        pending.push(record);
        if pending.len() >= self.shard_events {
            self.flush(fold)?;
        }
        Ok(())
    }

    /// Writes the pending records of `fold` as a shard.
    fn flush(&mut self, fold: u8) -> Result<(), DataError> {
        let Some(records) = self.pending.remove(&fold).filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        let index = self.shards.iter().filter(|s| s.fold == fold).count();
        let file = format!("part-f{fold}-u{:06}-{index:04}.parquet", self.unit);
        let path = self.dir.join(&file);
        self.files.add(&file);
        let batch = to_batch(&records).map_err(|e| cache_err(&path, e))?;
        let bytes = parquet_bytes(&batch).map_err(|e| cache_err(&path, e))?;
        write_atomically(&path, |tmp| {
            std::fs::write(tmp, &bytes).map_err(io_err(tmp))
        })?;
        let moments = if self.auto.is_empty() {
            BTreeMap::new()
        } else {
            let d_node = records
                .iter()
                .find(|r| r.n_nodes > 0)
                .map_or(0, |r| r.node_features.len() / usize::from(r.n_nodes));
            let events: Vec<(&[f32], &[f32])> = records
                .iter()
                .map(|r| (r.node_features.as_slice(), r.global_features.as_slice()))
                .collect();
            self.auto.moments(&events, d_node)
        };
        self.shards.push(ShardInfo {
            file,
            events: records.len() as u64,
            bytes: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
            fold,
            moments,
        });
        Ok(())
    }

    /// Writes the last shards and the unit's marker.
    pub fn finish(mut self, sample: &str, counts: SampleCounts) -> Result<UnitDone, DataError> {
        let folds: Vec<u8> = self.pending.keys().copied().collect();
        for fold in folds {
            self.flush(fold)?;
        }
        self.shards
            .sort_by(|a, b| (a.fold, &a.file).cmp(&(b.fold, &b.file)));
        let done = UnitDone {
            fingerprint: self.fingerprint,
            unit: self.unit,
            sample: sample.to_owned(),
            counts,
            shards: self.shards,
            skipped: None,
        };
        write_marker(&self.dir, &self.files, &done)?;
        Ok(done)
    }
}

/// Writes `done`'s marker in `dir` (atomically: a marker is whole or absent).
fn write_marker(dir: &Path, files: &UnitFiles, done: &UnitDone) -> Result<(), DataError> {
    let name = unit_marker(done.unit);
    files.add(&name);
    let path = dir.join(name);
    let text = serde_json::to_string_pretty(done).map_err(|e| cache_err(&path, e.to_string()))?;
    write_atomically(&path, |tmp| std::fs::write(tmp, text).map_err(io_err(tmp)))
}

/// The units whose markers a finished cache keeps (see [`CacheBuilder::finish`]), by unit; a
/// unit that left its file out (`on_bad_file: skip`) is not one. Empty for a cache written
/// before markers were kept.
pub fn finished_units(dir: &Path) -> Result<BTreeMap<u32, UnitDone>, DataError> {
    Ok(read_markers(dir)?
        .into_values()
        .flatten()
        .filter(|d| d.skipped.is_none())
        .map(|d| (d.unit, d))
        .collect())
}

/// Of `units` (of the cache in `dir`, by any key), those read whole and intact: every shard
/// there, at its size and SHA-256 (checked as [`verify_cache`] checks, on every core).
pub fn intact_units<K: Ord>(dir: &Path, units: BTreeMap<K, UnitDone>) -> BTreeMap<K, UnitDone> {
    let shards: Vec<ShardInfo> = units.values().flat_map(|d| d.shards.clone()).collect();
    let bad: std::collections::BTreeSet<&str> = shards
        .iter()
        .zip(per_shard(&shards, &|s| check_shard(dir, s).is_ok()))
        .filter(|(_, ok)| !ok)
        .map(|(s, _)| s.file.as_str())
        .collect();
    units
        .into_iter()
        .filter(|(_, d)| d.shards.iter().all(|s| !bad.contains(s.file.as_str())))
        .collect()
}

/// The unit markers in `dir`, by unit (`None`: a marker that does not parse).
fn read_markers(dir: &Path) -> Result<BTreeMap<u32, Option<UnitDone>>, DataError> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(unit) = name
            .strip_prefix("unit-")
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let done = std::fs::read_to_string(e.path())
            .ok()
            .and_then(|t| serde_json::from_str::<UnitDone>(&t).ok())
            .filter(|d| d.unit == unit);
        out.insert(unit, done);
    }
    Ok(out)
}

/// Whether every shard of `done` is in `dir` at its size.
fn shards_intact(dir: &Path, done: &UnitDone) -> bool {
    done.shards
        .iter()
        .all(|s| std::fs::metadata(dir.join(&s.file)).is_ok_and(|m| m.len() == s.bytes))
}

/// Reads every shard of the cache in `dir` and checks it against the manifest's size and
/// SHA-256, on up to as many threads as the machine has cores. The first failing shard in shard
/// order is named.
pub fn verify_cache(dir: &Path, manifest: &CacheManifest) -> Result<(), DataError> {
    let parts = per_shard(&manifest.shards, &|s| check_shard(dir, s));
    parts.into_iter().collect()
}

/// `one` applied to every shard on up to as many threads as the machine has cores, results in
/// shard order.
fn per_shard<T: Send>(shards: &[ShardInfo], one: &(dyn Fn(&ShardInfo) -> T + Sync)) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    gnn4c_rootio::map_on_threads(shards.iter().collect(), threads, one)
}

/// A shard's file contents, checked against the manifest's size and SHA-256.
fn shard_bytes(dir: &Path, shard: &ShardInfo) -> Result<Vec<u8>, DataError> {
    let path = dir.join(&shard.file);
    let bytes = std::fs::read(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            missing_shard(&path)
        } else {
            DataError::Io {
                path: path.clone(),
                source,
            }
        }
    })?;
    use sha2::{Digest, Sha256};
    check_content(&path, shard, bytes.len() as u64, &Sha256::digest(&bytes))?;
    Ok(bytes)
}

/// Reads every record of the cache in `dir` whose fold passes `keep_fold`, in shard order.
///
/// Each shard is checked against the manifest (size, SHA-256, event count) before it is decoded.
/// Shards are read on up to as many threads as the machine has cores and the results joined in
/// shard order, so the result does not depend on the thread count. An error names the first
/// failing shard in shard order.
pub fn read_cache(
    dir: &Path,
    manifest: &CacheManifest,
    keep_fold: &(dyn Fn(u8) -> bool + Sync),
) -> Result<Vec<EventRecord>, DataError> {
    let one = |s: &ShardInfo| -> Result<Vec<EventRecord>, DataError> {
        let path = dir.join(&s.file);
        let bytes = shard_bytes(dir, s)?;
        let mut out = Vec::new();
        let rows = read_shard(&path, bytes, keep_fold, &mut out)?;
        if rows != s.events {
            return Err(cache_err(
                &path,
                format!(
                    "shard holds {rows} events but the manifest says {}",
                    s.events
                ),
            ));
        }
        Ok(out)
    };
    // Only the shards of the folds asked for are read.
    let wanted: Vec<ShardInfo> = manifest
        .shards
        .iter()
        .filter(|s| keep_fold(s.fold))
        .cloned()
        .collect();
    let mut out = Vec::new();
    for part in per_shard(&wanted, &one) {
        out.extend(part?);
    }
    Ok(out)
}

/// Decodes the shard `bytes` (read from `path`) into `out`; returns how many rows it holds.
fn read_shard(
    path: &Path,
    bytes: Vec<u8>,
    keep_fold: &dyn Fn(u8) -> bool,
    out: &mut Vec<EventRecord>,
) -> Result<u64, DataError> {
    let corrupt = |e: &dyn std::fmt::Display| {
        cache_err(path, format!("truncated or corrupted Parquet shard: {e}"))
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
        .map_err(|e| corrupt(&e))?
        .with_batch_size(8192)
        .build()
        .map_err(|e| corrupt(&e))?;
    let mut names: BTreeMap<String, Arc<str>> = BTreeMap::new();
    let mut paths: BTreeMap<String, Arc<Path>> = BTreeMap::new();
    let mut rows = 0;
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(&e))?;
        decode(&batch, &mut names, &mut paths, keep_fold, out).map_err(|e| cache_err(path, e))?;
        rows += batch.num_rows() as u64;
    }
    Ok(rows)
}
