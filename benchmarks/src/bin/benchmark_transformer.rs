//! The ROOT-Transformer on the CPU: inference and a training step per batch of demo events.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_transformer -- [BATCH] [REPS]
//! [default|part|both] [fused|op-by-op|both] [--events demo|busy|DATA.yaml] [--dump-batch
//! FILE.npz]`: the model run by the CPU's fused kernels (`FusedTransformer`, what the CLI runs),
//! by Burn's operations (`OpByOp`), or both side by side. The default model (d 64, 4 heads,
//! 4 layers, pair bias; docs/root-transformer.md) and the ParT-like size (d 128, 8 heads,
//! 8 layers), 12 outputs, on BATCH (default 512) events of the same batch `benchmark_training`
//! uses: the forward without autodiff, and a training step (forward and weighted loss,
//! backward, Adam step, each timed; the set-up, model initialisation and the first step,
//! apart), with the GFLOP/s of their matrix products (`transformer_matmul_flops` over the real
//! tokens; a training step counted as 3 forwards) against this machine's 1024³ GEMM rate. A
//! second table splits the inference forward by part (the kernel's calls timed one by one, so
//! with the layers run one at a time: the inference time of the first table runs all but the
//! last layer as one kernel, `TransformerKernel::encoder`), a
//! third the training step, forward and backward, by fused block (the CPU kernels' `tracing`
//! spans, summed by `SpanTimer`).
//! `--dump-batch` writes the batch for the PyTorch reference (`python
//! benchmarks/reference/root_transformer.py --time FILE.npz REPS [default|part]`), so both time
//! the same events. Medians of REPS (default 10) after 2 warm-up runs; peak RSS at the end.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use burn::nn::{LayerNorm, Linear};
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;

use gnn4c_benchmarks::{
    BatchArgs, DumpArg, EventsArg, Meta, SpanTimer, Stats, gemm_gflops, machine, time_reps,
    transformer_matmul_flops, write_peak_rss,
};
use gnn4c_graphs::HostBatch;
use gnn4c_root_transformer::FusedTransformer;
use gnn4c_root_transformer::{
    FlatGraphs, OpByOp, PairEmbed, RootTransformer, RootTransformerConfig, Sequences, TokenBatch,
    TransformerKernel,
};
use gnn4c_run::backend::TrainingBackend;
use gnn4c_run::device::DeviceChoice;
use gnn4c_tasks::{Task, per_event_loss, weighted_loss};
use gnn4c_training::optimiser;
use tracing_subscriber::prelude::*;

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

/// What [`measure`] needs besides the model: the batch, its targets and the device.
struct Setup {
    tokens: TokenBatch,
    labels: Vec<i64>,
    weights: Vec<f32>,
    task: Task,
    device: burn::backend::flex::FlexDevice,
    timer: SpanTimer,
}

/// One size run by one kernel: inference and training-step times, the training step's median
/// forward+loss, backward and optimiser parts, the set-up (model initialisation and the first
/// step), and the inference forward's mean seconds per part ([`PARTS`]).
struct Row {
    forward: Stats,
    step: Stats,
    parts: (f64, f64, f64),
    setup: f64,
    split: [f64; PARTS.len()],
    step_split: Vec<f64>,
}

/// The CPU kernels' spans (`FusedTransformer`) a training step is split into, with
/// their column names; the rest of a step (Burn's operations: embeddings, gathers, head, loss;
/// autodiff's bookkeeping; Adam) is the last column. The forward of every layer but the last
/// is one kernel (`encoder_layer`); the last layer's blocks run one by one.
const STEP_PARTS: [(&str, &str); 13] = [
    ("encoder_layer", "layers but the last fwd"),
    ("norm_linear", "LN + q,k,v fwd"),
    ("attention", "attention fwd"),
    ("linear", "output projection fwd"),
    ("feed_forward", "feed-forward fwd"),
    ("pair_mlp", "pair bias fwd"),
    ("layer_norm", "LayerNorm fwd"),
    ("norm_linear_backward", "LN + q,k,v bwd"),
    ("attention_backward", "attention bwd"),
    ("linear_backward", "output projection bwd"),
    ("feed_forward_backward", "feed-forward bwd"),
    ("pair_mlp_backward", "pair bias bwd"),
    ("layer_norm_backward", "LayerNorm bwd"),
];

/// The parts of a forward that [`Timed`] tells apart; the last is the rest of the forward
/// (token and class-token embeddings, the pair-bias MLP, packing, the head).
const PARTS: [&str; 5] = [
    "LayerNorm + q,k,v projection",
    "attention",
    "output projection + residual",
    "feed-forward (LayerNorm, linear, GELU, linear, residual)",
    "embeddings, pair bias, head, packing",
];

/// The kernel `K` with the wall time of each of its calls added to `spent` under its part of
/// [`PARTS`]: the CPU backend runs an operation before it returns, so a call's wall time is its
/// cost. Every method runs `K`'s (the untimed ones count in the last part).
#[derive(Debug, Clone)]
struct Timed<K> {
    inner: K,
    spent: Arc<Mutex<[f64; PARTS.len()]>>,
}

impl<K> Timed<K> {
    fn time<T>(&self, part: usize, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        if let Ok(mut spent) = self.spent.lock() {
            spent[part] += t.elapsed().as_secs_f64();
        }
        out
    }
}

impl<B: Backend, K: TransformerKernel<B>> TransformerKernel<B> for Timed<K> {
    fn layer_norm(&self, norm: &LayerNorm<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.inner.layer_norm(norm, x)
    }

    fn linear(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.inner.linear(linear, x)
    }

    fn linear_gelu(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.inner.linear_gelu(linear, x)
    }

    fn pair_bias(
        &self,
        embed: &PairEmbed<B>,
        features: Tensor<B, 2>,
        off_diagonal: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        self.inner.pair_bias(embed, features, off_diagonal)
    }

    fn norm_linear(
        &self,
        norm: &LayerNorm<B>,
        linear: &Linear<B>,
        x: Tensor<B, 2>,
        gelu: bool,
    ) -> Tensor<B, 2> {
        self.time(0, || self.inner.norm_linear(norm, linear, x, gelu))
    }

    fn linear_residual(
        &self,
        linear: &Linear<B>,
        x: Tensor<B, 2>,
        residual: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        self.time(2, || self.inner.linear_residual(linear, x, residual))
    }

    fn attention(
        &self,
        qkv: Tensor<B, 2>,
        pair_bias: Option<Tensor<B, 2>>,
        seqs: &Sequences,
        n_heads: usize,
        class_only: bool,
    ) -> Tensor<B, 2> {
        self.time(1, || {
            self.inner
                .attention(qkv, pair_bias, seqs, n_heads, class_only)
        })
    }

    fn feed_forward(
        &self,
        norm: &LayerNorm<B>,
        first: &Linear<B>,
        second: &Linear<B>,
        x: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        self.time(3, || self.inner.feed_forward(norm, first, second, x))
    }
}

/// The inference forward's mean seconds per part of [`PARTS`] over `reps` runs.
fn forward_split<K: TransformerKernel<Flex> + Copy>(
    model: RootTransformer<Flex, K>,
    s: &Setup,
    reps: usize,
) -> [f64; PARTS.len()] {
    let spent = Arc::new(Mutex::new([0.0; PARTS.len()]));
    let kernel = model.kernel;
    let timed = model.with_kernel(Timed {
        inner: kernel,
        spent: spent.clone(),
    });
    let mut total = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        let logits = timed.forward(&s.tokens, &s.device);
        std::hint::black_box(logits.into_data());
        total += t.elapsed().as_secs_f64();
    }
    let mut split = spent.lock().map_or([0.0; PARTS.len()], |v| *v);
    let kernels: f64 = split[..PARTS.len() - 1].iter().sum();
    split[PARTS.len() - 1] = total - kernels;
    split.map(|x| x / reps.max(1) as f64)
}

fn measure<K>(
    config: &RootTransformerConfig,
    kernel: K,
    s: &Setup,
    reps: usize,
) -> anyhow::Result<Row>
where
    K: TransformerKernel<Flex>
        + TransformerKernel<Autodiff<Flex>>
        + Clone
        + Copy
        + Send
        + std::fmt::Debug,
{
    type AD = Autodiff<Flex>;
    let (device, batch) = (&s.device, s.tokens.n_events);
    Flex::seed(device, 1);
    let model: RootTransformer<Flex, K> = config.init(device).with_kernel(kernel);
    let forward = time_reps(2, reps, || {
        let logits = model.forward(&s.tokens, device);
        std::hint::black_box(logits.into_data());
    });
    let split = forward_split(model, s, reps);
    let t_setup = Instant::now();
    let mut setup = None;
    // Held as an `Option` so that each step hands the model itself to the optimiser, as `train`
    // does: a clone would share the parameters' storage, and the optimiser would copy each one.
    let mut model: Option<RootTransformer<AD, K>> = Some(config.init(device).with_kernel(kernel));
    // The optimiser as `train` runs it (one pass per parameter on the CPU).
    let mut optim = optimiser::<AD, RootTransformer<AD, K>, _>(AD::adam_kernel());
    let (mut fwd, mut bwd, mut opt) = (Vec::new(), Vec::new(), Vec::new());
    let mut step = Vec::new();
    let spans = s.timer.measure(|| {
        step = time_reps(2, reps, || {
            let t0 = Instant::now();
            let stepped = model
                .take()
                .expect("the model is put back after every step");
            let logits = stepped.forward(&s.tokens, device);
            let y =
                Tensor::<AD, 1, Int>::from_data(TensorData::new(s.labels.clone(), [batch]), device);
            let w = Tensor::<AD, 1>::from_data(TensorData::new(s.weights.clone(), [batch]), device);
            let loss = weighted_loss(per_event_loss(&s.task, logits, y, None), w);
            let t1 = Instant::now();
            let grads = GradientsParams::from_grads(loss.backward(), &stepped);
            let t2 = Instant::now();
            model = Some(optim.step(1e-4, stepped, grads));
            let t3 = Instant::now();
            setup.get_or_insert((t3 - t_setup).as_secs_f64());
            fwd.push((t1 - t0).as_secs_f64());
            bwd.push((t2 - t1).as_secs_f64());
            opt.push((t3 - t2).as_secs_f64());
        })
    });
    // The kernels' spans per step (warm-up steps included), and the rest of the mean step.
    let steps = fwd.len().max(1) as f64;
    let mut step_split: Vec<f64> = STEP_PARTS
        .iter()
        .map(|(span, _)| spans.get(*span).copied().unwrap_or(0.0) / steps)
        .collect();
    let mean_step = fwd.iter().chain(&bwd).chain(&opt).sum::<f64>() / steps;
    step_split.push(mean_step - step_split.iter().sum::<f64>());
    // The warm-up steps are timed too: keep the last `reps` of each part.
    let last = |v: &[f64]| Stats::of(&v[v.len().saturating_sub(reps)..]).median;
    Ok(Row {
        forward: Stats::of(&forward),
        step: Stats::of(&step),
        parts: (last(&fwd), last(&bwd), last(&opt)),
        setup: setup.unwrap_or(0.0),
        split,
        step_split,
    })
}

/// The ROOT-Transformer's forward and training step on one batch, at two sizes, with the
/// project's kernels or Burn's operations one at a time.
#[derive(clap::Parser)]
#[command(after_help = gnn4c_benchmarks::DETAILS)]
struct Args {
    #[command(flatten)]
    run: BatchArgs,
    /// The model's size: default (64 wide, 4 heads, 4 layers), part (ParT-like: 128, 8, 8) or
    /// both.
    #[arg(default_value = "both", value_parser = ["default", "part", "both"])]
    size: String,
    /// The kernels: fused (the project's), op-by-op (Burn's operations) or both.
    #[arg(default_value = "fused", value_parser = ["fused", "op-by-op", "both"])]
    kernels: String,
    #[command(flatten)]
    events: EventsArg,
    #[command(flatten)]
    dump: DumpArg,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    gnn4c_benchmarks::setup_like_the_cli();
    let (events, dump) = (args.events.events, args.dump.dump_batch);
    let (batch, reps) = (args.run.batch, args.run.reps);
    let (sizes, kernels) = grid(&args.size, &args.kernels);
    let host = events.batch(batch, machine().1)?;
    if let Some(path) = &dump {
        gnn4c_benchmarks::dump_batch(&host, path)?;
    }
    let tokens = tokens_of(&host);
    let objects: Vec<usize> = host.n_nodes.iter().map(|&k| k as usize).collect();
    let mut meta = Meta::new("benchmark_transformer", DeviceChoice::Cpu);
    meta.events = Some(events.describe());
    let device = Default::default();
    let gemm = gemm_gflops::<Flex>(&device, 1024, 10);
    let real_tokens: usize = objects.iter().sum();
    let timer = SpanTimer::default();
    tracing_subscriber::registry().with(timer.clone()).init();
    let setup = Setup {
        timer,
        labels: host.labels.iter().map(|l| l % 12).collect(),
        weights: host.weights.clone(),
        task: Task::Multiclass { n_classes: 12 },
        device,
        tokens,
    };

    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", meta.header())?;
    writeln!(
        out,
        "{batch} events ({}), {real_tokens} objects, padded to {} per event; 12 outputs; medians of {reps} after 2 warm-ups; f32 GEMM on this backend: 1024³ {gemm:.1} GFLOP/s; GFLOP/s of the real tokens' products",
        events.describe(),
        setup.tokens.n_tokens
    )?;
    writeln!(
        out,
        "| size | kernel | measure | median s | events/s | forward+loss s | backward s | optimiser s | setup s | GFLOP/s (% of GEMM) |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|")?;
    let (mut splits, mut step_splits) = (Vec::new(), Vec::new());
    for (size, d, heads, layers) in sizes {
        let config = RootTransformerConfig::new(12)
            .with_d_model(d)
            .with_n_heads(heads)
            .with_n_layers(layers);
        let flops = transformer_matmul_flops(
            &objects,
            d,
            layers,
            config.embed_layers,
            7,
            2,
            3,
            config.pair_hidden,
            heads,
            12,
        );
        for kernel in &kernels {
            let row = match kernel.as_str() {
                "fused" => measure(&config, FusedTransformer, &setup, reps)?,
                _ => measure(&config, OpByOp, &setup, reps)?,
            };
            splits.push((size, kernel.clone(), row.split, row.forward.median));
            step_splits.push((size, kernel.clone(), row.step_split.clone()));
            for (name, st, parts, work) in [
                ("inference (forward)", &row.forward, None, flops),
                ("training step", &row.step, Some(row.parts), 3.0 * flops),
            ] {
                let setup = parts.map(|_| row.setup);
                let gflops = work / st.median / 1e9;
                meta.emit(serde_json::json!({
                    "measure": name, "size": size, "kernel": kernel, "d_model": d, "n_heads": heads,
                    "n_layers": layers, "median_s": st.median, "min_s": st.min, "max_s": st.max,
                    "reps": st.n, "events_per_s": batch as f64 / st.median, "batch": batch,
                    "forward_loss_s": parts.map(|p| p.0), "backward_s": parts.map(|p| p.1),
                    "optimiser_s": parts.map(|p| p.2), "setup_s": setup, "gflops": gflops, "gemm_gflops": gemm,
                    "gemm_fraction": gflops / gemm,
                }));
                let part = |p: Option<f64>| p.map_or_else(|| "–".to_owned(), |x| format!("{x:.4}"));
                writeln!(
                    out,
                    "| {size} | {kernel} | {name} | {:.4} | {:.0} | {} | {} | {} | {} | {gflops:.1} ({:.0} %) |",
                    st.median,
                    batch as f64 / st.median,
                    part(parts.map(|p| p.0)),
                    part(parts.map(|p| p.1)),
                    part(parts.map(|p| p.2)),
                    part(setup),
                    100.0 * gflops / gemm
                )?;
            }
        }
    }
    print_splits(&mut out, &meta, reps, splits, step_splits)?;
    write_peak_rss(&mut out)?;
    Ok(())
}

/// The tables of the inference forward and the training step by part.
fn print_splits(
    out: &mut impl Write,
    meta: &Meta,
    reps: usize,
    splits: Vec<(&str, String, [f64; PARTS.len()], f64)>,
    step_splits: Vec<(&str, String, Vec<f64>)>,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "\nThe inference forward by part (mean s over {reps} runs, each part's calls timed, the layers one at a time; % of that forward):"
    )?;
    writeln!(out, "| size | kernel | {} |", PARTS.join(" | "))?;
    writeln!(out, "|---|---|{}", "---|".repeat(PARTS.len()))?;
    for (size, kernel, split, median) in splits {
        let total: f64 = split.iter().sum();
        let cells: Vec<String> = split
            .iter()
            .map(|x| format!("{x:.4} ({:.0} %)", 100.0 * x / total))
            .collect();
        meta.emit(serde_json::json!({
            "measure": "inference split", "size": size, "kernel": kernel,
            "parts": PARTS.iter().zip(split).map(|(p, x)| serde_json::json!({"part": p, "mean_s": x})).collect::<Vec<_>>(),
            "forward_median_s": median,
        }));
        writeln!(out, "| {size} | {kernel} | {} |", cells.join(" | "))?;
    }
    writeln!(
        out,
        "\nThe training step by part (mean s per step, the fused kernels' spans; the rest is Burn's operations, autodiff and Adam; op-by-op: all in the rest):"
    )?;
    let names: Vec<&str> = STEP_PARTS.iter().map(|(_, name)| *name).collect();
    writeln!(out, "| size | kernel | {} | the rest |", names.join(" | "))?;
    writeln!(out, "|---|---|{}", "---|".repeat(names.len() + 1))?;
    for (size, kernel, split) in step_splits {
        let cells: Vec<String> = split.iter().map(|x| format!("{x:.4}")).collect();
        meta.emit(serde_json::json!({
            "measure": "training split", "size": size, "kernel": kernel,
            "parts": names.iter().chain(["the rest"].iter()).zip(&split).map(|(p, x)| serde_json::json!({"part": p, "mean_s": x})).collect::<Vec<_>>(),
        }));
        writeln!(out, "| {size} | {kernel} | {} |", cells.join(" | "))?;
    }
    Ok(())
}

/// A model size: its name, width, heads and layers.
type Size = (&'static str, usize, usize, usize);

/// The sizes and kernels `--size` and `--kernels` ask for.
fn grid(size: &str, kernels: &str) -> (Vec<Size>, Vec<String>) {
    let sizes = match size {
        "default" => vec![("default", 64, 4, 4)],
        "part" => vec![("ParT-like", 128, 8, 8)],
        _ => vec![("default", 64, 4, 4), ("ParT-like", 128, 8, 8)],
    };
    let kernels = match kernels {
        "op-by-op" => vec!["op-by-op".into()],
        "both" => vec!["fused".into(), "op-by-op".into()],
        _ => vec!["fused".into()],
    };
    (sizes, kernels)
}
