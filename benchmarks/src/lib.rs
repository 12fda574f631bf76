//! Benchmarks for every pipeline stage: shared helpers (timing statistics, machine metadata) for the
//! benchmark binaries in `benchmarks/src/bin/`.
//!
//! The bench crate may depend on every workspace crate and choose a backend; nothing depends on it.
//! Results are printed as JSON lines plus a table; speed is measured here, never asserted in tests.

mod span_timer;

pub use span_timer::SpanTimer;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use gnn4c_data::{
    DEMO_TREE, DatasetConfig, EntryRange, PRETRAIN_PROCESSES, SampleMeta, ToyProcess, toy_events,
    write_demo, write_tree,
};
use gnn4c_events::{EventSample, Label};
use gnn4c_features::SelectionConfig;
use gnn4c_graphs::{GraphSample, HostBatch, Padding, TopologyCache, collate};
use gnn4c_reference::{
    CONTRACT_WIDTHS, EventFeatures, builtin_schema, graph_of_event, read_file_events, read_sample,
};
use gnn4c_run::device::DeviceChoice;

/// Summary statistics of repeated timings, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Repetitions.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Fastest.
    pub min: f64,
    /// Slowest.
    pub max: f64,
    /// Sample standard deviation (0 for one repetition).
    pub std: f64,
}

impl Stats {
    /// Statistics of `samples` (seconds); panics on an empty slice (a benchmark bug).
    pub fn of(samples: &[f64]) -> Stats {
        assert!(!samples.is_empty(), "no timing samples");
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let mean = s.iter().sum::<f64>() / n as f64;
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            0.5 * (s[n / 2 - 1] + s[n / 2])
        };
        let var = if n > 1 {
            s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Stats {
            n,
            mean,
            median,
            min: s[0],
            max: s[n - 1],
            std: var.sqrt(),
        }
    }
}

/// Runs `f` `warmup` times untimed, then `reps` times timed; returns the seconds of each timed run.
pub fn time_reps(warmup: usize, reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..warmup {
        f();
    }
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect()
}

/// Process CPU seconds (user + system) from /proc/self/stat; 0 where unavailable.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0 // utime, stime in clock ticks (100 Hz on Linux)
}

/// The CPU model (sysinfo) and logical core count.
pub fn machine() -> (String, usize) {
    use sysinfo::{CpuRefreshKind, RefreshKind, System};
    let sys =
        System::new_with_specifics(RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing()));
    let model = sys
        .cpus()
        .first()
        .map(|c| c.brand().trim().to_owned())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (model, cores)
}

/// Every event of `tree` in `path`, read with the built-in `schema` as sample `sample` with
/// class `label` (benchmarks read their fixed inputs once, untimed).
pub fn read_events(
    path: &Path,
    tree: &str,
    schema: &str,
    sample: &str,
    label: u32,
) -> anyhow::Result<Vec<EventSample>> {
    let spec =
        builtin_schema(schema).ok_or_else(|| anyhow::anyhow!("no built-in schema '{schema}'"))?;
    let meta = SampleMeta {
        name: sample.into(),
        label: Label::Class(label),
        weight_branch: None,
        scale: 1.0,
    };
    let range = EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        step_size: 10_000,
        threads: 0,
    };
    let mut out = Vec::new();
    read_file_events(path, tree, &spec, &meta, range, &mut |evs| {
        out.extend_from_slice(evs);
        Ok(())
    })?;
    Ok(out)
}

/// The demo pretraining graphs of `per_process` events per process (seed 42), interleaved by
/// (entry, sample) so any prefix mixes the 12 processes (written and read untimed).
pub fn demo_graphs(per_process: usize, cores: usize) -> anyhow::Result<Vec<GraphSample>> {
    let tmp = tempfile::tempdir()?;
    let files = write_demo(tmp.path(), per_process, 42, cores)?;
    let selection = SelectionConfig::default();
    let mut topo = TopologyCache::new(selection.max_nodes());
    let mut feats = EventFeatures::default();
    let mut graphs = Vec::new();
    for f in files.iter().take(PRETRAIN_PROCESSES.len()) {
        for ev in read_events(&f.path, "output", "vector", f.sample, f.label)? {
            if let Ok(g) = graph_of_event(&ev, &selection, &mut feats, &mut topo) {
                graphs.push(g);
            }
        }
    }
    graphs.sort_by_key(|g| (g.id.entry, g.id.sample.clone()));
    Ok(graphs)
}

/// Which events a benchmark runs on (`--events`).
#[derive(Debug, Clone, PartialEq)]
pub enum Events {
    /// The demo pretraining processes, mixed (≈ 6 nodes, 35 edges per event).
    Demo,
    /// A toy at the object multiplicity of ttH/tttt analyses ([`BUSY_PROCESS`]: ≈ 10–11 nodes,
    /// ≈ 110–120 edges per event), written by the demo generator.
    Busy,
    /// Every sample of a dataset config, in order (files relative to the folder run from).
    Config(PathBuf),
}

/// The `--events busy` toy: the demo generator's ttH with the jet and lepton activity of a
/// ttH/tttt signal region (≥ 6 jets, 4 b-tags expected, leptons and photons), so that an
/// event has the node and edge counts of those analyses.
pub const BUSY_PROCESS: ToyProcess = ToyProcess {
    name: "busy",
    jets: (7, 2.0),
    b_jets: 4.0,
    leptons: (1, 0.8),
    photons: (0, 0.3),
    jet_pt: 60.0,
    jet_eta: 1.5,
    lep_pt: 35.0,
    met: 50.0,
    weight: 1.0,
    negative_fraction: 0.08,
};

impl Events {
    /// `demo`, `busy` or a dataset config (`.yaml`, `.yml`).
    pub fn parse(s: &str) -> Result<Events, String> {
        Ok(match s {
            "demo" => Events::Demo,
            "busy" => Events::Busy,
            path if path.ends_with(".yaml") || path.ends_with(".yml") => {
                Events::Config(path.into())
            }
            other => {
                return Err(format!(
                    "{other}: expected demo, busy or a dataset config (.yaml)"
                ));
            }
        })
    }

    /// What the output says the events were.
    pub fn describe(&self) -> String {
        match self {
            Events::Demo => "demo (12 pretraining processes, seed 42)".into(),
            Events::Busy => "busy (ttH/tttt-like toy, seed 42)".into(),
            Events::Config(p) => format!("dataset config {}", p.display()),
        }
    }

    /// `n` graphs of these events, mixed across processes for the demo; a dataset config with
    /// fewer events is repeated.
    pub fn graphs(&self, n: usize, cores: usize) -> anyhow::Result<Vec<GraphSample>> {
        let mut graphs = match self {
            // ≈ 0.3 % of demo events fail the selection: a tenth more per process is plenty.
            Events::Demo => {
                demo_graphs(n.div_ceil(PRETRAIN_PROCESSES.len()) * 11 / 10 + 10, cores)?
            }
            Events::Busy => busy_graphs(n)?,
            Events::Config(path) => config_graphs(path)?,
        };
        anyhow::ensure!(
            !graphs.is_empty(),
            "{}: no event passes the selection",
            self.describe()
        );
        let source = graphs.len();
        for k in source..n {
            graphs.push(graphs[k % source].clone());
        }
        graphs.truncate(n);
        Ok(graphs)
    }

    /// One batch of `batch` graphs ([`Events::graphs`]).
    pub fn batch(&self, batch: usize, cores: usize) -> anyhow::Result<HostBatch> {
        let graphs = self.graphs(batch, cores)?;
        let refs: Vec<&GraphSample> = graphs.iter().collect();
        collate(&refs, Padding::None, CONTRACT_WIDTHS).map_err(anyhow::Error::msg)
    }
}

/// Graphs of every event of `events` that passes the contract's selection.
fn graphs_of(events: &[EventSample], out: &mut Vec<GraphSample>) {
    let selection = SelectionConfig::default();
    let mut topo = TopologyCache::new(selection.max_nodes());
    let mut feats = EventFeatures::default();
    out.extend(
        events
            .iter()
            .filter_map(|ev| graph_of_event(ev, &selection, &mut feats, &mut topo).ok()),
    );
}

/// `n` events of [`BUSY_PROCESS`] (and a few more: some fail the selection), written to a
/// temporary ROOT file and read back, as graphs.
fn busy_graphs(n: usize) -> anyhow::Result<Vec<GraphSample>> {
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("busy.root");
    let columns = toy_events(&BUSY_PROCESS, 0, n + n / 8 + 16, 42).into_write_columns();
    write_tree(&path, DEMO_TREE, columns)?;
    let mut graphs = Vec::new();
    graphs_of(
        &read_events(&path, DEMO_TREE, "vector", "busy", 0)?,
        &mut graphs,
    );
    Ok(graphs)
}

/// Every sample of the dataset config at `path`, as graphs, the samples interleaved (one event
/// of each in turn) so that any first `n` mix them as a training batch does.
fn config_graphs(path: &Path) -> anyhow::Result<Vec<GraphSample>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let cfg: DatasetConfig =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    cfg.validate()?;
    let mut per_sample = Vec::new();
    for sample in &cfg.samples {
        let mut graphs = Vec::new();
        read_sample(&cfg, sample, Path::new("."), &mut |evs| {
            graphs_of(evs, &mut graphs);
            Ok(())
        })
        .with_context(|| format!("reading sample '{}' of {}", sample.name, path.display()))?;
        per_sample.push(graphs.into_iter());
    }
    let mut graphs = Vec::new();
    loop {
        let before = graphs.len();
        graphs.extend(per_sample.iter_mut().filter_map(Iterator::next));
        if graphs.len() == before {
            return Ok(graphs);
        }
    }
}

/// Mean nodes and edges per graph of `graphs`.
pub fn multiplicity(graphs: &[GraphSample]) -> (f64, f64) {
    let n = graphs.len().max(1) as f64;
    let nodes: usize = graphs.iter().map(GraphSample::n_nodes).sum();
    let edges: usize = graphs.iter().map(GraphSample::n_edges).sum();
    (nodes as f64 / n, edges as f64 / n)
}

/// What every benchmark's `--help` ends with.
pub const DETAILS: &str = "Details: benchmarks/README.md and docs/performance.md.";

/// `[BATCH] [REPS]`: the batch a model benchmark times, and how often.
#[derive(Debug, Clone, clap::Args)]
pub struct BatchArgs {
    /// Events in the batch.
    #[arg(default_value_t = 512)]
    pub batch: usize,
    /// Timed repetitions (steps per set-up where a benchmark has several).
    #[arg(default_value_t = 10)]
    pub reps: usize,
}

/// `--device`: where a benchmark runs.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceArg {
    /// Where to run: cpu, cuda, cuda:N (a `--features cuda` build) or wgpu (`--features wgpu`).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: DeviceChoice,
}

/// `--device`'s value.
fn parse_device(s: &str) -> Result<DeviceChoice, String> {
    s.parse()
}

/// `--events`: which events a benchmark runs on.
#[derive(Debug, Clone, clap::Args)]
pub struct EventsArg {
    /// demo (the demo's pretraining processes, mixed), busy (a ttH/tttt-like multiplicity) or
    /// a dataset config (.yaml; files relative to the folder run from).
    #[arg(long, default_value = "demo", value_parser = Events::parse)]
    pub events: Events,
}

/// `--dump-batch`: the benchmark's batch written for the PyTorch reference.
#[derive(Debug, Clone, clap::Args)]
pub struct DumpArg {
    /// Also write the batch to this file (.npz) for the PyTorch reference
    /// (`benchmarks/reference/`), so that both time the same graphs.
    #[arg(long, value_name = "FILE.npz")]
    pub dump_batch: Option<std::path::PathBuf>,
}

/// The Burn version every crate is built against (the workspace pins it exactly).
pub const BURN_VERSION: &str = "0.21.0";

/// What every benchmark result records about where and how it ran (the performance brief's
/// metadata): merged into each JSON line and printed above each table.
#[derive(Debug, Clone)]
pub struct Meta {
    /// The benchmark binary.
    pub benchmark: &'static str,
    /// `rustc -V` of the build.
    pub rustc: &'static str,
    /// Burn backend name (`flex`, `cuda`).
    pub backend: String,
    /// The device (`cpu`, `cuda:0`).
    pub device: String,
    /// CPU model and logical cores (sysinfo).
    pub cpu: String,
    /// Logical cores.
    pub cores: usize,
    /// Host memory in GiB (sysinfo).
    pub memory_gib: f64,
    /// GPU model (nvidia-smi), when the device is CUDA.
    pub gpu: Option<String>,
    /// Compute threads (rayon's pool: `RAYON_NUM_THREADS` or all cores).
    pub threads: usize,
    /// Element type of the model.
    pub dtype: &'static str,
    /// Data-parallel processes (the benchmarks run one).
    pub world_size: usize,
    /// The events measured ([`Events::describe`]), when the benchmark runs the model.
    pub events: Option<String>,
}

impl Meta {
    /// The metadata of this process running `benchmark` on `device`.
    pub fn new(benchmark: &'static str, device: DeviceChoice) -> Meta {
        use sysinfo::{MemoryRefreshKind, RefreshKind, System};
        let sys = System::new_with_specifics(
            RefreshKind::nothing().with_memory(MemoryRefreshKind::nothing().with_ram()),
        );
        let (cpu, cores) = machine();
        let (backend, device_name, gpu) = match device {
            DeviceChoice::Cpu => ("flex".to_owned(), "cpu".to_owned(), None),
            DeviceChoice::Cuda(i) => ("cuda".to_owned(), format!("cuda:{i}"), Some(gpu_model(i))),
            DeviceChoice::Wgpu => ("wgpu".to_owned(), "wgpu".to_owned(), None),
        };
        Meta {
            benchmark,
            rustc: env!("GNN4C_RUSTC_VERSION"),
            backend,
            device: device_name,
            cpu,
            cores,
            memory_gib: sys.total_memory() as f64 / (1u64 << 30) as f64,
            gpu,
            threads: rayon::current_num_threads(),
            dtype: "f32",
            world_size: 1,
            events: None,
        }
    }

    /// One line for the top of a table.
    pub fn header(&self) -> String {
        let gpu = self
            .gpu
            .as_deref()
            .map(|g| format!(", GPU {g}"))
            .unwrap_or_default();
        format!(
            "{}: {} on {} ({}{gpu}); CPU {} ({} logical cores, {:.0} GiB), {} compute threads; \
             burn {BURN_VERSION} {} {}; world size {}{}",
            self.benchmark,
            self.rustc,
            self.device,
            self.backend,
            self.cpu,
            self.cores,
            self.memory_gib,
            self.threads,
            self.backend,
            self.dtype,
            self.world_size,
            self.events
                .as_deref()
                .map(|e| format!("; events: {e}"))
                .unwrap_or_default()
        )
    }

    /// Prints `fields` merged with this metadata as one JSON line on stderr.
    pub fn emit(&self, fields: serde_json::Value) {
        let mut line = serde_json::json!({
            "benchmark": self.benchmark, "rustc": self.rustc, "burn": BURN_VERSION,
            "backend": self.backend, "device": self.device, "cpu": self.cpu, "cores": self.cores,
            "memory_gib": self.memory_gib, "gpu": self.gpu, "threads": self.threads,
            "dtype": self.dtype, "world_size": self.world_size, "events": self.events,
        });
        if let (Some(out), serde_json::Value::Object(extra)) = (line.as_object_mut(), fields) {
            out.extend(extra);
        }
        eprintln!("{line}");
    }
}

/// The name of CUDA device `index` from nvidia-smi, or "unknown GPU".
fn gpu_model(index: usize) -> String {
    std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,memory.total",
            "--format=csv,noheader",
            "-i",
        ])
        .arg(index.to_string())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown GPU".to_owned())
}

/// Sets the process up as the CLI does before it runs the model: glibc keeps freed memory and
/// this thread becomes a worker of the compute pool (`RAYON_NUM_THREADS` sizes it). For
/// before/after comparisons `GNN4C_MALLOC=default` keeps glibc's defaults and
/// `GNN4C_POOL=outside` leaves the caller outside the pool. Call it first in `main`.
pub fn setup_like_the_cli() {
    if std::env::var("GNN4C_MALLOC").as_deref() != Ok("default") {
        gnn4c_kernels::tune_allocator();
    }
    if std::env::var("GNN4C_POOL").as_deref() != Ok("outside") {
        gnn4c_run::device::init_compute_pool(0);
    }
}

/// Writes the process's peak resident memory under a table (Linux; nothing elsewhere).
pub fn write_peak_rss(out: &mut impl std::io::Write) -> std::io::Result<()> {
    match gnn4c_run::device::peak_rss_mb() {
        Some(mb) => writeln!(out, "peak RSS (VmHWM): {mb:.0} MB"),
        None => Ok(()),
    }
}

/// This machine's f32 matrix-multiply rate on `B` in GFLOP/s: the median of `reps` products of
/// two `n × n` matrices after 2 warm-ups, the device synchronised around each (the yardstick of
/// the training step's arithmetic efficiency).
pub fn gemm_gflops<B: burn::tensor::backend::Backend>(
    device: &B::Device,
    n: usize,
    reps: usize,
) -> f64 {
    matmul_gflops::<B>(device, [n, n, n], reps)
}

/// [`gemm_gflops`] for the product of an `m × k` and a `k × n` matrix, `shape = [m, k, n]`: e.g.
/// the per-edge layers' `[n_edges, 64] · [64, 64]`, tall and skinny, whose rate differs from the
/// square one's (docs/performance.md).
pub fn matmul_gflops<B: burn::tensor::backend::Backend>(
    device: &B::Device,
    shape: [usize; 3],
    reps: usize,
) -> f64 {
    use burn::tensor::{Distribution, Tensor};
    let [m, k, n] = shape;
    let a = Tensor::<B, 2>::random([m, k], Distribution::Uniform(-1.0, 1.0), device);
    let b = Tensor::<B, 2>::random([k, n], Distribution::Uniform(-1.0, 1.0), device);
    let _ = B::sync(device);
    let times = time_reps(2, reps, || {
        let c = a.clone().matmul(b.clone());
        let _ = B::sync(device);
        drop(c);
    });
    2.0 * (m * k * n) as f64 / Stats::of(&times).median / 1e9
}

/// Multiply-add FLOPs (2 per multiply-add) of the Edge_Network forward's matrix products on a
/// batch, as this implementation computes them (the first layer of the edge and node updates
/// applied per node and per graph before the gathers; contract §5 widths).
pub fn forward_matmul_flops(
    n_nodes: usize,
    n_edges: usize,
    n_graphs: usize,
    n_out: usize,
    h: usize,
    n_layers: usize,
    n_steps: usize,
) -> f64 {
    let (n, e, g) = (n_nodes as f64, n_edges as f64, n_graphs as f64);
    let h = h as f64;
    let hidden = (n_layers.saturating_sub(1)) as f64 * h * h; // the H→H (and H→d_out = H) layers
    let mlp = |rows: f64, d_in: f64| rows * (d_in * h + hidden);
    let encoders = mlp(n, 7.0) + mlp(e, 3.0) + mlp(g, 2.0);
    // edge update: e·W_e on edges, h·W_s and h·W_d on nodes, u·W_u on graphs, then the rest on edges.
    let edge = e * h * h + 2.0 * n * h * h + g * h * h + e * hidden;
    // node update: h·W_h and a·W_a on nodes, u·W_u on graphs, then the rest on nodes.
    let node = 2.0 * n * h * h + g * h * h + n * hidden;
    let global = mlp(g, 3.0 * h);
    let head = mlp(g, h) + g * h * n_out as f64;
    2.0 * (encoders + n_steps as f64 * (edge + node + global) + head)
}

/// Multiply-add FLOPs (2 per multiply-add) of the ROOT-Transformer forward's matrix products on
/// events of `objects[e]` objects each (sequences of `s = objects + 1` with the class token), on
/// the real tokens alone as this implementation computes them (a padded implementation does
/// more for the same events): the embedding blocks, the pair-bias MLP over every object pair,
/// per layer the q/k/v projection, q·kᵀ and attention·v per head, the output projection and the
/// 4d feed-forward, and the head.
#[allow(clippy::too_many_arguments)] // the model's widths, one each
pub fn transformer_matmul_flops(
    objects: &[usize],
    d: usize,
    n_layers: usize,
    embed_layers: usize,
    d_token: usize,
    d_global: usize,
    d_pair: usize,
    pair_hidden: usize,
    n_heads: usize,
    n_out: usize,
) -> f64 {
    let n = objects.len() as f64;
    let d = d as f64;
    let tokens: f64 = objects.iter().map(|&k| k as f64).sum();
    let object_pairs: f64 = objects.iter().map(|&k| (k * k) as f64).sum();
    let rows = tokens + n;
    let square: f64 = objects.iter().map(|&k| ((k + 1) * (k + 1)) as f64).sum();
    let embed = |rows: f64, d_in: f64| rows * (d_in * d + (embed_layers.max(1) - 1) as f64 * d * d);
    let embeds = embed(tokens, d_token as f64) + embed(n, d_global as f64);
    let h = pair_hidden as f64;
    let pairs = object_pairs * (d_pair as f64 * h + h * n_heads as f64);
    let layer = rows * d * 3.0 * d // q, k, v
        + 2.0 * square * d // q·kᵀ and attention·v over all heads
        + rows * d * d // output projection
        + 2.0 * rows * d * 4.0 * d; // feed-forward
    2.0 * (embeds + pairs + n_layers as f64 * layer + n * d * n_out as f64)
}

/// The batch as NPZ arrays (the names of the fixtures' `model_inputs.npz`, plus labels and weights).
pub fn dump_batch(h: &HostBatch, path: &std::path::Path) -> anyhow::Result<()> {
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

/// The Edge_Network's MLP kernel on each backend, as `train` and `predict` pick it there
/// (`gnn4c_family::Kernels`): fused on burn-flex, Burn's operations elsewhere. The benchmarks
/// time the model's own `forward` on a batch already on the device, so they name the kernel.
pub trait EdgeNetworkKernel: burn::tensor::backend::Backend {
    /// The kernel.
    type Kernel: gnn4c_root_gnn::MlpKernel<Self>
        + Clone
        + Copy
        + Send
        + Sync
        + std::fmt::Debug
        + 'static;

    /// The kernel's value.
    fn kernel() -> Self::Kernel;
}

macro_rules! edge_network_kernel {
    ($kernel:ty => $($backend:ty),+) => {
        $(impl EdgeNetworkKernel for $backend {
            type Kernel = $kernel;

            fn kernel() -> $kernel {
                <$kernel>::default()
            }
        })+
    };
}

edge_network_kernel!(gnn4c_root_gnn::FusedMlp => burn::backend::Flex, burn::backend::Autodiff<burn::backend::Flex>);
#[cfg(feature = "cuda")]
edge_network_kernel!(gnn4c_root_gnn::OpByOp => burn::backend::Cuda, burn::backend::Autodiff<burn::backend::Cuda>);
#[cfg(feature = "wgpu")]
edge_network_kernel!(gnn4c_root_gnn::OpByOp => burn::backend::Wgpu, burn::backend::Autodiff<burn::backend::Wgpu>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_known_samples() {
        let s = Stats::of(&[3.0, 1.0, 2.0, 4.0]);
        assert_eq!((s.n, s.median, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!((s.mean - 2.5).abs() < 1e-12);
        assert!((s.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }
}
