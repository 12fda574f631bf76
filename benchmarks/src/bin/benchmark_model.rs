//! Edge_Network forward and forward + backward per batch of demo events, with a per-block split.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_model -- [BATCH] [REPS] [--device cpu|cuda[:N]] [--backend flex|ndarray]`
//! (`--features cuda` for CUDA). Batches of BATCH (default 512) graphs of the demo pretraining data
//! (seed 42), contract-default model (H 64, L 4, T 4, 12 outputs). Forward runs on the inner backend
//! (no autodiff), once with Burn's operations one at a time and once as `predict` runs it (on the
//! CPU: fused MLP blocks); the training pass is forward + mean logit² + backward on `Autodiff<B>`. Setup
//! (first batch) is reported apart from the steady state; the device is synchronised around every
//! timed region. The per-block split comes from the model's tracing spans (CPU only: on CUDA the
//! spans would time kernel launches, not kernels).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::prelude::*;
use gnn4c_benchmarks::{
    BatchArgs, DeviceArg, EdgeNetworkKernel, EventsArg, SpanTimer, Stats, machine, time_reps,
};
use gnn4c_graphs::{GraphBatch, HostBatch};
use gnn4c_root_gnn::{EdgeNetwork, EdgeNetworkConfig};
use gnn4c_run::backend::InferenceBackend;
use gnn4c_run::device::{DeviceChoice, check_device};
use tracing_subscriber::prelude::*;

/// A forward pass over a batch already on the device.
type Forward<'a, B> = Box<dyn Fn(&GraphBatch<B>) -> Tensor<B, 2> + 'a>;

/// The forward `predict` runs on `B` (fused MLP blocks on the CPU).
fn inference_forward<B: InferenceBackend + EdgeNetworkKernel>(
    model: &EdgeNetwork<B>,
) -> Option<Forward<'static, B>> {
    let scorer = model.clone().with_kernel(B::kernel());
    Some(Box::new(move |gb| scorer.forward(gb)))
}

/// Wall time per span (block) over `reps` calls of `forward`, and their total.
fn split<B: Backend>(
    timer: &SpanTimer,
    reps: usize,
    forward: impl Fn() -> Tensor<B, 2>,
) -> (f64, BTreeMap<String, f64>) {
    let t = Instant::now();
    let times = timer.measure(|| {
        for _ in 0..reps {
            let _ = forward().into_data();
        }
    });
    (t.elapsed().as_secs_f64(), times)
}

/// `inference`: [`inference_forward`] where the tool scores on `B`, else `None`.
fn bench<B: Backend>(
    inference: impl Fn(&EdgeNetwork<B>) -> Option<Forward<'static, B>>,
    device: &B::Device,
    name: &str,
    host: &HostBatch,
    reps: usize,
    timer: &SpanTimer,
) -> anyhow::Result<()> {
    let (cpu, cores) = machine();
    let batch = host.n_real;
    let sync = || B::sync(device).map_err(|e| anyhow::anyhow!("device sync failed: {e:?}"));
    let model = EdgeNetworkConfig::new(12).init::<B>(device);
    // Burn initialises parameters lazily, and a clone taken before then draws its own: load the
    // drawn values so that the inference model (a clone) runs the same weights.
    let model = model.clone().load_record(model.into_record());
    let params = model.num_params();
    let t0 = Instant::now();
    let gb = host.to_device::<B>(device);
    let _ = model.forward(&gb).into_data();
    sync()?;
    let first = t0.elapsed().as_secs_f64();
    let to_device = time_reps(2, reps, || {
        let _ = host.to_device::<B>(device);
        let _ = B::sync(device);
    });
    let fwd = time_reps(2, reps, || {
        let _ = model.forward(&gb).into_data();
    });
    let scorer = inference(&model);
    let fwd_inference = scorer.as_ref().map(|f| {
        time_reps(2, reps, || {
            let _ = f(&gb).into_data();
        })
    });
    // More passes of forwards with the span timer on, for the per-block split.
    let split_obo = split(timer, reps, || model.forward(&gb));
    let split_inference = scorer.as_ref().map(|f| split(timer, reps, || f(&gb)));
    let model_ad = EdgeNetworkConfig::new(12).init::<Autodiff<B>>(device);
    let gb_ad = host.to_device::<Autodiff<B>>(device);
    let train = time_reps(2, reps, || {
        let loss = model_ad.forward(&gb_ad).powf_scalar(2.0).mean();
        std::hint::black_box(loss.backward());
        let _ = B::sync(device);
    });

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "machine: {cpu}, {cores} logical cores; burn 0.21.0 {name} (f32); batch {batch} demo graphs: {} nodes, {} edges; {params} parameters",
        host.total_nodes(),
        host.total_edges()
    )?;
    writeln!(
        out,
        "first batch (setup: upload + first forward): {first:.4} s"
    )?;
    writeln!(
        out,
        "| measure | median s | min s | max s | events/s (median) |"
    )?;
    writeln!(out, "|---|---|---|---|---|")?;
    let rows = [
        ("to_device", Some(&to_device)),
        ("forward (no autodiff)", Some(&fwd)),
        ("forward as predict runs it", fwd_inference.as_ref()),
        ("forward + backward", Some(&train)),
    ];
    for (measure, secs) in rows.into_iter().filter_map(|(m, s)| s.map(|s| (m, s))) {
        let s = Stats::of(secs);
        writeln!(
            out,
            "| {measure} | {:.4} | {:.4} | {:.4} | {:.0} |",
            s.median,
            s.min,
            s.max,
            batch as f64 / s.median
        )?;
        eprintln!(
            "{}",
            serde_json::json!({"benchmark": "model", "measure": measure, "batch": batch, "nodes": host.total_nodes(),
                "edges": host.total_edges(), "params": params, "median_s": s.median, "min_s": s.min, "max_s": s.max,
                "std_s": s.std, "reps": s.n, "events_per_s": batch as f64 / s.median, "backend": name, "dtype": "f32",
                "first_batch_s": first, "cpu": cpu, "cores": cores})
        );
    }
    print_split(&mut out, reps, split_obo, split_inference)
}

/// The forward's time per block, op by op and as `predict` runs it.
fn print_split(
    out: &mut impl Write,
    reps: usize,
    split_obo: (f64, BTreeMap<String, f64>),
    split_inference: Option<(f64, BTreeMap<String, f64>)>,
) -> anyhow::Result<()> {
    let (total_obo, times_obo) = split_obo;
    if !times_obo.is_empty() {
        let (total_inf, times_inf) = split_inference.unwrap_or_default();
        writeln!(
            out,
            "\nforward split over {reps} forwards ({total_obo:.3} s in all op by op, {total_inf:.3} s as predict runs it):"
        )?;
        writeln!(
            out,
            "| block | share of forward (op by op) | ms per forward (op by op) | ms per forward (as predict) |"
        )?;
        writeln!(out, "|---|---|---|---|")?;
        let mut rows: Vec<(String, f64)> = times_obo.into_iter().collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (block, t) in rows {
            let t_inf = times_inf.get(&block).copied().unwrap_or(f64::NAN);
            writeln!(
                out,
                "| {block} | {:.1} % | {:.2} | {:.2} |",
                100.0 * t / total_obo,
                1e3 * t / reps as f64,
                1e3 * t_inf / reps as f64
            )?;
        }
    }
    Ok(())
}

/// The CPU backend's forward and training step of the Edge_Network, by span, on one batch.
#[derive(clap::Parser)]
#[command(after_help = gnn4c_benchmarks::DETAILS)]
struct Args {
    #[command(flatten)]
    run: BatchArgs,
    #[command(flatten)]
    device: DeviceArg,
    #[command(flatten)]
    events: EventsArg,
    /// The CPU backend: flex (the tool's) or ndarray (a `--features ndarray` build; the record
    /// of why burn-flex is the default).
    #[arg(long, default_value = "flex", value_parser = ["flex", "ndarray"])]
    backend: String,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    gnn4c_benchmarks::setup_like_the_cli();
    let (device, events) = (args.device.device, args.events.events);
    let (batch, reps, ndarray) = (args.run.batch, args.run.reps, args.backend == "ndarray");
    check_device(device).map_err(anyhow::Error::msg)?;
    let timer = SpanTimer::default();
    tracing_subscriber::registry().with(timer.clone()).init();
    let host = events.batch(batch, machine().1)?;
    let (g, n) = (host.n_graphs().max(1) as f64, host.total_nodes() as f64);
    writeln!(
        std::io::stdout(),
        "events: {} ({:.1} nodes, {:.1} edges per event)",
        events.describe(),
        n / g,
        host.total_edges() as f64 / g
    )?;
    if ndarray && device == DeviceChoice::Cpu {
        #[cfg(feature = "ndarray")]
        return bench::<burn::backend::NdArray>(
            |_, _, _| None,
            &Default::default(),
            "ndarray",
            &host,
            reps,
            &timer,
        );
        #[cfg(not(feature = "ndarray"))]
        anyhow::bail!("--backend ndarray needs --features ndarray");
    }
    // The spans are CPU time: on a GPU they would time the launches.
    let (name, timer) = match device {
        DeviceChoice::Cpu => ("flex", timer),
        DeviceChoice::Cuda(_) => ("cuda", SpanTimer::default()),
        DeviceChoice::Wgpu => ("wgpu", SpanTimer::default()),
    };
    gnn4c_run::on_backend!(device, |B, dev| bench::<B>(
        inference_forward::<B>,
        &dev,
        name,
        &host,
        reps,
        &timer
    ))
}
