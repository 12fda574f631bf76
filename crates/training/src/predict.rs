//! Scoring a split: logits of every event with its targets, in dataset order, on one or many ranks.

use std::sync::Arc;

use burn::prelude::*;
use gnn4c_distributed::World;
use gnn4c_family::{Batch, Classifier, EventSource};
use gnn4c_tasks::{Metrics, Task, metrics_from_logits};

use crate::error::TrainingError;
use crate::progress::ProgressBar;
use crate::stream::{Pass, stream};

/// A model's outputs over a whole split, with the targets, in dataset order.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predictions {
    /// `[n, n_out]` row-major.
    pub logits: Vec<f32>,
    /// Class index per event.
    pub labels: Vec<i64>,
    /// `[n, n_labels]` (multilabel only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
    pub(crate) fn push_targets_rows<X>(
        &mut self,
        b: &Batch<X>,
        task: &Task,
        rows: std::ops::Range<usize>,
    ) {
        self.labels.extend_from_slice(&b.labels[rows.clone()]);
        self.weights.extend_from_slice(&b.weights[rows.clone()]);
        if let Task::Multilabel { n_labels } = *task {
            self.multilabels
                .extend_from_slice(&b.multilabels[rows.start * n_labels..rows.end * n_labels]);
        }
    }

    /// Every rank's predictions, each on its own, in rank order, on every rank (itself in a
    /// single process).
    pub fn into_per_rank(self, world: &World) -> Vec<Predictions> {
        if !world.is_distributed() {
            return vec![self];
        }
        let own = [
            self.logits.len(),
            self.labels.len(),
            self.multilabels.len(),
            self.weights.len(),
        ]
        .map(|n| n as i64);
        let lengths = world.all_gather_i64(&own);
        let all = self.gathered(world);
        let mut at = [0usize; 4];
        lengths
            .chunks_exact(4)
            .map(|n| {
                let mut take = |i: usize| {
                    let range = at[i]..at[i] + n[i] as usize;
                    at[i] = range.end;
                    range
                };
                Predictions {
                    logits: all.logits[take(0)].to_vec(),
                    labels: all.labels[take(1)].to_vec(),
                    multilabels: all.multilabels[take(2)].to_vec(),
                    weights: all.weights[take(3)].to_vec(),
                }
            })
            .collect()
    }

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
pub(crate) struct Pending<B: Backend> {
    tensors: Vec<Tensor<B, 2>>,
    out: Vec<f32>,
}

impl<B: Backend> Pending<B> {
    const CHUNK: usize = 64;

    pub(crate) fn new() -> Self {
        Pending {
            tensors: Vec::new(),
            out: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, t: Tensor<B, 2>) {
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

    pub(crate) fn finish(mut self) -> Vec<f32> {
        self.flush();
        self.out
    }

    /// The values so far (the pending tensors read back).
    pub(crate) fn values(&mut self) -> &[f32] {
        self.flush();
        &self.out
    }

    /// Pending values that start with `values` (read back before a resume).
    pub(crate) fn starting_with(values: Vec<f32>) -> Self {
        Pending {
            tensors: Vec::new(),
            out: values,
        }
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
