//! Features + graphs throughput on HZZ-like events (contract §2–§4), one thread.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_features -- [N_EVENTS] [REPS]`
//! The 2,421 events of `$GNN4C_SHARED/data/real/uproot-HZZ.root` are read once and cycled to
//! N_EVENTS (default 1,000,000); reading is not timed. Reports events/s and heap bytes allocated
//! per event (a counting global allocator), for features alone and features + graphs.
#![allow(unsafe_code)] // the counting allocator below: GlobalAlloc is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use gnn4c_benchmarks::{Stats, machine, read_events, time_reps};
use gnn4c_events::EventSample;
use gnn4c_features::{EventFeatures, SelectionConfig, build_features};
use gnn4c_graphs::{TopologyCache, build_graph};

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
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let reps: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let shared =
        std::env::var_os("GNN4C_SHARED").map_or_else(|| PathBuf::from("../shared"), PathBuf::from);
    let file = shared.join("data/real/uproot-HZZ.root");
    let base = read_events(&file, "events", "hzz", "hzz", 0)?;
    let events: Vec<&EventSample> = base.iter().cycle().take(n).collect();
    let selection = SelectionConfig::default();
    let (cpu, cores) = machine();

    let mut rows = Vec::new();
    let mut measure = |name: &str, f: &mut dyn FnMut() -> usize| {
        let before = ALLOCATED.load(Ordering::Relaxed);
        let mut kept = 0;
        let secs = time_reps(1, reps, || kept = f());
        let bytes = (ALLOCATED.load(Ordering::Relaxed) - before) as f64 / ((reps + 1) * n) as f64;
        let s = Stats::of(&secs);
        eprintln!(
            "{}",
            serde_json::json!({
                "benchmark": "features", "measure": name, "events": n, "kept": kept, "threads": 1,
                "median_s": s.median, "min_s": s.min, "max_s": s.max, "std_s": s.std, "reps": s.n,
                "events_per_s": n as f64 / s.median, "alloc_bytes_per_event": bytes,
                "cpu": cpu, "cores": cores,
                "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            })
        );
        rows.push((name.to_owned(), s, bytes));
    };

    let mut feats = EventFeatures::default();
    measure("features", &mut || {
        events
            .iter()
            .filter(|ev| build_features(ev, &selection, &mut feats).is_ok())
            .count()
    });
    let mut cache = TopologyCache::new(selection.max_nodes());
    measure("features_and_graphs", &mut || {
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
    writeln!(
        out,
        "machine: {cpu}, {cores} logical cores; {n} HZZ events (2,421 cycled), 1 thread"
    )?;
    writeln!(
        out,
        "| measure | median s | min s | max s | events/s (median) | heap bytes/event |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|")?;
    for (name, s, bytes) in rows {
        writeln!(
            out,
            "| {name} | {:.3} | {:.3} | {:.3} | {:.0} | {bytes:.0} |",
            s.median,
            s.min,
            s.max,
            n as f64 / s.median
        )?;
    }
    Ok(())
}
