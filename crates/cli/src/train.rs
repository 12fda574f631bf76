//! `gnn4colliders train` and `finetune`: run config → cache → Edge_Network training in a run folder.
//!
//! Run folder (default `runs/<name>`, fine-tuning `runs/<name>_<mode>`): `config.json` (the
//! resolved config), `last.ckpt`, `best.ckpt`, `history.jsonl`, and at the end `best.safetensors`
//! (PyTorch state-dict names) and `metrics.json` (best model on validation and test).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use burn::module::AutodiffModule;
use burn::prelude::*;
use gnn4c_cli::backend::TrainingBackend;
use gnn4c_cli::device::{DeviceChoice, check_device};
use gnn4c_cli::pipeline::{CacheBuild, CacheMode, GraphStream, ensure_cache};
use gnn4c_data::{CONTRACT_VERSION, DatasetConfig, Folds, Split, first_difference};
use gnn4c_distributed::World;
use gnn4c_family::write_atomic;
use gnn4c_features::SelectionConfig;
use gnn4c_root_gnn::{
    EdgeNetwork, EdgeNetworkConfig, HEAD_WEIGHT, is_head_parameter, save_pytorch_safetensors,
};
use gnn4c_tasks::Task;
use gnn4c_training::{
    Checkpoint, FitOptions, MetricsRecord, ProgressBar, RunFiles, Scoring, TrainConfig, fit,
    predict, progress_wanted, read_checkpoint,
};
use serde::{Deserialize, Serialize};

use crate::config;
use crate::preprocess::cache_dir;
use crate::scan::load_dataset;

/// Arguments of `train`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders train pretrain_multiclass                     (configs/experiment/pretrain_multiclass.yaml)\n  gnn4colliders train pretrain_multiclass trainer.max_epochs=2 trainer.lr=3e-4 --print-config\n  gnn4colliders train pretrain_multiclass environment=perlmutter --device cuda:0\n  gnn4colliders train pretrain_multiclass --resume\n  gnn4colliders train finetune_ttH_CP --run runs/finetune_ttH_CP_scratch   (the from-scratch baseline)\n  gnn4colliders train my_run.yaml data=nanoaod task=multilabel --seed 3\n\nConfig groups (configs/<group>/<name>.yaml, selected in a defaults list or as group=name):\n  data, model, task, trainer, environment. Precedence: defaults list, the file (_self_),\n  GNN4C_<SECTION>__<KEY> environment variables, KEY=VALUE and flags. Exit codes: 0 ok,\n  1 runtime error, 2 usage or config error."
)]
pub(crate) struct Args {
    /// Run config: a YAML file, or the name of one in configs/experiment/.
    config: PathBuf,
    /// Hydra-style overrides, applied last: `trainer.max_epochs=3 model.dropout=0.1` sets keys,
    /// `data=nanoaod task=binary` selects group files. Before them, environment variables
    /// `GNN4C_<SECTION>__<KEY>` (`GNN4C_TRAINER__LR=1e-4`).
    #[arg(value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Print the resolved config (after overrides) as JSON and exit.
    #[arg(long)]
    print_config: bool,
    /// Run folder [default: <environment.runs_dir>/<name>, runs/<name>].
    #[arg(long)]
    run: Option<PathBuf>,
    /// Continue the run in the run folder from its last checkpoint.
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Start again in a run folder that already holds a run (its checkpoints are replaced).
    #[arg(long)]
    overwrite: bool,
    /// cpu, cuda or cuda:N [default: environment.device, cpu].
    #[arg(long)]
    device: Option<DeviceChoice>,
    /// Compute threads, 0 = all cores [default: environment.threads].
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of initialisation, shuffling, dropout and subsets [default: trainer.seed].
    #[arg(long)]
    seed: Option<u64>,
    /// Override trainer.max_epochs.
    #[arg(long)]
    max_epochs: Option<u64>,
    /// No progress bar (it is off anyway when standard error is not a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of the run's stages to FILE: loader
    /// waits, batch preparation, forward, backward, all-reduce, optimiser, validation,
    /// checkpoints, and the model's blocks. Off by default (no cost when off); under MPI each
    /// rank writes FILE.rank<N>. Pair it with a short run (--max-epochs 1, a subset).
    #[arg(long, value_name = "FILE")]
    profile_trace: Option<PathBuf>,
}

/// Arguments of `finetune`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders finetune finetune_ttH_CP                       (from finetune.from, mode finetune.mode)\n  gnn4colliders finetune finetune_ttH_CP --mode frozen_backbone\n  gnn4colliders finetune my_task.yaml --from runs/pretrain_multiclass/best.ckpt --mode full"
)]
pub(crate) struct FinetuneArgs {
    #[command(flatten)]
    common: Args,
    /// Pretrained checkpoint whose backbone is loaded [default: the config's finetune.from].
    #[arg(long)]
    from: Option<PathBuf>,
    /// Train only the new head, or everything [default: the config's finetune.mode].
    #[arg(long, value_enum)]
    mode: Option<FinetuneMode>,
}

/// How much of a pretrained model fine-tuning trains (contract §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub(crate) enum FinetuneMode {
    /// Only the new `classify` head; the backbone gets no gradients and no optimiser state.
    #[default]
    FrozenBackbone,
    /// Everything.
    Full,
}

impl FinetuneMode {
    fn name(self) -> &'static str {
        match self {
            FinetuneMode::FrozenBackbone => "frozen_backbone",
            FinetuneMode::Full => "full",
        }
    }
}

/// The task kind; the number of outputs comes from the dataset's classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TaskKind {
    Binary,
    Multiclass,
    Multilabel,
}

/// The `task` section (`configs/task/*.yaml`); `task: binary` is short for `task: {kind: binary}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskSection {
    kind: TaskKind,
}

fn task_section<'de, D: serde::Deserializer<'de>>(d: D) -> Result<TaskSection, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = TaskSection;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("binary, multiclass, multilabel, or {kind: ...}")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TaskSection, E> {
            let kind = TaskKind::deserialize(serde::de::value::StrDeserializer::<E>::new(s))?;
            Ok(TaskSection { kind })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<TaskSection, A::Error> {
            TaskSection::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(V)
}

/// Where a run executes (`configs/environment/*.yaml`): none of it changes the results on CPU
/// except through the device, so a resume may change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct EnvironmentSection {
    /// cpu, cuda or cuda:N.
    device: String,
    /// Compute threads (the CPU backend's pool); 0 = all cores.
    threads: usize,
    /// Run folders: `<runs_dir>/<name>`.
    runs_dir: PathBuf,
    /// Graph caches: `<cache_dir>/<dataset name>` (unless the run sets `cache`).
    cache_dir: PathBuf,
}

impl Default for EnvironmentSection {
    fn default() -> Self {
        EnvironmentSection {
            device: "cpu".into(),
            threads: 0,
            runs_dir: PathBuf::from("runs"),
            cache_dir: PathBuf::from("cache"),
        }
    }
}

/// Edge_Network hyperparameters a run may set (contract §5 defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ModelSection {
    d_hidden: usize,
    n_layers: usize,
    n_steps: usize,
    dropout: f64,
}

impl Default for ModelSection {
    /// The model's own defaults (`EdgeNetworkConfig`, contract §5): written once, there.
    fn default() -> Self {
        let c = EdgeNetworkConfig::new(1);
        ModelSection {
            d_hidden: c.d_hidden,
            n_layers: c.n_layers,
            n_steps: c.n_steps,
            dropout: c.dropout,
        }
    }
}

impl ModelSection {
    /// What of the backbone's shape (`d_hidden`, `n_layers`, `n_steps`) differs in
    /// `pretrained`, as "key pretrained (config value)", or `None`.
    fn backbone_difference(&self, pretrained: &ModelSection) -> Option<String> {
        let pairs = [
            ("d_hidden", pretrained.d_hidden, self.d_hidden),
            ("n_layers", pretrained.n_layers, self.n_layers),
            ("n_steps", pretrained.n_steps, self.n_steps),
        ];
        let differing: Vec<String> = pairs
            .iter()
            .filter(|(_, p, c)| p != c)
            .map(|(k, p, c)| format!("model.{k} {p} (the config says {c})"))
            .collect();
        (!differing.is_empty()).then(|| differing.join(", "))
    }

    pub(crate) fn config(&self, n_out: usize) -> EdgeNetworkConfig {
        EdgeNetworkConfig::new(n_out)
            .with_d_hidden(self.d_hidden)
            .with_n_layers(self.n_layers)
            .with_n_steps(self.n_steps)
            .with_dropout(self.dropout)
    }
}

/// Seeded random subsets of the splits (small-data studies, quick runs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct SubsetSection {
    /// Training events to keep [default: all].
    train_events: Option<usize>,
    /// Validation events to keep [default: all].
    val_events: Option<usize>,
    /// Test events to keep for the final evaluation [default: all].
    test_events: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FinetuneSection {
    /// The pretrained checkpoint.
    from: Option<PathBuf>,
    #[serde(default)]
    mode: FinetuneMode,
}

/// A run config, composed from `configs/experiment/*.yaml` and its groups (see `config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunConfig {
    /// Run name (the default run folder is `<environment.runs_dir>/<name>`).
    name: String,
    /// Dataset config file (or a name in configs/data/).
    data: PathBuf,
    /// Cache folder [default: `<environment.cache_dir>/<dataset name>`].
    #[serde(default)]
    pub(crate) cache: Option<PathBuf>,
    #[serde(default)]
    pub(crate) folds: Folds,
    #[serde(deserialize_with = "task_section")]
    task: TaskSection,
    #[serde(default)]
    model: ModelSection,
    #[serde(default)]
    trainer: TrainConfig,
    #[serde(default)]
    environment: EnvironmentSection,
    #[serde(default)]
    subset: SubsetSection,
    #[serde(default)]
    finetune: Option<FinetuneSection>,
}

/// The composed run config, checked; config problems are usage errors (exit code 2).
fn load_run_config(args: &Args) -> anyhow::Result<(RunConfig, Vec<String>)> {
    let path = config::resolve_primary(&args.config)?;
    let mut flags = Vec::new();
    if let Some(d) = args.device {
        flags.push(("device", format!("environment.device={}", d.name())));
    }
    if let Some(t) = args.threads {
        flags.push(("threads", format!("environment.threads={t}")));
    }
    if let Some(s) = args.seed {
        flags.push(("seed", format!("trainer.seed={s}")));
    }
    if let Some(n) = args.max_epochs {
        flags.push(("max-epochs", format!("trainer.max_epochs={n}")));
    }
    let composed = config::compose(&path, &args.overrides, &flags)?;
    let cfg: RunConfig = composed.extract()?;
    let label = path.display();
    let check = |r: Result<(), String>| -> anyhow::Result<()> {
        r.map_err(|e| config::ConfigError(format!("in run config {label}: {e}")).into())
    };
    check(cfg.folds.validate().map_err(|e| e.to_string()))?;
    check(cfg.trainer.validate().map_err(|e| e.to_string()))?;
    check(
        cfg.environment
            .device
            .parse::<DeviceChoice>()
            .map(|_| ())
            .map_err(|e| format!("environment.device: {e}")),
    )?;
    Ok((cfg, composed.sources()))
}

/// `data=nanoaod` (Hydra's group form) means `configs/data/nanoaod.yaml` when `nanoaod` is not
/// itself a file.
fn resolve_data_group(data: &Path) -> PathBuf {
    let group = Path::new("configs/data").join(data).with_extension("yaml");
    if !data.is_file() && data.extension().is_none() && group.is_file() {
        group
    } else {
        data.to_path_buf()
    }
}

fn task_of(kind: TaskKind, data: &DatasetConfig) -> anyhow::Result<Task> {
    let k = data.classes.len();
    Ok(match kind {
        TaskKind::Binary if k == 2 => Task::Binary,
        TaskKind::Binary => {
            return Err(config::ConfigError(format!(
                "task binary needs a dataset with 2 classes, dataset '{}' has {k}: {:?}",
                data.name, data.classes
            ))
            .into());
        }
        TaskKind::Multiclass if k >= 2 => Task::Multiclass { n_classes: k },
        TaskKind::Multilabel if k >= 1 => Task::Multilabel { n_labels: k },
        _ => {
            return Err(config::ConfigError(format!(
                "dataset '{}' lists no classes: add `classes: [...]` to it",
                data.name
            ))
            .into());
        }
    })
}

/// What `config.json` holds, and the state of every checkpoint: the run config as resolved
/// (dataset file, cache folder and, when fine-tuning, the backbone's shape filled in), the
/// dataset config it names, the selection, the task and the layers it was composed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolvedRun {
    pub(crate) contract_version: String,
    pub(crate) run: RunConfig,
    pub(crate) dataset: DatasetConfig,
    pub(crate) selection: SelectionConfig,
    pub(crate) task: Task,
    pub(crate) composed_from: Vec<String>,
}

impl ResolvedRun {
    /// A resolved run stored as JSON (`config.json`, a checkpoint's state); `origin` names it.
    pub(crate) fn from_value(v: &serde_json::Value, origin: &Path) -> anyhow::Result<ResolvedRun> {
        serde_json::from_value(v.clone())
            .with_context(|| format!("{}: not a resolved run config", origin.display()))
    }

    /// This run with what a resume may change (epochs, step checkpoints, loader and environment
    /// settings, the composition) set aside, as JSON to compare.
    fn comparable(&self) -> anyhow::Result<serde_json::Value> {
        let mut r = self.clone();
        let t = &mut r.run.trainer;
        t.max_epochs = 0;
        t.loader_threads = 0;
        t.prefetch = 0;
        t.eval_batch_size = 0;
        t.checkpoint_every_steps = None;
        r.run.environment = EnvironmentSection::default();
        r.composed_from.clear();
        Ok(serde_json::to_value(r)?)
    }
}

/// Records every tracing span into a Chrome trace at `path` until dropped; the file appears
/// (atomically renamed) when the guard is dropped.
struct ProfileTrace {
    guard: Option<tracing_chrome::FlushGuard>,
    tmp: PathBuf,
    path: PathBuf,
}

impl ProfileTrace {
    fn start(path: &Path, world: &World) -> anyhow::Result<ProfileTrace> {
        use tracing_subscriber::layer::SubscriberExt;
        let path = if world.is_distributed() {
            PathBuf::from(format!("{}.rank{}", path.display(), world.rank()))
        } else {
            path.to_path_buf()
        };
        gnn4c_data::check_output_path(&path, true)?;
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".tmp-{}.{name}", std::process::id()));
        let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
            .file(&tmp)
            .include_args(true)
            .build();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .context("installing the trace recorder")?;
        Ok(ProfileTrace {
            guard: Some(guard),
            tmp,
            path,
        })
    }
}

impl Drop for ProfileTrace {
    fn drop(&mut self) {
        drop(self.guard.take()); // flushes and closes the file
        if std::fs::rename(&self.tmp, &self.path).is_ok() {
            let _ = writeln!(
                std::io::stdout(),
                "wrote the trace {} (open in https://ui.perfetto.dev or chrome://tracing)",
                self.path.display()
            );
        }
        if let Some(mb) = gnn4c_cli::device::peak_rss_mb() {
            let _ = writeln!(std::io::stdout(), "peak resident memory: {mb:.0} MB");
        }
    }
}

pub(crate) fn run_train(args: &Args, world: &World) -> anyhow::Result<()> {
    let (mut cfg, sources) = load_run_config(args)?;
    if cfg.finetune.take().is_some() && !args.print_config && world.is_root() {
        // The from-scratch baseline of a fine-tuning experiment uses the same config.
        writeln!(
            std::io::stdout(),
            "note: `train` trains from scratch; the config's finetune section is used by `gnn4colliders finetune`"
        )?;
    }
    let run_dir = args
        .run
        .clone()
        .unwrap_or_else(|| cfg.environment.runs_dir.join(&cfg.name));
    dispatch(args, cfg, &sources, &run_dir, None, world)
}

pub(crate) fn run_finetune(args: &FinetuneArgs, world: &World) -> anyhow::Result<()> {
    let (mut cfg, sources) = load_run_config(&args.common)?;
    let section = cfg.finetune.get_or_insert(FinetuneSection {
        from: None,
        mode: FinetuneMode::default(),
    });
    if let Some(f) = &args.from {
        section.from = Some(f.clone());
    }
    if let Some(m) = args.mode {
        section.mode = m;
    }
    let Some(from) = section.from.clone() else {
        bail!(
            "finetune needs a pretrained checkpoint: pass --from PATH or set finetune.from in {}",
            args.common.config.display()
        );
    };
    let mode = section.mode;
    let run_dir = args.common.run.clone().unwrap_or_else(|| {
        cfg.environment
            .runs_dir
            .join(format!("{}_{}", cfg.name, mode.name()))
    });
    dispatch(
        &args.common,
        cfg,
        &sources,
        &run_dir,
        Some(&(from, mode)),
        world,
    )
}

fn dispatch(
    args: &Args,
    cfg: RunConfig,
    sources: &[String],
    run_dir: &Path,
    finetune: Option<&(PathBuf, FinetuneMode)>,
    world: &World,
) -> anyhow::Result<()> {
    let mut device: DeviceChoice = cfg.environment.device.parse().map_err(anyhow::Error::msg)?;
    // One rank per GPU: plain `cuda` means this node's GPU number <local rank>.
    if world.is_distributed() && cfg.environment.device.trim() == "cuda" {
        device = DeviceChoice::Cuda(world.local_rank());
    }
    if !args.print_config {
        check_device(device).map_err(anyhow::Error::msg)?;
        let threads = compute_threads(cfg.environment.threads, world);
        let pool = gnn4c_cli::device::init_compute_pool(threads);
        if threads > 0 && pool != threads {
            anyhow::bail!(
                "could not set {threads} compute threads: the pool already has {pool} (set \
                 environment.threads before anything else runs)"
            );
        }
    }
    let _trace = match &args.profile_trace {
        Some(p) if !args.print_config => Some(ProfileTrace::start(p, world)?),
        _ => None,
    };
    match device {
        DeviceChoice::Cpu => train_on::<burn::backend::Autodiff<burn::backend::Flex>>(
            args,
            cfg,
            sources,
            run_dir,
            finetune,
            world,
            &Default::default(),
        ),
        #[cfg(feature = "cuda")]
        DeviceChoice::Cuda(i) => train_on::<burn::backend::Autodiff<burn::backend::Cuda>>(
            args,
            cfg,
            sources,
            run_dir,
            finetune,
            world,
            &burn::backend::cuda::CudaDevice::new(i),
        ),
        #[cfg(not(feature = "cuda"))]
        DeviceChoice::Cuda(_) => unreachable!("check_device refuses CUDA without the cuda feature"),
    }
}

/// The model section of the config stored in checkpoint `ck`.
fn model_section(ck: &Checkpoint) -> anyhow::Result<ModelSection> {
    Ok(ResolvedRun::from_value(&ck.state.config, &ck.path)?
        .run
        .model)
}

/// A fine-tuning run's model section: the backbone's shape (`d_hidden`, `n_layers`, `n_steps`)
/// from the pretrained checkpoint, or on `--resume` from the run's own, so that the run records
/// it and predict, evaluate, export and `--resume` rebuild the same network; `config`'s dropout.
/// A differing config value is noted on `out` (not on resume: the run already said so).
fn finetune_model(
    config: &ModelSection,
    pretrained: Option<&Checkpoint>,
    resumed: Option<&Checkpoint>,
    out: &mut dyn Write,
) -> anyhow::Result<ModelSection> {
    let Some(ck) = pretrained.or(resumed) else {
        return Ok(config.clone());
    };
    let backbone = model_section(ck)?;
    if let (Some(what), Some(ck)) = (config.backbone_difference(&backbone), pretrained) {
        writeln!(
            out,
            "note: the backbone's settings come from {}: {what}",
            ck.path.display()
        )?;
    }
    Ok(ModelSection {
        dropout: config.dropout,
        ..backbone
    })
}

/// The Edge_Network a checkpoint holds, built from the model section of its stored config and
/// the head width of its `classify.weight`, checked and loaded (inference, export, or the
/// backbone of a fine-tuning run).
pub(crate) fn model_from_checkpoint<B: Backend>(
    ck: &Checkpoint,
    device: &B::Device,
) -> anyhow::Result<EdgeNetwork<B>> {
    let model = model_section(ck)?;
    let n_out = ck
        .state
        .parameters
        .iter()
        .find(|p| p.name == HEAD_WEIGHT)
        .and_then(|p| p.shape.get(1).copied())
        .with_context(|| {
            format!(
                "checkpoint {} holds no Edge_Network (no {HEAD_WEIGHT})",
                ck.path.display()
            )
        })?;
    let net = model.config(n_out).init::<B>(device);
    ck.check_compatible(&net, CONTRACT_VERSION)?;
    Ok(ck.load_model(net, device)?)
}

/// The compute threads of this process: `environment.threads`, or for 0 the node's cores shared
/// among its ranks (one per core on one process; `mpirun -np 2` on 8 cores: 4 each), so that
/// ranks on one node do not oversubscribe its cores.
fn compute_threads(threads: usize, world: &World) -> usize {
    if threads > 0 || world.local_size() <= 1 {
        return threads;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores / world.local_size()).max(1)
}

fn train_on<B: TrainingBackend>(
    args: &Args,
    mut cfg: RunConfig,
    sources: &[String],
    run_dir: &Path,
    finetune: Option<&(PathBuf, FinetuneMode)>,
    world: &World,
    device: &B::Device,
) -> anyhow::Result<()> {
    // Rank 0 speaks for the job; the other ranks train silently.
    let mut out: Box<dyn Write> = if world.is_root() {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::sink())
    };
    cfg.data = resolve_data_group(&cfg.data);
    let data = load_dataset(&cfg.data)?;
    let task = task_of(cfg.task.kind, &data)?;
    // The cache folder is resolved here so predict and evaluate find it from config.json alone.
    cfg.cache = Some(cache_dir(
        cfg.cache.as_deref(),
        &data,
        &cfg.environment.cache_dir,
    ));
    let files = RunFiles {
        last: run_dir.join("last.ckpt"),
        best: run_dir.join("best.ckpt"),
        history: run_dir.join("history.jsonl"),
    };
    let resume_ck = if args.resume && !args.print_config {
        Some(read_checkpoint(&files.last).with_context(|| {
            format!(
                "--resume: no checkpoint to resume in {} (start the run without --resume)",
                run_dir.display()
            )
        })?)
    } else {
        None
    };
    let pretrained = match (finetune, &resume_ck) {
        (Some((from, _)), None) => Some(
            read_checkpoint(from)
                .with_context(|| format!("loading the pretrained checkpoint {}", from.display()))?,
        ),
        _ => None,
    };
    if finetune.is_some() {
        cfg.model = finetune_model(
            &cfg.model,
            pretrained.as_ref(),
            resume_ck.as_ref(),
            &mut out,
        )?;
    }
    let resolved = ResolvedRun {
        contract_version: CONTRACT_VERSION.to_owned(),
        run: cfg.clone(),
        dataset: data.clone(),
        selection: SelectionConfig::default(),
        task,
        composed_from: sources.to_vec(),
    };
    if args.print_config {
        writeln!(out, "{}", serde_json::to_string_pretty(&resolved)?)?;
        return Ok(());
    }

    // The run folder: never silently replace a run.
    let resume = if let Some(ck) = resume_ck {
        let stored = ResolvedRun::from_value(&ck.state.config, &ck.path)?;
        if let Some(what) = first_difference(&stored.comparable()?, &resolved.comparable()?) {
            return Err(config::ConfigError(format!(
                "--resume: the config differs from the checkpoint's ({what}); only max_epochs, checkpoint_every_steps, loader and environment settings may change on resume"
            ))
            .into());
        }
        Some(ck)
    } else {
        if files.last.exists() && !args.overwrite {
            bail!(
                "run folder {} already holds a run: pass --resume to continue it or --overwrite to start again",
                run_dir.display()
            );
        }
        None
    };
    // Rank 0 writes the run folder; the other ranks never read it (a failed rank ends the job).
    if world.is_root() {
        std::fs::create_dir_all(run_dir)
            .with_context(|| format!("creating run folder {}", run_dir.display()))?;
        if args.overwrite {
            for f in [&files.best, &files.history] {
                let _ = std::fs::remove_file(f);
            }
        }
        write_atomic(
            &run_dir.join("config.json"),
            serde_json::to_string_pretty(&resolved)?.as_bytes(),
        )
        .with_context(|| format!("writing {}", run_dir.join("config.json").display()))?;
    }

    // Data: the cache, built or validated by rank 0, then only read by the others.
    let cache = cfg.cache.clone().expect("resolved above");
    let cache_span = tracing::info_span!("cache").entered();
    let manifest = if world.is_root() {
        let m = ensure_cache(
            &mut out,
            &data,
            &cache,
            CacheMode::Auto,
            &cfg.folds,
            &CacheBuild::default(),
            &SelectionConfig::default(),
        )?;
        world.barrier();
        m
    } else {
        // Rank 0 has checked every shard: the others read the manifest it found up to date.
        world.barrier();
        gnn4c_data::read_manifest(&cache)?
    };
    if let Some(ck) = &resume
        && ck.state.fingerprint != manifest.fingerprint
    {
        bail!(
            "--resume: the cache {} was rebuilt since the checkpoint (fingerprint {} then, {} now)",
            cache.display(),
            &ck.state.fingerprint[..12.min(ck.state.fingerprint.len())],
            &manifest.fingerprint[..12]
        );
    }
    drop(cache_span);
    let load_span = tracing::info_span!("open_splits").entered();
    let seed = cfg.trainer.seed;
    // The splits are streamed block by block, never read whole; subsets come from the manifest.
    let (_, train) = GraphStream::open(
        &cache,
        &cfg.folds,
        &[Split::Train],
        cfg.subset
            .train_events
            .map(|n| (n, seed ^ 0x0074_7261_696e)),
    )?;
    let (_, val) = GraphStream::open(
        &cache,
        &cfg.folds,
        &[Split::Validation],
        cfg.subset.val_events.map(|n| (n, seed ^ 0x76_616c)),
    )?;
    drop(load_span);
    // The model: fresh, or a pretrained backbone with a new head.
    B::seed(device, seed);
    let n_out = task.n_out();
    let model: EdgeNetwork<B> = match (finetune, &resume) {
        (Some((from, mode)), None) => {
            let ck = pretrained.expect("read above for a fine-tuning run that is not resumed");
            let net = model_from_checkpoint::<B>(&ck, device)?.with_new_head(n_out, seed, device);
            writeln!(
                out,
                "fine-tuning from {} (epoch {}), new {n_out}-output head, {}",
                from.display(),
                ck.state.epoch,
                mode.name()
            )?;
            match mode {
                FinetuneMode::FrozenBackbone => net.freeze_backbone(),
                FinetuneMode::Full => net,
            }
        }
        (Some((_, mode)), Some(_)) => {
            // The run's own checkpoint holds every weight: only the structure is needed here.
            let net = cfg.model.config(n_out).init::<B>(device);
            match mode {
                FinetuneMode::FrozenBackbone => net.freeze_backbone(),
                FinetuneMode::Full => net,
            }
        }
        (None, _) => cfg.model.config(n_out).init::<B>(device),
    };
    let frozen = matches!(finetune, Some((_, FinetuneMode::FrozenBackbone)));
    // How the MLP blocks run on this backend (fused on the CPU, forward and backward).
    let model = model.with_kernel(B::training_kernel());
    let trainable: usize = {
        let mut n = 0usize;
        let shapes = gnn4c_training::param_shapes(&model);
        for p in &shapes {
            if !frozen || is_head_parameter(&p.name) {
                n += p.shape.iter().product::<usize>();
            }
        }
        n
    };
    writeln!(
        out,
        "run {}: {} training / {} validation events, task {:?}, {} trainable of {} parameters, device {:?}{}",
        run_dir.display(),
        train.events(),
        val.events(),
        task,
        trainable,
        model.num_params(),
        cfg.environment.device,
        if world.is_distributed() {
            format!(
                ", {} MPI ranks (global batch {} = {} × {})",
                world.size(),
                cfg.trainer.batch_size * world.size(),
                cfg.trainer.batch_size,
                world.size()
            )
        } else {
            String::new()
        }
    )?;
    if let Some(ck) = &resume {
        match &ck.state.position {
            Some(p) => writeln!(
                out,
                "resuming inside epoch {} after {} of its steps (step {})",
                ck.state.epoch + 1,
                p.batches,
                ck.state.global_step
            )?,
            None => writeln!(
                out,
                "resuming after epoch {} (step {})",
                ck.state.epoch, ck.state.global_step
            )?,
        }
    }

    let report = fit::<B, _, _>(
        model,
        &train,
        &val,
        FitOptions {
            config: cfg.trainer.clone(),
            task,
            files: files.clone(),
            resolved_config: serde_json::to_value(&resolved)?,
            fingerprint: manifest.fingerprint,
            contract_version: CONTRACT_VERSION.to_owned(),
            written_by: format!("gnn4colliders {}", env!("CARGO_PKG_VERSION")),
            resume,
            progress: !args.no_progress && progress_wanted(),
            log: &mut out,
            world,
        },
        device,
    )?;
    drop(train);
    if !world.is_root() {
        return Ok(());
    }

    // The best model: exported with PyTorch names, and scored on validation and test.
    let best = read_checkpoint(&files.best)?;
    let skeleton = report.model;
    let best_model = best.load_model(skeleton, device)?.valid();
    let weights = run_dir.join("best.safetensors");
    save_pytorch_safetensors(&best_model, &weights)?;
    let (_, test) = GraphStream::open(
        &cache,
        &cfg.folds,
        &[Split::Test],
        cfg.subset.test_events.map(|n| (n, seed ^ 0x7465_7374)),
    )?;
    let test_fold_events = test.split.fold_events() as usize;
    let scoring = Scoring::whole(cfg.trainer.eval_batch_size, cfg.trainer.loader_threads);
    let hidden = ProgressBar::hidden();
    let val_m = predict(&best_model, &val, &task, scoring, device, &hidden)?.metrics(&task);
    let test_m = predict(&best_model, &test, &task, scoring, device, &hidden)?.metrics(&task);
    // Epochs are numbered from 1 wherever a user reads them.
    let best_epoch = best.state.early_stopping.best_epoch.unwrap_or(0) + 1;
    // The objective that chose the best epoch: the class-balanced validation loss when the
    // training weights are balanced, else the validation loss.
    let objective = report
        .history
        .iter()
        .find(|r| r.epoch == best_epoch)
        .map_or(val_m.loss, |r| r.val_objective);
    let summary = serde_json::json!({
        "best_epoch": best_epoch,
        "best_validation_objective": objective,
        "epochs_run": report.history.len(),
        "stopped_early": report.stopped_early,
        "validation": MetricsRecord::from(&val_m),
        "test": MetricsRecord::from(&test_m),
        "test_events": test.events(),
        "test_fold_events": test_fold_events,
    });
    write_atomic(
        &run_dir.join("metrics.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    let balanced = if cfg.trainer.class_balance {
        format!(" (balanced {objective:.4}, which chose the epoch)")
    } else {
        String::new()
    };
    let test_events = if test.events() < test_fold_events {
        format!(
            "{} of the fold's {test_fold_events} events; `evaluate` scores the whole fold",
            test.events()
        )
    } else {
        format!("{} events", test.events())
    };
    writeln!(
        out,
        "best epoch {best_epoch}: validation loss {:.4}{balanced} acc {:.4} auc {}; test ({test_events}) loss {:.4} acc {:.4} auc {}",
        val_m.loss,
        val_m.accuracy,
        fmt_auc(val_m.auc_macro),
        test_m.loss,
        test_m.accuracy,
        fmt_auc(test_m.auc_macro),
    )?;
    let plots = crate::plots::training_plots(&files.history, run_dir)?;
    writeln!(
        out,
        "wrote {} (checkpoints, history.jsonl, metrics.json, best.safetensors{})",
        run_dir.display(),
        plots.iter().map(|p| format!(", {p}")).collect::<String>()
    )?;
    writeln!(
        out,
        "next: gnn4colliders evaluate {0} (test metrics, ROC and score plots), gnn4colliders predict {0} (NPZ and ROOT friend trees)",
        run_dir.display()
    )?;
    Ok(())
}

fn fmt_auc(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "n/a".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_group_file_states_the_models_defaults() {
        use figment::providers::{Format, Yaml};
        let file: ModelSection = figment::Figment::from(Yaml::string(include_str!(
            "../../../configs/model/root_gnn.yaml"
        )))
        .extract()
        .expect("configs/model/root_gnn.yaml");
        assert_eq!(file, ModelSection::default());
        let trainer: TrainConfig = figment::Figment::from(Yaml::string(include_str!(
            "../../../configs/trainer/default.yaml"
        )))
        .extract()
        .expect("configs/trainer/default.yaml");
        assert_eq!(trainer, TrainConfig::default());
    }
}
