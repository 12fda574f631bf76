//! The training loop (contract §8): Adam, exponential decay per epoch, early stopping, best-model
//! tracking, checkpoints every epoch, a JSON-lines history and exact resume.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_distributed::World;
use gnn4c_tasks::{
    ClassTotals, Metrics, NegativeWeights, Task, metrics_from_logits, per_event_loss, weighted_loss,
};
use serde::{Deserialize, Serialize};

use crate::adam::{AdamKernel, optimiser};
use crate::checkpoint::{
    Checkpoint, CheckpointState, EpochPosition, number_params, param_shapes, save_checkpoint,
};
use crate::error::TrainingError;
use crate::progress::{ProgressBar, progress_bar};
use crate::schedule::{EarlyStopping, ExponentialLr, Verdict};
use crate::stream::{Pass, stream};
use crate::sync::{all_reduce_gradients, broadcast_parameters};
use gnn4c_family::{Batch, Classifier, EventSource};

/// Training hyperparameters (defaults: contract §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Events per training batch.
    pub batch_size: usize,
    /// Events per evaluation batch (results do not depend on it; on the CPU backend 64–256 are
    /// the fastest of 64–4096, benchmark_inference).
    pub eval_batch_size: usize,
    /// Upper bound on epochs.
    pub max_epochs: u64,
    /// Initial learning rate.
    pub lr: f64,
    /// lr × gamma after every epoch.
    pub gamma: f64,
    /// Epochs without a better validation loss before stopping.
    pub patience: u64,
    /// Seed of shuffling, dropout and (in the CLI) initialisation.
    pub seed: u64,
    /// What negative event weights do in the training loss.
    pub negative_weights: NegativeWeights,
    /// Give every class the same total |w| in the training split.
    pub class_balance: bool,
    /// Loader threads preparing batches.
    pub loader_threads: usize,
    /// Ready batches per loader thread.
    pub prefetch: usize,
    /// Also report metrics of the training split, from the outputs seen during the epoch.
    pub train_metrics: bool,
    /// Training metrics come from the last this many events each rank trains on per epoch, so
    /// their memory does not grow with the data.
    pub train_metrics_events: usize,
    /// Events in each rank's shuffle buffer (the training order mixes events this far apart;
    /// memory: about 1 kB per event).
    pub shuffle_buffer: usize,
    /// Also write `last.ckpt` every this many steps inside an epoch, with the loader position, so
    /// `--resume` continues from there (off when absent).
    pub checkpoint_every_steps: Option<u64>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch_size: 512,
            eval_batch_size: 256,
            max_epochs: 20,
            lr: 1e-4,
            gamma: 0.99,
            patience: 10,
            seed: 42,
            negative_weights: NegativeWeights::Keep,
            class_balance: false,
            loader_threads: 2,
            prefetch: 2,
            train_metrics: true,
            train_metrics_events: 100_000,
            shuffle_buffer: 32_768,
            checkpoint_every_steps: None,
        }
    }
}

impl TrainConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let bad = |m: String| Err(TrainingError::Config(m));
        if self.batch_size == 0 || self.eval_batch_size == 0 {
            return bad("batch_size and eval_batch_size must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("lr must be a positive number, got {}", self.lr));
        }
        if !(self.gamma.is_finite() && self.gamma > 0.0 && self.gamma <= 1.0) {
            return bad(format!("gamma must be in (0, 1], got {}", self.gamma));
        }
        if self.patience == 0 {
            return bad("patience must be at least 1".into());
        }
        if self.shuffle_buffer == 0 {
            return bad("shuffle_buffer must be at least 1".into());
        }
        if self.checkpoint_every_steps == Some(0) {
            return bad(
                "checkpoint_every_steps must be at least 1 (leave it out to turn it off)".into(),
            );
        }
        Ok(())
    }
}

/// Where the loop writes (the CLI decides the run-folder layout).
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// The checkpoint of the latest epoch.
    pub last: PathBuf,
    /// The checkpoint of the best validation loss.
    pub best: PathBuf,
    /// JSON lines, one [`EpochRecord`] per epoch.
    pub history: PathBuf,
}

/// Everything about a run but the model and the data.
pub struct FitOptions<'a> {
    /// Hyperparameters.
    pub config: TrainConfig,
    /// The task.
    pub task: Task,
    /// Output files.
    pub files: RunFiles,
    /// The resolved configuration, stored in every checkpoint.
    pub resolved_config: serde_json::Value,
    /// The training data's preprocessing fingerprint, stored in every checkpoint.
    pub fingerprint: String,
    /// Contract version, stored and checked.
    pub contract_version: String,
    /// Program and version, stored.
    pub written_by: String,
    /// Resume from this checkpoint (its model weights, optimiser state and counters).
    pub resume: Option<Checkpoint>,
    /// Draw a progress bar on standard error.
    pub progress: bool,
    /// Where the per-epoch lines go.
    pub log: &'a mut dyn Write,
    /// The ranks training together (`World::single()` for one process). Each rank trains on
    /// its share of every global batch of `config.batch_size × size` events; only rank 0
    /// writes checkpoints, the history and the log.
    pub world: &'a World,
}

/// One line of the metrics history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// The epoch's number, counted from 1 as on the console (the checkpoint written after it
    /// records `epoch` epochs completed).
    pub epoch: u64,
    /// Learning rate used in the epoch.
    pub lr: f64,
    /// Optimiser steps taken after the epoch.
    pub global_step: u64,
    /// Σ wℓ / Σ|w| over the epoch's batches, with the training weights.
    pub train_loss: f64,
    /// Metrics of the training split from the outputs seen during the epoch (`train_metrics`).
    pub train: Option<MetricsRecord>,
    /// Metrics of the validation split after the epoch (weights as stored, contract §6).
    pub val: MetricsRecord,
    /// The validation loss early stopping watches: weighted like the training loss (class
    /// balance factors applied, negative weights kept). Equals `val.loss` without class balance.
    pub val_objective: f64,
    /// A new best validation loss.
    pub best: bool,
    /// Training events per second (all ranks: global events over the epoch's training wall
    /// time, padding not counted).
    pub events_per_s: f64,
    /// Seconds of the training pass.
    pub train_s: f64,
    /// Of `train_s`, seconds in the gradient all-reduce (flatten, MPI, unflatten); 0 in one process.
    #[serde(default)]
    pub allreduce_s: f64,
    /// MPI ranks that trained (1 in one process).
    #[serde(default = "one")]
    pub ranks: usize,
    /// Seconds of the whole epoch (training, validation, checkpoints).
    pub epoch_s: f64,
}

fn one() -> usize {
    1
}

/// [`Metrics`] as written in the history (NaN, for an undefined AUC, is written as null).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRecord {
    /// Weighted loss.
    pub loss: f64,
    /// Accuracy.
    pub accuracy: f64,
    /// AUC per output.
    pub auc: Vec<Option<f64>>,
    /// Weighted AUC per output.
    pub auc_weighted: Vec<Option<f64>>,
    /// Macro mean AUC.
    pub auc_macro: Option<f64>,
    /// Macro mean weighted AUC.
    pub auc_macro_weighted: Option<f64>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl From<&Metrics> for MetricsRecord {
    fn from(m: &Metrics) -> Self {
        MetricsRecord {
            loss: m.loss,
            accuracy: m.accuracy,
            auc: m.auc.iter().copied().map(finite).collect(),
            auc_weighted: m.auc_weighted.iter().copied().map(finite).collect(),
            auc_macro: finite(m.auc_macro),
            auc_macro_weighted: finite(m.auc_macro_weighted),
        }
    }
}

/// What a finished (or stopped) run leaves.
#[derive(Debug)]
pub struct FitReport<M> {
    /// The model after the last epoch.
    pub model: M,
    /// Every epoch's record, including those before a resume.
    pub history: Vec<EpochRecord>,
    /// Best validation objective and its epoch (0-based, as in [`EarlyStopping`]).
    pub best: Option<(u64, f64)>,
    /// True when early stopping ended the run.
    pub stopped_early: bool,
}

/// A model's outputs over a whole split, with the targets, in dataset order.
#[derive(Debug, Clone, Default)]
pub struct Predictions {
    /// `[n, n_out]` row-major.
    pub logits: Vec<f32>,
    /// Class index per event.
    pub labels: Vec<i64>,
    /// `[n, n_labels]` (multilabel only).
    pub multilabels: Vec<f32>,
    /// Event weights as stored.
    pub weights: Vec<f32>,
}

impl Predictions {
    /// Every metric of the split.
    pub fn metrics(&self, task: &Task) -> Metrics {
        metrics_from_logits(
            task,
            &self.logits,
            &self.labels,
            &self.multilabels,
            &self.weights,
        )
    }

    /// Σ fᵢwᵢℓᵢ / Σ|fᵢwᵢ| with class factors `scales` (negative weights kept).
    pub fn balanced_loss(&self, task: &Task, scales: &[f64]) -> f64 {
        let targets = gnn4c_tasks::targets_of(task, &self.labels, &self.multilabels);
        let losses = gnn4c_tasks::per_event_loss_host(task, &self.logits, &targets);
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for ((l, &w), &y) in losses.iter().zip(&self.weights).zip(&self.labels) {
            let f = usize::try_from(y)
                .ok()
                .and_then(|y| scales.get(y))
                .copied()
                .unwrap_or(0.0);
            num += f * f64::from(w) * l;
            den += (f * f64::from(w)).abs();
        }
        if den > 0.0 { num / den } else { 0.0 }
    }

    /// The targets of the batch's first `n` rows.
    fn push_targets_first<X>(&mut self, b: &Batch<X>, task: &Task, n: usize) {
        self.push_targets_rows(b, task, 0..n);
    }

    /// The targets of the batch's rows `rows`.
    fn push_targets_rows<X>(&mut self, b: &Batch<X>, task: &Task, rows: std::ops::Range<usize>) {
        self.labels.extend_from_slice(&b.labels[rows.clone()]);
        self.weights.extend_from_slice(&b.weights[rows.clone()]);
        if let Task::Multilabel { n_labels } = *task {
            self.multilabels
                .extend_from_slice(&b.multilabels[rows.start * n_labels..rows.end * n_labels]);
        }
    }
}

impl Predictions {
    /// Every rank's predictions, concatenated in rank order, on every rank (itself in a
    /// single process). Metrics over the result are those of the whole split.
    pub fn gathered(self, world: &World) -> Predictions {
        if !world.is_distributed() {
            return self;
        }
        Predictions {
            logits: world.all_gather_f32(&self.logits),
            labels: world.all_gather_i64(&self.labels),
            multilabels: world.all_gather_f32(&self.multilabels),
            weights: world.all_gather_f32(&self.weights),
        }
    }
}

/// Device tensors waiting to be read back in one go (one synchronisation per chunk, not per batch).
struct Pending<B: Backend> {
    tensors: Vec<Tensor<B, 2>>,
    out: Vec<f32>,
}

impl<B: Backend> Pending<B> {
    const CHUNK: usize = 64;

    fn new() -> Self {
        Pending {
            tensors: Vec::new(),
            out: Vec::new(),
        }
    }

    fn push(&mut self, t: Tensor<B, 2>) {
        self.tensors.push(t);
        if self.tensors.len() >= Self::CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.tensors.is_empty() {
            return;
        }
        let all = Tensor::cat(std::mem::take(&mut self.tensors), 0);
        self.out.extend(
            all.into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .expect("f32 logits"),
        );
    }

    fn finish(mut self) -> Vec<f32> {
        self.flush();
        self.out
    }
}

/// How a dataset is scored: batch size, loader threads, and which rank's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scoring {
    /// Events per batch (results do not depend on it).
    pub batch_size: usize,
    /// Loader threads (results do not depend on them).
    pub threads: usize,
    /// This rank.
    pub rank: usize,
    /// Ranks sharing the dataset (1: all of it).
    pub world: usize,
}

impl Scoring {
    /// The whole dataset in one process.
    pub fn whole(batch_size: usize, threads: usize) -> Scoring {
        Scoring {
            batch_size,
            threads,
            rank: 0,
            world: 1,
        }
    }

    /// The pass over the rank's share, in dataset order.
    pub fn pass(&self) -> Pass {
        Pass {
            seed: 0,
            epoch: 0,
            shuffle: false,
            shuffle_buffer: 1,
            batch_size: self.batch_size,
            rank: self.rank,
            world: self.world,
            skip_batches: 0,
        }
    }
}

/// The logits of the rank's share of `data` (a contiguous run, in dataset order), advancing
/// `bar` by the events scored. Gathered in rank order ([`Predictions::gathered`]) they are the
/// whole dataset's in order.
pub fn predict<B, M, D>(
    model: &M,
    data: &Arc<D>,
    task: &Task,
    scoring: Scoring,
    device: &B::Device,
    bar: &ProgressBar,
) -> Result<Predictions, TrainingError>
where
    B: Backend,
    M: Classifier<B, Input = D::Input>,
    D: EventSource,
{
    let (_, loader) = stream(
        data,
        scoring.pass(),
        scoring.threads,
        2,
        |d: &D, events, n| Ok((d.batch(events)?, n)),
    );
    predict_batches(model, loader, task, device, bar)
}

/// The logits of the real rows of every batch `batches` yields (with its real-row count).
pub fn predict_batches<B, M, X>(
    model: &M,
    batches: impl Iterator<Item = Result<(Batch<X>, usize), TrainingError>>,
    task: &Task,
    device: &B::Device,
    bar: &ProgressBar,
) -> Result<Predictions, TrainingError>
where
    B: Backend,
    M: Classifier<B, Input = X>,
{
    let mut pred = Predictions::default();
    let mut pending = Pending::<B>::new();
    for item in batches {
        let (b, n_real) = item?;
        let n_real = n_real.min(b.n_events);
        if n_real == 0 {
            continue;
        }
        let logits = model.logits(&b.input, device); // [n_rows, n_out]
        let [n_rows, n_out] = logits.dims();
        pending.push(if n_rows == n_real {
            logits
        } else {
            logits.slice([0..n_real, 0..n_out])
        });
        pred.push_targets_first(&b, task, n_real);
        bar.inc(n_real as u64);
    }
    bar.finish_and_clear();
    pred.logits = pending.finish();
    Ok(pred)
}

/// A seed from (seed, x) through the splitmix64 finaliser.
fn derive_seed(seed: u64, epoch: u64) -> u64 {
    let mut x = seed ^ 0xD1B5_4A32_D192_ED03u64.wrapping_mul(epoch.wrapping_add(1));
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Seed of the dropout of step `step` (0-based, within the epoch) of rank `rank`.
fn step_seed(seed: u64, epoch: u64, step: u64, rank: usize) -> u64 {
    let rank_mix = (rank as u64).wrapping_mul(0xA076_1D64_78BD_642F);
    derive_seed(seed ^ rank_mix, (epoch << 32) ^ step)
}

/// The value of a running loss sum (0 before the first batch).
fn loss_value<B: Backend>(sum: &Option<Tensor<B, 1>>) -> f32 {
    sum.as_ref().map_or(0.0, |s| {
        s.clone()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 loss")[0]
    })
}

/// Checks a mid-epoch position fits this run: as many ranks, the same training split.
fn check_position(
    ck: &Checkpoint,
    p: &EpochPosition,
    split_events: usize,
    world: &World,
) -> Result<(), TrainingError> {
    let incompatible = |reason: String| TrainingError::Incompatible {
        path: ck.path.clone(),
        reason,
    };
    if p.ranks != world.size()
        || p.loss_sums.len() != p.ranks
        || p.abs_sums.len() != p.ranks
        || p.events.len() != p.ranks
    {
        return Err(incompatible(format!(
            "it was written inside epoch {} by {} ranks and this run has {}: resume with {} ranks",
            ck.state.epoch + 1,
            p.ranks,
            world.size(),
            p.ranks
        )));
    }
    if p.split_events != split_events as u64 {
        return Err(incompatible(format!(
            "its loader position (step {} of epoch {}) is in a training split of {} events, but the \
             split now holds {split_events}: resume on the cache and subset it was written with",
            p.batches,
            ck.state.epoch + 1,
            p.split_events
        )));
    }
    Ok(())
}

/// The history lines of the first `completed` epochs.
fn read_history(path: &Path, completed: u64) -> Result<Vec<EpochRecord>, TrainingError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(TrainingError::Io {
                path: path.to_path_buf(),
                source: e,
            });
        }
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // A line cut short by a kill is dropped: the checkpoint, not the history, is the truth.
        if let Ok(r) = serde_json::from_str::<EpochRecord>(line)
            && r.epoch <= completed
        {
            out.push(r);
        }
    }
    Ok(out)
}

fn write_history(path: &Path, history: &[EpochRecord]) -> Result<(), TrainingError> {
    let mut text = String::new();
    for r in history {
        text.push_str(&serde_json::to_string(r).expect("history serialises"));
        text.push('\n');
    }
    gnn4c_family::write_atomic(path, text.as_bytes()).map_err(|e| TrainingError::Io {
        path: path.to_path_buf(),
        source: e,
    })
}

fn fmt_metric(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |v| format!("{v:.4}"))
}

/// Trains `model` on `train`, validating on `val` after every epoch (contract §8–§9).
///
/// Writes `files.last` after every epoch and `files.best` on every new best validation loss,
/// both atomically, and rewrites `files.history` (JSON lines) after every epoch. With
/// `resume`, continues from that checkpoint: the result is bitwise the uninterrupted run's on
/// a deterministic backend.
pub fn fit<B, M, D, K>(
    model: M,
    train: &Arc<D>,
    val: &Arc<D>,
    opts: FitOptions<'_>,
    adam: K,
    device: &B::Device,
) -> Result<FitReport<M>, TrainingError>
where
    B: AutodiffBackend,
    K: AdamKernel<B::InnerBackend>,
    M: AutodiffModule<B> + Classifier<B, Input = D::Input>,
    M::InnerModule: Classifier<B::InnerBackend, Input = D::Input>,
    D: EventSource,
{
    let FitOptions {
        config: cfg,
        task,
        files,
        resolved_config,
        fingerprint,
        contract_version,
        written_by,
        resume,
        progress,
        log,
        world,
    } = opts;
    let root = world.is_root();
    cfg.validate()?;
    if train.is_empty() || val.is_empty() {
        return Err(TrainingError::Config(
            "the training and validation splits must both hold events".into(),
        ));
    }
    let schedule = ExponentialLr {
        initial: cfg.lr,
        gamma: cfg.gamma,
    };
    // Training weights: the negative-weight policy, then class balancing (class totals read
    // block by block: the labels and weights only).
    let scales: Option<Vec<f64>> = if cfg.class_balance {
        let n_classes = match task {
            Task::Binary => 2,
            Task::Multiclass { n_classes } => n_classes,
            Task::Multilabel { .. } => {
                return Err(TrainingError::Config(
                    "class_balance is defined for binary and multiclass tasks only".into(),
                ));
            }
        };
        let mut totals = ClassTotals::new(n_classes);
        for block in 0..train.block_sizes().len() {
            for (label, w) in train.read_targets(block)? {
                totals.add(label, w);
            }
        }
        Some(totals.scales())
    } else {
        None
    };
    let train_weight = |label: i64, w: f32| -> f32 {
        let w = cfg.negative_weights.apply(w);
        match &scales {
            Some(s) => usize::try_from(label)
                .ok()
                .and_then(|l| s.get(l))
                .map_or(0.0, |f| (f64::from(w) * f) as f32),
            None => w,
        }
    };
    if train.len() < world.size() {
        return Err(TrainingError::Config(format!(
            "the training split holds {} events, fewer than the {} ranks",
            train.len(),
            world.size()
        )));
    }

    let mut optim = optimiser::<B, M, K>(adam);
    let mut model = number_params(model);
    let mut start_epoch = 0u64;
    let mut step = 0u64;
    let mut es = EarlyStopping::new(cfg.patience);
    let mut stopped = false;
    let mut position: Option<EpochPosition> = None;
    if let Some(ck) = &resume {
        ck.check_compatible(&model, &contract_version)?;
        model = ck.load_model(model, device)?;
        optim = optim.load_record(ck.load_optimizer(device)?);
        start_epoch = ck.state.epoch;
        step = ck.state.global_step;
        es = ck.state.early_stopping.clone();
        es.patience = cfg.patience;
        stopped = ck.state.stopped;
        position = ck.state.position.clone();
        if let Some(p) = &position {
            check_position(ck, p, train.len(), world)?;
        }
    }
    if resume.is_none() {
        // Identical initial weights on every rank (resuming ranks all read the same checkpoint).
        model = broadcast_parameters::<B, M>(model, world);
    }
    let mut history = if resume.is_some() {
        read_history(&files.history, start_epoch)?
    } else {
        Vec::new()
    };
    if root {
        write_history(&files.history, &history)?;
    }
    let parameters = param_shapes(&model);
    let state_at = |epoch: u64,
                    step: u64,
                    es: &EarlyStopping,
                    stopped: bool,
                    position: Option<EpochPosition>| CheckpointState {
        contract_version: contract_version.clone(),
        written_by: written_by.clone(),
        epoch,
        global_step: step,
        schedule,
        early_stopping: es.clone(),
        seed: cfg.seed,
        stopped,
        config: resolved_config.clone(),
        fingerprint: fingerprint.clone(),
        parameters: parameters.clone(),
        position,
    };

    let rank = world.rank();
    let scoring = Scoring {
        batch_size: cfg.eval_batch_size,
        threads: cfg.loader_threads,
        rank,
        world: world.size(),
    };
    // The pass of an epoch (the same whenever it is started: a function of the epoch).
    let epoch_stream = |epoch: u64, skip_batches: u64| {
        let pass = Pass {
            seed: cfg.seed,
            epoch,
            shuffle: true,
            shuffle_buffer: cfg.shuffle_buffer,
            batch_size: cfg.batch_size,
            rank,
            world: world.size(),
            skip_batches,
        };
        stream(
            train,
            pass,
            cfg.loader_threads,
            cfg.prefetch,
            |d: &D, events, n| Ok((d.batch(events)?, n)),
        )
    };
    let mut next_epoch = None;
    let mut epoch = start_epoch;
    while epoch < cfg.max_epochs && !stopped {
        let epoch_start = Instant::now();
        let lr = schedule.lr(epoch);
        // Each rank streams its own share; a mid-epoch resume skips the batches already trained.
        let resumed = position.take();
        let skip = resumed.as_ref().map_or(0, |p| p.batches);
        let (plan, loader) = match next_epoch.take() {
            Some((e, started)) if e == epoch && skip == 0 => started,
            _ => epoch_stream(epoch, skip),
        };
        let bar = progress_bar(
            progress && root,
            plan.events as u64,
            if world.is_distributed() {
                format!("epoch {}/{} (rank 0)", epoch + 1, cfg.max_epochs)
            } else {
                format!("epoch {}/{}", epoch + 1, cfg.max_epochs)
            },
            "events",
        );
        // The epoch's sums so far (Σ loss_b·Σ|w|_b accumulated on the device, in f32).
        let mut loss_sum: Option<Tensor<B::InnerBackend, 1>> = None;
        let mut abs_sum = 0.0f64;
        let mut n_events = 0usize;
        if let Some(p) = &resumed {
            loss_sum = Some(Tensor::from_data(
                TensorData::new(vec![p.loss_sums[rank]], [1]),
                device,
            ));
            abs_sum = p.abs_sums[rank];
            n_events = p.events[rank] as usize;
            bar.inc(n_events as u64);
        }
        let events_before = n_events;
        let mut seen = Predictions::default();
        let mut seen_logits = Pending::<B::InnerBackend>::new();
        // Training metrics: the rank's last `train_metrics_events` events of the epoch.
        let metrics_from = plan.events.saturating_sub(cfg.train_metrics_events);
        let mut allreduce_s = 0.0f64;
        let _epoch_span = tracing::info_span!("epoch", epoch).entered();
        let mut batches_in = loader;
        let mut in_epoch = skip;
        loop {
            // Time the training loop spends waiting for the loader (zero when prefetch keeps up).
            let next = {
                let _s = tracing::info_span!("wait_for_batch").entered();
                batches_in.next()
            };
            let Some(item) = next else {
                break;
            };
            let (b, n_real) = item?;
            // Dropout of each step is seeded from (seed, epoch, step, rank): a resume inside the
            // epoch continues the same random stream.
            B::seed(device, step_seed(cfg.seed, epoch, in_epoch, rank));
            let forward_span = tracing::info_span!("forward_loss").entered();
            // Rows past `n_real` are padding (graph padding, or a rank's share filled up).
            let n_real = n_real.min(b.n_events);
            let logits = model.logits(&b.input, device); // [n_rows, n_out]
            let [n_rows, n_out] = logits.dims();
            let labels =
                Tensor::<B, 1, Int>::from_data(TensorData::new(b.labels.clone(), [n_rows]), device);
            let multilabels = match task {
                Task::Multilabel { n_labels } => Some(Tensor::<B, 2>::from_data(
                    TensorData::new(b.multilabels.clone(), [n_rows, n_labels]),
                    device,
                )),
                _ => None,
            };
            let w: Vec<f32> = b
                .labels
                .iter()
                .zip(&b.weights)
                .enumerate()
                .map(
                    |(i, (&l, &w))| {
                        if i < n_real { train_weight(l, w) } else { 0.0 }
                    },
                )
                .collect();
            let s_b: f64 = w.iter().map(|w| f64::from(w.abs())).sum();
            let weights = Tensor::<B, 1>::from_data(TensorData::new(w, [n_rows]), device);
            let first_kept = metrics_from.saturating_sub(n_events).min(n_real);
            if cfg.train_metrics && first_kept < n_real {
                let detached = logits.clone().inner(); // [n_rows, n_out]
                seen_logits.push(if first_kept == 0 && n_rows == n_real {
                    detached
                } else {
                    detached.slice([first_kept..n_real, 0..n_out])
                });
                seen.push_targets_rows(&b, &task, first_kept..n_real);
            }
            let per_event = per_event_loss(&task, logits, labels, multilabels);
            let loss = weighted_loss(per_event, weights); // [1]
            let contribution = loss.clone().inner().mul_scalar(s_b);
            loss_sum = Some(match loss_sum {
                Some(s) => s + contribution,
                None => contribution,
            });
            abs_sum += s_b;
            drop(forward_span);
            let backward_span = tracing::info_span!("backward").entered();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            drop(backward_span);
            let _allreduce_span = tracing::info_span!("allreduce").entered();
            let sync_start = Instant::now();
            let grads = all_reduce_gradients::<B, M>(&model, grads, s_b, world, device);
            if world.is_distributed() {
                allreduce_s += sync_start.elapsed().as_secs_f64();
            }
            drop(_allreduce_span);
            let _optimizer_span = tracing::info_span!("optimizer_step").entered();
            model = optim.step(lr, model, grads);
            step += 1;
            in_epoch += 1;
            n_events += n_real;
            bar.inc(n_real as u64);
            if let Some(every) = cfg.checkpoint_every_steps
                && in_epoch.is_multiple_of(every)
                && in_epoch < plan.steps
            {
                let _s = tracing::info_span!("checkpoint").entered();
                let position = EpochPosition {
                    batches: in_epoch,
                    ranks: world.size(),
                    split_events: train.len() as u64,
                    loss_sums: world.all_gather_f32(&[loss_value(&loss_sum)]),
                    abs_sums: world
                        .all_gather_i64(&[abs_sum.to_bits() as i64])
                        .into_iter()
                        .map(|b| f64::from_bits(b as u64))
                        .collect(),
                    events: world
                        .all_gather_i64(&[n_events as i64])
                        .into_iter()
                        .map(|n| n as u64)
                        .collect(),
                };
                if root {
                    let state = state_at(epoch, step, &es, false, Some(position));
                    save_checkpoint::<B, M, _>(&files.last, &state, &model, optim.to_record())?;
                }
            }
        }
        drop(batches_in);
        bar.finish_and_clear();
        // The next epoch's loader fills its shuffle buffer while this one is validated.
        if epoch + 1 < cfg.max_epochs {
            next_epoch = Some((epoch + 1, epoch_stream(epoch + 1, 0)));
        }
        let local_loss = f64::from(loss_value(&loss_sum));
        // Global sums over ranks (padding counted nowhere), and the events trained by this
        // process (not before a resume), for the rate.
        let mut sums = [local_loss, abs_sum, (n_events - events_before) as f64];
        world.all_reduce_sum_f64(&mut sums);
        let [loss_total, abs_total, trained] = sums;
        let train_s = epoch_start.elapsed().as_secs_f64();
        let train_loss = loss_total / abs_total.max(f64::MIN_POSITIVE);
        if !train_loss.is_finite() {
            return Err(TrainingError::NonFiniteLoss {
                epoch: epoch + 1,
                value: train_loss,
            });
        }
        let train_metrics = cfg.train_metrics.then(|| {
            seen.logits = seen_logits.finish();
            MetricsRecord::from(&seen.gathered(world).metrics(&task))
        });
        let validation_span = tracing::info_span!("validation").entered();
        let valid = model.valid();
        // Each rank scores its share of the validation split; every rank gets all the outputs,
        // so every rank computes the same exact metrics and the same early-stopping verdict.
        let val_pred =
            predict(&valid, val, &task, scoring, device, &ProgressBar::hidden())?.gathered(world);
        let val_metrics = val_pred.metrics(&task);
        let val_objective = match &scales {
            Some(s) => val_pred.balanced_loss(&task, s),
            None => val_metrics.loss,
        };
        drop(validation_span);
        let _checkpoint_span = tracing::info_span!("checkpoint").entered();
        let verdict = es.update(epoch, val_objective);
        stopped = verdict == Verdict::Stop;
        let state = state_at(epoch + 1, step, &es, stopped, None);
        if root {
            if verdict == Verdict::Improved {
                save_checkpoint::<B, M, _>(&files.best, &state, &model, optim.to_record())?;
            }
            save_checkpoint::<B, M, _>(&files.last, &state, &model, optim.to_record())?;
        }
        let record = EpochRecord {
            epoch: epoch + 1,
            lr,
            global_step: step,
            train_loss,
            train: train_metrics,
            val: MetricsRecord::from(&val_metrics),
            val_objective,
            best: verdict == Verdict::Improved,
            events_per_s: trained / train_s.max(1e-9),
            train_s,
            allreduce_s,
            ranks: world.size(),
            epoch_s: epoch_start.elapsed().as_secs_f64(),
        };
        if root {
            let _ = writeln!(
                log,
                "epoch {:>3}/{}  lr {:.3e}  train loss {:.4}{}  val loss {:.4}{}  acc {:.4}  auc {}  {:.0} ev/s  {:.1} s{}{}",
                epoch + 1,
                cfg.max_epochs,
                lr,
                train_loss,
                record
                    .train
                    .as_ref()
                    .map_or_else(String::new, |t| format!(" acc {:.4}", t.accuracy)),
                record.val.loss,
                if scales.is_some() {
                    format!(" (balanced {:.4})", record.val_objective)
                } else {
                    String::new()
                },
                record.val.accuracy,
                fmt_metric(record.val.auc_macro),
                record.events_per_s,
                record.epoch_s,
                if world.is_distributed() {
                    format!(
                        " ({} ranks, all-reduce {:.2} s)",
                        record.ranks, record.allreduce_s
                    )
                } else {
                    String::new()
                },
                if record.best { "  *best*" } else { "" },
            );
        }
        history.push(record);
        if root {
            write_history(&files.history, &history)?;
        }
        epoch += 1;
    }
    if stopped && root {
        let _ = writeln!(
            log,
            "early stopping: no better validation loss in {} epochs (best {} at epoch {})",
            cfg.patience,
            fmt_metric(es.best),
            es.best_epoch.map_or(0, |e| e + 1)
        );
    }
    Ok(FitReport {
        model,
        history,
        best: es.best_epoch.zip(es.best),
        stopped_early: stopped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::read_checkpoint;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
    use burn::tensor::activation::relu;

    type AD = Autodiff<Flex>;

    /// The backend's RNG is process-global: tests that seed it and train take turns.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A small MLP with dropout: enough to exercise every piece of state a resume restores.
    #[derive(Module, Debug)]
    struct Toy<B: Backend> {
        hidden: Linear<B>,
        out: Linear<B>,
        dropout: Dropout,
    }

    fn toy<B: Backend>(n_out: usize, device: &B::Device) -> Toy<B> {
        B::seed(device, 11);
        Toy {
            hidden: LinearConfig::new(4, 16).init(device),
            out: LinearConfig::new(16, n_out).init(device),
            dropout: DropoutConfig::new(0.2).init(),
        }
    }

    impl<B: Backend> Classifier<B> for Toy<B> {
        type Input = Vec<f32>;
        fn logits(&self, input: &Vec<f32>, device: &B::Device) -> Tensor<B, 2> {
            let n = input.len() / 4;
            let x = Tensor::<B, 2>::from_data(TensorData::new(input.clone(), [n, 4]), device);
            self.out
                .forward(self.dropout.forward(relu(self.hidden.forward(x))))
        }
    }

    /// Three Gaussian blobs, labels 0..3, ~10 % negative weights, in blocks of 37 events.
    /// With `fail_after`, reading blocks fails after that many reads (a crash mid-epoch).
    struct Blobs {
        x: Vec<[f32; 4]>,
        y: Vec<i64>,
        w: Vec<f32>,
        sizes: Vec<usize>,
        fail_after: Option<usize>,
        reads: std::sync::atomic::AtomicUsize,
    }

    const BLOCK: usize = 37;

    impl Blobs {
        fn new(n: usize, seed: u64) -> Arc<Blobs> {
            Arc::new(Blobs::make(n, seed, None))
        }

        fn make(n: usize, seed: u64, fail_after: Option<usize>) -> Blobs {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut b = Blobs {
                x: Vec::new(),
                y: Vec::new(),
                w: Vec::new(),
                sizes: (0..n).step_by(BLOCK).map(|s| BLOCK.min(n - s)).collect(),
                fail_after,
                reads: Default::default(),
            };
            for i in 0..n {
                let c = (i % 3) as i64;
                let mut x = [0f32; 4];
                for (k, v) in x.iter_mut().enumerate() {
                    *v = rng.random_range(-1.0..1.0) + if k as i64 == c { 1.5 } else { 0.0 };
                }
                b.x.push(x);
                b.y.push(c);
                b.w.push(if rng.random_range(0.0..1.0) < 0.1 {
                    -0.5
                } else {
                    1.0
                });
            }
            b
        }
    }

    impl EventSource for Blobs {
        type Event = usize;
        type Input = Vec<f32>;
        fn block_sizes(&self) -> &[usize] {
            &self.sizes
        }
        fn read_block(&self, block: usize) -> Result<Vec<usize>, gnn4c_family::SourceError> {
            let reads = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.fail_after.is_some_and(|n| reads >= n) {
                return Err(gnn4c_family::SourceError("the job was killed".into()));
            }
            let start = block * BLOCK;
            Ok((start..start + self.sizes[block]).collect())
        }
        fn target(&self, &i: &usize) -> (i64, f32) {
            (self.y[i], self.w[i])
        }
        fn batch(&self, idx: Vec<usize>) -> Result<Batch<Vec<f32>>, gnn4c_family::SourceError> {
            Ok(Batch {
                input: idx.iter().flat_map(|&i| self.x[i]).collect(),
                labels: idx.iter().map(|&i| self.y[i]).collect(),
                multilabels: Vec::new(),
                weights: idx.iter().map(|&i| self.w[i]).collect(),
                n_events: idx.len(),
            })
        }
    }

    fn files(dir: &Path) -> RunFiles {
        RunFiles {
            last: dir.join("last.ckpt"),
            best: dir.join("best.ckpt"),
            history: dir.join("history.jsonl"),
        }
    }

    fn run(
        dir: &Path,
        max_epochs: u64,
        resume: Option<Checkpoint>,
        cfg: &TrainConfig,
    ) -> FitReport<Toy<AD>> {
        run_on(dir, max_epochs, resume, cfg, &Blobs::new(600, 1)).expect("fit")
    }

    fn run_on(
        dir: &Path,
        max_epochs: u64,
        resume: Option<Checkpoint>,
        cfg: &TrainConfig,
        train: &Arc<Blobs>,
    ) -> Result<FitReport<Toy<AD>>, TrainingError> {
        let _turn = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let device = Default::default();
        let mut sink = Vec::new();
        let world = gnn4c_distributed::World::single();
        let opts = FitOptions {
            config: TrainConfig {
                max_epochs,
                ..cfg.clone()
            },
            task: Task::Multiclass { n_classes: 3 },
            files: files(dir),
            resolved_config: serde_json::json!({"toy": true}),
            fingerprint: "f".into(),
            contract_version: "v1".into(),
            written_by: "test".into(),
            resume,
            progress: false,
            log: &mut sink,
            world: &world,
        };
        fit::<AD, _, _, _>(
            toy::<AD>(3, &device),
            train,
            &Blobs::new(150, 2),
            opts,
            crate::BurnAdam,
            &device,
        )
    }

    fn weights(m: &Toy<AD>) -> Vec<u32> {
        let v = m.valid();
        [
            v.hidden.weight.val().into_data(),
            v.out.weight.val().into_data(),
            v.out.bias.as_ref().expect("bias").val().into_data(),
        ]
        .into_iter()
        .flat_map(|d| d.to_vec::<f32>().expect("f32"))
        .map(f32::to_bits)
        .collect()
    }

    fn cfg() -> TrainConfig {
        TrainConfig {
            batch_size: 64,
            lr: 1e-2,
            loader_threads: 2,
            ..TrainConfig::default()
        }
    }

    #[test]
    fn resume_after_two_epochs_is_bitwise_the_straight_run() {
        let straight = tempfile::tempdir().expect("tempdir");
        let a = run(straight.path(), 4, None, &cfg());
        assert_eq!(a.history.len(), 4);
        assert!(
            a.history[3].val.accuracy > 0.6,
            "the toy learns: {:?}",
            a.history[3].val
        );

        let split = tempfile::tempdir().expect("tempdir");
        run(split.path(), 2, None, &cfg()); // the "killed" run: stops after epoch 2
        let ck = read_checkpoint(&split.path().join("last.ckpt")).expect("checkpoint");
        assert_eq!((ck.state.epoch, ck.state.global_step), (2, 2 * 10));
        let b = run(split.path(), 4, Some(ck), &cfg());
        assert_eq!(weights(&a.model), weights(&b.model), "bitwise identical");
        assert_eq!(b.history.len(), 4, "history keeps the first two epochs");
        let lines = std::fs::read_to_string(split.path().join("history.jsonl")).expect("history");
        assert_eq!(lines.lines().count(), 4);
        assert_eq!(
            a.history[3].val.loss, b.history[3].val.loss,
            "same validation loss"
        );
        assert!((a.history[3].lr - 1e-2 * 0.99f64.powi(3)).abs() < 1e-15);
        let numbers: Vec<u64> = b.history.iter().map(|r| r.epoch).collect();
        assert_eq!(numbers, [1, 2, 3, 4], "epochs are numbered from 1");
        // Byte-identical files: a checksum confirms the resumed run is the straight one.
        for f in ["last.ckpt", "best.ckpt"] {
            let read = |d: &Path| std::fs::read(d.join(f)).expect("checkpoint");
            assert!(read(straight.path()) == read(split.path()), "{f} bytes");
        }
    }

    #[test]
    fn a_run_killed_inside_an_epoch_resumes_bitwise_from_its_step_checkpoint() {
        let c = TrainConfig {
            shuffle_buffer: 100,
            checkpoint_every_steps: Some(2),
            ..cfg()
        };
        let straight = tempfile::tempdir().expect("tempdir");
        let a = run(straight.path(), 3, None, &c);
        // Killed in epoch 2: 17 blocks per epoch, the 8th block read of epoch 2 fails.
        let killed = tempfile::tempdir().expect("tempdir");
        let killing = Arc::new(Blobs::make(600, 1, Some(17 + 8)));
        let e = run_on(killed.path(), 3, None, &c, &killing)
            .map(drop)
            .expect_err("killed");
        assert!(e.to_string().contains("killed"), "{e}");
        let ck = read_checkpoint(&killed.path().join("last.ckpt")).expect("checkpoint");
        let p = ck.state.position.clone().expect("written inside the epoch");
        assert_eq!(ck.state.epoch, 1, "inside the second epoch");
        assert!(p.batches >= 2 && p.batches.is_multiple_of(2), "{p:?}");
        assert_eq!(ck.state.global_step, 10 + p.batches);
        // The wrong split: refused, naming the position.
        let e = run_on(killed.path(), 3, Some(ck.clone()), &c, &Blobs::new(599, 1))
            .map(drop)
            .expect_err("another split")
            .to_string();
        assert!(e.contains("loader position") && e.contains("600"), "{e}");
        let b = run(killed.path(), 3, Some(ck), &c);
        assert_eq!(weights(&a.model), weights(&b.model), "bitwise identical");
        assert_eq!(a.history[1].train_loss, b.history[1].train_loss);
        for f in ["last.ckpt", "best.ckpt"] {
            let read = |d: &Path| std::fs::read(d.join(f)).expect("checkpoint");
            assert!(read(straight.path()) == read(killed.path()), "{f} bytes");
        }
    }

    #[test]
    fn bad_checkpoints_give_clear_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        run(dir.path(), 1, None, &cfg());
        let path = dir.path().join("last.ckpt");
        let ck = read_checkpoint(&path).expect("checkpoint");
        let device = Default::default();
        let _turn = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);

        // Another model shape: a 5-class head.
        let other = toy::<AD>(5, &device);
        let e = ck
            .check_compatible(&other, "v1")
            .expect_err("shape")
            .to_string();
        assert!(e.contains("out.weight") && e.contains("[16, 3]"), "{e}");
        // Another contract version.
        let e = ck
            .check_compatible(&toy::<AD>(3, &device), "v2")
            .expect_err("contract");
        assert!(e.to_string().contains("contract v1"), "{e}");

        // Truncated and corrupted files.
        let bytes = std::fs::read(&path).expect("read");
        let cut = dir.path().join("cut.ckpt");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
        let e = read_checkpoint(&cut).expect_err("truncated").to_string();
        assert!(
            e.contains("cut.ckpt") && e.contains("truncated or corrupted"),
            "{e}"
        );
        let mut flipped = bytes;
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        std::fs::write(&cut, &flipped).expect("write");
        assert!(read_checkpoint(&cut).is_err());
        std::fs::write(&cut, b"PK\x03\x04 a zip, not a checkpoint").expect("write");
        let e = read_checkpoint(&cut).expect_err("foreign").to_string();
        assert!(e.contains("not a gnn4colliders checkpoint"), "{e}");
        let e = read_checkpoint(&dir.path().join("missing.ckpt")).expect_err("missing");
        assert!(e.to_string().contains("missing.ckpt"), "{e}");
    }

    #[test]
    fn weights_policies_and_balance_reach_the_loss() {
        let dir = tempfile::tempdir().expect("tempdir");
        let balanced = TrainConfig {
            class_balance: true,
            negative_weights: NegativeWeights::Drop,
            ..cfg()
        };
        let r = run(dir.path(), 1, None, &balanced);
        assert!(r.history[0].train_loss.is_finite());
        let plain = run(dir.path(), 1, None, &cfg());
        assert_ne!(
            r.history[0].train_loss, plain.history[0].train_loss,
            "dropping negative weights changes the training loss"
        );
        // The validation loss keeps negative weights as they are, whatever the policy.
        assert!(r.history[0].val.loss.is_finite());
        // Early stopping watches the loss weighted like training: with class balance it differs
        // from the stored-weight metric; without, they are the same number.
        assert_ne!(r.history[0].val_objective, r.history[0].val.loss);
        assert_eq!(plain.history[0].val_objective, plain.history[0].val.loss);
    }

    #[test]
    fn early_stopping_ends_the_run_and_a_resume_trains_nothing_more() {
        let dir = tempfile::tempdir().expect("tempdir");
        // gamma 1e-6: after the first epochs the steps are below f32 resolution, the validation
        // loss stops changing, and patience 1 ends the run.
        let c = TrainConfig {
            gamma: 1e-6,
            patience: 1,
            ..cfg()
        };
        let r = run(dir.path(), 50, None, &c);
        assert!(
            r.stopped_early && r.history.len() < 50,
            "{}",
            r.history.len()
        );
        let ck = read_checkpoint(&dir.path().join("last.ckpt")).expect("checkpoint");
        assert!(ck.state.stopped);
        let again = run(dir.path(), 50, Some(ck), &c);
        assert_eq!(again.history.len(), r.history.len());
        let best = read_checkpoint(&dir.path().join("best.ckpt")).expect("best");
        assert_eq!(best.state.early_stopping.best_epoch, r.best.map(|b| b.0));
    }
}
