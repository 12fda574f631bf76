//! Training steps per second: forward + weighted loss, backward, Adam step, per batch of demo events.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_train -- [BATCH] [REPS] [--device cpu|cuda[:N]]`
//! (`--features cuda` for CUDA). Three set-ups, each on the same BATCH (default 512) demo graphs
//! (seed 42), contract-default model: multiclass pretraining (12 outputs, everything trained),
//! binary fine-tuning with a frozen backbone (65 trainable parameters) and with the full
//! backbone. Each step is split into forward + loss, backward and optimiser step, with the
//! device synchronised around each part (which costs a little on CUDA; the total is also timed
//! unsplit). Peak RSS is the process's VmHWM after all three. `--dump-batch FILE.npz` also
//! writes the batch for the PyTorch reference (`benchmarks/reference/train_torch.py`), so both
//! time the same graphs.

use std::io::Write;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_benchmarks::{Stats, demo_batch, machine, take_device};
use gnn4c_cli::device::{DeviceChoice, check_device};
use gnn4c_graphs::HostBatch;
use gnn4c_root_gnn::{EdgeNetwork, EdgeNetworkConfig};
use gnn4c_tasks::{Task, per_event_loss, weighted_loss};

struct Split {
    forward: Vec<f64>,
    backward: Vec<f64>,
    step: Vec<f64>,
    total: Vec<f64>,
}

fn run_setup<B: AutodiffBackend>(
    device: &B::Device,
    task: Task,
    frozen: bool,
    host: &HostBatch,
    reps: usize,
) -> anyhow::Result<Split> {
    let sync = || B::sync(device).map_err(|e| anyhow::anyhow!("device sync failed: {e:?}"));
    B::seed(device, 1);
    let mut model: EdgeNetwork<B> = EdgeNetworkConfig::new(task.n_out()).init(device);
    if frozen {
        model = model.freeze_backbone();
    }
    let mut optim = AdamConfig::new()
        .with_epsilon(1e-8)
        .init::<B, EdgeNetwork<B>>();
    let mut labels = host.labels.clone();
    if task == Task::Binary {
        labels.iter_mut().for_each(|l| *l %= 2);
    }
    let n = host.n_graphs();
    let mut split = Split {
        forward: Vec::new(),
        backward: Vec::new(),
        step: Vec::new(),
        total: Vec::new(),
    };
    for rep in 0..reps + 2 {
        let t0 = Instant::now();
        let batch = host.to_device::<B>(device);
        let y = Tensor::<B, 1, Int>::from_data(TensorData::new(labels.clone(), [n]), device);
        let logits = model.forward(&batch);
        let loss = weighted_loss(
            per_event_loss(&task, logits, y, None),
            batch.weights.clone(),
        );
        sync()?;
        let t1 = Instant::now();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        sync()?;
        let t2 = Instant::now();
        model = optim.step(1e-4, model, grads);
        sync()?;
        let t3 = Instant::now();
        if rep >= 2 {
            split.forward.push((t1 - t0).as_secs_f64());
            split.backward.push((t2 - t1).as_secs_f64());
            split.step.push((t3 - t2).as_secs_f64());
        }
    }
    // The same steps without the intermediate synchronisations.
    for rep in 0..reps + 1 {
        let t0 = Instant::now();
        let batch = host.to_device::<B>(device);
        let y = Tensor::<B, 1, Int>::from_data(TensorData::new(labels.clone(), [n]), device);
        let loss = weighted_loss(
            per_event_loss(&task, model.forward(&batch), y, None),
            batch.weights.clone(),
        );
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-4, model, grads);
        sync()?;
        if rep >= 1 {
            split.total.push(t0.elapsed().as_secs_f64());
        }
    }
    Ok(split)
}

/// The batch as NPZ arrays (the names of the fixtures' `model_inputs.npz`, plus labels and weights).
fn dump_batch(h: &HostBatch, path: &std::path::Path) -> anyhow::Result<()> {
    use ndarray::{Array1, Array2};
    let f = std::fs::File::create(path)?;
    let mut z = ndarray_npy::NpzWriter::new(f);
    let n = h.n_graphs();
    z.add_array(
        "node_features",
        &Array2::from_shape_vec((h.total_nodes(), 7), h.node_features.clone())?,
    )?;
    z.add_array(
        "edge_features",
        &Array2::from_shape_vec((h.total_edges(), 3), h.edge_features.clone())?,
    )?;
    z.add_array(
        "global_features",
        &Array2::from_shape_vec((n, 2), h.global_features.clone())?,
    )?;
    z.add_array("edge_src", &Array1::from_vec(h.edge_src.clone()))?;
    z.add_array("edge_dst", &Array1::from_vec(h.edge_dst.clone()))?;
    z.add_array(
        "n_nodes",
        &Array1::from_iter(h.n_nodes.iter().map(|&x| i64::from(x))),
    )?;
    z.add_array("labels", &Array1::from_vec(h.labels.clone()))?;
    z.add_array("weights", &Array1::from_vec(h.weights.clone()))?;
    z.finish()?;
    Ok(())
}

fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn bench<B: AutodiffBackend>(
    device: &B::Device,
    name: &str,
    host: &HostBatch,
    reps: usize,
) -> anyhow::Result<()> {
    let (cpu, cores) = machine();
    let batch = host.n_real;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "machine: {cpu}, {cores} logical cores; burn 0.21.0 {name} (f32); batch {batch} demo graphs: {} nodes, {} edges; Adam (eps 1e-8)",
        host.total_nodes(),
        host.total_edges()
    )?;
    writeln!(
        out,
        "| set-up | steps/s | events/s | step median s | forward+loss s | backward s | optimiser s | optimiser share |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|")?;
    for (setup, task, frozen) in [
        (
            "pretrain multiclass (12), full",
            Task::Multiclass { n_classes: 12 },
            false,
        ),
        ("finetune binary, frozen backbone", Task::Binary, true),
        ("finetune binary, full", Task::Binary, false),
    ] {
        let s = run_setup::<B>(device, task, frozen, host, reps)?;
        let (f, b, o, t) = (
            Stats::of(&s.forward),
            Stats::of(&s.backward),
            Stats::of(&s.step),
            Stats::of(&s.total),
        );
        let share = o.median / (f.median + b.median + o.median);
        writeln!(
            out,
            "| {setup} | {:.2} | {:.0} | {:.4} | {:.4} | {:.4} | {:.4} | {:.1} % |",
            1.0 / t.median,
            batch as f64 / t.median,
            t.median,
            f.median,
            b.median,
            o.median,
            100.0 * share
        )?;
        eprintln!(
            "{}",
            serde_json::json!({"benchmark": "train", "setup": setup, "batch": batch, "backend": name,
                "steps_per_s": 1.0 / t.median, "events_per_s": batch as f64 / t.median,
                "step_median_s": t.median, "step_min_s": t.min, "step_max_s": t.max,
                "forward_loss_median_s": f.median, "backward_median_s": b.median,
                "optimizer_median_s": o.median, "optimizer_share": share, "reps": t.n,
                "cpu": cpu, "cores": cores})
        );
    }
    if let Some(mb) = peak_rss_mb() {
        writeln!(out, "peak RSS (VmHWM): {mb:.0} MB")?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut rest: Vec<String> = std::env::args().skip(1).collect();
    let device = take_device(&mut rest)?;
    let mut positional = Vec::new();
    let mut dump: Option<std::path::PathBuf> = None;
    let mut args = rest.into_iter();
    while let Some(a) = args.next() {
        if a == "--dump-batch" {
            dump = args.next().map(Into::into);
        } else {
            positional.push(a);
        }
    }
    let batch: usize = positional.first().map_or(Ok(512), |a| a.parse())?;
    let reps: usize = positional.get(1).map_or(Ok(10), |a| a.parse())?;
    check_device(device).map_err(anyhow::Error::msg)?;
    let host = demo_batch(batch, machine().1)?;
    if let Some(path) = &dump {
        dump_batch(&host, path)?;
    }
    match device {
        DeviceChoice::Cpu => {
            bench::<Autodiff<burn::backend::Flex>>(&Default::default(), "flex", &host, reps)
        }
        #[cfg(feature = "cuda")]
        DeviceChoice::Cuda(i) => bench::<Autodiff<burn::backend::Cuda>>(
            &burn::backend::cuda::CudaDevice::new(i),
            "cuda",
            &host,
            reps,
        ),
        #[cfg(not(feature = "cuda"))]
        DeviceChoice::Cuda(_) => unreachable!("check_device refuses CUDA without the cuda feature"),
    }
}
