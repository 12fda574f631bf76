//! A cache's manifest (`manifest.json`, written last): what the cache holds and what made it
//! (versions, the preprocessing fingerprint and its inputs, the features' names, the shards with
//! their sizes and SHA-256, the counts per sample, the files left out), read and checked
//! ([`read_manifest`]); the fingerprint and the first difference between two fingerprints'
//! inputs; an input file's identity; a shard's size and hash checked against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gnn4c_features::{Moments, Scale};
use serde::{Deserialize, Serialize};

use crate::DataError;

/// Version of the cache's on-disk layout; bump it when columns change.
pub const CACHE_SCHEMA_VERSION: u32 = 6;
/// The scientific contract the cached features follow (`../shared/spec/contract.md`).
pub const CONTRACT_VERSION: &str = "v1";
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";

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
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
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
            _ => Some(format!("{path}: {} → {}", short(a), short(b))),
        }
    }
    // A long list (a sample's files) by its length.
    fn short(v: &Value) -> String {
        let text = v.to_string();
        match v {
            Value::Array(items) if text.len() > 120 => format!("{} entries", items.len()),
            _ => text,
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

/// The folder in which the cache `target` is built.
pub fn building_dir(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.building"))
}

/// Reads and validates `dir/manifest.json`. A folder with shards but no manifest was left
/// half-written (a killed `preprocess`): it is reported, never read.
pub fn read_manifest(dir: &Path) -> Result<CacheManifest, DataError> {
    let path = dir.join(MANIFEST);
    if !path.is_file() {
        return Err(no_manifest(dir));
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
        let bytes = std::fs::metadata(&p).map_err(|_| missing_shard(&p))?.len();
        check_size(&p, s, bytes)?;
    }
    Ok(manifest)
}

/// Why `dir` holds no manifest: a build interrupted (its finished units named), a cache left
/// half-written, or no cache at all.
fn no_manifest(dir: &Path) -> DataError {
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
    cache_err(dir, message)
}

/// Checks a shard's size and SHA-256 against the manifest, reading it in 1 MiB pieces.
pub(crate) fn check_shard(dir: &Path, shard: &ShardInfo) -> Result<(), DataError> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let path = dir.join(&shard.file);
    let io = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::NotFound {
            missing_shard(&path)
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

/// A shard the manifest lists that is not on disk.
pub(crate) fn missing_shard(path: &Path) -> DataError {
    cache_err(path, "shard listed in the manifest is missing")
}

/// A shard's size (`bytes`) against the manifest's.
fn check_size(path: &Path, shard: &ShardInfo, bytes: u64) -> Result<(), DataError> {
    if bytes == shard.bytes {
        return Ok(());
    }
    Err(cache_err(
        path,
        format!(
            "shard is {bytes} bytes but the manifest says {} (truncated or replaced)",
            shard.bytes
        ),
    ))
}

/// The size and hash checks of a shard whose `bytes` and SHA-256 `digest` were read.
pub(crate) fn check_content(
    path: &Path,
    shard: &ShardInfo,
    bytes: u64,
    digest: &[u8],
) -> Result<(), DataError> {
    check_size(path, shard, bytes)?;
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
