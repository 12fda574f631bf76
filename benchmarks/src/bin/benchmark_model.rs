//! Edge_Network forward and forward + backward on CPU (burn-flex), per batch of demo events.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_model -- [BATCH] [REPS]`
//! Batches of BATCH (default 512) graphs of the demo pretraining data (seed 42), contract-default
//! model (H 64, L 4, T 4, 12 outputs). Forward runs on the inner backend (no autodiff); the
//! training pass is forward + mean logit² + backward on Autodiff<Flex>. Setup (first batch) is
//! reported apart from the steady state.

use std::io::Write;

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use gnn4c_benchmarks::{Stats, machine, time_reps};
use gnn4c_data::{
    EntryRange, PRETRAIN_PROCESSES, SampleMeta, SchemaSpec, read_file_events, write_demo,
};
use gnn4c_events::Label;
use gnn4c_features::{EventFeatures, SelectionConfig, build_features};
use gnn4c_graphs::{GraphSample, Padding, TopologyCache, build_graph, collate};
use gnn4c_root_gnn::EdgeNetworkConfig;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let batch: usize = args.next().map_or(Ok(512), |a| a.parse())?;
    let reps: usize = args.next().map_or(Ok(10), |a| a.parse())?;
    let (cpu, cores) = machine();
    let tmp = tempfile::tempdir()?;
    let files = write_demo(
        tmp.path(),
        batch.div_ceil(PRETRAIN_PROCESSES.len()) * 2,
        42,
        cores,
    )?;
    let spec = SchemaSpec::builtin("vector").expect("built-in");
    let selection = SelectionConfig::default();
    let mut topo = TopologyCache::new(selection.max_nodes());
    let mut feats = EventFeatures::default();
    let mut graphs: Vec<GraphSample> = Vec::new();
    for f in files.iter().take(PRETRAIN_PROCESSES.len()) {
        let meta = SampleMeta {
            name: f.sample.into(),
            label: Label::Class(f.label),
            weight_branch: None,
            scale: 1.0,
        };
        let range = EntryRange {
            entry_start: 0,
            entry_stop: u64::MAX,
            step_size: 10_000,
        };
        read_file_events(&f.path, "output", &spec, &meta, range, &mut |evs| {
            for ev in evs {
                if build_features(ev, &selection, &mut feats).is_ok() {
                    graphs.push(build_graph(
                        &feats,
                        ev.id.clone(),
                        ev.label.clone(),
                        ev.weight,
                        &mut topo,
                    ));
                }
            }
            Ok(())
        })?;
    }
    // Interleave processes so the batch mixes them, then take BATCH graphs.
    graphs.sort_by_key(|g| (g.id.entry, g.id.sample.clone()));
    let refs: Vec<&GraphSample> = graphs.iter().take(batch).collect();
    let host = collate(&refs, Padding::None).map_err(anyhow::Error::msg)?;
    let (n_nodes, n_edges) = (host.total_nodes(), host.total_edges());

    let device = Default::default();
    type B = Flex;
    type AD = Autodiff<Flex>;
    let model = EdgeNetworkConfig::new(12).init::<B>(&device);
    let params = model.num_params();
    let gb = host.to_device::<B>(&device);
    let t0 = std::time::Instant::now();
    let _ = model.forward(&gb).into_data();
    let first_forward = t0.elapsed().as_secs_f64();
    let fwd = time_reps(2, reps, || {
        let _ = model.forward(&gb).into_data();
    });
    let model_ad = EdgeNetworkConfig::new(12).init::<AD>(&device);
    let gb_ad = host.to_device::<AD>(&device);
    let train = time_reps(2, reps, || {
        let loss = model_ad.forward(&gb_ad).powf_scalar(2.0).mean();
        let grads = loss.backward();
        std::hint::black_box(grads);
    });
    let to_device = time_reps(2, reps, || {
        let _ = host.to_device::<B>(&device);
    });

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "machine: {cpu}, {cores} logical cores; burn 0.21.0 flex (f32); batch {batch} demo graphs: {n_nodes} nodes, {n_edges} edges; {params} parameters"
    )?;
    writeln!(out, "first forward (setup): {first_forward:.4} s")?;
    writeln!(
        out,
        "| measure | median s | min s | max s | events/s (median) |"
    )?;
    writeln!(out, "|---|---|---|---|---|")?;
    for (name, secs) in [
        ("to_device", &to_device),
        ("forward (no autodiff)", &fwd),
        ("forward + backward", &train),
    ] {
        let s = Stats::of(secs);
        writeln!(
            out,
            "| {name} | {:.4} | {:.4} | {:.4} | {:.0} |",
            s.median,
            s.min,
            s.max,
            batch as f64 / s.median
        )?;
        eprintln!(
            "{}",
            serde_json::json!({"benchmark": "model", "measure": name, "batch": batch, "nodes": n_nodes, "edges": n_edges,
                "params": params, "median_s": s.median, "min_s": s.min, "max_s": s.max, "std_s": s.std, "reps": s.n,
                "events_per_s": batch as f64 / s.median, "backend": "flex", "dtype": "f32", "cpu": cpu, "cores": cores})
        );
    }
    Ok(())
}
