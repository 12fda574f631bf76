//! Cache and loader throughput: cold cache build, warm cache read, loader batches/s.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_dataloader -- [EVENTS_PER_PROCESS] [REPS]`
//! Demo pretraining data (12 processes, seed 42) in a temporary folder; batch size 512, CPU
//! backend (burn-flex) for the host-to-device step.
//!
//! `benchmark_dataloader --cache DIR`: one streamed epoch over the training split of an existing
//! cache (the trainer's loader at its defaults: shuffle buffer 32,768, 2 loader threads,
//! prefetch 2, batch 512), with the events/s and the process's peak RSS (VmHWM). Wall and process CPU time are both reported:
//! CPU ≪ wall means the stage waits on the filesystem (or on other processes on a shared machine).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use burn::backend::Flex;
use gnn4c_benchmarks::{Meta, Stats, cpu_seconds, machine};
use gnn4c_data::{
    DatasetConfig, Folds, LabelSpec, SampleConfig, SchemaRef, Split, read_cache, read_manifest,
    write_demo,
};
use gnn4c_family::EventSource;
use gnn4c_features::Standardization;
use gnn4c_root_gnn::{EdgeNetworkConfig, RootGnnFamily};
use gnn4c_run::CachedEvents;
use gnn4c_run::device::DeviceChoice;
use gnn4c_run::pipeline::build_cache;
use gnn4c_training::{Pass, TrainConfig, stream};

fn timed(reps: usize, mut f: impl FnMut()) -> (Vec<f64>, Vec<f64>) {
    f(); // warm-up
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (t, c) = (std::time::Instant::now(), cpu_seconds());
        f();
        wall.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c);
    }
    (wall, cpu)
}

/// One streamed epoch of `data` on `threads` loader threads; returns the batches.
/// The cache as the Edge_Network's loader reads it.
type GraphStream = CachedEvents<RootGnnFamily>;

fn epoch(data: &Arc<GraphStream>, pass: Pass, threads: usize, prefetch: usize) -> usize {
    let device = Default::default();
    let (_, loader) = stream(data, pass, threads, prefetch, |d: &GraphStream, ev, n| {
        Ok((d.batch(ev)?, n))
    });
    let mut n = 0;
    for item in loader {
        let (b, _) = item.expect("batch");
        std::hint::black_box(b.input.to_device::<Flex>(&device));
        n += 1;
    }
    n
}

/// The trainer's loader over an existing cache's training split, at the trainer's defaults.
fn stream_cache(dir: &Path) -> anyhow::Result<()> {
    let meta = Meta::new("benchmark_dataloader", DeviceChoice::Cpu);
    let defaults = TrainConfig::default();
    let (_, data) = GraphStream::open(
        dir,
        &Folds::default(),
        &[Split::Train],
        None,
        &EdgeNetworkConfig::new(12),
        // Declared `auto` features are read raw here: the loader's cost without their scaling.
        &Standardization::default(),
    )?;
    let pass = Pass {
        seed: defaults.seed,
        epoch: 0,
        shuffle: true,
        shuffle_buffer: defaults.shuffle_buffer,
        batch_size: defaults.batch_size,
        rank: 0,
        world: 1,
        skip_batches: 0,
    };
    let t = std::time::Instant::now();
    let batches = epoch(&data, pass, defaults.loader_threads, defaults.prefetch);
    let secs = t.elapsed().as_secs_f64();
    let rss = gnn4c_run::device::peak_rss_mb().unwrap_or(0.0);
    meta.emit(serde_json::json!({
        "measure": "streamed_epoch", "cache": dir.display().to_string(),
        "events": data.events(), "batches": batches, "wall_s": secs,
        "events_per_s": data.events() as f64 / secs, "peak_rss_mb": rss,
    }));
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "{}: {} training events, {batches} batches in {secs:.1} s ({:.0} events/s), peak RSS {:.0} MB",
        dir.display(),
        data.events(),
        data.events() as f64 / secs,
        rss
    )?;
    Ok(())
}

/// The event cache and the loader: a demo cache built, read and batched; or, with `--cache`, an
/// existing cache streamed.
#[derive(clap::Parser)]
#[command(after_help = gnn4c_benchmarks::DETAILS)]
struct Args {
    /// Demo events per process.
    #[arg(default_value_t = 20_000)]
    events_per_process: usize,
    /// Timed repetitions.
    #[arg(default_value_t = 3)]
    reps: usize,
    /// Stream this cache folder instead.
    #[arg(long, value_name = "DIR")]
    cache: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    if let Some(dir) = &args.cache {
        return stream_cache(dir);
    }
    let (n, reps) = (args.events_per_process, args.reps);
    let cores = machine().1;
    let meta = Meta::new("benchmark_dataloader", DeviceChoice::Cpu);
    let tmp = tempfile::tempdir()?;
    let files = write_demo(tmp.path(), n, 42, cores)?;
    let cfg = demo_dataset(&files, tmp.path());
    let events = n * cfg.samples.len();
    let folds = Folds::default();
    let dir = tmp.path().join("cache");
    let mut sink = std::io::sink();
    let mut rows: Vec<(String, Stats, Stats, f64)> = Vec::new();
    let mut report = |name: &str, wall: &[f64], cpu: &[f64], per: f64, unit: &str, bytes: u64| {
        let (w, c) = (Stats::of(wall), Stats::of(cpu));
        meta.emit(serde_json::json!({
            "measure": name, "mean_wall_s": w.mean, "median_wall_s": w.median,
            "median_cpu_s": c.median, "min_wall_s": w.min, "max_wall_s": w.max,
            "std_wall_s": w.std, "reps": w.n, unit: per / w.median,
            "mb_per_s": bytes as f64 / 1e6 / w.median,
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        }));
        rows.push((format!("{name} ({unit})"), w, c, per / w.median));
    };

    // Cold build: ROOT → features → zstd Parquet (one file at a time).
    let (wall, cpu) = timed(reps, || {
        build_cache(
            &mut sink,
            &cfg,
            &dir,
            &folds,
            &gnn4c_run::pipeline::CacheBuild {
                shard_events: 100_000,
                threads: 1,
                part: None,
                stop: Default::default(),
            },
            serde_json::json!({}),
            String::new(),
            Path::new("/"),
            gnn4c_run::pipeline::BuildFrom::Nothing,
        )
        .expect("build cache");
    });
    let manifest = read_manifest(&dir)?;
    let bytes: u64 = manifest.shards.iter().map(|s| s.bytes).sum();
    report(
        "cold_cache_build",
        &wall,
        &cpu,
        events as f64,
        "events_per_s",
        bytes,
    );

    // Warm read of the whole cache (page cache warm after the first run).
    let (wall, cpu) = timed(reps, || {
        std::hint::black_box(read_cache(&dir, &manifest, &|_| true).expect("read").len());
    });
    report(
        "warm_cache_read",
        &wall,
        &cpu,
        manifest.events() as f64,
        "events_per_s",
        bytes,
    );

    time_loaders(&dir, &folds, reps, &mut report)?;
    print_table(&meta, events, n, reps, &manifest, rows)
}

/// The demo's pretraining files in `dir` as a dataset read through the built-in `vector`
/// declaration.
fn demo_dataset(files: &[gnn4c_data::DemoFile], dir: &Path) -> DatasetConfig {
    DatasetConfig {
        name: "bench".into(),
        tree: Some("output".into()),
        schema: Some(SchemaRef::Builtin("vector".into())),
        inputs: None,
        source: None,
        classes: Vec::new(),
        step_size: 10_000,
        on_bad_file: Default::default(),
        samples: files
            .iter()
            .filter(|f| f.path.starts_with(dir.join("pretrain")))
            .map(|f| SampleConfig {
                name: f.sample.into(),
                files: vec![f.path.display().to_string()],
                files_from: None,
                tree: None,
                label: LabelSpec::Class(f.label),
                weight: None,
                scale: 1.0,
                entry_start: 0,
                entry_stop: None,
            })
            .collect(),
    }
}

/// Records one measure: its name, wall and CPU seconds per repetition, the work per
/// repetition and its unit, and the bytes read.
type Report<'r> = dyn FnMut(&str, &[f64], &[f64], f64, &str, u64) + 'r;

/// The loader at 1 and 2 threads × prefetch 1 and 4: the training split of the cache in `dir`
/// streamed block by block → graphs and collation (loader threads) → to_device (consumer).
fn time_loaders(
    dir: &Path,
    folds: &Folds,
    reps: usize,
    report: &mut Report<'_>,
) -> anyhow::Result<()> {
    let (_, data) = GraphStream::open(
        dir,
        folds,
        &[Split::Train],
        None,
        &EdgeNetworkConfig::new(12),
        // The demo's declaration has no `auto` features.
        &Standardization::default(),
    )?;
    for threads in [1, 2] {
        for prefetch in [1, 4] {
            let mut n_batches = 0;
            let pass = Pass {
                seed: 42,
                epoch: 0,
                shuffle: true,
                shuffle_buffer: TrainConfig::default().shuffle_buffer,
                batch_size: 512,
                rank: 0,
                world: 1,
                skip_batches: 0,
            };
            let (wall, cpu) = timed(reps, || n_batches = epoch(&data, pass, threads, prefetch));
            report(
                &format!("loader_t{threads}_p{prefetch}"),
                &wall,
                &cpu,
                n_batches as f64,
                "batches_per_s",
                0,
            );
        }
    }

    Ok(())
}

/// The table of the measures, with what they ran on.
fn print_table(
    meta: &Meta,
    events: usize,
    n: usize,
    reps: usize,
    manifest: &gnn4c_data::CacheManifest,
    rows: Vec<(String, Stats, Stats, f64)>,
) -> anyhow::Result<()> {
    let bytes: u64 = manifest.shards.iter().map(|s| s.bytes).sum();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "{events} demo events (12 processes x {n}); batch 512; medians of {reps} after 1 warm-up"
    )?;
    writeln!(
        out,
        "cache: {} events, {} shards, {:.1} MB zstd Parquet",
        manifest.events(),
        manifest.shards.len(),
        bytes as f64 / 1e6
    )?;
    writeln!(
        out,
        "| measure | median wall s | median CPU s | rate (median wall) |"
    )?;
    writeln!(out, "|---|---|---|---|")?;
    for (name, w, c, rate) in rows {
        writeln!(
            out,
            "| {name} | {:.3} | {:.3} | {rate:.0} |",
            w.median, c.median
        )?;
    }
    Ok(())
}
