//! Preprocessing stage by stage on real HZZ events (contract §2–§4), one thread: the product's
//! path (the `hzz` declaration read column-wise: `read_file_inputs` → `Inputs::build_chunk`)
//! beside the contract's reference path (ROOT reading into `EventSample`s, then
//! `build_features`), both from the file; then selection + node/global features and features +
//! graphs (topology, edge features) on events in memory. Cache writing and reading are
//! `benchmark_dataloader`'s.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_preprocessing -- [N_EVENTS] [REPS]`
//! ROOT reading: the whole of `$GNN4C_SHARED/data/real/uproot-HZZ.root` (2,421 events, the page
//! cache warm after the warm-up). Features and graphs: those events read once and cycled to
//! N_EVENTS (default 1,000,000). Reports events/s and heap bytes allocated per event (a
//! counting global allocator).
#![allow(unsafe_code)] // the counting allocator below: GlobalAlloc is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use gnn4c_benchmarks::{Meta, Stats, read_events, time_reps};
use gnn4c_events::EventSample;
use gnn4c_features::SelectionConfig;
use gnn4c_graphs::TopologyCache;
use gnn4c_reference::{EventFeatures, build_features, build_graph};
use gnn4c_run::device::DeviceChoice;

struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The product's path from `file` to cached features: the built-in `hzz` declaration read
/// column-wise and evaluated chunk by chunk; returns the events kept.
fn declared_features(
    file: &std::path::Path,
) -> anyhow::Result<impl FnMut() -> anyhow::Result<usize>> {
    let spec = gnn4c_data::builtin_inputs("hzz").ok_or_else(|| anyhow::anyhow!("no hzz"))??;
    let inputs = gnn4c_features::Inputs::new(&spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    let meta = gnn4c_data::SampleMeta {
        name: "hzz".into(),
        label: gnn4c_events::Label::Class(0),
        weight_branch: None,
        scale: 1.0,
    };
    let range = gnn4c_data::EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        step_size: 10_000,
        threads: 0,
    };
    let file = file.to_owned();
    let mut features = gnn4c_features::ChunkFeatures::default();
    Ok(move || {
        let mut kept = 0;
        gnn4c_data::read_file_inputs(&file, "events", &inputs, &meta, range, "", &mut |chunk| {
            inputs.build_chunk(&chunk.inputs, &mut features);
            kept += features.kept.iter().filter(|k| k.is_ok()).count();
            Ok(())
        })?;
        Ok(kept)
    })
}

/// From a ROOT file to the cached features: the declared path beside the contract's reference,
/// alternated, and each stage alone (one thread).
#[derive(clap::Parser)]
#[command(after_help = gnn4c_benchmarks::DETAILS)]
struct Args {
    /// Events (the real HZZ file's, repeated).
    #[arg(default_value_t = 1_000_000)]
    n_events: usize,
    /// Timed repetitions.
    #[arg(default_value_t = 5)]
    reps: usize,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let (n, reps) = (args.n_events, args.reps);
    let shared =
        std::env::var_os("GNN4C_SHARED").map_or_else(|| PathBuf::from("../shared"), PathBuf::from);
    let file = shared.join("data/real/uproot-HZZ.root");
    let base = read_events(&file, "events", "hzz", "hzz", 0)?;
    let events: Vec<&EventSample> = base.iter().cycle().take(n).collect();
    let selection = SelectionConfig::default();
    let mut meta = Meta::new("benchmark_preprocessing", DeviceChoice::Cpu);
    meta.threads = 1;

    let mut rows = Vec::new();
    alternated(&file, reps, base.len(), &meta, &mut rows)?;
    let mut measure = |name: &str, n: usize, f: &mut dyn FnMut() -> usize| {
        let before = ALLOCATED.load(Ordering::Relaxed);
        let mut kept = 0;
        let secs = time_reps(1, reps, || kept = f());
        let bytes = (ALLOCATED.load(Ordering::Relaxed) - before) as f64 / ((reps + 1) * n) as f64;
        let s = Stats::of(&secs);
        meta.emit(serde_json::json!({
            "measure": name, "events": n, "kept": kept,
            "mean_s": s.mean, "median_s": s.median, "min_s": s.min, "max_s": s.max,
            "std_s": s.std, "reps": s.n, "events_per_s": n as f64 / s.median,
            "alloc_bytes_per_event": bytes,
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        }));
        rows.push((name.to_owned(), n, s, bytes));
    };

    measure(
        "read_root (our reader → EventSample)",
        base.len(),
        &mut || read_events(&file, "events", "hzz", "hzz", 0).map_or(0, |evs| evs.len()),
    );

    let mut feats = EventFeatures::default();
    measure("features", n, &mut || {
        events
            .iter()
            .filter(|ev| build_features(ev, &selection, &mut feats).is_ok())
            .count()
    });
    let mut cache = TopologyCache::new(selection.max_nodes());
    measure("features_and_graphs", n, &mut || {
        let mut kept = 0;
        for ev in &events {
            if build_features(ev, &selection, &mut feats).is_ok() {
                let g = build_graph(
                    &feats,
                    ev.id.clone(),
                    ev.label.clone(),
                    ev.weight,
                    &mut cache,
                );
                kept += usize::from(std::hint::black_box(g).n_nodes() > 0);
            }
        }
        kept
    });

    print_table(&meta, base.len(), n, reps, rows)
}

/// The two ways from the file to the cached features, the declared (the product's) and
/// `EventSample` + `build_features` (the reference), alternated rep by rep in one run: both
/// must keep the same events.
fn alternated(
    file: &Path,
    reps: usize,
    file_events: usize,
    meta: &Meta,
    rows: &mut Vec<(String, usize, Stats, f64)>,
) -> anyhow::Result<()> {
    let selection = SelectionConfig::default();
    let mut declared = declared_features(file)?;
    let mut reference_feats = EventFeatures::default();
    let mut reference = || {
        read_events(file, "events", "hzz", "hzz", 0).map_or(0, |evs| {
            evs.iter()
                .filter(|ev| build_features(ev, &selection, &mut reference_feats).is_ok())
                .count()
        })
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut kept_a, mut kept_b) = (0, 0);
    let before = ALLOCATED.load(Ordering::Relaxed);
    for rep in 0..=reps {
        let t = std::time::Instant::now();
        kept_a = declared()?;
        let ta = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        kept_b = reference();
        let tb = t.elapsed().as_secs_f64();
        if rep > 0 {
            a.push(ta);
            b.push(tb);
        }
    }
    anyhow::ensure!(
        kept_a == kept_b,
        "the declared path kept {kept_a} events, the reference {kept_b}"
    );
    let bytes =
        (ALLOCATED.load(Ordering::Relaxed) - before) as f64 / ((reps + 1) * 2 * file_events) as f64;
    for (name, secs) in [
        ("file → features, declared (product path)", a),
        (
            "file → features, EventSample + build_features (reference)",
            b,
        ),
    ] {
        let s = Stats::of(&secs);
        meta.emit(serde_json::json!({
            "measure": name, "events": file_events, "kept": kept_a,
            "mean_s": s.mean, "median_s": s.median, "min_s": s.min, "max_s": s.max,
            "std_s": s.std, "reps": s.n, "events_per_s": file_events as f64 / s.median,
            "alloc_bytes_per_event_both_paths": bytes,
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        }));
        rows.push((name.to_owned(), file_events, s, bytes));
    }
    Ok(())
}

/// The table of the measures.
fn print_table(
    meta: &Meta,
    file_events: usize,
    n: usize,
    reps: usize,
    rows: Vec<(String, usize, Stats, f64)>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "uproot-HZZ.root: {} events; features and graphs on them cycled to {n}; {reps} repetitions after 1 warm-up",
        file_events
    )?;
    writeln!(
        out,
        "| measure | events | mean s | median s | min s | max s | std s | events/s (median) | heap bytes/event |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|")?;
    for (name, n, s, bytes) in rows {
        writeln!(
            out,
            "| {name} | {n} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.0} | {bytes:.0} |",
            s.mean,
            s.median,
            s.min,
            s.max,
            s.std,
            n as f64 / s.median
        )?;
    }
    Ok(())
}
