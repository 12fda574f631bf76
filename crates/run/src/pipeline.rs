//! Preprocessing: a dataset's cache made ready — used as it is when its fingerprint matches,
//! finished or rebuilt otherwise ([`preprocess`], [`ensure_cache`]); the build itself is
//! `cache_build.rs`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use gnn4c_data::{
    CACHE_SCHEMA_VERSION, CONTRACT_VERSION, CacheManifest, DatasetConfig, Folds, OnBadFile,
    file_identity, fingerprint_of, first_difference, open_tree, read_manifest, verify_cache,
};

use crate::cache_build::report_skipped_files;
pub use crate::cache_build::{BuildFrom, CacheBuild, build_cache, to_record};

/// What to do with an existing cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Use it when it matches the config and files, rebuild it otherwise.
    Auto,
    /// Always rebuild.
    Rebuild,
    /// Use it when it matches; refuse (naming what differs) otherwise.
    ReadOnly,
}

/// Input files whose trees are opened at once for the fingerprint: opening a remote file is
/// bound by round trips, not by the cores, so a dataset of many files opens several at a time.
const OPEN_AT_ONCE: usize = 16;

/// The resolved inputs of preprocessing: change any of them and the cache is stale. Each input
/// file's identity holds its entries, which the build then reads from here.
pub fn fingerprint_inputs(
    cfg: &DatasetConfig,
    n_folds: u32,
    base: &Path,
) -> anyhow::Result<serde_json::Value> {
    let inputs = cfg.inputs_spec()?;
    let mut paths = Vec::new();
    for s in &cfg.samples {
        for path in cfg.sample_files(s, base)? {
            paths.push((cfg.tree_of(s), path));
        }
    }
    let identities = gnn4c_rootio::map_on_threads(paths, OPEN_AT_ONCE, |(tree, path)| {
        let identity = open_tree(&path, tree)
            .map(|t| t.entries())
            .and_then(|entries| file_identity(&path, entries));
        (path, identity)
    });
    let mut files = Vec::with_capacity(identities.len());
    for (path, identity) in identities {
        match identity {
            Ok(identity) => files.push(identity),
            // Skipped when read: a rerun tries it again, and a file that reads now makes the
            // fingerprint differ.
            Err(_) if cfg.on_bad_file == OnBadFile::Skip => files.push(serde_json::json!({
                "path": path.display().to_string(),
                "unreadable": true,
            })),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(serde_json::json!({
        "schema_version": CACHE_SCHEMA_VERSION,
        "contract_version": CONTRACT_VERSION,
        "dataset": cfg,
        "inputs": inputs,
        "n_folds": n_folds,
        "files": files,
    }))
}

/// The `preprocess` step: builds or validates the cache of `dataset` in `cache` (default
/// `cache/<dataset name>`) with the contract's selection; its manifest, unless only a part was
/// built. Under MPI the ranks share the input
/// files and rank 0 writes the manifest once every rank is done; a `part` or a rebuild is then
/// refused (the ranks already split the work; a rebuild would delete the others' units).
pub fn preprocess(
    dataset: &DatasetConfig,
    cache: Option<&Path>,
    mode: CacheMode,
    folds: &Folds,
    mut build: CacheBuild,
    world: &gnn4c_distributed::World,
    out: &mut dyn Write,
) -> anyhow::Result<Option<CacheManifest>> {
    folds.validate()?;
    let dir = crate::settings::cache_dir(cache, dataset, Path::new("cache"));
    if world.is_distributed() {
        if build.part.is_some() {
            bail!(
                "--part splits the work between separate processes; under MPI the ranks already share it: leave --part out"
            );
        }
        if mode == CacheMode::Rebuild {
            bail!(
                "--mode rebuild under MPI: run it in one process, or remove the cache folder first"
            );
        }
        let size = u32::try_from(world.size()).context("too many ranks")?;
        let rank = u32::try_from(world.rank()).context("too many ranks")?;
        build.part = Some((rank, size));
        build.threads = (build.threads / world.local_size()).max(1);
        // Every rank writes its units (a failing rank ends the job); the manifest comes after,
        // from rank 0 alone.
        preprocess_cache(&mut std::io::sink(), dataset, &dir, mode, folds, &build)?;
        world.barrier();
        if !world.is_root() {
            return Ok(None);
        }
        build.part = None;
    }
    preprocess_cache(out, dataset, &dir, mode, folds, &build)
}

/// Ensures the cache for `cfg` exists and matches; returns its manifest.
pub fn ensure_cache(
    out: &mut dyn Write,
    cfg: &DatasetConfig,
    dir: &Path,
    mode: CacheMode,
    folds: &Folds,
    build: &CacheBuild,
) -> anyhow::Result<CacheManifest> {
    let whole = CacheBuild {
        part: None,
        ..build.clone()
    };
    preprocess_cache(out, cfg, dir, mode, folds, &whole)?
        .context("a whole build writes the manifest")
}

/// [`ensure_cache`], or with `build.part` the part's input files only (`None`: no manifest yet).
pub fn preprocess_cache(
    out: &mut dyn Write,
    cfg: &DatasetConfig,
    dir: &Path,
    mode: CacheMode,
    folds: &Folds,
    build: &CacheBuild,
) -> anyhow::Result<Option<CacheManifest>> {
    if build.part.is_some() && mode == CacheMode::Rebuild {
        bail!(
            "--mode rebuild would remove the other parts' work: start a parted build with --mode auto \
             (it discards input files done for another config by itself)"
        );
    }
    let base = std::env::current_dir().context("reading the current folder")?;
    let inputs = fingerprint_inputs(cfg, folds.n_folds, &base)?;
    let fingerprint = fingerprint_of(&inputs);
    // Units of a cache that left out input files, kept when those files are read again.
    let mut kept = BTreeMap::new();
    if mode != CacheMode::Rebuild && dir.exists() {
        // A cache whose inputs match is only up to date if every shard is intact.
        let found = read_manifest(dir).and_then(|m| {
            if m.fingerprint == fingerprint {
                verify_cache(dir, &m)?;
            }
            Ok(m)
        });
        match found {
            Ok(m)
                if !m.skipped_files.is_empty()
                    && mode == CacheMode::Auto
                    && let Some(same) =
                        same_but_unreadable_files(&m.fingerprint_inputs, &inputs) =>
            {
                if build.part.is_none() {
                    kept = gnn4c_data::kept_units(dir)?;
                    kept.retain(|u, _| same.get(*u as usize).copied().unwrap_or(false));
                }
                writeln!(
                    out,
                    "cache {} left out {} input files it could not read: reading them again{}",
                    dir.display(),
                    m.skipped_files.len(),
                    if kept.is_empty() {
                        String::new()
                    } else {
                        format!(" (the other {} input files' shards are kept)", kept.len())
                    }
                )?;
            }
            Ok(m) if m.fingerprint == fingerprint => {
                writeln!(
                    out,
                    "cache {} is up to date ({} events, fingerprint {})",
                    dir.display(),
                    m.events(),
                    &fingerprint[..12]
                )?;
                report_skipped_files(out, &m)?;
                return Ok(Some(m));
            }
            Ok(m) => {
                let what = first_difference(&m.fingerprint_inputs, &inputs)
                    .unwrap_or_else(|| "the fingerprint".into());
                if mode == CacheMode::ReadOnly {
                    bail!(
                        "cache {} is stale ({what}) and cache mode is read_only: rebuild it with --mode rebuild",
                        dir.display()
                    );
                }
                writeln!(out, "cache {} is stale ({what}): rebuilding", dir.display())?;
            }
            Err(e) if mode == CacheMode::ReadOnly => {
                return Err(e).context("cache mode is read_only");
            }
            Err(e) => writeln!(out, "{e:#}: rebuilding")?,
        }
    } else if mode == CacheMode::ReadOnly {
        // Names an interrupted build when there is one.
        read_manifest(dir).context("cache mode is read_only")?;
    }
    build_cache(
        out,
        cfg,
        dir,
        folds,
        build,
        inputs,
        fingerprint,
        &base,
        if mode == CacheMode::Rebuild {
            BuildFrom::Nothing
        } else {
            BuildFrom::Keeping(kept)
        },
    )
}

/// Per input file, whether a cache of `old` inputs holds it as `new` would: `None` unless the
/// two differ at most in files `old` could not read (what a rerun under `on_bad_file: skip`
/// reads again).
fn same_but_unreadable_files(
    old: &serde_json::Value,
    new: &serde_json::Value,
) -> Option<Vec<bool>> {
    let (o, n) = (old.as_object()?, new.as_object()?);
    let others_equal = o.len() == n.len()
        && o.iter()
            .all(|(k, v)| k == "files" || n.get(k).is_some_and(|w| w == v));
    let (of, nf) = (o.get("files")?.as_array()?, n.get("files")?.as_array()?);
    if !others_equal || of.len() != nf.len() {
        return None;
    }
    let mut same = Vec::with_capacity(of.len());
    for (a, b) in of.iter().zip(nf) {
        let unreadable = a.get("unreadable").is_some();
        if a != b && !unreadable {
            return None;
        }
        same.push(a == b && !unreadable);
    }
    Some(same)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_keeps_its_units_only_where_nothing_but_unreadable_files_changed() {
        let inputs = |files: serde_json::Value, n_folds: u32| serde_json::json!({"dataset": {"name": "d"}, "n_folds": n_folds, "files": files});
        let a = serde_json::json!({"path": "a.root", "size": 1});
        let b = serde_json::json!({"path": "b.root", "unreadable": true});
        let b_now = serde_json::json!({"path": "b.root", "size": 2});
        let old = inputs(serde_json::json!([a, b]), 5);
        // The unreadable file reads now: the other is kept.
        assert_eq!(
            same_but_unreadable_files(&old, &inputs(serde_json::json!([a, b_now]), 5)),
            Some(vec![true, false])
        );
        // Still unreadable: the same.
        assert_eq!(
            same_but_unreadable_files(&old, &old),
            Some(vec![true, false])
        );
        // A readable file changed, a file added, or anything else: nothing is kept.
        let a_changed = serde_json::json!({"path": "a.root", "size": 3});
        for new in [
            inputs(serde_json::json!([a_changed, b]), 5),
            inputs(serde_json::json!([a, b, a]), 5),
            inputs(serde_json::json!([a, b]), 4),
        ] {
            assert_eq!(same_but_unreadable_files(&old, &new), None, "{new}");
        }
    }

    #[test]
    fn a_stop_request_ends_a_build_without_a_manifest_and_a_rerun_finishes_it() {
        let path = gnn4c_testkit::shared("data/real/uproot-HZZ.root");
        let cfg: DatasetConfig = serde_yaml::from_str(&format!(
            "{{name: hzz, tree: events, schema: hzz, classes: [a, b], samples: [{{name: a, files: ['{0}'], label: 0, entry_stop: 300}}, {{name: b, files: ['{0}'], label: 1, entry_start: 300, entry_stop: 600}}]}}",
            path.display()
        ))
        .expect("config");
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = dir.path().join("cache");
        let build = CacheBuild {
            threads: 1,
            ..CacheBuild::default()
        };
        build.stop.request();
        let mut out = Vec::new();
        let e = ensure_cache(
            &mut out,
            &cfg,
            &cache,
            CacheMode::Auto,
            &Folds::default(),
            &build,
        )
        .expect_err("stopped");
        let stopped = e.downcast_ref::<crate::Stopped>().expect("a Stopped error");
        assert!(
            stopped.0.contains("0 of 2 input files are done")
                && stopped.0.contains("run the command again"),
            "{stopped}"
        );
        assert!(
            read_manifest(&cache).is_err(),
            "no manifest for a stopped build"
        );
        let m = ensure_cache(
            &mut out,
            &cfg,
            &cache,
            CacheMode::Auto,
            &Folds::default(),
            &CacheBuild::default(),
        )
        .expect("the rerun finishes the build");
        assert_eq!(m.samples.len(), 2);
        assert!(m.events() > 0);
    }
}
