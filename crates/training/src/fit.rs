//! The training loop (contract §8): Adam, exponential decay per epoch, early stopping, best-model
//! tracking, checkpoints every epoch (and every `checkpoint_every_steps` steps), a JSON-lines
//! history, exact resume and a graceful stop.
//!
//! [`fit`] is its steps in order: [`Fit::setup`] (weights, resume), then per epoch
//! [`Fit::train_epoch`] (each batch one [`Fit::train_step`]; a stop request or the step
//! checkpoint interval writes [`Fit::write_position`]), [`Fit::validate`] and
//! [`Fit::end_epoch`] (checkpoints, early stopping, history and the console line).

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_distributed::World;
use gnn4c_family::{Batch, Classifier, EventSource};
use gnn4c_tasks::{ClassTotals, Metrics, Task, per_event_loss, weighted_loss};

use crate::adam::{AdamKernel, Optimiser, optimiser};
use crate::checkpoint::{
    Checkpoint, CheckpointState, EpochPosition, ParamShape, number_params, param_shapes,
    save_checkpoint,
};
use crate::config::{FitOptions, RunFiles, TrainConfig};
use crate::epoch_progress::{EpochProgress, loss_value};
use crate::error::TrainingError;
use crate::history::{EpochRecord, MetricsRecord, epoch_line, read_history, write_history};
use crate::loader::Loader;
use crate::predict::{Scoring, predict};
use crate::progress::{ProgressBar, progress_bar};
use crate::schedule::{EarlyStopping, ExponentialLr, Verdict};
use crate::stop::StopFlag;
use crate::stream::{Pass, RankPlan, stream};
use crate::sync::{all_reduce_gradients, broadcast_parameters};
use crate::tensorboard::EventWriter;

/// What a finished run leaves.
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

/// Trains `model` on `train`, validating on `val` after every epoch (contract §8–§9).
///
/// Writes `files.last` after every epoch and `files.best` on every new best validation loss,
/// both atomically, and rewrites `files.history` (JSON lines) after every epoch. With
/// `resume`, continues from that checkpoint: the result is bitwise the uninterrupted run's on
/// a deterministic backend. When `opts.stop` is requested, the step under way finishes,
/// `files.last` gets the loader position and the result is [`TrainingError::Stopped`].
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
    let (mut run, mut model) = Fit::setup(model, train, val, opts, adam, device)?;
    while let Some(epoch) = run.next_epoch() {
        let (trained, progress) = run.train_epoch(model, epoch)?;
        model = trained;
        let summary = run.summarise_training(progress, epoch)?;
        let validated = run.validate(&model)?;
        run.end_epoch(&model, epoch, summary, &validated)?;
        if run.next_epoch().is_some() && run.stop_agreed() {
            return Err(run.stopped(epoch + 1));
        }
    }
    Ok(run.finish(model))
}

/// A run between its steps: everything but the model.
struct Fit<'o, 'd, B, M, D, K>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    D: EventSource,
    K: AdamKernel<B::InnerBackend>,
{
    cfg: TrainConfig,
    task: Task,
    files: RunFiles,
    log: &'o mut dyn Write,
    world: &'o World,
    stop: StopFlag,
    progress: bool,
    train: &'d Arc<D>,
    val: &'d Arc<D>,
    device: &'d B::Device,
    /// What every checkpoint records about the run besides its counters.
    stamp: Stamp,
    schedule: ExponentialLr,
    /// Class factors of the training weights (`class_balance`).
    scales: Option<Vec<f64>>,
    optim: Optimiser<K, M, B>,
    /// Optimiser steps taken.
    step: u64,
    early_stopping: EarlyStopping,
    stopped_early: bool,
    /// Epochs completed.
    epochs_done: u64,
    /// Where a resume inside an epoch starts.
    position: Option<EpochPosition>,
    history: Vec<EpochRecord>,
    /// The next epoch's batches, started while this one validates.
    prefetched: Option<(u64, EpochBatches<D::Input>)>,
    /// Where rank 0 writes TensorBoard scalars.
    board: Option<&'o mut EventWriter>,
    /// When TensorBoard last got a step's line, and the rank's events trained since.
    since_logged: (Instant, usize),
}

/// Batches as the loader yields them, with their real-row counts.
type Batches<X> = Loader<Result<(Batch<X>, usize), TrainingError>>;

/// An epoch's plan on this rank and its batches.
type EpochBatches<X> = (RankPlan, Batches<X>);

/// What every checkpoint of a run records besides its counters.
struct Stamp {
    contract_version: String,
    written_by: String,
    resolved_config: serde_json::Value,
    fingerprint: String,
    parameters: Vec<ParamShape>,
}

/// The training half of an epoch's record, over all ranks.
struct TrainingSummary {
    start: Instant,
    lr: f64,
    loss: f64,
    metrics: Option<MetricsRecord>,
    events_per_s: f64,
    train_s: f64,
    allreduce_s: f64,
}

/// The validation half of an epoch's record.
struct Validation {
    metrics: Metrics,
    /// What early stopping watches: the class-balanced loss with `class_balance`.
    objective: f64,
}

impl<'o, 'd, B, M, D, K> Fit<'o, 'd, B, M, D, K>
where
    B: AutodiffBackend,
    K: AdamKernel<B::InnerBackend>,
    M: AutodiffModule<B> + Classifier<B, Input = D::Input>,
    M::InnerModule: Classifier<B::InnerBackend, Input = D::Input>,
    D: EventSource,
{
    /// Checks the options, computes the training weights' class factors, and loads a resumed
    /// run's model, optimiser, counters and history (or gives every rank the same weights).
    fn setup(
        model: M,
        train: &'d Arc<D>,
        val: &'d Arc<D>,
        opts: FitOptions<'o>,
        adam: K,
        device: &'d B::Device,
    ) -> Result<(Self, M), TrainingError> {
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
            stop,
            tensorboard,
        } = opts;
        cfg.validate()?;
        if train.is_empty() || val.is_empty() {
            return Err(TrainingError::Config(
                "the training and validation splits must both hold events".into(),
            ));
        }
        if train.len() < world.size() {
            return Err(TrainingError::Config(format!(
                "the training split holds {} events, fewer than the {} ranks",
                train.len(),
                world.size()
            )));
        }
        let scales = class_scales(&cfg, &task, train.as_ref())?;
        let model = number_params(model);
        let optim = optimiser::<B, M, K>(adam);
        let (model, optim) = match &resume {
            Some(ck) => {
                ck.check_compatible(&model, &contract_version)?;
                let model = ck.load_model(model, device)?;
                (model, optim.load_record(ck.load_optimizer(device)?))
            }
            // Identical initial weights on every rank (resuming ranks all read the same checkpoint).
            None => (broadcast_parameters::<B, M>(model, world), optim),
        };
        let mut run = Fit {
            schedule: ExponentialLr {
                initial: cfg.lr,
                gamma: cfg.gamma,
            },
            early_stopping: EarlyStopping::new(cfg.patience),
            stamp: Stamp {
                contract_version,
                written_by,
                resolved_config,
                fingerprint,
                parameters: param_shapes(&model),
            },
            cfg,
            task,
            files,
            log,
            world,
            stop,
            progress,
            train,
            val,
            device,
            scales,
            optim,
            step: 0,
            stopped_early: false,
            epochs_done: 0,
            position: None,
            history: Vec::new(),
            prefetched: None,
            board: tensorboard,
            since_logged: (Instant::now(), 0),
        };
        if let Some(ck) = &resume {
            run.continue_from(ck)?;
            // What the interrupted run logged past its checkpoint is dropped.
            if let Some(board) = run.board.as_deref_mut() {
                board.restart(run.step + 1)?;
            }
        }
        if world.is_root() {
            write_history(&run.files.history, &run.history)?;
        }
        Ok((run, model))
    }

    /// The counters, early stopping, loader position and history of the run `ck` ends.
    fn continue_from(&mut self, ck: &Checkpoint) -> Result<(), TrainingError> {
        self.epochs_done = ck.state.epoch;
        self.step = ck.state.global_step;
        self.early_stopping = ck.state.early_stopping.clone();
        self.early_stopping.patience = self.cfg.patience;
        self.stopped_early = ck.state.stopped;
        self.position = ck.state.position.clone();
        if let Some(p) = &self.position {
            check_position(ck, p, self.train.len(), self.world)?;
        }
        self.history = read_history(&self.files.history, self.epochs_done)?;
        Ok(())
    }

    /// The epoch to train next (0-based), if the run goes on.
    fn next_epoch(&self) -> Option<u64> {
        (self.epochs_done < self.cfg.max_epochs && !self.stopped_early).then_some(self.epochs_done)
    }

    /// Whether every rank stops now: a stop request on any rank stops all of them at the same
    /// step (one small all-reduce per step under MPI).
    fn stop_agreed(&self) -> bool {
        let mut requested = [f64::from(u8::from(self.stop.is_requested()))];
        if self.world.is_distributed() {
            self.world.all_reduce_sum_f64(&mut requested);
        }
        requested[0] > 0.0
    }

    /// The error that ends a stopped run in epoch `epoch` (from 1).
    fn stopped(&self, epoch: u64) -> TrainingError {
        TrainingError::Stopped {
            epoch,
            step: self.step,
            checkpoint: self.files.last.clone(),
        }
    }

    /// The rank's batches of `epoch`, after the first `skip` (already trained before a resume).
    fn batches(&mut self, epoch: u64, skip: u64) -> EpochBatches<D::Input> {
        match self.prefetched.take() {
            Some((e, started)) if e == epoch && skip == 0 => started,
            _ => self.start_batches(epoch, skip),
        }
    }

    /// Starts the loader of `epoch` (the same order whenever it starts: a function of the epoch).
    fn start_batches(&self, epoch: u64, skip_batches: u64) -> EpochBatches<D::Input> {
        let pass = Pass {
            seed: self.cfg.seed,
            epoch,
            shuffle: true,
            shuffle_buffer: self.cfg.shuffle_buffer,
            batch_size: self.cfg.batch_size,
            rank: self.world.rank(),
            world: self.world.size(),
            skip_batches,
        };
        stream(
            self.train,
            pass,
            self.cfg.loader_threads,
            self.cfg.prefetch,
            |d: &D, events, n| Ok((d.batch(events)?, n)),
        )
    }

    /// Trains one epoch (or its rest after a resume inside it).
    fn train_epoch(
        &mut self,
        mut model: M,
        epoch: u64,
    ) -> Result<(M, EpochProgress<B::InnerBackend>), TrainingError> {
        let resumed = self.position.take();
        let (plan, mut batches) = self.batches(epoch, resumed.as_ref().map_or(0, |p| p.batches));
        let mut progress = EpochProgress::new(
            self.schedule.lr(epoch),
            resumed.as_ref(),
            self.world.rank(),
            plan.events.saturating_sub(self.cfg.train_metrics_events),
            self.device,
        );
        let bar = self.epoch_bar(epoch, plan.events);
        bar.inc(progress.events as u64);
        self.since_logged = (Instant::now(), 0);
        let _epoch_span = tracing::info_span!("epoch", epoch).entered();
        // Time the training loop spends waiting for the loader (zero when prefetch keeps up).
        while let Some(item) = tracing::info_span!("wait_for_batch").in_scope(|| batches.next()) {
            let (batch, n_real) = item?;
            model = self.train_step(model, epoch, &batch, n_real, &mut progress)?;
            bar.inc(n_real.min(batch.n_events) as u64);
            if self.stop_agreed() {
                bar.finish_and_clear();
                self.write_position(&model, epoch, &mut progress)?;
                return Err(self.stopped(epoch + 1));
            }
            if let Some(every) = self.cfg.checkpoint_every_steps
                && progress.batches.is_multiple_of(every)
                && progress.batches < plan.steps
            {
                self.write_position(&model, epoch, &mut progress)?;
            }
        }
        drop(batches);
        bar.finish_and_clear();
        // The next epoch's loader fills its shuffle buffer while this one is validated.
        if epoch + 1 < self.cfg.max_epochs {
            self.prefetched = Some((epoch + 1, self.start_batches(epoch + 1, 0)));
        }
        Ok((model, progress))
    }

    fn epoch_bar(&self, epoch: u64, events: usize) -> ProgressBar {
        let of = if self.world.is_distributed() {
            " (rank 0)"
        } else {
            ""
        };
        progress_bar(
            self.progress && self.world.is_root(),
            events as u64,
            format!("epoch {}/{}{of}", epoch + 1, self.cfg.max_epochs),
            "events",
        )
    }

    /// One optimiser step on `batch` (rows past `n_real` are padding): forward, weighted loss,
    /// backward, gradient all-reduce, Adam.
    fn train_step(
        &mut self,
        model: M,
        epoch: u64,
        batch: &Batch<D::Input>,
        n_real: usize,
        progress: &mut EpochProgress<B::InnerBackend>,
    ) -> Result<M, TrainingError> {
        let device = self.device;
        let rank = self.world.rank();
        // Dropout of each step is seeded from (seed, epoch, step, rank): a resume inside the
        // epoch continues the same random stream.
        B::seed(
            device,
            step_seed(self.cfg.seed, epoch, progress.batches, rank),
        );
        let forward_span = tracing::info_span!("forward_loss").entered();
        let n_real = n_real.min(batch.n_events);
        let logits = model.logits(&batch.input, device); // [n_rows, n_out]
        let [n_rows, _] = logits.dims();
        let weights = self.training_weights(batch, n_real);
        let s_b: f64 = weights.iter().map(|w| f64::from(w.abs())).sum();
        progress.keep_for_metrics(&logits, batch, n_real, &self.task, self.cfg.train_metrics);
        let (labels, multilabels) = targets::<B, _>(batch, &self.task, n_rows, device);
        let per_event = per_event_loss(&self.task, logits, labels, multilabels);
        let weights = Tensor::<B, 1>::from_data(TensorData::new(weights, [n_rows]), device);
        let loss = weighted_loss(per_event, weights); // [1]
        progress.add_loss(loss.clone().inner(), s_b, n_real);
        let logged =
            self.cfg.tensorboard && (self.step + 1).is_multiple_of(self.cfg.log_every_steps);
        let step_loss = logged.then(|| loss.clone().inner());
        drop(forward_span);
        let grads = tracing::info_span!("backward")
            .in_scope(|| GradientsParams::from_grads(loss.backward(), &model));
        let grads = tracing::info_span!("allreduce").in_scope(|| {
            let start = Instant::now();
            let grads = all_reduce_gradients::<B, M>(&model, grads, s_b, self.world, device);
            if self.world.is_distributed() {
                progress.allreduce_s += start.elapsed().as_secs_f64();
            }
            grads
        });
        let _optimizer_span = tracing::info_span!("optimizer_step").entered();
        let model = self.optim.step(progress.lr, model, grads);
        self.step += 1;
        self.since_logged.1 += n_real;
        if let Some(loss) = step_loss {
            self.log_step(loss, s_b, progress.lr)?;
        }
        Ok(model)
    }

    /// TensorBoard's line of the step just taken: the global batch's loss from this rank's
    /// `loss` over `s_b` = Σ|w|, and the events per second since the last line (every rank
    /// takes part: one small all-reduce).
    fn log_step(
        &mut self,
        loss: Tensor<B::InnerBackend, 1>,
        s_b: f64,
        lr: f64,
    ) -> Result<(), TrainingError> {
        let local = f64::from(loss_value(&Some(loss)));
        let mut sums = [local * s_b, s_b, self.since_logged.1 as f64];
        self.world.all_reduce_sum_f64(&mut sums);
        let [loss_sum, abs_sum, events] = sums;
        let secs = self.since_logged.0.elapsed().as_secs_f64();
        self.since_logged = (Instant::now(), 0);
        match self.board.as_deref_mut() {
            Some(board) => board.step(
                self.step,
                loss_sum / abs_sum.max(f64::MIN_POSITIVE),
                lr,
                events / secs.max(1e-9),
            ),
            None => Ok(()),
        }
    }

    /// The training weight of each row: the negative-weight policy, then the class factors;
    /// padding rows 0.
    fn training_weights(&self, batch: &Batch<D::Input>, n_real: usize) -> Vec<f32> {
        let weight = |label: i64, w: f32| -> f32 {
            let w = self.cfg.negative_weights.apply(w);
            match &self.scales {
                Some(s) => usize::try_from(label)
                    .ok()
                    .and_then(|l| s.get(l))
                    .map_or(0.0, |f| (f64::from(w) * f) as f32),
                None => w,
            }
        };
        batch
            .labels
            .iter()
            .zip(&batch.weights)
            .enumerate()
            .map(|(i, (&l, &w))| if i < n_real { weight(l, w) } else { 0.0 })
            .collect()
    }

    /// Writes `last.ckpt` inside `epoch` with the loader position (every rank takes part: the
    /// position gathers each rank's sums; rank 0 writes).
    fn write_position(
        &mut self,
        model: &M,
        epoch: u64,
        progress: &mut EpochProgress<B::InnerBackend>,
    ) -> Result<(), TrainingError> {
        let _s = tracing::info_span!("checkpoint").entered();
        let world = self.world;
        let position = EpochPosition {
            batches: progress.batches,
            ranks: world.size(),
            split_events: self.train.len() as u64,
            loss_sums: world.all_gather_f32(&[loss_value(&progress.loss_sum)]),
            abs_sums: world
                .all_gather_i64(&[progress.abs_sum.to_bits() as i64])
                .into_iter()
                .map(|b| f64::from_bits(b as u64))
                .collect(),
            events: world
                .all_gather_i64(&[progress.events as i64])
                .into_iter()
                .map(|n| n as u64)
                .collect(),
            kept: progress.kept_so_far(world),
        };
        if world.is_root() {
            let state = self.state(epoch, false, Some(position));
            save_checkpoint::<B, M, _>(&self.files.last, &state, model, self.optim.to_record())?;
        }
        Ok(())
    }

    /// The checkpoint state with `epochs` epochs completed.
    fn state(
        &self,
        epochs: u64,
        stopped: bool,
        position: Option<EpochPosition>,
    ) -> CheckpointState {
        CheckpointState {
            contract_version: self.stamp.contract_version.clone(),
            written_by: self.stamp.written_by.clone(),
            epoch: epochs,
            global_step: self.step,
            schedule: self.schedule,
            early_stopping: self.early_stopping.clone(),
            seed: self.cfg.seed,
            stopped,
            config: self.stamp.resolved_config.clone(),
            fingerprint: self.stamp.fingerprint.clone(),
            parameters: self.stamp.parameters.clone(),
            position,
        }
    }

    /// The epoch's training loss, metrics and rate over all ranks (padding counted nowhere).
    fn summarise_training(
        &self,
        progress: EpochProgress<B::InnerBackend>,
        epoch: u64,
    ) -> Result<TrainingSummary, TrainingError> {
        let local_loss = f64::from(loss_value(&progress.loss_sum));
        let trained_here = (progress.events - progress.events_before) as f64;
        let mut sums = [local_loss, progress.abs_sum, trained_here];
        self.world.all_reduce_sum_f64(&mut sums);
        let [loss_total, abs_total, trained] = sums;
        let train_s = progress.start.elapsed().as_secs_f64();
        let loss = loss_total / abs_total.max(f64::MIN_POSITIVE);
        if !loss.is_finite() {
            return Err(TrainingError::NonFiniteLoss {
                epoch: epoch + 1,
                value: loss,
            });
        }
        let metrics = self.cfg.train_metrics.then(|| {
            let mut seen = progress.seen;
            seen.logits = progress.seen_logits.finish();
            MetricsRecord::from(&seen.gathered(self.world).metrics(&self.task))
        });
        Ok(TrainingSummary {
            start: progress.start,
            lr: progress.lr,
            loss,
            metrics,
            events_per_s: trained / train_s.max(1e-9),
            train_s,
            allreduce_s: progress.allreduce_s,
        })
    }

    /// Scores the validation split: each rank its share, every rank gets all the outputs, so
    /// every rank computes the same exact metrics and the same early-stopping verdict.
    fn validate(&self, model: &M) -> Result<Validation, TrainingError> {
        let _span = tracing::info_span!("validation").entered();
        let scoring = Scoring {
            batch_size: self.cfg.eval_batch_size,
            threads: self.cfg.loader_threads,
            rank: self.world.rank(),
            world: self.world.size(),
        };
        let predictions = predict(
            &model.valid(),
            self.val,
            &self.task,
            scoring,
            self.device,
            &ProgressBar::hidden(),
        )?
        .gathered(self.world);
        let metrics = predictions.metrics(&self.task);
        let objective = match &self.scales {
            Some(s) => predictions.balanced_loss(&self.task, s),
            None => metrics.loss,
        };
        Ok(Validation { metrics, objective })
    }

    /// Closes `epoch`: early stopping's verdict, `last.ckpt` (and `best.ckpt` on a new best),
    /// the history line and the console line.
    fn end_epoch(
        &mut self,
        model: &M,
        epoch: u64,
        training: TrainingSummary,
        validation: &Validation,
    ) -> Result<(), TrainingError> {
        let _span = tracing::info_span!("checkpoint").entered();
        let root = self.world.is_root();
        let verdict = self.early_stopping.update(epoch, validation.objective);
        self.stopped_early = verdict == Verdict::Stop;
        self.epochs_done = epoch + 1;
        if root {
            let state = self.state(epoch + 1, self.stopped_early, None);
            if verdict == Verdict::Improved {
                save_checkpoint::<B, M, _>(
                    &self.files.best,
                    &state,
                    model,
                    self.optim.to_record(),
                )?;
            }
            save_checkpoint::<B, M, _>(&self.files.last, &state, model, self.optim.to_record())?;
        }
        let record = EpochRecord {
            epoch: epoch + 1,
            lr: training.lr,
            global_step: self.step,
            train_loss: training.loss,
            train: training.metrics,
            val: MetricsRecord::from(&validation.metrics),
            val_objective: validation.objective,
            best: verdict == Verdict::Improved,
            events_per_s: training.events_per_s,
            train_s: training.train_s,
            allreduce_s: training.allreduce_s,
            ranks: self.world.size(),
            epoch_s: training.start.elapsed().as_secs_f64(),
        };
        if root {
            let balanced = self.scales.is_some();
            let _ = writeln!(
                self.log,
                "{}",
                epoch_line(&record, self.cfg.max_epochs, balanced)
            );
        }
        if let Some(board) = self.board.as_deref_mut() {
            board.epoch(&record)?;
        }
        self.history.push(record);
        if root {
            write_history(&self.files.history, &self.history)?;
        }
        Ok(())
    }

    /// The report of a run that ran its course (or stopped early).
    fn finish(self, model: M) -> FitReport<M> {
        let es = &self.early_stopping;
        if self.stopped_early && self.world.is_root() {
            let _ = writeln!(
                self.log,
                "early stopping: no better validation loss in {} epochs (best {} at epoch {})",
                self.cfg.patience,
                crate::history::fmt_metric(es.best),
                es.best_epoch.map_or(0, |e| e + 1)
            );
        }
        FitReport {
            model,
            history: self.history,
            best: es.best_epoch.zip(es.best),
            stopped_early: self.stopped_early,
        }
    }
}

/// The labels (and multilabel targets) of a batch's `n_rows` rows on the device.
fn targets<B: Backend, X>(
    batch: &Batch<X>,
    task: &Task,
    n_rows: usize,
    device: &B::Device,
) -> (Tensor<B, 1, Int>, Option<Tensor<B, 2>>) {
    let labels = Tensor::from_data(TensorData::new(batch.labels.clone(), [n_rows]), device);
    let multilabels = match *task {
        Task::Multilabel { n_labels } => Some(Tensor::from_data(
            TensorData::new(batch.multilabels.clone(), [n_rows, n_labels]),
            device,
        )),
        _ => None,
    };
    (labels, multilabels)
}

/// The class factors of the training weights (`class_balance`): every class the same total |w|
/// in the training split (class totals read block by block: the labels and weights only).
fn class_scales<D: EventSource>(
    cfg: &TrainConfig,
    task: &Task,
    train: &D,
) -> Result<Option<Vec<f64>>, TrainingError> {
    if !cfg.class_balance {
        return Ok(None);
    }
    let n_classes = match *task {
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
    Ok(Some(totals.scales()))
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

#[cfg(test)]
mod tests;
