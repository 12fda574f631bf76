//! Training steps per second: forward + weighted loss, backward, Adam step, per batch of demo events.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_training -- [BATCH] [REPS] [--device cpu|cuda[:N]]`
//! (`--features cuda` for CUDA). Three set-ups, each on the same BATCH (default 512) demo graphs
//! (seed 42), contract-default model: multiclass pretraining (12 outputs, everything trained),
//! binary fine-tuning with a frozen backbone (65 trainable parameters) and with the full
//! backbone. Each step is split into forward + loss, backward and optimiser step, with the
//! device synchronised around each part (which costs a little on CUDA; the total is also timed
//! unsplit). Setup (model initialisation and the first step, which on CUDA compiles kernels) is
//! reported apart from the steady state. The arithmetic rate of the step (the model's matrix
//! products, forward and both backward products) is compared with this machine's f32 GEMM rate
//! on the same backend. Peak RSS is the process's VmHWM after all three. `--dump-batch FILE.npz` also
//! writes the batch for the PyTorch reference (`benchmarks/reference/train_torch.py`), so both
//! time the same graphs.

use std::io::Write;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use gnn4c_benchmarks::{
    BatchArgs, DeviceArg, DumpArg, EdgeNetworkKernel, EventsArg, Meta, Stats, forward_matmul_flops,
    gemm_gflops, machine, matmul_gflops,
};
use gnn4c_graphs::HostBatch;
use gnn4c_root_gnn::{EdgeNetwork, EdgeNetworkConfig};
use gnn4c_run::backend::TrainingBackend;
use gnn4c_run::device::check_device;
use gnn4c_tasks::{Task, per_event_loss, weighted_loss};
use gnn4c_training::optimiser;

struct Split {
    setup: f64,
    forward: Vec<f64>,
    backward: Vec<f64>,
    step: Vec<f64>,
    total: Vec<f64>,
}

fn run_setup<B: TrainingBackend + EdgeNetworkKernel>(
    device: &B::Device,
    task: Task,
    frozen: bool,
    host: &HostBatch,
    reps: usize,
) -> anyhow::Result<Split> {
    let sync = || B::sync(device).map_err(|e| anyhow::anyhow!("device sync failed: {e:?}"));
    let t_setup = Instant::now();
    B::seed(device, 1);
    let mut model: EdgeNetwork<B> = EdgeNetworkConfig::new(task.n_out()).init(device);
    if frozen {
        model = model.freeze_backbone();
    }
    // The MLP blocks run as `train` runs them (fused on the CPU, forward and backward).
    let mut model = model.with_kernel(B::kernel());
    let mut optim =
        optimiser::<B, EdgeNetwork<B, <B as EdgeNetworkKernel>::Kernel>, _>(B::adam_kernel());
    let mut labels = host.labels.clone();
    if task == Task::Binary {
        labels.iter_mut().for_each(|l| *l %= 2);
    }
    let n = host.n_graphs();
    let mut split = Split {
        setup: 0.0,
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
        if rep == 0 {
            split.setup = (t3 - t_setup).as_secs_f64();
        }
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

fn bench<B: TrainingBackend + EdgeNetworkKernel>(
    device: &B::Device,
    meta: &Meta,
    host: &HostBatch,
    reps: usize,
) -> anyhow::Result<()> {
    let batch = host.n_real;
    let (nodes, edges) = (host.total_nodes(), host.total_edges());
    let gemm = gemm_gflops::<B::InnerBackend>(device, 1024, 10);
    let edge_gemm = matmul_gflops::<B::InnerBackend>(device, [edges, 64, 64], 20);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "batch {batch} graphs: {nodes} nodes, {edges} edges; Adam (eps 1e-8); medians of {reps} steps after 2 warm-ups; f32 GEMM on this backend: 1024³ {gemm:.1} GFLOP/s, per-edge layer [{edges}×64]·[64×64] {edge_gemm:.1} GFLOP/s"
    )?;
    writeln!(
        out,
        "| set-up | setup s | steps/s | events/s | step median s (min–max, std) | forward+loss s | backward s | optimiser s | GFLOP/s (% of GEMM) |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|")?;
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
        // Forward products, plus (when the backbone trains) the input- and weight-gradient
        // products of the backward: ≈ 3× the forward's.
        let forward_flops =
            forward_matmul_flops(nodes, edges, host.n_graphs(), task.n_out(), 64, 4, 4);
        let flops = if frozen {
            forward_flops
        } else {
            3.0 * forward_flops
        };
        let gflops = flops / t.median / 1e9;
        writeln!(
            out,
            "| {setup} | {:.3} | {:.2} | {:.0} | {:.4} ({:.4}–{:.4}, {:.4}) | {:.4} | {:.4} | {:.4} | {:.1} ({:.0} %) |",
            s.setup,
            1.0 / t.median,
            batch as f64 / t.median,
            t.median,
            t.min,
            t.max,
            t.std,
            f.median,
            b.median,
            o.median,
            gflops,
            100.0 * gflops / gemm
        )?;
        meta.emit(serde_json::json!({"setup": setup, "batch": batch, "nodes": nodes, "edges": edges,
            "setup_s": s.setup, "steps_per_s": 1.0 / t.median, "events_per_s": batch as f64 / t.median,
            "step_mean_s": t.mean, "step_median_s": t.median, "step_min_s": t.min,
            "step_max_s": t.max, "step_std_s": t.std, "reps": t.n,
            "forward_loss_median_s": f.median, "backward_median_s": b.median,
            "optimizer_median_s": o.median, "matmul_gflop_per_step": flops / 1e9,
            "gflops": gflops, "gemm_gflops": gemm, "gemm_fraction": gflops / gemm,
            "edge_gemm_gflops": edge_gemm}));
    }
    gnn4c_benchmarks::write_peak_rss(&mut out)?;
    Ok(())
}

/// Training steps per second of the Edge_Network: pretraining, frozen-backbone and full
/// fine-tuning steps on one batch, each split into forward + loss, backward and optimiser.
#[derive(clap::Parser)]
#[command(after_help = gnn4c_benchmarks::DETAILS)]
struct Args {
    #[command(flatten)]
    run: BatchArgs,
    #[command(flatten)]
    device: DeviceArg,
    #[command(flatten)]
    events: EventsArg,
    #[command(flatten)]
    dump: DumpArg,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    gnn4c_benchmarks::setup_like_the_cli();
    let (device, events, dump) = (args.device.device, args.events.events, args.dump.dump_batch);
    let (batch, reps) = (args.run.batch, args.run.reps);
    check_device(device).map_err(anyhow::Error::msg)?;
    let host = events.batch(batch, machine().1)?;
    let mut meta = Meta::new("benchmark_training", device);
    meta.events = Some(events.describe());
    if let Some(path) = &dump {
        gnn4c_benchmarks::dump_batch(&host, path)?;
    }
    gnn4c_run::on_backend!(device, |B, dev| bench::<Autodiff<B>>(
        &dev, &meta, &host, reps
    ))
}
