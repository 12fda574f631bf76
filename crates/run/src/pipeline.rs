//! Preprocessing: a dataset's cache made ready — used as it is when its fingerprint matches,
//! finished or rebuilt otherwise ([`preprocess`], [`ensure_cache`]); the build itself is
//! `cache_build.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use gnn4c_data::{
    CACHE_SCHEMA_VERSION, CONTRACT_VERSION, CacheManifest, DatasetConfig, Folds, OnBadFile,
    UnitDone, file_identity, fingerprint_of, first_difference, open_tree, read_manifest,
    verify_cache,
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
    // Units of the cache in place whose input files did not change, kept as they are.
    let mut kept = BTreeMap::new();
    if mode != CacheMode::Rebuild && dir.exists() {
        // A cache whose inputs match is only up to date if every shard is intact.
        let found = read_manifest(dir).and_then(|m| {
            if m.fingerprint == fingerprint {
                verify_cache(dir, &m)?;
            }
            Ok(m)
        });
        let up_to_date = |m: &CacheManifest| {
            m.fingerprint == fingerprint && (m.skipped_files.is_empty() || mode != CacheMode::Auto)
        };
        match found {
            Ok(m) if up_to_date(&m) => {
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
                let what = first_difference(&m.fingerprint_inputs, &inputs);
                if mode == CacheMode::ReadOnly {
                    bail!(
                        "cache {} is stale ({}) and cache mode is read_only: rebuild it with --mode rebuild",
                        dir.display(),
                        what.unwrap_or_else(|| "the fingerprint".into())
                    );
                }
                if build.part.is_none() {
                    kept = unchanged_units(cfg, dir, &base, &m, &inputs)?;
                }
                let keeping = if kept.is_empty() {
                    String::new()
                } else {
                    format!(" (the other {} input files' shards are kept)", kept.len())
                };
                match what {
                    // Only the files it could not read: they are tried again.
                    None => writeln!(
                        out,
                        "cache {} left out {} input files it could not read: reading them again{keeping}",
                        dir.display(),
                        m.skipped_files.len(),
                    )?,
                    Some(what) => writeln!(
                        out,
                        "cache {} is stale ({what}): rebuilding{keeping}",
                        dir.display()
                    )?,
                }
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

/// The units of the cache in `dir` (its manifest `m`) a build of `inputs` takes as they are
/// ([`reusable_units`]), those whose shards are intact.
fn unchanged_units(
    cfg: &DatasetConfig,
    dir: &Path,
    base: &Path,
    m: &CacheManifest,
    inputs: &serde_json::Value,
) -> anyhow::Result<BTreeMap<u32, UnitDone>> {
    let reusable = reusable_units(
        &m.fingerprint_inputs,
        inputs,
        &gnn4c_data::finished_units(dir)?,
        &unit_samples(cfg, base)?,
    );
    Ok(gnn4c_data::intact_units(dir, reusable))
}

/// The sample of every input file, in unit order (as the fingerprint lists the files).
fn unit_samples(cfg: &DatasetConfig, base: &Path) -> anyhow::Result<Vec<String>> {
    let mut samples = Vec::new();
    for s in &cfg.samples {
        let n = cfg.sample_files(s, base)?.len();
        samples.extend(std::iter::repeat_n(s.name.clone(), n));
    }
    Ok(samples)
}

/// The units of a cache built from `old` inputs that a build from `new` inputs takes as they
/// are, by the unit each becomes: the same input file (path, size, version, entries) read for a
/// sample of the same name and settings, where everything else the cache depends on (the
/// declaration, the folds, the dataset's settings besides its samples' files) is the same. A
/// file the old cache could not read is read again; so is every file when anything else
/// changed. `samples`: the sample of each of `new`'s files.
fn reusable_units(
    old: &serde_json::Value,
    new: &serde_json::Value,
    units: &BTreeMap<u32, UnitDone>,
    samples: &[String],
) -> BTreeMap<u32, UnitDone> {
    let mut kept = BTreeMap::new();
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return kept;
    };
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    let others_equal = keys
        .into_iter()
        .filter(|k| !matches!(k.as_str(), "files" | "dataset"))
        .all(|k| o.get(k) == n.get(k));
    let (od, nd) = (
        dataset_settings(&o["dataset"]),
        dataset_settings(&n["dataset"]),
    );
    let (Some(old_files), Some(new_files)) = (o["files"].as_array(), n["files"].as_array()) else {
        return kept;
    };
    if !others_equal || od.0 != nd.0 {
        return kept;
    }
    let mut taken = BTreeSet::new();
    for (j, (file, sample)) in new_files.iter().zip(samples).enumerate() {
        let same_sample =
            nd.1.get(sample)
                .is_some_and(|s| od.1.get(sample) == Some(s));
        if file.get("unreadable").is_some() || !same_sample {
            continue;
        }
        let found = units.iter().find(|(i, d)| {
            !taken.contains(*i) && d.sample == *sample && old_files.get(**i as usize) == Some(file)
        });
        if let Some((&i, done)) = found {
            taken.insert(i);
            kept.insert(j as u32, done.clone());
        }
    }
    kept
}

/// A dataset's settings as the fingerprint holds them, split: everything but its samples, and
/// each sample's settings but its files, by name.
fn dataset_settings(
    dataset: &serde_json::Value,
) -> (serde_json::Value, BTreeMap<String, serde_json::Value>) {
    let mut rest = dataset.clone();
    let samples = rest
        .as_object_mut()
        .and_then(|d| d.remove("samples"))
        .and_then(|s| s.as_array().cloned())
        .unwrap_or_default();
    let by_name = samples
        .into_iter()
        .filter_map(|mut s| {
            let settings = s.as_object_mut()?;
            settings.remove("files");
            settings.remove("files_from");
            Some((settings.get("name")?.as_str()?.to_owned(), s))
        })
        .collect();
    (rest, by_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_keeps_the_units_of_the_files_that_did_not_change() {
        let sample = |name: &str, files: &[&str], label: u32| serde_json::json!({"name": name, "files": files, "label": label});
        let inputs = |samples: serde_json::Value, files: serde_json::Value, n_folds: u32| serde_json::json!({"dataset": {"name": "d", "samples": samples}, "n_folds": n_folds, "files": files});
        let unit = |unit: u32, sample: &str| UnitDone {
            fingerprint: "old".into(),
            unit,
            sample: sample.into(),
            counts: gnn4c_data::SampleCounts::default(),
            shards: Vec::new(),
            skipped: None,
        };
        let (a, b, c) = (
            serde_json::json!({"path": "a.root", "size": 1}),
            serde_json::json!({"path": "b.root", "unreadable": true}),
            serde_json::json!({"path": "c.root", "size": 3}),
        );
        // Sample s: a, b (unreadable then); sample t: c.
        let old = inputs(
            serde_json::json!([
                sample("s", &["a.root", "b.root"], 0),
                sample("t", &["c.root"], 1)
            ]),
            serde_json::json!([a, b, c]),
            5,
        );
        let units: BTreeMap<u32, UnitDone> = [(0, unit(0, "s")), (2, unit(2, "t"))].into();
        let samples = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let kept = |new: &serde_json::Value, of: &[&str]| {
            reusable_units(&old, new, &units, &samples(of))
                .into_iter()
                .map(|(j, d)| (j, d.unit))
                .collect::<Vec<_>>()
        };
        // The unreadable file reads now: the others are kept where they are.
        let b_now = serde_json::json!({"path": "b.root", "size": 2});
        let same_samples = serde_json::json!([
            sample("s", &["a.root", "b.root"], 0),
            sample("t", &["c.root"], 1)
        ]);
        let new = inputs(same_samples.clone(), serde_json::json!([a, b_now, c]), 5);
        assert_eq!(kept(&new, &["s", "s", "t"]), [(0, 0), (2, 2)]);
        // A file added to s, before the others: they are kept under their new units.
        let d = serde_json::json!({"path": "d.root", "size": 4});
        let new = inputs(
            serde_json::json!([
                sample("s", &["d.root", "a.root", "b.root"], 0),
                sample("t", &["c.root"], 1)
            ]),
            serde_json::json!([d, a, b_now, c]),
            5,
        );
        assert_eq!(kept(&new, &["s", "s", "s", "t"]), [(1, 0), (3, 2)]);
        // A file that changed, or moved to another sample, is read again.
        let a_changed = serde_json::json!({"path": "a.root", "size": 9});
        let new = inputs(
            same_samples.clone(),
            serde_json::json!([a_changed, b_now, c]),
            5,
        );
        assert_eq!(kept(&new, &["s", "s", "t"]), [(2, 2)]);
        let new = inputs(
            serde_json::json!([
                sample("s", &["b.root"], 0),
                sample("t", &["a.root", "c.root"], 1)
            ]),
            serde_json::json!([b_now, a, c]),
            5,
        );
        assert_eq!(kept(&new, &["s", "t", "t"]), [(2, 2)]);
        // A sample's settings changed: its files are read again; anything else: every file.
        let new = inputs(
            serde_json::json!([
                sample("s", &["a.root", "b.root"], 7),
                sample("t", &["c.root"], 1)
            ]),
            serde_json::json!([a, b_now, c]),
            5,
        );
        assert_eq!(kept(&new, &["s", "s", "t"]), [(2, 2)]);
        let new = inputs(same_samples, serde_json::json!([a, b_now, c]), 4);
        assert_eq!(kept(&new, &["s", "s", "t"]), []);
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
