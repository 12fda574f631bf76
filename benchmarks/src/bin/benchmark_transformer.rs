//! The ROOT-Transformer on the CPU: inference and a training step per batch of demo events.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_transformer -- [BATCH] [REPS]
//! [--events demo|busy|DATA.yaml] [--dump-batch FILE.npz]`. The default model (d 64, 4 heads,
//! 4 layers, pair bias; docs/root-transformer.md), 12 outputs, on BATCH (default 512) events of
//! the same batch `benchmark_training` uses: the forward without autodiff, and a training step
//! (forward, weighted loss, backward, Adam step). `--dump-batch` writes the batch for the PyTorch
//! reference (`python benchmarks/reference/root_transformer.py --time FILE.npz REPS`), so both
//! time the same events. Medians of REPS (default 10) after 2 warm-up runs; peak RSS at the end.

use std::io::Write;

use burn::backend::{Autodiff, Flex};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use gnn4c_benchmarks::{Events, Meta, Stats, machine, time_reps, write_peak_rss};
use gnn4c_graphs::HostBatch;
use gnn4c_root_transformer::{FlatGraphs, RootTransformer, RootTransformerConfig, TokenBatch};
use gnn4c_run::device::DeviceChoice;
use gnn4c_tasks::{Task, per_event_loss, weighted_loss};

/// The graphs of `h` as padded tokens.
fn tokens_of(h: &HostBatch) -> TokenBatch {
    let index = |v: &[i64]| -> Vec<usize> { v.iter().map(|&i| i as usize).collect() };
    let n_nodes: Vec<usize> = h.n_nodes.iter().map(|&n| n as usize).collect();
    let (src, dst) = (index(&h.edge_src), index(&h.edge_dst));
    let graphs = FlatGraphs {
        node_features: &h.node_features,
        n_nodes: &n_nodes,
        edge_src: &src,
        edge_dst: &dst,
        edge_features: &h.edge_features,
        globals: &h.global_features,
    };
    TokenBatch::from_graphs(graphs, 7, 2, 3)
}

fn main() -> anyhow::Result<()> {
    gnn4c_benchmarks::help_and_exit_if_asked(
        "benchmark_transformer [BATCH] [REPS] [--events demo|busy|DATA.yaml] [--dump-batch FILE.npz]",
    );
    gnn4c_benchmarks::setup_like_the_cli();
    let mut rest: Vec<String> = std::env::args().skip(1).collect();
    let events = Events::take(&mut rest)?;
    let dump = gnn4c_benchmarks::take_dump_batch(&mut rest)?;
    let positional = rest;
    let batch: usize = positional.first().map_or(Ok(512), |a| a.parse())?;
    let reps: usize = positional.get(1).map_or(Ok(10), |a| a.parse())?;
    let host = events.batch(batch, machine().1)?;
    if let Some(path) = &dump {
        gnn4c_benchmarks::dump_batch(&host, path)?;
    }
    let tokens = tokens_of(&host);
    let mut meta = Meta::new("benchmark_transformer", DeviceChoice::Cpu);
    meta.events = Some(events.describe());
    let task = Task::Multiclass { n_classes: 12 };
    let config = RootTransformerConfig::new(12);
    let device = Default::default();

    Flex::seed(&device, 1);
    let model: RootTransformer<Flex> = config.init(&device);
    let forward = time_reps(2, reps, || {
        let logits = model.forward(&tokens, &device);
        std::hint::black_box(logits.into_data());
    });

    type AD = Autodiff<Flex>;
    let mut model: RootTransformer<AD> = config.init(&device);
    let mut optim = AdamConfig::new()
        .with_epsilon(1e-8)
        .init::<AD, RootTransformer<AD>>();
    let labels: Vec<i64> = host.labels.iter().map(|l| l % 12).collect();
    let step = time_reps(2, reps, || {
        let logits = model.forward(&tokens, &device);
        let y = Tensor::<AD, 1, Int>::from_data(TensorData::new(labels.clone(), [batch]), &device);
        let w = Tensor::<AD, 1>::from_data(TensorData::new(host.weights.clone(), [batch]), &device);
        let loss = weighted_loss(per_event_loss(&task, logits, y, None), w);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-4, model.clone(), grads);
    });

    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "{batch} events ({}), padded to {} tokens; default ROOT-Transformer, 12 outputs; medians of {reps}",
        events.describe(),
        tokens.n_tokens
    )?;
    writeln!(out, "| measure | median s | events/s |")?;
    writeln!(out, "|---|---|---|")?;
    for (name, times) in [("inference (forward)", &forward), ("training step", &step)] {
        let s = Stats::of(times);
        meta.emit(serde_json::json!({
            "measure": name, "median_s": s.median, "min_s": s.min, "max_s": s.max,
            "reps": s.n, "events_per_s": batch as f64 / s.median, "batch": batch,
        }));
        writeln!(
            out,
            "| {name} | {:.4} | {:.0} |",
            s.median,
            batch as f64 / s.median
        )?;
    }
    write_peak_rss(&mut out)?;
    Ok(())
}
