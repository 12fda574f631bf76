//! The training step behind `train` and `finetune`: a run config → the event cache → a model of
//! the configured family trained in a run folder, its best model exported and scored.

use std::collections::BTreeMap;
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use burn::module::AutodiffModule;
use burn::prelude::*;
use gnn4c_data::{CONTRACT_VERSION, CacheManifest, Split, first_difference};
use gnn4c_distributed::World;
use gnn4c_family::write_atomic;
use gnn4c_training::{
    Checkpoint, EventWriter, FitOptions, FitReport, MetricsRecord, ProgressBar, Scoring, StopFlag,
    fit, fmt_metric, predict, progress_wanted, read_checkpoint,
};
use serde::{Deserialize, Serialize};

use crate::backend::TrainingBackend;
use crate::cached_events::CachedEvents;
use crate::device::{DeviceChoice, check_device};
use crate::error::ConfigError;
use crate::family::{FamilyJob, ModelConfig, Registered, load_model};
use crate::pipeline::{CacheBuild, CacheMode, ensure_cache};
use crate::run_dir::{RunDir, Start};
use crate::settings::{
    FinetuneMode, FinetuneSection, ResolvedRun, RunConfig, cache_dir, check_same_inputs,
    input_widths, load_dataset, resolve_data_group, standardization_of, task_of,
};
use crate::tensorboard::open_board;

/// Fine-tuning's starting point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finetune {
    /// The pretrained checkpoint whose backbone is loaded.
    pub from: PathBuf,
    /// Frozen backbone or full.
    pub mode: FinetuneMode,
}

impl Finetune {
    /// The config's `finetune` section with `from` and `mode` (command-line flags) applied; the
    /// section is filled in so the run records it. `config` names the run config in the error
    /// when no checkpoint is given.
    pub fn resolve(
        cfg: &mut RunConfig,
        from: Option<&Path>,
        mode: Option<FinetuneMode>,
        config: &Path,
    ) -> anyhow::Result<Finetune> {
        let section = cfg.finetune.get_or_insert(FinetuneSection {
            from: None,
            mode: FinetuneMode::default(),
        });
        if let Some(f) = from {
            section.from = Some(f.to_path_buf());
        }
        if let Some(m) = mode {
            section.mode = m;
        }
        let Some(from) = section.from.clone() else {
            bail!(
                "finetune needs a pretrained checkpoint: pass --from PATH or set finetune.from in {}",
                config.display()
            );
        };
        Ok(Finetune {
            from,
            mode: section.mode,
        })
    }
}

/// What to train, where, and how to report it.
#[derive(Debug, Clone)]
pub struct TrainRequest {
    /// The composed run config.
    pub config: RunConfig,
    /// The labels of the layers it was composed from.
    pub composed_from: Vec<String>,
    /// The run folder.
    pub run_dir: RunDir,
    /// New, overwrite or resume.
    pub start: Start,
    /// Fine-tune from a pretrained checkpoint instead of training from scratch.
    pub finetune: Option<Finetune>,
    /// Print the resolved config as JSON and stop.
    pub print_config: bool,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
    /// Write a Chrome trace of the run's stages to this file.
    pub profile_trace: Option<PathBuf>,
    /// Stops the run after the step under way, with `last.ckpt` holding the position
    /// ([`crate::stop_on_signals`] sets it on SIGTERM, SIGINT and SIGUSR1).
    pub stop: StopFlag,
}

impl TrainRequest {
    /// A request to train `config` in its default run folder (`<runs_dir>/<name>`, fine-tuning
    /// `<runs_dir>/<name>_<mode>`) as a new run, without progress bar or trace.
    pub fn new(
        config: RunConfig,
        composed_from: Vec<String>,
        finetune: Option<Finetune>,
    ) -> TrainRequest {
        let name = match &finetune {
            Some(f) => format!("{}_{}", config.name, f.mode.name()),
            None => config.name.clone(),
        };
        TrainRequest {
            run_dir: RunDir::new(config.environment.runs_dir.join(name)),
            config,
            composed_from,
            start: Start::New,
            finetune,
            print_config: false,
            progress: false,
            profile_trace: None,
            stop: StopFlag::new(),
        }
    }
}

/// What `metrics.json` of a finished run holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The epoch of the best checkpoint, from 1.
    pub best_epoch: u64,
    /// The validation objective that chose it.
    pub best_validation_objective: f64,
    /// Epochs trained (including those before a resume).
    pub epochs_run: usize,
    /// Whether early stopping ended the run.
    pub stopped_early: bool,
    /// The best model on the validation split.
    pub validation: MetricsRecord,
    /// The best model on the test split (or its subset).
    pub test: MetricsRecord,
    /// Test events scored.
    pub test_events: usize,
    /// Events in the test fold.
    pub test_fold_events: usize,
}

/// Trains (or fine-tunes) as `req` says, under `world`; rank 0 writes the run folder and the
/// log lines to `out`. Returns the run's summary (`None` on other ranks and for `print_config`).
pub fn train(
    req: &TrainRequest,
    world: &World,
    out: &mut dyn Write,
) -> anyhow::Result<Option<RunSummary>> {
    let env = &req.config.environment;
    let mut device: DeviceChoice = env.device.parse().map_err(anyhow::Error::msg)?;
    // One rank per GPU: plain `cuda` means this node's GPU number <local rank>.
    if world.is_distributed() && env.device.trim() == "cuda" {
        device = DeviceChoice::Cuda(world.local_rank());
    }
    if !req.print_config {
        check_device(device).map_err(anyhow::Error::msg)?;
        let threads = compute_threads(env.threads, world);
        let pool = crate::device::init_compute_pool(threads);
        if threads > 0 && pool != threads {
            bail!(
                "could not set {threads} compute threads: the pool already has {pool} (set \
                 environment.threads before anything else runs)"
            );
        }
    }
    let _trace = match &req.profile_trace {
        Some(p) if !req.print_config => Some(crate::trace::ProfileTrace::start(p, world)?),
        _ => None,
    };
    crate::on_backend!(device, |B, dev| train_on::<burn::backend::Autodiff<B>>(
        req, world, out, &dev
    ))
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

/// The model a run trains: the config's, or when fine-tuning the pretrained checkpoint's backbone
/// (on `--resume`, the run's own checkpoint's) with the config's dropout and `n_out` outputs.
/// A differing backbone setting is noted on `out` (not on resume: the run already said so).
fn resolve_model(
    cfg: &RunConfig,
    data: &gnn4c_data::DatasetConfig,
    n_out: usize,
    finetune: bool,
    pretrained: Option<&Checkpoint>,
    resumed: Option<&Checkpoint>,
    out: &mut dyn Write,
) -> anyhow::Result<ModelConfig> {
    let configured = ModelConfig::resolve(&cfg.model, n_out)?.with_inputs(input_widths(data)?);
    let source = if finetune {
        pretrained.or(resumed)
    } else {
        None
    };
    let Some(ck) = source else {
        return Ok(configured);
    };
    let stored_run = ResolvedRun::from_value(&ck.state.config, &ck.path)?;
    check_same_inputs(&stored_run.dataset, data, &ck.path)?;
    let stored = stored_run.model;
    let model = configured.finetuned(&stored, n_out).ok_or_else(|| {
        ConfigError(format!(
            "{} holds a {} model but the config names {}: select it with model={}",
            ck.path.display(),
            stored.name(),
            configured.name(),
            stored.name()
        ))
    })?;
    let differing = model.differences(&configured);
    if let (false, Some(ck)) = (differing.is_empty(), pretrained) {
        let what: Vec<String> = differing
            .iter()
            .map(|(k, theirs, ours)| format!("model.{k} {theirs} (the config says {ours})"))
            .collect();
        writeln!(
            out,
            "note: the backbone's settings come from {}: {}",
            ck.path.display(),
            what.join(", ")
        )?;
    }
    Ok(model)
}

fn train_on<B: TrainingBackend>(
    req: &TrainRequest,
    world: &World,
    out: &mut dyn Write,
    device: &B::Device,
) -> anyhow::Result<Option<RunSummary>> {
    let Starting {
        mut resolved,
        resume,
        pretrained,
    } = resolve_run(req, out)?;
    if req.print_config {
        writeln!(out, "{}", serde_json::to_string_pretty(&resolved)?)?;
        return Ok(None);
    }
    let cache = resolved.run.cache.clone().expect("resolved with the run");
    let manifest = cache_of_run(req, &resolved, &cache, resume.as_ref(), world, out)?;
    resolved.standardization = match (
        req.finetune.is_some(),
        pretrained.as_ref().or(resume.as_ref()),
    ) {
        // A backbone reads its inputs as it was trained to.
        (true, Some(ck)) => ResolvedRun::from_value(&ck.state.config, &ck.path)?.standardization,
        _ => manifest.auto_scales(&|f| resolved.run.folds.split_of(f) == Split::Train),
    };
    if let Some(ck) = &resume {
        check_resumable(ck, &resolved)?;
    }
    // Rank 0 writes the run folder; the other ranks never read it (a failed rank ends the job).
    if world.is_root() {
        req.run_dir.prepare(req.start, &resolved)?;
    }
    resolved.model.clone().run(TrainFamily::<B> {
        req,
        resolved: &resolved,
        cache: &cache,
        manifest,
        resume,
        pretrained,
        world,
        out,
        device,
        backend: PhantomData,
    })
}

/// A run about to train: its resolved config, and the checkpoints it starts from.
struct Starting {
    resolved: ResolvedRun,
    /// The run's own `last.ckpt` on `--resume`.
    resume: Option<Checkpoint>,
    /// The pretrained checkpoint a new fine-tuning run starts from.
    pretrained: Option<Checkpoint>,
}

/// The run `req` asks for, resolved: dataset, task, cache folder (so `predict` and `evaluate`
/// find it from `config.json` alone) and model (when fine-tuning, the pretrained backbone's).
fn resolve_run(req: &TrainRequest, out: &mut dyn Write) -> anyhow::Result<Starting> {
    let mut cfg = req.config.clone();
    cfg.data = resolve_data_group(&cfg.data);
    let data = load_dataset(&cfg.data)?;
    let task = task_of(cfg.task.kind, &data)?;
    cfg.cache = Some(cache_dir(
        cfg.cache.as_deref(),
        &data,
        &cfg.environment.cache_dir,
    ));
    let resume = if req.print_config {
        None
    } else {
        req.run_dir.checkpoint_to_resume(req.start)?
    };
    let pretrained =
        match (&req.finetune, &resume) {
            (Some(f), None) => Some(read_checkpoint(&f.from).with_context(|| {
                format!("loading the pretrained checkpoint {}", f.from.display())
            })?),
            _ => None,
        };
    let model = resolve_model(
        &cfg,
        &data,
        task.n_out(),
        req.finetune.is_some(),
        pretrained.as_ref(),
        resume.as_ref(),
        out,
    )?;
    let resolved = ResolvedRun {
        contract_version: CONTRACT_VERSION.to_owned(),
        run: cfg,
        model,
        dataset: data,
        standardization: BTreeMap::new(),
        legacy_selection: None,
        task,
        composed_from: req.composed_from.clone(),
    };
    Ok(Starting {
        resolved,
        resume,
        pretrained,
    })
}

/// The run's event cache in `cache`: built or validated by rank 0, then only read by the
/// others; a resumed run's cache must be the one its checkpoint trained on.
fn cache_of_run(
    req: &TrainRequest,
    resolved: &ResolvedRun,
    cache: &Path,
    resume: Option<&Checkpoint>,
    world: &World,
    out: &mut dyn Write,
) -> anyhow::Result<CacheManifest> {
    let _span = tracing::info_span!("cache").entered();
    let manifest = if world.is_root() {
        let m = ensure_cache(
            out,
            &resolved.dataset,
            cache,
            CacheMode::Auto,
            &resolved.run.folds,
            &CacheBuild::stopped_by(&req.stop),
        )?;
        world.barrier();
        m
    } else {
        // Rank 0 has checked every shard: the others read the manifest it found up to date.
        world.barrier();
        gnn4c_data::read_manifest(cache)?
    };
    if let Some(ck) = resume
        && ck.state.fingerprint != manifest.fingerprint
    {
        bail!(
            "--resume: the cache {} was rebuilt since the checkpoint (fingerprint {} then, {} now)",
            cache.display(),
            &ck.state.fingerprint[..12.min(ck.state.fingerprint.len())],
            &manifest.fingerprint[..12]
        );
    }
    Ok(manifest)
}

/// A resumed run's config may differ from its checkpoint's only in what does not change the
/// result (max_epochs, checkpoint_every_steps, the TensorBoard settings, loader and environment
/// settings).
fn check_resumable(ck: &Checkpoint, resolved: &ResolvedRun) -> anyhow::Result<()> {
    let stored = ResolvedRun::from_value(&ck.state.config, &ck.path)?;
    if let Some(what) = first_difference(&stored.comparable()?, &resolved.comparable()?) {
        return Err(ConfigError(format!(
            "--resume: the config differs from the checkpoint's ({what}); only max_epochs, checkpoint_every_steps, tensorboard, log_every_steps, loader and environment settings may change on resume"
        ))
        .into());
    }
    Ok(())
}

/// The rest of a training step, with the family's types.
struct TrainFamily<'a, B: TrainingBackend> {
    req: &'a TrainRequest,
    resolved: &'a ResolvedRun,
    cache: &'a Path,
    manifest: CacheManifest,
    resume: Option<Checkpoint>,
    pretrained: Option<Checkpoint>,
    world: &'a World,
    out: &'a mut dyn Write,
    device: &'a B::Device,
    backend: PhantomData<B>,
}

impl<B: TrainingBackend> FamilyJob for TrainFamily<'_, B> {
    type Output = anyhow::Result<Option<RunSummary>>;

    fn run<F: Registered>(mut self, config: &F::Config) -> Self::Output {
        let load_span = tracing::info_span!("open_splits").entered();
        let train = self.open::<F>(config, Split::Train)?;
        let val = self.open::<F>(config, Split::Validation)?;
        drop(load_span);
        let model = self.model_to_train::<F>(config, (train.events(), val.events()))?;
        let cfg = &self.resolved.run;
        let mut board = if self.world.is_root() && cfg.trainer.tensorboard {
            Some(open_board(
                &self.req.run_dir,
                self.resolved,
                self.resume.is_some(),
            )?)
        } else {
            None
        };
        let report = fit::<B, _, _, _>(
            model,
            &train,
            &val,
            FitOptions {
                config: cfg.trainer.clone(),
                task: self.resolved.task,
                files: self.req.run_dir.files(),
                resolved_config: serde_json::to_value(self.resolved)?,
                fingerprint: self.manifest.fingerprint.clone(),
                contract_version: CONTRACT_VERSION.to_owned(),
                written_by: format!("gnn4colliders {}", env!("CARGO_PKG_VERSION")),
                resume: self.resume.take(),
                progress: self.req.progress && progress_wanted(),
                log: &mut *self.out,
                world: self.world,
                stop: self.req.stop.clone(),
                tensorboard: board.as_mut(),
            },
            B::adam_kernel(),
            self.device,
        )?;
        drop(train);
        if !self.world.is_root() {
            return Ok(None);
        }
        self.best_model::<F>(config, report, &val, board.as_mut())
            .map(Some)
    }
}

impl<B: TrainingBackend> TrainFamily<'_, B> {
    /// A split of the cache as the family reads it, streamed block by block; its subset (with
    /// the run's seed and the split's salt) chosen from the manifest.
    fn open<F: Registered>(
        &self,
        config: &F::Config,
        split: Split,
    ) -> anyhow::Result<Arc<CachedEvents<F>>> {
        let cfg = &self.resolved.run;
        let (subset, salt) = match split {
            Split::Train => (cfg.subset.train_events, 0x0074_7261_696e),
            Split::Validation => (cfg.subset.val_events, 0x76_616c),
            Split::Test => (cfg.subset.test_events, 0x7465_7374),
        };
        let (_, events) = CachedEvents::<F>::open(
            self.cache,
            &cfg.folds,
            &[split],
            subset.map(|n| (n, cfg.trainer.seed ^ salt)),
            config,
            &standardization_of(self.resolved)?,
        )?;
        Ok(events)
    }

    /// The model the run trains, as it runs on this backend (new, pretrained with a new head,
    /// its backbone frozen when asked), announced on the console with the `events` of the
    /// training and validation splits.
    fn model_to_train<F: Registered>(
        &mut self,
        config: &F::Config,
        events: (usize, usize),
    ) -> anyhow::Result<B::Trained<F>> {
        let (req, device) = (self.req, self.device);
        B::seed(device, self.resolved.run.trainer.seed);
        let frozen = matches!(
            &req.finetune,
            Some(Finetune {
                mode: FinetuneMode::FrozenBackbone,
                ..
            })
        );
        let n_out = self.resolved.task.n_out();
        let pretrained = self.pretrained.as_ref();
        let mut model = initial_model::<F, B>(req, config, pretrained, n_out, device, self.out)?;
        if frozen {
            model = F::freeze_backbone(model);
        }
        // How the model runs on this backend (the CPU's fused kernels, where it has them).
        let model = B::for_training::<F>(model);
        let trainable: usize = gnn4c_training::param_shapes(&model)
            .iter()
            .filter(|p| !frozen || F::is_head_parameter(&p.name))
            .map(|p| p.shape.iter().product::<usize>())
            .sum();
        report_start(
            self.out,
            self.resolved,
            &req.run_dir,
            events,
            trainable,
            model.num_params(),
            self.world,
        )?;
        if let Some(ck) = &self.resume {
            report_resume(self.out, ck)?;
        }
        Ok(model)
    }

    /// The best model: exported with PyTorch names, scored on the validation and test splits,
    /// `metrics.json`, the training plots and TensorBoard's test metrics written, the summary
    /// printed.
    fn best_model<F: Registered>(
        &mut self,
        config: &F::Config,
        report: FitReport<B::Trained<F>>,
        val: &Arc<CachedEvents<F>>,
        board: Option<&mut EventWriter>,
    ) -> anyhow::Result<RunSummary> {
        let (device, task) = (self.device, self.resolved.task);
        let (cfg, run_dir) = (&self.resolved.run, &self.req.run_dir);
        let files = run_dir.files();
        let best = read_checkpoint(&files.best)?;
        let exported = load_model::<F, B::InnerBackend>(&best, config, device)?;
        F::save_weights(&exported, &run_dir.weights())?;
        let best_model = best.load_model(report.model, device)?.valid();
        let test = self.open::<F>(config, Split::Test)?;
        let scoring = Scoring::whole(cfg.trainer.eval_batch_size, cfg.trainer.loader_threads);
        let hidden = ProgressBar::hidden();
        let val_m = predict(&best_model, val, &task, scoring, device, &hidden)?.metrics(&task);
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
        let summary = RunSummary {
            best_epoch,
            best_validation_objective: objective,
            epochs_run: report.history.len(),
            stopped_early: report.stopped_early,
            validation: MetricsRecord::from(&val_m),
            test: MetricsRecord::from(&test_m),
            test_events: test.events(),
            test_fold_events: test.split.fold_events() as usize,
        };
        write_atomic(
            &run_dir.metrics(),
            serde_json::to_string_pretty(&summary)?.as_bytes(),
        )
        .with_context(|| format!("writing {}", run_dir.metrics().display()))?;
        if let Some(board) = board {
            let step = report.history.last().map_or(0, |r| r.global_step);
            board.test(step, &summary.test)?;
            board.hparams_end()?;
        }
        let out = &mut *self.out;
        report_end(out, &summary, cfg.trainer.class_balance, &val_m, &test_m)?;
        let plots = crate::plots::training_plots(&files.history, run_dir.path())?;
        writeln!(
            out,
            "wrote {} (checkpoints, history.jsonl, tensorboard/, metrics.json, best.safetensors{})",
            run_dir.path().display(),
            plots.iter().map(|p| format!(", {p}")).collect::<String>()
        )?;
        writeln!(
            out,
            "next: gnn4colliders evaluate {0} (test metrics, ROC and score plots), gnn4colliders predict {0} (NPZ and ROOT friend trees)",
            run_dir.path().display()
        )?;
        Ok(summary)
    }
}

/// The model a run starts from: a new one, or the pretrained checkpoint's backbone with a new
/// head of `n_out` outputs (a resumed run's own checkpoint then holds every weight).
fn initial_model<F: Registered, B: TrainingBackend>(
    req: &TrainRequest,
    config: &F::Config,
    pretrained: Option<&Checkpoint>,
    n_out: usize,
    device: &B::Device,
    out: &mut dyn Write,
) -> anyhow::Result<F::Model<B>> {
    let (Some(f), Some(ck)) = (&req.finetune, pretrained) else {
        return Ok(F::init(config, device));
    };
    // The pretrained model: this config's backbone with the checkpoint's head.
    let stored = ResolvedRun::from_value(&ck.state.config, &ck.path)?.model;
    let skeleton = F::finetuned(config, config, stored.n_out());
    let net = load_model::<F, B>(ck, &skeleton, device)?;
    writeln!(
        out,
        "fine-tuning from {} (epoch {}), new {n_out}-output head, {}",
        f.from.display(),
        ck.state.epoch,
        f.mode.name()
    )?;
    Ok(F::with_new_head(
        net,
        n_out,
        req.config.trainer.seed,
        device,
    ))
}

/// The line that opens a training run: folder, events, task, model, parameters, device, ranks.
fn report_start(
    out: &mut dyn Write,
    resolved: &ResolvedRun,
    run_dir: &RunDir,
    (n_train, n_val): (usize, usize),
    trainable: usize,
    parameters: usize,
    world: &World,
) -> anyhow::Result<()> {
    let trainer = &resolved.run.trainer;
    let ranks = if world.is_distributed() {
        format!(
            ", {} MPI ranks (global batch {} = {} × {})",
            world.size(),
            trainer.batch_size * world.size(),
            trainer.batch_size,
            world.size()
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "run {}: {n_train} training / {n_val} validation events, task {:?}, model {}, {trainable} trainable of {parameters} parameters, device {:?}{ranks}",
        run_dir.path().display(),
        resolved.task,
        resolved.model.name(),
        resolved.run.environment.device,
    )?;
    Ok(())
}

/// Where a resumed run picks up.
fn report_resume(out: &mut dyn Write, ck: &Checkpoint) -> anyhow::Result<()> {
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
    Ok(())
}

/// The line that closes a training run: the best epoch on validation and test.
fn report_end(
    out: &mut dyn Write,
    s: &RunSummary,
    class_balance: bool,
    val: &gnn4c_tasks::Metrics,
    test: &gnn4c_tasks::Metrics,
) -> anyhow::Result<()> {
    let balanced = if class_balance {
        format!(
            " (balanced {:.4}, which chose the epoch)",
            s.best_validation_objective
        )
    } else {
        String::new()
    };
    let test_events = if s.test_events < s.test_fold_events {
        format!(
            "{} of the fold's {} events; `evaluate` scores the whole fold",
            s.test_events, s.test_fold_events
        )
    } else {
        format!("{} events", s.test_events)
    };
    writeln!(
        out,
        "best epoch {}: validation loss {:.4}{balanced} acc {:.4} auc {}; test ({test_events}) loss {:.4} acc {:.4} auc {}",
        s.best_epoch,
        val.loss,
        val.accuracy,
        fmt_metric(val.auc_macro.is_finite().then_some(val.auc_macro)),
        test.loss,
        test.accuracy,
        fmt_metric(test.auc_macro.is_finite().then_some(test.auc_macro)),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::{ScoreRequest, evaluate};
    use crate::settings::load_run_config;

    #[test]
    fn the_steps_train_evaluate_and_export_a_transformer_without_the_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        gnn4c_data::write_demo(&root.join("demo"), 100, 42, 1).expect("demo files");
        let data = root.join("ft_data.yaml");
        std::fs::write(
            &data,
            format!(
                "name: ft\ntree: output\nschema: vector\nclasses: [even, odd]\nsamples:\n  - {{name: even, files: [{0}/demo/finetune/ttH_CPeven.root], label: 0}}\n  - {{name: odd, files: [{0}/demo/finetune/ttH_CPodd.root], label: 1}}\n",
                root.display()
            ),
        )
        .expect("write");
        let run_config = root.join("run.yaml");
        std::fs::write(
            &run_config,
            format!(
                "name: steps\ndata: {}\ntask: binary\nmodel: {{name: root_transformer, d_model: 16, n_heads: 2, n_layers: 1}}\ntrainer: {{batch_size: 32, max_epochs: 1, seed: 3}}\nenvironment: {{runs_dir: {r}/runs, cache_dir: {r}/cache}}\nsubset: {{train_events: 64, val_events: 32, test_events: 32}}\n",
                data.display(),
                r = root.display()
            ),
        )
        .expect("write");
        let (cfg, sources) = load_run_config(&run_config, &[], &[]).expect("run config");
        let req = TrainRequest::new(cfg, sources, None);
        assert_eq!(req.run_dir.path(), root.join("runs/steps"));
        let mut log = Vec::new();
        let world = World::single();
        let summary = train(&req, &world, &mut log)
            .expect("trains")
            .expect("rank 0 summarises");
        assert_eq!((summary.epochs_run, summary.test_events), (1, 32));
        let resolved = req.run_dir.read_config().expect("config.json");
        assert_eq!(resolved.model.name(), "root_transformer");
        assert_eq!(resolved.model.n_out(), 1);
        // The run folder is not replaced without Start::Overwrite.
        let again = train(&req, &world, &mut log).unwrap_err();
        assert!(again.to_string().contains("already holds a run"), "{again}");

        let (_, evaluation) =
            evaluate(&ScoreRequest::new(req.run_dir.path()), &mut log).expect("evaluates");
        assert_eq!(evaluation.events, summary.test_fold_events);
        let exported = crate::export::export(
            req.run_dir.path(),
            &root.join("w.safetensors"),
            crate::ExportFormat::Safetensors,
            false,
        )
        .expect("exports");
        assert_eq!(exported.family, "root_transformer");
        assert_eq!(
            std::fs::read(root.join("w.safetensors")).expect("export"),
            std::fs::read(req.run_dir.weights()).expect("best.safetensors")
        );
    }
}
