//! A cache's build: each input file's entries read through the declaration, a chunk at a time,
//! into event records and the files' shards, on several threads ([`build_cache`]), and the
//! report of what a cache holds.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use gnn4c_data::{
    CACHE_SCHEMA_VERSION, CONTRACT_VERSION, CacheBuilder, CacheManifest, DatasetConfig, EntryRange,
    EventRecord, FeatureNames, Folds, OnBadFile, SampleCounts, SkippedFile, fold_of, open_tree,
};
use gnn4c_features::{ChunkFeatures, Inputs};
use gnn4c_training::{StopFlag, progress_wanted};

use crate::entry_progress::EntryProgress;

/// The cached form of entry `i` of a chunk, kept by the declaration: its features and the raw
/// η/φ of its nodes (and their pt and mass where a declared pair feature needs them).
pub fn to_record(
    features: &ChunkFeatures,
    i: usize,
    id: gnn4c_events::EventId,
    label: &gnn4c_events::Label,
    weight: f32,
    n_folds: u32,
) -> EventRecord {
    let nodes = features.nodes(i);
    let (pt, mass) = features.momenta_of(i);
    EventRecord {
        fold: fold_of(id.event_number, n_folds),
        n_nodes: nodes.len() as u16,
        id,
        label: label.clone(),
        weight,
        node_features: features.node_features_of(i).to_vec(),
        eta: features.eta[nodes.clone()].to_vec(),
        phi: features.phi[nodes].to_vec(),
        pt: pt.to_vec(),
        mass: mass.to_vec(),
        global_features: features.global_features_of(i).to_vec(),
    }
}

/// Where a cache build starts.
pub enum BuildFrom {
    /// From nothing.
    Nothing,
    /// From an interrupted build of the same inputs, if any, and these units of the cache in
    /// place (read before from the same files), by the unit each becomes.
    Keeping(BTreeMap<u32, gnn4c_data::UnitDone>),
}

/// How a cache is built: events per shard, the threads that read input files, and which part
/// of the input files this process takes.
#[derive(Debug, Clone)]
pub struct CacheBuild {
    /// Events per Parquet shard (of one fold of one input file).
    pub shard_events: usize,
    /// Threads that read input files: files at once, and with fewer files than threads the
    /// rest decompress inside each file; the cache does not depend on it.
    pub threads: usize,
    /// `Some((k, n))`: only input files `k, k + n, k + 2n, …` (counted from 0 in config order),
    /// and no manifest: one of `n` processes (MPI ranks, array tasks) sharing the work.
    pub part: Option<(u32, u32)>,
    /// A stop request ends the build between chunks of an input file, keeping the files done.
    pub stop: StopFlag,
}

impl CacheBuild {
    /// The default build, ended early by `stop`.
    pub fn stopped_by(stop: &StopFlag) -> CacheBuild {
        CacheBuild {
            stop: stop.clone(),
            ..CacheBuild::default()
        }
    }
}

impl Default for CacheBuild {
    fn default() -> Self {
        CacheBuild {
            shard_events: 100_000,
            threads: std::thread::available_parallelism().map_or(1, usize::from),
            part: None,
            stop: StopFlag::new(),
        }
    }
}

/// What reading an input file did: entries read and events not kept, by reason.
#[derive(Default)]
struct FileCounts {
    entries_read: u64,
    skipped: BTreeMap<String, u64>,
}

/// Where reading an input file hands its events: each kept event's record, and after each
/// chunk its entries (false: stop reading, a stop was asked for).
struct EventSink<'a> {
    record: &'a mut dyn FnMut(EventRecord) -> Result<(), gnn4c_data::DataError>,
    chunk_done: &'a mut dyn FnMut(u64) -> bool,
}

/// Reads `range` of one input file of a sample into records, a chunk at a time (memory holds
/// one chunk's): the declaration's inputs read column-wise, then its selection and features
/// ([`Inputs::build_chunk`]). A read that `sink.chunk_done` stops ends with `Ok` and the counts
/// so far.
fn file_events(
    cfg: &DatasetConfig,
    plan: &gnn4c_data::SamplePlan,
    inputs: &Inputs,
    path: &Path,
    range: EntryRange,
    n_folds: u32,
    sink: &mut EventSink<'_>,
) -> Result<FileCounts, gnn4c_data::DataError> {
    let mut features = ChunkFeatures::default();
    let mut skipped = BTreeMap::new();
    let mut stopped = false;
    let source_file: Arc<Path> = Arc::from(path);
    let tree: Arc<str> = Arc::from(plan.tree.as_str());
    let read = gnn4c_data::read_file_inputs(
        path,
        &plan.tree,
        inputs,
        &plan.meta,
        range,
        &cfg.source_prefix(),
        &mut |chunk| {
            inputs.build_chunk(&chunk.inputs, &mut features);
            for (i, kept) in features.kept.iter().enumerate() {
                match kept {
                    Ok(()) => {
                        let id = gnn4c_data::entry_id(&plan.meta, &source_file, &tree, chunk, i);
                        let record = to_record(
                            &features,
                            i,
                            id,
                            &plan.meta.label,
                            chunk.weights[i],
                            n_folds,
                        );
                        (sink.record)(record)?;
                    }
                    Err(skip) => {
                        *skipped
                            .entry(inputs.skip_name(*skip).into_owned())
                            .or_default() += 1;
                    }
                }
            }
            if !(sink.chunk_done)(chunk.inputs.n_entries as u64) {
                // Ends the read; not an error (the caller sees its stop flag).
                stopped = true;
                return Err(gnn4c_data::DataError::Config("stopped".into()));
            }
            Ok(())
        },
    );
    let entries_read = match read {
        Ok(n) => n,
        Err(_) if stopped => 0,
        Err(e) => return Err(e),
    };
    Ok(FileCounts {
        entries_read,
        skipped,
    })
}

/// Reads every sample and writes a new cache (manifest last), or with `build.part` only that
/// part's input files (then `None`).
///
/// Each input file is a unit of the build ([`CacheBuilder`]): units finished by an earlier,
/// interrupted run or by other parts are kept (and, `from` [`BuildFrom::Keeping`], units of the
/// cache in place), the rest are read, `build.threads` files at a
/// time, each by one thread that also encodes and writes its shards. A unit's files depend only
/// on its input, so the cache is the same for any thread count or split into parts; memory holds,
/// per thread, a piece of at most 50,000 entries' records and the file's shards being filled.
#[allow(clippy::too_many_arguments)] // two call sites; a struct would only rename these
pub fn build_cache(
    out: &mut dyn Write,
    cfg: &DatasetConfig,
    dir: &Path,
    folds: &Folds,
    build: &CacheBuild,
    inputs: serde_json::Value,
    fingerprint: String,
    base: &Path,
    from: BuildFrom,
) -> anyhow::Result<Option<CacheManifest>> {
    let start = Instant::now();
    let declaration = cfg.inputs()?;
    let (fresh, kept) = match from {
        BuildFrom::Nothing => (true, BTreeMap::new()),
        BuildFrom::Keeping(units) => (false, units),
    };
    let builder = CacheBuilder::open(dir, &fingerprint, build.shard_events, fresh)?
        .with_auto(gnn4c_features::AutoColumns::of(&declaration.spec));
    for (&unit, done) in &kept {
        builder.adopt_unit(dir, unit, done)?;
    }
    let plans = cfg
        .samples
        .iter()
        .map(|s| {
            cfg.sample_plan(s, base)
                .with_context(|| format!("preprocessing sample '{}'", s.name))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // One unit per (sample, file), in config order.
    let units: Vec<(usize, &Path)> = plans
        .iter()
        .enumerate()
        .flat_map(|(k, p)| p.files.iter().map(move |f| (k, f.as_path())))
        .collect();
    let n_units = u32::try_from(units.len()).context("too many input files")?;
    // Each unit's entries as the fingerprint read them (not there: the file is opened again).
    let entries: Vec<Option<u64>> = units
        .iter()
        .enumerate()
        .map(|(u, (_, path))| {
            let file = &inputs["files"][u];
            let same = file["path"].as_str() == Some(path.display().to_string().as_str());
            file["entries"].as_u64().filter(|_| same)
        })
        .collect();
    let job = BuildJob {
        cfg,
        plans: &plans,
        units: &units,
        entries: &entries,
        declaration: &declaration,
        builder: &builder,
        folds,
        build,
    };
    let todo = job.units_to_read(out)?;
    let pieces = job.pieces(&todo)?;
    let cached_now = job.read(&pieces)?;
    if let Some((k, n)) = build.part {
        writeln!(
            out,
            "part {k}/{n}: {} input files read in {:.2} s into {}; when every part is done, run \
             `gnn4colliders preprocess` without --part: it writes the manifest",
            todo.len(),
            start.elapsed().as_secs_f64(),
            builder.dir().display()
        )?;
        return Ok(None);
    }
    let manifest = CacheManifest {
        schema_version: CACHE_SCHEMA_VERSION,
        contract_version: CONTRACT_VERSION.to_owned(),
        fingerprint,
        fingerprint_inputs: inputs,
        n_folds: folds.n_folds,
        features: FeatureNames::of(&declaration.spec),
        shards: Vec::new(),
        samples: cfg
            .samples
            .iter()
            .map(|s| (s.name.clone(), SampleCounts::default()))
            .collect(),
        skipped_files: Vec::new(),
        written_by: format!("gnn4colliders {}", env!("CARGO_PKG_VERSION")),
    };
    let manifest = builder.finish(n_units, manifest)?;
    report_cache(
        out,
        dir,
        &manifest,
        folds,
        cached_now,
        start.elapsed().as_secs_f64(),
    )?;
    Ok(Some(manifest))
}

/// A cache build's inputs: the dataset, its input files as units (sample, file) in config
/// order, and where the shards go.
struct BuildJob<'a> {
    cfg: &'a DatasetConfig,
    plans: &'a [gnn4c_data::SamplePlan],
    units: &'a [(usize, &'a Path)],
    /// Each unit's entries, where the fingerprint read them.
    entries: &'a [Option<u64>],
    declaration: &'a Inputs,
    builder: &'a CacheBuilder,
    folds: &'a Folds,
    build: &'a CacheBuild,
}

impl BuildJob<'_> {
    /// The units this process reads: its part's, less those done before (said on `out`).
    fn units_to_read(&self, out: &mut dyn Write) -> anyhow::Result<Vec<u32>> {
        let n_units = self.units.len() as u32;
        let done = self.builder.done()?;
        let mine = |u: u32| self.build.part.is_none_or(|(k, n)| u % n == k);
        let todo = (0..n_units)
            .filter(|u| mine(*u) && !done.contains_key(u))
            .collect();
        let kept = (0..n_units).filter(|u| done.contains_key(u)).count();
        if kept > 0 {
            writeln!(
                out,
                "continuing the build in {}: {kept} of {n_units} input files already done",
                self.builder.dir().display()
            )?;
        }
        Ok(todo)
    }

    /// Each unit of `todo` with the entries of it to read (read a chunk at a time, so memory
    /// holds a chunk's records per thread whatever the files' sizes); a file the fingerprint
    /// could not read is opened again, and skipped here when it still does not open and the
    /// dataset skips bad files.
    fn pieces(&self, todo: &[u32]) -> anyhow::Result<Vec<(u32, EntryRange)>> {
        let mut pieces = Vec::with_capacity(todo.len());
        for &u in todo {
            let (k, f) = self.units[u as usize];
            let p = &self.plans[k];
            let known = self.entries.get(u as usize).copied().flatten();
            let entries = match known.map_or_else(|| open_tree(f, &p.tree).map(|t| t.entries()), Ok)
            {
                Ok(entries) => entries,
                Err(e) => {
                    self.skip_or_fail(u, e.into())?;
                    continue;
                }
            };
            let stop = p.range.entry_stop.min(entries);
            let range = EntryRange {
                entry_start: p.range.entry_start.min(stop),
                entry_stop: stop,
                ..p.range
            };
            pieces.push((u, range));
        }
        Ok(pieces)
    }

    /// Reads the units of `pieces`: `threads` threads each take the next file not yet taken,
    /// read it and encode and write its shards themselves, so reading and writing both run in
    /// parallel; a unit's files do not depend on which thread wrote them. Returns the events
    /// cached. A failing file stops the others from starting; the first in config order is
    /// reported, and the work of the others is kept; so is it on a stop request.
    fn read(&self, pieces: &[(u32, EntryRange)]) -> anyhow::Result<u64> {
        let total = pieces
            .iter()
            .map(|(_, r)| r.entry_stop - r.entry_start)
            .sum();
        let progress = std::sync::Mutex::new(EntryProgress::with_total(
            progress_wanted(),
            total,
            "preprocessing",
        ));
        let failed = std::sync::atomic::AtomicBool::new(false);
        let stop = &self.build.stop;
        let threads = self.build.threads.clamp(1, pieces.len().max(1));
        // The threads left over when there are fewer files than threads read and decompress
        // inside each file.
        let per_file = (self.build.threads / threads).max(1);
        // After a failure or a stop request, the pieces not started are left (`None`).
        let jobs: Vec<(usize, (u32, EntryRange))> = pieces.iter().copied().enumerate().collect();
        let outcomes = gnn4c_rootio::map_on_threads(jobs, threads, |(i, (u, range))| {
            if failed.load(std::sync::atomic::Ordering::Relaxed) || stop.is_requested() {
                return None;
            }
            // The remote file a thread takes next opened meanwhile, in the background (while
            // the process keeps open both the files being read and those opened ahead).
            let ahead = pieces
                .get(i + threads)
                .filter(|_| 2 * threads <= gnn4c_rootio::REMOTE_FILES_KEPT);
            if let Some(&(next, _)) = ahead {
                let path = self.units[next as usize].1;
                if gnn4c_rootio::is_url(path) {
                    gnn4c_rootio::open_ahead(&path.to_string_lossy());
                }
            }
            let outcome = self
                .read_unit(u, range, per_file, &progress)
                .or_else(|e| self.skip_or_fail(u, e).map(|()| 0));
            if outcome.is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Some(outcome)
        });
        if stop.is_requested() {
            let done = self.builder.done()?.len();
            return Err(crate::Stopped(format!(
                "preprocessing stopped on request: {done} of {} input files are done in {}; \
                 run the command again to continue the build",
                self.units.len(),
                self.builder.dir().display()
            ))
            .into());
        }
        let mut cached = 0u64;
        for outcome in outcomes.into_iter().flatten() {
            cached += outcome?;
        }
        progress
            .into_inner()
            .map_err(|_| anyhow::anyhow!("a preprocessing thread failed"))?
            .finish();
        Ok(cached)
    }

    /// A unit whose file could not be read (`error`): marked skipped when the dataset skips
    /// bad files (and a stop request is not what ended it), else the error, naming the sample.
    fn skip_or_fail(&self, u: u32, error: anyhow::Error) -> anyhow::Result<()> {
        let (k, path) = self.units[u as usize];
        let sample = &self.cfg.samples[k].name;
        if self.cfg.on_bad_file != OnBadFile::Skip || self.build.stop.is_requested() {
            return Err(error.context(format!("preprocessing sample '{sample}'")));
        }
        self.builder.skip_unit(
            u,
            SkippedFile {
                sample: sample.clone(),
                file: path.display().to_string(),
                error: format!("{error:#}"),
            },
        )?;
        Ok(())
    }

    /// Reads `range` of unit `u` a chunk at a time into its shards, on `threads` threads; the
    /// events cached. A stop request leaves the unit unfinished (a rerun reads this file again).
    fn read_unit(
        &self,
        u: u32,
        range: EntryRange,
        threads: usize,
        progress: &std::sync::Mutex<EntryProgress>,
    ) -> anyhow::Result<u64> {
        let (k, path) = self.units[u as usize];
        let name = &self.cfg.samples[k].name;
        let mut writer = self.builder.unit(u)?;
        let stop = &self.build.stop;
        if stop.is_requested() {
            return Ok(0);
        }
        let mut counts = SampleCounts::default();
        let cached = &mut counts.cached;
        let file = file_events(
            self.cfg,
            &self.plans[k],
            self.declaration,
            path,
            EntryRange { threads, ..range },
            self.folds.n_folds,
            &mut EventSink {
                record: &mut |r| {
                    *cached += 1;
                    writer.push(r)
                },
                chunk_done: &mut |entries| {
                    if let Ok(mut p) = progress.lock() {
                        p.advance(entries);
                    }
                    !stop.is_requested()
                },
            },
        )?;
        if stop.is_requested() {
            return Ok(0);
        }
        counts.read += file.entries_read;
        for (reason, n) in file.skipped {
            *counts.skipped.entry(reason).or_default() += n;
        }
        let cached = counts.cached;
        writer.finish(name, counts)?;
        Ok(cached)
    }
}

/// The summary lines of a finished cache.
pub(crate) fn report_cache(
    out: &mut dyn Write,
    dir: &Path,
    manifest: &CacheManifest,
    folds: &Folds,
    cached_now: u64,
    secs: f64,
) -> anyhow::Result<()> {
    let bytes: u64 = manifest.shards.iter().map(|s| s.bytes).sum();
    let rate = cached_now as f64 / secs;
    let this_run = if cached_now == manifest.events() {
        format!("{rate:.0} events/s")
    } else {
        format!("{cached_now} of them by this run, {rate:.0} events/s")
    };
    writeln!(
        out,
        "cache {}: {} events in {} shards, {:.1} MB, {secs:.2} s ({this_run})",
        dir.display(),
        manifest.events(),
        manifest.shards.len(),
        bytes as f64 / 1e6,
    )?;
    writeln!(
        out,
        "  {:<14} {:>9} {:>9}  skipped",
        "sample", "read", "cached"
    )?;
    for (name, c) in &manifest.samples {
        let skipped: Vec<String> = c.skipped.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        let skipped = if skipped.is_empty() {
            "none".to_owned()
        } else {
            skipped.join(", ")
        };
        writeln!(out, "  {name:<14} {:>9} {:>9}  {skipped}", c.read, c.cached)?;
    }
    let mut per_fold = vec![0u64; folds.n_folds as usize];
    for s in &manifest.shards {
        per_fold[usize::from(s.fold)] += s.events;
    }
    let folds_text: Vec<String> = per_fold
        .iter()
        .enumerate()
        .map(|(f, n)| format!("{f}: {n}"))
        .collect();
    writeln!(out, "  events per fold: {}", folds_text.join(", "))?;
    report_skipped_files(out, manifest)
}

/// The input files a cache left out, each with why (nothing when none were).
pub(crate) fn report_skipped_files(
    out: &mut dyn Write,
    manifest: &CacheManifest,
) -> anyhow::Result<()> {
    if manifest.skipped_files.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {} input files could not be read and were left out (on_bad_file: skip; \
         `preprocess` reads them again):",
        manifest.skipped_files.len()
    )?;
    for s in &manifest.skipped_files {
        writeln!(out, "    {} (sample '{}'): {}", s.file, s.sample, s.error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use gnn4c_data::{CachedSplit, SampleMeta};
    use gnn4c_events::Label;
    use gnn4c_features::{PairFeature, SelectionConfig};
    use gnn4c_graphs::{GraphSample, TopologyCache};
    use gnn4c_reference::{EventFeatures, builtin_schema, graph_of_event, read_file_events};

    #[test]
    fn cached_events_give_bitwise_the_graphs_built_from_the_events() {
        // HZZ events through the built-in declaration and the event-level cache (Parquet
        // written and read back), and through the contract's code (EventSample →
        // build_features → build_graph): the same graphs, features bit for bit.
        let spec = builtin_schema("hzz").expect("built-in");
        let meta = SampleMeta {
            name: "hzz".into(),
            label: Label::Class(1),
            weight_branch: None,
            scale: 1.0,
        };
        let range = EntryRange {
            entry_start: 0,
            entry_stop: 600,
            step_size: 256,
            threads: 0,
        };
        let mut events = Vec::new();
        let path = gnn4c_testkit::shared("data/real/uproot-HZZ.root");
        read_file_events(&path, "events", &spec, &meta, range, &mut |evs| {
            events.extend_from_slice(evs);
            Ok(())
        })
        .expect("read");
        let selection = SelectionConfig::default();
        let (mut features, mut topo) = (
            EventFeatures::default(),
            TopologyCache::new(selection.max_nodes()),
        );
        let cfg: DatasetConfig = serde_yaml::from_str(&format!(
            "{{name: hzz, tree: events, schema: hzz, step_size: 256, samples: [{{name: hzz, files: ['{}'], label: 1, entry_stop: 600}}]}}",
            path.display()
        ))
        .expect("config");
        let plan = cfg
            .sample_plan(&cfg.samples[0], Path::new("/"))
            .expect("plan");
        let mut records = Vec::new();
        let mut sink = EventSink {
            record: &mut |r| {
                records.push(r);
                Ok(())
            },
            chunk_done: &mut |_| true,
        };
        file_events(
            &cfg,
            &plan,
            &cfg.inputs().expect("inputs"),
            &path,
            range,
            5,
            &mut sink,
        )
        .expect("declared read");
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("cache");
        let mut built = Vec::new();
        for ev in &events {
            if let Ok(g) = graph_of_event(ev, &selection, &mut features, &mut topo) {
                built.push(g);
            }
        }
        assert_eq!(records.len(), built.len());
        let manifest = write_one_unit(&target, records, events.len(), built.len());
        // Read back the way the loader reads: block by block.
        let split = CachedSplit::open(&target, &manifest, &|_| true, None).expect("open");
        let cached: Vec<GraphSample> = (0..split.block_sizes().len())
            .flat_map(|b| split.read_block(b).expect("block"))
            .map(|r| {
                let widths = gnn4c_family::InputWidths {
                    d_node: 7,
                    d_global: 2,
                    d_pair: 3,
                };
                crate::cached_events::graph_of_record(r, widths, &PairFeature::ALL, &mut topo)
                    .expect("graph")
            })
            .collect();
        assert!(built.len() > 500, "{} graphs", built.len());
        // The cache keeps each fold's events together, in input order.
        built.sort_by_key(|g| fold_of(g.id.event_number, 5));
        assert_eq!(cached.len(), built.len());
        for (c, b) in cached.iter().zip(&built) {
            assert_eq!(c, b, "entry {}", b.id.entry);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&c.edge_features), bits(&b.edge_features));
            assert_eq!(bits(&c.node_features), bits(&b.node_features));
        }
    }

    /// `records` as a one-unit cache in `target`, counted as `read` events of which `cached`
    /// kept; its manifest.
    fn write_one_unit(
        target: &Path,
        records: Vec<EventRecord>,
        read: usize,
        cached: usize,
    ) -> CacheManifest {
        let builder = CacheBuilder::open(target, "", 100, true).expect("builder");
        let mut writer = builder.unit(0).expect("unit");
        for r in records {
            writer.push(r).expect("push");
        }
        let counts = SampleCounts {
            read: read as u64,
            cached: cached as u64,
            ..SampleCounts::default()
        };
        writer.finish("hzz", counts).expect("unit");
        let manifest = CacheManifest {
            schema_version: CACHE_SCHEMA_VERSION,
            contract_version: CONTRACT_VERSION.to_owned(),
            fingerprint: String::new(),
            fingerprint_inputs: serde_json::Value::Null,
            n_folds: 5,
            features: FeatureNames::default(),
            shards: Vec::new(),
            samples: BTreeMap::new(),
            skipped_files: Vec::new(),
            written_by: "test".into(),
        };
        builder.finish(1, manifest).expect("finish")
    }
}
