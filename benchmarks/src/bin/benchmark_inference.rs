//! Inference throughput by batch size, split into stages, and the output writers.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_inference -- [N_EVENTS] [--device cpu|cuda[:N]] [--events demo|busy|DATA.yaml] [--op-by-op]`
//! (`--features cuda` for CUDA). Builds N_EVENTS (default 8,192) graphs of the chosen events
//! (default: the demo pretraining processes; `busy`: ttH/tttt-like multiplicity) in memory
//! (untimed), then for batch sizes 64, 256, 1024, 4096 and 16384 (those ≤ N_EVENTS) scores them all with the
//! contract-default 12-class model on the inner backend (no autodiff), timing per stage: host
//! collation (the loader's work, here on the calling thread), host-to-device transfer, forward
//! (synchronised), post-processing (logits read back, softmax in f64). Then the writers on the
//! same N events: the NPZ table and one ROOT friend tree of N entries. The forward is the one
//! `predict` runs (on the CPU: fused MLP blocks); `--op-by-op` runs Burn's operations one at a
//! time instead (the comparison of docs/performance.md).

use std::io::Write;
use std::time::Instant;

use burn::module::Module;
use gnn4c_benchmarks::{DeviceArg, EdgeNetworkKernel, EventsArg, Meta, machine};
use gnn4c_data::{FriendTree, PredictionTable, write_friend_tree, write_predictions_npz};
use gnn4c_graphs::{GraphSample, Padding, collate};
use gnn4c_root_gnn::EdgeNetworkConfig;
use gnn4c_run::backend::InferenceBackend;
use gnn4c_run::device::check_device;
use gnn4c_tasks::{Task, scores_host};

fn bench<B: InferenceBackend + EdgeNetworkKernel>(
    device: &B::Device,
    meta: &Meta,
    graphs: &[GraphSample],
    op_by_op: bool,
) -> anyhow::Result<()> {
    let sync = || B::sync(device).map_err(|e| anyhow::anyhow!("device sync failed: {e:?}"));
    let task = Task::Multiclass { n_classes: 12 };
    B::seed(device, 1);
    let model = EdgeNetworkConfig::new(12).init::<B>(device);
    // Burn initialises parameters lazily, and a clone taken before then draws its own: load the
    // drawn values so that both forwards below run the same weights.
    let model = model.clone().load_record(model.into_record());
    let scorer = model.clone().with_kernel(B::kernel());
    let n = graphs.len();
    let (nodes, edges) = gnn4c_benchmarks::multiplicity(graphs);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "{n} graphs ({nodes:.1} nodes, {edges:.1} edges per event); 12-class model, inference mode ({}); each row is the second of two passes",
        if op_by_op {
            "Burn's operations one at a time"
        } else {
            "as predict runs it"
        }
    )?;
    writeln!(
        out,
        "| batch | events/s | collate s | to_device s | forward s | post-process s | total s |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    // One pass over every graph in batches of `batch`: stage times and the scores.
    let pass = |batch: usize| -> anyhow::Result<([f64; 5], Vec<f64>)> {
        let mut t = [0.0f64; 5];
        let mut scores = Vec::with_capacity(n * 12);
        let start = Instant::now();
        for chunk in graphs.chunks(batch) {
            let t0 = Instant::now();
            let refs: Vec<&GraphSample> = chunk.iter().collect();
            let host = collate(&refs, Padding::None, gnn4c_reference::CONTRACT_WIDTHS)
                .map_err(anyhow::Error::msg)?;
            let t1 = Instant::now();
            let gb = host.to_device::<B>(device);
            sync()?;
            let t2 = Instant::now();
            let logits = if op_by_op {
                model.forward(&gb)
            } else {
                scorer.forward(&gb)
            };
            sync()?;
            let t3 = Instant::now();
            let v: Vec<f32> = logits.into_data().convert::<f32>().to_vec().expect("f32");
            scores.extend(scores_host(&task, &v));
            let t4 = Instant::now();
            t[0] += (t1 - t0).as_secs_f64();
            t[1] += (t2 - t1).as_secs_f64();
            t[2] += (t3 - t2).as_secs_f64();
            t[3] += (t4 - t3).as_secs_f64();
        }
        t[4] = start.elapsed().as_secs_f64();
        Ok((t, scores))
    };
    let mut last_scores = Vec::new();
    for batch in [64usize, 256, 1024, 4096, 16384]
        .into_iter()
        .filter(|&b| b <= n)
    {
        pass(batch)?; // warm-up: allocations, kernels
        let ([t_col, t_dev, t_fwd, t_post, total], scores) = pass(batch)?;
        last_scores = scores;
        writeln!(
            out,
            "| {batch} | {:.0} | {t_col:.4} | {t_dev:.4} | {t_fwd:.4} | {t_post:.4} | {total:.4} |",
            n as f64 / total
        )?;
        meta.emit(
            serde_json::json!({"measure": "scoring", "batch": batch, "events": n,
            "events_per_s": n as f64 / total, "collate_s": t_col, "to_device_s": t_dev,
            "forward_s": t_fwd, "post_s": t_post, "total_s": total}),
        );
    }

    time_writers(&mut out, meta, graphs, &last_scores)?;
    gnn4c_benchmarks::write_peak_rss(&mut out)?;
    Ok(())
}

/// The output writers on the events scored: the NPZ table and one ROOT friend tree.
fn time_writers(
    out: &mut impl Write,
    meta: &Meta,
    graphs: &[GraphSample],
    scores: &[f64],
) -> anyhow::Result<()> {
    let n = graphs.len();
    let dir = tempfile::tempdir()?;
    let table = PredictionTable {
        n_out: 12,
        scores: scores.iter().map(|&s| s as f32).collect(),
        logits: vec![0.0; n * 12],
        labels: graphs
            .iter()
            .map(|g| match &g.label {
                gnn4c_events::Label::Class(c) => i64::from(*c),
                gnn4c_events::Label::Multi(_) => -1,
            })
            .collect(),
        weights: graphs.iter().map(|g| g.weight).collect(),
        entry: graphs.iter().map(|g| g.id.entry).collect(),
        event_number: graphs.iter().map(|g| g.id.event_number).collect(),
        fold: graphs
            .iter()
            .map(|g| (g.id.event_number % 5) as u8)
            .collect(),
        sample_index: graphs.iter().map(|_| 0).collect(),
        samples: vec!["demo".into()],
    };
    let t = Instant::now();
    write_predictions_npz(&dir.path().join("p.npz"), &table, false)?;
    let npz_s = t.elapsed().as_secs_f64();
    let branches: Vec<String> = (0..12).map(|i| format!("score_{i}")).collect();
    let friend = FriendTree {
        path: dir.path().join("f.root"),
        tree: "output".into(),
        entries: n as u64,
        branches,
        scored: (0..n)
            .map(|i| (i as u64, table.scores[i * 12..(i + 1) * 12].to_vec()))
            .collect(),
    };
    let t = Instant::now();
    write_friend_tree(&friend, false)?;
    let root_s = t.elapsed().as_secs_f64();
    writeln!(
        out,
        "writers, {n} events × 12 scores: NPZ {npz_s:.4} s ({:.0} events/s), ROOT friend tree {root_s:.4} s ({:.0} events/s)",
        n as f64 / npz_s,
        n as f64 / root_s
    )?;
    meta.emit(
        serde_json::json!({"measure": "writers", "events": n, "npz_s": npz_s, "root_s": root_s}),
    );
    Ok(())
}

/// Inference throughput of the Edge_Network by batch size, split into stages, and the output
/// writers.
#[derive(clap::Parser)]
#[command(after_help = gnn4c_benchmarks::DETAILS)]
struct Args {
    /// Events scored (graphs built in memory, untimed).
    #[arg(default_value_t = 8192)]
    n_events: usize,
    #[command(flatten)]
    device: DeviceArg,
    #[command(flatten)]
    events: EventsArg,
    /// Burn's operations one at a time instead of the fused forward `predict` runs.
    #[arg(long)]
    op_by_op: bool,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    gnn4c_benchmarks::setup_like_the_cli();
    let (device, events, op_by_op, n) = (
        args.device.device,
        args.events.events,
        args.op_by_op,
        args.n_events,
    );
    check_device(device).map_err(anyhow::Error::msg)?;
    let graphs = events.graphs(n, machine().1)?;
    let mut meta = Meta::new("benchmark_inference", device);
    meta.events = Some(events.describe());
    gnn4c_run::on_backend!(device, |B, dev| bench::<B>(&dev, &meta, &graphs, op_by_op))
}
