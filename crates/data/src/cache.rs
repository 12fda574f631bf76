//! The Parquet event cache: sharded zstd Parquet files plus a JSON manifest written last. It
//! holds events (node features, raw η/φ, globals), not graphs: edges are built when it is read.
//!
//! Layout of a cache folder: `part-f<fold>-u<unit>-<index>.parquet` (the events of one fold of
//! one input file each, at most `shard_events`, in row groups of [`ROW_GROUP_EVENTS`]; a split
//! reads only its folds' files) and `manifest.json` (schema and contract versions, the
//! preprocessing fingerprint and its inputs, shards with event counts, sizes and SHA-256 content
//! hashes, per-sample and per-reason counts). A cache is built unit by unit in a sibling folder
//! ([`CacheBuilder`]) and moved into place with its manifest, so a folder without one was never
//! completed and is never read. A shard is checked against its hash whenever it is read whole and
//! by the up-to-date check, so a corrupted one is refused by name rather than served.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{
    Float32Builder, Float64Builder, Int32Builder, ListBuilder, StringBuilder, UInt8Builder,
    UInt16Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, UInt8Type, UInt16Type, UInt64Type};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use gnn4c_events::{EventId, Label};
use gnn4c_features::{AutoColumns, Moments, Scale};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use crate::DataError;
use crate::error::write_atomically;

/// Version of the cache's on-disk layout; bump it when columns change.
pub const CACHE_SCHEMA_VERSION: u32 = 6;
/// The scientific contract the cached features follow (`../shared/spec/contract.md`).
pub const CONTRACT_VERSION: &str = "v1";
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";

/// One event as cached: identity, fold, label, weight, node features, the raw η and φ of the
/// nodes, and the global features.
///
/// The cache is event-level: it holds no edges. A graph's topology comes from `n_nodes` and its
/// edge features from `eta`/`phi` when it is read (bitwise what building it from the event
/// gives); another model family reads the same records.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// Identity.
    pub id: EventId,
    /// `event_number mod n_folds`.
    pub fold: u8,
    /// Training target.
    pub label: Label,
    /// Event weight.
    pub weight: f32,
    /// Node count.
    pub n_nodes: u16,
    /// `[n_nodes, d_node]` row-major.
    pub node_features: Vec<f32>,
    /// `[n_nodes]`: each node's raw η (MET: 0), f64, as edge features need it.
    pub eta: Vec<f64>,
    /// `[n_nodes]`: each node's raw φ (rad), f64.
    pub phi: Vec<f64>,
    /// `[n_nodes]`, or empty: each node's pt (GeV), kept where a declared pair feature needs
    /// the nodes' momenta (`mass`, `kt`, `z`, …).
    pub pt: Vec<f64>,
    /// `[n_nodes]` where `pt` is kept, else empty: each node's mass (GeV; MET: 0).
    pub mass: Vec<f64>,
    /// `[d_global]`.
    pub global_features: Vec<f32>,
}

/// One shard in the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// File name inside the cache folder.
    pub file: String,
    /// Events in it.
    pub events: u64,
    /// Size in bytes (a shorter file is truncated).
    pub bytes: u64,
    /// SHA-256 (hex) of the file's bytes.
    pub sha256: String,
    /// The fold of every event in it.
    pub fold: u8,
    /// Moments of the declaration's `auto`-standardised features over its events, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub moments: BTreeMap<String, Moments>,
}

/// Per-sample counts in the manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleCounts {
    /// Entries read.
    pub read: u64,
    /// Graphs cached.
    pub cached: u64,
    /// Events skipped, by reason.
    pub skipped: BTreeMap<String, u64>,
}

/// The names of the cached features, in column order: what a model's input widths come from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureNames {
    /// Node features (`d_node` of them).
    pub node: Vec<String>,
    /// Global features.
    pub global: Vec<String>,
    /// Pair features, computed when the cache is read.
    pub pair: Vec<String>,
}

impl FeatureNames {
    /// The names of a declaration's features.
    pub fn of(spec: &gnn4c_features::InputsSpec) -> FeatureNames {
        FeatureNames {
            node: spec.node_features.iter().map(|f| f.name.clone()).collect(),
            global: spec.globals.iter().map(|f| f.name.clone()).collect(),
            pair: spec.pairs.iter().map(|p| p.name().to_owned()).collect(),
        }
    }
}

/// `manifest.json`: what a cache holds and what made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheManifest {
    /// [`CACHE_SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    /// [`CONTRACT_VERSION`] when written.
    pub contract_version: String,
    /// SHA-256 of `fingerprint_inputs` (canonical JSON).
    pub fingerprint: String,
    /// The resolved preprocessing config and every input file's identity (path, size, mtime,
    /// entries); kept so a mismatch can say which field differs.
    pub fingerprint_inputs: serde_json::Value,
    /// Number of folds (`fold = event_number mod n_folds`).
    pub n_folds: u32,
    /// The cached features' names, in column order.
    pub features: FeatureNames,
    /// The shards, in order.
    pub shards: Vec<ShardInfo>,
    /// Counts per sample.
    pub samples: BTreeMap<String, SampleCounts>,
    /// The input files left out because they could not be read (`on_bad_file: skip`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_files: Vec<SkippedFile>,
    /// The tool and version that wrote it.
    pub written_by: String,
}

impl CacheManifest {
    /// Total events cached.
    pub fn events(&self) -> u64 {
        self.shards.iter().map(|s| s.events).sum()
    }

    /// The mean and standard deviation of each `auto` feature over the shards of the folds
    /// `keep_fold` passes (the training folds), merged in manifest order: the same numbers for
    /// the same cache.
    pub fn auto_scales(&self, keep_fold: &dyn Fn(u8) -> bool) -> BTreeMap<String, Scale> {
        let mut merged: BTreeMap<&str, Moments> = BTreeMap::new();
        for shard in self.shards.iter().filter(|s| keep_fold(s.fold)) {
            for (name, m) in &shard.moments {
                let e = merged.entry(name.as_str()).or_default();
                *e = e.merge(*m);
            }
        }
        merged
            .into_iter()
            .filter_map(|(name, m)| m.scale().map(|s| (name.to_owned(), s)))
            .collect()
    }
}

/// SHA-256 (hex) of a JSON value's canonical text (serde_json keeps map keys sorted).
pub fn fingerprint_of(inputs: &serde_json::Value) -> String {
    let text = serde_json::to_string(inputs).unwrap_or_default();
    sha256_hex(text.as_bytes())
}

/// SHA-256 of `bytes`, as lowercase hex.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first place two JSON values differ, as `path: old → new`, or `None` when equal.
pub fn first_difference(old: &serde_json::Value, new: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    fn walk(path: &str, a: &Value, b: &Value) -> Option<String> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                keys.into_iter().find_map(|k| {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(
                        &p,
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    )
                })
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (u, v))| walk(&format!("{path}[{i}]"), u, v)),
            _ if a == b => None,
            _ => Some(format!("{path}: {a} → {b}")),
        }
    }
    walk("", old, new)
}

/// The file's identity for the fingerprint: path, size, modification time (ns since the epoch);
/// for a URL, the URL, size, and the server's `Last-Modified` and `ETag`.
pub fn file_identity(path: &Path, entries: u64) -> Result<serde_json::Value, DataError> {
    if gnn4c_rootio::is_url(path) {
        let url = path.to_string_lossy();
        let id = gnn4c_rootio::remote_identity(&url).map_err(|source| DataError::Io {
            path: path.to_owned(),
            source,
        })?;
        return Ok(serde_json::json!({
            "path": url,
            "size": id.size,
            "modified": id.modified,
            "etag": id.etag,
            "entries": entries,
        }));
    }
    let meta = std::fs::metadata(path).map_err(|source| DataError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    Ok(serde_json::json!({
        "path": path.display().to_string(),
        "size": meta.len(),
        "mtime_ns": mtime,
        "entries": entries,
    }))
}

pub(crate) fn cache_err(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Cache {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// A cache column's Arrow type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Utf8,
    U8,
    U16,
    I32,
    U64,
    F32,
    ListU8,
    ListF32,
    ListF64,
}

impl Kind {
    fn data_type(self) -> DataType {
        let list = |item: DataType| DataType::List(Arc::new(Field::new("item", item, false)));
        match self {
            Kind::Utf8 => DataType::Utf8,
            Kind::U8 => DataType::UInt8,
            Kind::U16 => DataType::UInt16,
            Kind::I32 => DataType::Int32,
            Kind::U64 => DataType::UInt64,
            Kind::F32 => DataType::Float32,
            Kind::ListU8 => list(DataType::UInt8),
            Kind::ListF32 => list(DataType::Float32),
            Kind::ListF64 => list(DataType::Float64),
        }
    }
}

/// The cache's columns: the one table writing and reading follow (readers find columns by name).
const COLUMNS: [(&str, Kind); 16] = [
    ("sample", Kind::Utf8),
    ("source_file", Kind::Utf8),
    ("tree", Kind::Utf8),
    ("entry", Kind::U64),
    ("event_number", Kind::U64),
    ("fold", Kind::U8),
    ("label", Kind::I32),
    ("multilabel", Kind::ListU8),
    ("weight", Kind::F32),
    ("n_nodes", Kind::U16),
    ("node_features", Kind::ListF32),
    ("eta", Kind::ListF64),
    ("phi", Kind::ListF64),
    ("pt", Kind::ListF64),
    ("mass", Kind::ListF64),
    ("global_features", Kind::ListF32),
];

/// Events per Parquet row group: the unit a streaming reader fetches and shuffles.
pub const ROW_GROUP_EVENTS: usize = 1024;

fn arrow_schema() -> Arc<Schema> {
    Arc::new(Schema::new(
        COLUMNS
            .iter()
            .map(|&(name, kind)| Field::new(name, kind.data_type(), false))
            .collect::<Vec<_>>(),
    ))
}

/// The column `name` of `batch`, checked against the schema table.
pub(crate) fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, String> {
    let kind = COLUMNS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, k)| k)
        .ok_or_else(|| format!("no cache column {name}"))?;
    let col = batch.column_by_name(name).ok_or_else(|| {
        format!("column {name} is missing: the shard was written by another cache layout; rebuild the cache")
    })?;
    if col.data_type() != &kind.data_type() {
        return Err(format!(
            "column {name} is {} but this build reads {}: rebuild the cache",
            col.data_type(),
            kind.data_type()
        ));
    }
    Ok(col)
}

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

/// An input file left out of a cache because it could not be read (`on_bad_file: skip`); a
/// rerun of `preprocess` reads it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkippedFile {
    /// Its sample.
    pub sample: String,
    /// Its path or URL.
    pub file: String,
    /// Why it could not be read.
    pub error: String,
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
}

/// The folder in which the cache `target` is built.
pub fn building_dir(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.building"))
}

fn unit_marker(unit: u32) -> String {
    format!("unit-{unit:06}.json")
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
        let tag = format!("-u{unit:06}-");
        let marker = unit_marker(unit);
        for e in std::fs::read_dir(&self.dir)
            .map_err(io_err(&self.dir))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == marker || (name.starts_with("part-") && name.contains(&tag)) {
                std::fs::remove_file(e.path()).map_err(io_err(&e.path()))?;
            }
        }
        Ok(())
    }

    /// Starts writing unit `unit`, removing what an earlier, unfinished attempt left of it.
    pub fn unit(&self, unit: u32) -> Result<UnitWriter, DataError> {
        self.clear_unit(unit)?;
        Ok(UnitWriter {
            dir: self.dir.clone(),
            fingerprint: self.fingerprint.clone(),
            unit,
            shard_events: self.shard_events,
            auto: self.auto.clone(),
            pending: BTreeMap::new(),
            shards: Vec::new(),
        })
    }

    /// Takes unit `done` as it is in the finished cache `from` (its shards linked, or copied
    /// where they cannot be): the same input file, read for a cache that differs only in other
    /// files.
    pub fn adopt_unit(&self, from: &Path, done: &UnitDone) -> Result<(), DataError> {
        self.clear_unit(done.unit)?;
        for shard in &done.shards {
            let (src, dst) = (from.join(&shard.file), self.dir.join(&shard.file));
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).map_err(io_err(&src))?;
            }
        }
        write_marker(
            &self.dir,
            &UnitDone {
                fingerprint: self.fingerprint.clone(),
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
        write_marker(&self.dir, &done)?;
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
        // Nothing but the manifest's shards goes into the cache; and, where input files were
        // left out, the units' markers, so that a rerun reads only those files again
        // ([`kept_units`]).
        let keep: std::collections::BTreeSet<&str> =
            manifest.shards.iter().map(|s| s.file.as_str()).collect();
        let keep_markers = !manifest.skipped_files.is_empty();
        for e in std::fs::read_dir(&self.dir)
            .map_err(io_err(&self.dir))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let marker = name.starts_with("unit-") && name.ends_with(".json");
            if !keep.contains(name.as_str()) && (!keep_markers || !marker) {
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
        write_marker(&self.dir, &done)?;
        Ok(done)
    }
}

/// Writes `done`'s marker in `dir` (atomically: a marker is whole or absent).
fn write_marker(dir: &Path, done: &UnitDone) -> Result<(), DataError> {
    let path = dir.join(unit_marker(done.unit));
    let text = serde_json::to_string_pretty(done).map_err(|e| cache_err(&path, e.to_string()))?;
    write_atomically(&path, |tmp| std::fs::write(tmp, text).map_err(io_err(tmp)))
}

/// The units a finished cache that left out input files keeps markers of (see
/// [`CacheBuilder::finish`]), those read whole and intact: every shard there, at its size and
/// SHA-256 (checked as [`verify_cache`] checks, on every core). Empty for a cache that left out
/// nothing.
pub fn kept_units(dir: &Path) -> Result<BTreeMap<u32, UnitDone>, DataError> {
    let units: Vec<UnitDone> = read_markers(dir)?
        .into_values()
        .flatten()
        .filter(|d| d.skipped.is_none())
        .collect();
    let shards: Vec<ShardInfo> = units.iter().flat_map(|d| d.shards.clone()).collect();
    let bad: std::collections::BTreeSet<&str> = shards
        .iter()
        .zip(per_shard(&shards, &|s| check_shard(dir, s).is_ok()))
        .filter(|(_, ok)| !ok)
        .map(|(s, _)| s.file.as_str())
        .collect();
    let kept = units
        .iter()
        .filter(|d| d.shards.iter().all(|s| !bad.contains(s.file.as_str())))
        .map(|d| (d.unit, d.clone()))
        .collect();
    Ok(kept)
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

/// One shard's file contents: `batch` as zstd Parquet.
fn parquet_bytes(batch: &RecordBatch) -> Result<Vec<u8>, String> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(ROW_GROUP_EVENTS))
        // Numbers are nearly all distinct: a dictionary per row group only adds bytes. The
        // strings (sample, file, tree) repeat and keep theirs.
        .set_dictionary_enabled(false)
        .set_column_dictionary_enabled("sample".into(), true)
        .set_column_dictionary_enabled("source_file".into(), true)
        .set_column_dictionary_enabled("tree".into(), true)
        .build();
    let mut bytes = Vec::new();
    let mut w =
        ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).map_err(|e| e.to_string())?;
    w.write(batch).map_err(|e| e.to_string())?;
    w.close().map_err(|e| e.to_string())?;
    Ok(bytes)
}

fn to_batch(records: &[EventRecord]) -> Result<RecordBatch, String> {
    let n = records.len();
    let mut sample = StringBuilder::new();
    let mut source = StringBuilder::new();
    let mut tree = StringBuilder::new();
    let mut entry = UInt64Builder::with_capacity(n);
    let mut event_number = UInt64Builder::with_capacity(n);
    let mut fold = UInt8Builder::with_capacity(n);
    let mut label = Int32Builder::with_capacity(n);
    let mut multi = ListBuilder::new(UInt8Builder::new()).with_field(Field::new(
        "item",
        DataType::UInt8,
        false,
    ));
    let mut weight = Float32Builder::with_capacity(n);
    let mut n_nodes = UInt16Builder::with_capacity(n);
    let item = || Field::new("item", DataType::Float32, false);
    let mut nodes = ListBuilder::new(Float32Builder::new()).with_field(item());
    let item64 = || Field::new("item", DataType::Float64, false);
    let mut eta = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut phi = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut pt = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut mass = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut globals = ListBuilder::new(Float32Builder::new()).with_field(item());
    for r in records {
        sample.append_value(&r.id.sample);
        source.append_value(r.id.source_file.display().to_string());
        tree.append_value(&r.id.tree);
        entry.append_value(r.id.entry);
        event_number.append_value(r.id.event_number);
        fold.append_value(r.fold);
        match &r.label {
            Label::Class(c) => {
                label.append_value(i32::try_from(*c).map_err(|_| format!("label {c} too large"))?);
                multi.append(true);
            }
            Label::Multi(v) => {
                label.append_value(-1);
                multi.values().append_slice(v);
                multi.append(true);
            }
        }
        weight.append_value(r.weight);
        n_nodes.append_value(r.n_nodes);
        nodes.values().append_slice(&r.node_features);
        nodes.append(true);
        eta.values().append_slice(&r.eta);
        eta.append(true);
        phi.values().append_slice(&r.phi);
        phi.append(true);
        pt.values().append_slice(&r.pt);
        pt.append(true);
        mass.values().append_slice(&r.mass);
        mass.append(true);
        globals.values().append_slice(&r.global_features);
        globals.append(true);
    }
    let mut by_name: BTreeMap<&str, ArrayRef> = [
        ("sample", Arc::new(sample.finish()) as ArrayRef),
        ("source_file", Arc::new(source.finish())),
        ("tree", Arc::new(tree.finish())),
        ("entry", Arc::new(entry.finish())),
        ("event_number", Arc::new(event_number.finish())),
        ("fold", Arc::new(fold.finish())),
        ("label", Arc::new(label.finish())),
        ("multilabel", Arc::new(multi.finish())),
        ("weight", Arc::new(weight.finish())),
        ("n_nodes", Arc::new(n_nodes.finish())),
        ("node_features", Arc::new(nodes.finish())),
        ("eta", Arc::new(eta.finish())),
        ("phi", Arc::new(phi.finish())),
        ("pt", Arc::new(pt.finish())),
        ("mass", Arc::new(mass.finish())),
        ("global_features", Arc::new(globals.finish())),
    ]
    .into_iter()
    .collect();
    let columns = COLUMNS
        .iter()
        .map(|(name, _)| {
            by_name
                .remove(name)
                .ok_or_else(|| format!("no builder for cache column {name}"))
        })
        .collect::<Result<Vec<ArrayRef>, String>>()?;
    RecordBatch::try_new(arrow_schema(), columns).map_err(|e| e.to_string())
}

/// Reads and validates `dir/manifest.json`. A folder with shards but no manifest was left
/// half-written (a killed `preprocess`): it is reported, never read.
pub fn read_manifest(dir: &Path) -> Result<CacheManifest, DataError> {
    let path = dir.join(MANIFEST);
    if !path.is_file() {
        let building = building_dir(dir);
        let units = std::fs::read_dir(&building)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("unit-"))
                    .count()
            })
            .ok();
        let has_shards = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("part-"))
            })
            .unwrap_or(false);
        let message = match units {
            Some(n) => format!(
                "no cache yet: a preprocess of it was interrupted with {n} input files done (in {}); \
                 rerun `gnn4colliders preprocess`: it keeps them and reads only the rest",
                building.display()
            ),
            None if has_shards => "no manifest.json: the cache was left half-written; it is not \
                 read: rerun `gnn4colliders preprocess` to rebuild it"
                .into(),
            None => "no cache here (no manifest.json): run `gnn4colliders preprocess` first".into(),
        };
        return Err(cache_err(dir, message));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| DataError::Io {
        path: path.clone(),
        source,
    })?;
    let unreadable = |e: serde_json::Error| cache_err(&path, format!("unreadable manifest: {e}"));
    let value: serde_json::Value = serde_json::from_str(&text).map_err(unreadable)?;
    // The versions first: an older layout is named as such, not as an unreadable manifest.
    let schema_version = value.get("schema_version").and_then(|v| v.as_u64());
    if schema_version != Some(u64::from(CACHE_SCHEMA_VERSION)) {
        let found = schema_version.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
        return Err(cache_err(
            &path,
            format!(
                "cache schema version {found} but this build reads version {CACHE_SCHEMA_VERSION}: \
                 rebuild the cache (`preprocess --mode rebuild`, or `auto` rebuilds it)"
            ),
        ));
    }
    let contract = value.get("contract_version").and_then(|v| v.as_str());
    if contract != Some(CONTRACT_VERSION) {
        return Err(cache_err(
            &path,
            format!(
                "cache made under contract {} but this build implements contract {CONTRACT_VERSION}: \
                 rebuild the cache (`preprocess --mode rebuild`, or `auto` rebuilds it)",
                contract.unwrap_or("unknown")
            ),
        ));
    }
    let manifest: CacheManifest = serde_json::from_value(value).map_err(unreadable)?;
    // The per-sample counts and the shards must agree, and each shard hold one valid fold.
    let cached: u64 = manifest.samples.values().map(|c| c.cached).sum();
    if cached != manifest.events() {
        return Err(cache_err(
            &path,
            format!(
                "the counts do not add up: the samples say {cached} events cached, the shards hold {}; \
                 rebuild the cache (`preprocess --mode rebuild`)",
                manifest.events()
            ),
        ));
    }
    if let Some(s) = manifest
        .shards
        .iter()
        .find(|s| u32::from(s.fold) >= manifest.n_folds)
    {
        return Err(cache_err(
            &dir.join(&s.file),
            format!(
                "shard of fold {} in a cache of {} folds; rebuild the cache (`preprocess --mode rebuild`)",
                s.fold, manifest.n_folds
            ),
        ));
    }
    for s in &manifest.shards {
        let p = dir.join(&s.file);
        let bytes = std::fs::metadata(&p)
            .map_err(|_| cache_err(&p, "shard listed in the manifest is missing"))?
            .len();
        if bytes != s.bytes {
            return Err(cache_err(
                &p,
                format!(
                    "shard is {bytes} bytes but the manifest says {} (truncated or replaced)",
                    s.bytes
                ),
            ));
        }
    }
    Ok(manifest)
}

/// Reads every shard of the cache in `dir` and checks it against the manifest's size and
/// SHA-256, on up to as many threads as the machine has cores. The first failing shard in shard
/// order is named.
pub fn verify_cache(dir: &Path, manifest: &CacheManifest) -> Result<(), DataError> {
    let parts = per_shard(&manifest.shards, &|s| check_shard(dir, s));
    parts.into_iter().collect()
}

/// Checks a shard's size and SHA-256 against the manifest, reading it in 1 MiB pieces.
fn check_shard(dir: &Path, shard: &ShardInfo) -> Result<(), DataError> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let path = dir.join(&shard.file);
    let io = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::NotFound {
            cache_err(&path, "shard listed in the manifest is missing")
        } else {
            DataError::Io {
                path: path.clone(),
                source,
            }
        }
    };
    let mut file = std::fs::File::open(&path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    check_content(&path, shard, bytes, &hasher.finalize())
}

/// The size and hash checks of a shard whose `bytes` and SHA-256 `digest` were read.
fn check_content(
    path: &Path,
    shard: &ShardInfo,
    bytes: u64,
    digest: &[u8],
) -> Result<(), DataError> {
    if bytes != shard.bytes {
        return Err(cache_err(
            path,
            format!(
                "shard is {bytes} bytes but the manifest says {} (truncated or replaced)",
                shard.bytes
            ),
        ));
    }
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    if hex != shard.sha256 {
        return Err(cache_err(
            path,
            "shard is corrupted: its SHA-256 differs from the manifest's; \
             rebuild the cache (`preprocess --mode rebuild`)",
        ));
    }
    Ok(())
}

/// `one` applied to every shard on up to as many threads as the machine has cores (plain
/// threads, each with a contiguous run of shards), results in shard order.
fn per_shard<T: Send>(shards: &[ShardInfo], one: &(dyn Fn(&ShardInfo) -> T + Sync)) -> Vec<T> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(shards.len());
    if threads <= 1 {
        return shards.iter().map(one).collect();
    }
    let per_thread = shards.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = shards
            .chunks(per_thread)
            .map(|run| scope.spawn(|| run.iter().map(one).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// A shard's file contents, checked against the manifest's size and SHA-256.
fn shard_bytes(dir: &Path, shard: &ShardInfo) -> Result<Vec<u8>, DataError> {
    let path = dir.join(&shard.file);
    let bytes = std::fs::read(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            cache_err(&path, "shard listed in the manifest is missing")
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

fn intern<T: ?Sized>(
    map: &mut BTreeMap<String, Arc<T>>,
    s: &str,
    make: impl Fn(&str) -> Arc<T>,
) -> Arc<T> {
    if let Some(v) = map.get(s) {
        return v.clone();
    }
    let v = make(s);
    map.insert(s.to_owned(), v.clone());
    v
}

/// Appends the rows of `batch` whose fold passes `keep_fold` to `out`, columns found by name.
pub(crate) fn decode(
    batch: &RecordBatch,
    names: &mut BTreeMap<String, Arc<str>>,
    paths: &mut BTreeMap<String, Arc<Path>>,
    keep_fold: &dyn Fn(u8) -> bool,
    out: &mut Vec<EventRecord>,
) -> Result<(), String> {
    let c = |name: &str| column(batch, name);
    let (sample, source, tree) = (
        c("sample")?.as_string::<i32>(),
        c("source_file")?.as_string::<i32>(),
        c("tree")?.as_string::<i32>(),
    );
    let entry = c("entry")?.as_primitive::<UInt64Type>();
    let event_number = c("event_number")?.as_primitive::<UInt64Type>();
    let fold = c("fold")?.as_primitive::<UInt8Type>();
    let label = c("label")?.as_primitive::<Int32Type>();
    let multi = c("multilabel")?.as_list::<i32>();
    let weight = c("weight")?.as_primitive::<Float32Type>();
    let n_nodes = c("n_nodes")?.as_primitive::<UInt16Type>();
    let (nodes, eta, phi, pt, mass, globals) = (
        c("node_features")?.as_list::<i32>(),
        c("eta")?.as_list::<i32>(),
        c("phi")?.as_list::<i32>(),
        c("pt")?.as_list::<i32>(),
        c("mass")?.as_list::<i32>(),
        c("global_features")?.as_list::<i32>(),
    );
    let floats = |l: &arrow_array::ListArray, i: usize| -> Vec<f32> {
        l.value(i).as_primitive::<Float32Type>().values().to_vec()
    };
    let doubles = |l: &arrow_array::ListArray, i: usize| -> Vec<f64> {
        l.value(i).as_primitive::<Float64Type>().values().to_vec()
    };
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        if !keep_fold(fold.value(i)) {
            continue;
        }
        let lab = if label.value(i) >= 0 {
            Label::Class(label.value(i) as u32)
        } else {
            Label::Multi(multi.value(i).as_primitive::<UInt8Type>().values().to_vec())
        };
        out.push(EventRecord {
            id: EventId {
                sample: intern(names, sample.value(i), |s| Arc::from(s)),
                source_file: intern(paths, source.value(i), |s| Arc::from(Path::new(s))),
                tree: intern(names, tree.value(i), |s| Arc::from(s)),
                entry: entry.value(i),
                event_number: event_number.value(i),
            },
            fold: fold.value(i),
            label: lab,
            weight: weight.value(i),
            n_nodes: n_nodes.value(i),
            node_features: floats(nodes, i),
            eta: doubles(eta, i),
            phi: doubles(phi, i),
            pt: doubles(pt, i),
            mass: doubles(mass, i),
            global_features: floats(globals, i),
        });
    }
    Ok(())
}
