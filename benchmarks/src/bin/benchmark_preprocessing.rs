//! Preprocessing stage by stage on real HZZ events (contract §2–§4), one thread: ROOT reading into
//! `EventSample`s, selection + node/global features, and features + graphs (topology, edge
//! features). Cache writing and reading are `benchmark_dataloader`'s.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_preprocessing -- [N_EVENTS] [REPS]`
//! ROOT reading: the whole of `$GNN4C_SHARED/data/real/uproot-HZZ.root` (2,421 events, the page
//! cache warm after the warm-up). Features and graphs: those events read once and cycled to
//! N_EVENTS (default 1,000,000). Reports events/s and heap bytes allocated per event (a
//! counting global allocator).
#![allow(unsafe_code)] // the counting allocator below: GlobalAlloc is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use gnn4c_benchmarks::{Meta, Stats, read_events, time_reps};
use gnn4c_events::EventSample;
use gnn4c_features::{EventFeatures, SelectionConfig, build_features};
use gnn4c_graphs::{TopologyCache, build_graph};
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

fn main() -> anyhow::Result<()> {
    gnn4c_benchmarks::help_and_exit_if_asked("benchmark_preprocessing [N_EVENTS] [REPS]");
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let reps: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let shared =
        std::env::var_os("GNN4C_SHARED").map_or_else(|| PathBuf::from("../shared"), PathBuf::from);
    let file = shared.join("data/real/uproot-HZZ.root");
    let base = read_events(&file, "events", "hzz", "hzz", 0)?;
    let events: Vec<&EventSample> = base.iter().cycle().take(n).collect();
    let selection = SelectionConfig::default();
    let mut meta = Meta::new("benchmark_preprocessing", DeviceChoice::Cpu);
    meta.threads = 1;

    let mut rows = Vec::new();
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
        "read_root (oxyroot → EventSample)",
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

    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "uproot-HZZ.root: {} events; features and graphs on them cycled to {n}; {reps} repetitions after 1 warm-up",
        base.len()
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
