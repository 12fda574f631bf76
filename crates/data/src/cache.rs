//! The Parquet event cache: sharded zstd Parquet files plus a JSON manifest written last. It
//! holds events (node features, raw η/φ, globals), not graphs: edges are built when it is read.
//!
//! Layout of a cache folder: `part-f<fold>-00000.parquet`, `part-f<fold>-00001.parquet`, … (the
//! events of one fold each, at most `shard_events`; a split reads only its folds' files) and
//! `manifest.json` (schema and contract versions, the
//! preprocessing fingerprint and its inputs, shards with event counts, sizes and SHA-256 content
//! hashes, per-sample and per-reason counts). Every file is written under a temporary name and
//! renamed; the manifest comes last, so a folder without one was never completed and is never
//! read. A shard is checked against its hash whenever it is read, so a corrupted one is refused by
//! name rather than served.

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
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use crate::DataError;
use crate::error::write_atomically;

/// Version of the cache's on-disk layout; bump it when columns change.
pub const CACHE_SCHEMA_VERSION: u32 = 3;
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
    /// The shards, in order.
    pub shards: Vec<ShardInfo>,
    /// Counts per sample.
    pub samples: BTreeMap<String, SampleCounts>,
    /// The tool and version that wrote it.
    pub written_by: String,
}

impl CacheManifest {
    /// Total events cached.
    pub fn events(&self) -> u64 {
        self.shards.iter().map(|s| s.events).sum()
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

/// The file's identity for the fingerprint: path, size, modification time (ns since the epoch).
pub fn file_identity(path: &Path, entries: u64) -> Result<serde_json::Value, DataError> {
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

fn cache_err(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Cache {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn arrow_schema() -> Arc<Schema> {
    let list = |name: &str, item: DataType| {
        Field::new(
            name,
            DataType::List(Arc::new(Field::new("item", item, false))),
            false,
        )
    };
    Arc::new(Schema::new(vec![
        Field::new("sample", DataType::Utf8, false),
        Field::new("source_file", DataType::Utf8, false),
        Field::new("tree", DataType::Utf8, false),
        Field::new("entry", DataType::UInt64, false),
        Field::new("event_number", DataType::UInt64, false),
        Field::new("fold", DataType::UInt8, false),
        Field::new("label", DataType::Int32, false),
        list("multilabel", DataType::UInt8),
        Field::new("weight", DataType::Float32, false),
        Field::new("n_nodes", DataType::UInt16, false),
        list("node_features", DataType::Float32),
        list("eta", DataType::Float64),
        list("phi", DataType::Float64),
        list("global_features", DataType::Float32),
    ]))
}

/// Writes event records into shards of a new cache folder.
///
/// Everything is written into a sibling folder `.<name>.building-<pid>` and swapped into place
/// by [`CacheWriter::finish`]: an existing valid cache is only replaced by a complete one, and a
/// failed or killed build never touches it. Dropping an unfinished writer removes its folder.
#[derive(Debug)]
pub struct CacheWriter {
    target: PathBuf,
    dir: PathBuf,
    shard_events: usize,
    /// Records waiting for a shard, per fold.
    pending: BTreeMap<u8, Vec<EventRecord>>,
    shards: Vec<ShardInfo>,
    done: bool,
}

impl CacheWriter {
    /// Starts building a cache for `target` (one build per cache folder at a time).
    pub fn create(target: &Path, shard_events: usize) -> Result<CacheWriter, DataError> {
        if shard_events == 0 {
            return Err(DataError::Config(
                "cache shard_events must be at least 1".into(),
            ));
        }
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| DataError::Io { path, source }
        };
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                DataError::Config(format!(
                    "cache path {} has no folder name",
                    target.display()
                ))
            })?;
        let parent = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        // Leftovers of killed builds of this cache.
        let prefix = format!(".{name}.building-");
        for e in std::fs::read_dir(parent).map_err(io(parent))?.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = parent.join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        Ok(CacheWriter {
            target: target.to_owned(),
            dir,
            shard_events,
            pending: BTreeMap::new(),
            shards: Vec::new(),
            done: false,
        })
    }

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
        let file = format!("part-f{fold}-{index:05}.parquet");
        let path = self.dir.join(&file);
        let batch = to_batch(&records).map_err(|e| cache_err(&path, e))?;
        let bytes = parquet_bytes(&batch).map_err(|e| cache_err(&path, e))?;
        write_atomically(&path, |tmp| {
            std::fs::write(tmp, &bytes).map_err(|source| DataError::Io {
                path: tmp.to_owned(),
                source,
            })
        })?;
        self.shards.push(ShardInfo {
            file,
            events: records.len() as u64,
            bytes: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
            fold,
        });
        Ok(())
    }

    /// Writes the last shard and the manifest, then swaps the finished cache into place.
    pub fn finish(mut self, mut manifest: CacheManifest) -> Result<CacheManifest, DataError> {
        let folds: Vec<u8> = self.pending.keys().copied().collect();
        for fold in folds {
            self.flush(fold)?;
        }
        // Shards in (fold, index) order: a split's events come in the same order however the
        // folds interleaved in the input.
        let mut shards = std::mem::take(&mut self.shards);
        shards.sort_by(|a, b| (a.fold, &a.file).cmp(&(b.fold, &b.file)));
        manifest.shards = shards;
        let path = self.dir.join(MANIFEST);
        let text =
            serde_json::to_string_pretty(&manifest).map_err(|e| cache_err(&path, e.to_string()))?;
        write_atomically(&path, |tmp| {
            std::fs::write(tmp, text).map_err(|source| DataError::Io {
                path: tmp.to_owned(),
                source,
            })
        })?;
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
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| DataError::Io { path, source }
        };
        if had_old {
            std::fs::rename(&self.target, &old).map_err(io(&self.target))?;
        }
        if let Err(e) = std::fs::rename(&self.dir, &self.target) {
            if had_old {
                let _ = std::fs::rename(&old, &self.target);
            }
            return Err(io(&self.target)(e));
        }
        self.done = true;
        if had_old {
            let _ = std::fs::remove_dir_all(&old);
        }
        Ok(manifest)
    }
}

impl Drop for CacheWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One shard's file contents: `batch` as zstd Parquet.
fn parquet_bytes(batch: &RecordBatch) -> Result<Vec<u8>, String> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
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
        globals.values().append_slice(&r.global_features);
        globals.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(sample.finish()),
        Arc::new(source.finish()),
        Arc::new(tree.finish()),
        Arc::new(entry.finish()),
        Arc::new(event_number.finish()),
        Arc::new(fold.finish()),
        Arc::new(label.finish()),
        Arc::new(multi.finish()),
        Arc::new(weight.finish()),
        Arc::new(n_nodes.finish()),
        Arc::new(nodes.finish()),
        Arc::new(eta.finish()),
        Arc::new(phi.finish()),
        Arc::new(globals.finish()),
    ];
    RecordBatch::try_new(arrow_schema(), columns).map_err(|e| e.to_string())
}

/// Reads and validates `dir/manifest.json`. A folder with shards but no manifest was left
/// half-written (a killed `preprocess`): it is reported, never read.
pub fn read_manifest(dir: &Path) -> Result<CacheManifest, DataError> {
    let path = dir.join(MANIFEST);
    if !path.is_file() {
        let has_shards = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("part-"))
            })
            .unwrap_or(false);
        let message = if has_shards {
            "no manifest.json: the cache was left half-written (preprocess was interrupted); \
             it is not read: rerun preprocess to rebuild it"
        } else {
            "no cache here (no manifest.json): run `gnn4colliders preprocess` first"
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
    let parts = per_shard(&manifest.shards, &|s| shard_bytes(dir, s).map(drop));
    parts.into_iter().collect()
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
    if bytes.len() as u64 != shard.bytes {
        return Err(cache_err(
            &path,
            format!(
                "shard is {} bytes but the manifest says {} (truncated or replaced)",
                bytes.len(),
                shard.bytes
            ),
        ));
    }
    if sha256_hex(&bytes) != shard.sha256 {
        return Err(cache_err(
            &path,
            "shard is corrupted: its SHA-256 differs from the manifest's; \
             rebuild the cache (`preprocess --mode rebuild`)",
        ));
    }
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
    let want = arrow_schema();
    let mut names: BTreeMap<String, Arc<str>> = BTreeMap::new();
    let mut paths: BTreeMap<String, Arc<Path>> = BTreeMap::new();
    let mut rows = 0;
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(&e))?;
        if batch.schema().fields() != want.fields() {
            return Err(cache_err(
                path,
                "columns differ from this build's cache schema: rebuild the cache",
            ));
        }
        decode(&batch, &mut names, &mut paths, keep_fold, out);
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

fn decode(
    batch: &RecordBatch,
    names: &mut BTreeMap<String, Arc<str>>,
    paths: &mut BTreeMap<String, Arc<Path>>,
    keep_fold: &dyn Fn(u8) -> bool,
    out: &mut Vec<EventRecord>,
) {
    let c = |i: usize| batch.column(i);
    let (sample, source, tree) = (
        c(0).as_string::<i32>(),
        c(1).as_string::<i32>(),
        c(2).as_string::<i32>(),
    );
    let entry = c(3).as_primitive::<UInt64Type>();
    let event_number = c(4).as_primitive::<UInt64Type>();
    let fold = c(5).as_primitive::<UInt8Type>();
    let label = c(6).as_primitive::<Int32Type>();
    let multi = c(7).as_list::<i32>();
    let weight = c(8).as_primitive::<Float32Type>();
    let n_nodes = c(9).as_primitive::<UInt16Type>();
    let (nodes, eta, phi, globals) = (
        c(10).as_list::<i32>(),
        c(11).as_list::<i32>(),
        c(12).as_list::<i32>(),
        c(13).as_list::<i32>(),
    );
    let floats = |l: &arrow_array::ListArray, i: usize| -> Vec<f32> {
        l.value(i).as_primitive::<Float32Type>().values().to_vec()
    };
    let doubles = |l: &arrow_array::ListArray, i: usize| -> Vec<f64> {
        l.value(i).as_primitive::<Float64Type>().values().to_vec()
    };
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
            global_features: floats(globals, i),
        });
    }
}

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

/// Reads the events of one split from the cache in `dir`, checking the folds match the cache's.
///
/// An empty split is an error naming the fold: training on nothing is never what was meant.
pub fn read_split(
    dir: &Path,
    folds: &Folds,
    split: Split,
) -> Result<(CacheManifest, Vec<EventRecord>), DataError> {
    let (manifest, mut splits) = read_splits(dir, folds, &[split])?;
    Ok((manifest, splits.pop().expect("one split asked for")))
}

/// [`read_split`] of several splits in one pass over the cache: `splits[k]`'s events, in
/// cache order, are the `k`-th vector. The same errors, for the first split that holds no
/// events.
pub fn read_splits(
    dir: &Path,
    folds: &Folds,
    splits: &[Split],
) -> Result<(CacheManifest, Vec<Vec<EventRecord>>), DataError> {
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
    let records = read_cache(dir, &manifest, &|f| splits.contains(&folds.split_of(f)))?;
    let mut out: Vec<Vec<EventRecord>> = splits.iter().map(|_| Vec::new()).collect();
    for r in records {
        let split = folds.split_of(r.fold);
        if let Some(k) = splits.iter().position(|s| *s == split) {
            out[k].push(r);
        }
    }
    for (split, records) in splits.iter().zip(&out) {
        if records.is_empty() {
            let which = match split {
                Split::Train => format!(
                    "the training folds (all but {} and {})",
                    folds.test_fold, folds.validation_fold
                ),
                Split::Validation => format!("validation fold {}", folds.validation_fold),
                Split::Test => format!("test fold {}", folds.test_fold),
            };
            return Err(cache_err(
                dir,
                format!(
                    "{which} holds no events ({} events in the cache)",
                    manifest.events()
                ),
            ));
        }
    }
    Ok((manifest, out))
}
