//! An epoch's training on one rank so far: the loss summed on the device, the events and
//! batches, and the outputs kept for the training metrics; what a mid-epoch checkpoint saves and
//! a resume starts from.

use std::time::Instant;

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_distributed::World;
use gnn4c_family::Batch;
use gnn4c_tasks::Task;

use crate::checkpoint::EpochPosition;
use crate::predict::{Pending, Predictions};

/// An epoch's training on this rank so far.
pub(crate) struct EpochProgress<B: Backend> {
    pub(crate) start: Instant,
    pub(crate) lr: f64,
    /// Σ loss_b·Σ|w|_b, accumulated on the device in f32.
    pub(crate) loss_sum: Option<Tensor<B, 1>>,
    /// Σ|w| of the training weights.
    pub(crate) abs_sum: f64,
    /// Events trained, including those before a resume.
    pub(crate) events: usize,
    /// Of them, trained before a resume (not counted in the rate).
    pub(crate) events_before: usize,
    /// Batches of the epoch trained.
    pub(crate) batches: u64,
    /// The training metrics' events start here (the rank's last `train_metrics_events`).
    pub(crate) metrics_from: usize,
    pub(crate) seen: Predictions,
    pub(crate) seen_logits: Pending<B>,
    pub(crate) allreduce_s: f64,
}

impl<B: Backend> EpochProgress<B> {
    /// An epoch's start, or where `resumed` left it (this rank's sums).
    pub(crate) fn new(
        lr: f64,
        resumed: Option<&EpochPosition>,
        rank: usize,
        metrics_from: usize,
        device: &B::Device,
    ) -> Self {
        let mut p = EpochProgress {
            start: Instant::now(),
            lr,
            loss_sum: None,
            abs_sum: 0.0,
            events: 0,
            events_before: 0,
            batches: 0,
            metrics_from,
            seen: Predictions::default(),
            seen_logits: Pending::new(),
            allreduce_s: 0.0,
        };
        if let Some(r) = resumed {
            p.loss_sum = Some(Tensor::from_data(
                TensorData::new(vec![r.loss_sums[rank]], [1]),
                device,
            ));
            p.abs_sum = r.abs_sums[rank];
            p.events = r.events[rank] as usize;
            p.events_before = p.events;
            p.batches = r.batches;
            if let Some(kept) = r.kept.get(rank) {
                let mut kept = kept.clone();
                p.seen_logits = Pending::starting_with(std::mem::take(&mut kept.logits));
                p.seen = kept;
            }
        }
        p
    }

    /// Keeps the rows of a batch that fall among the training metrics' events.
    pub(crate) fn keep_for_metrics<A, X>(
        &mut self,
        logits: &Tensor<A, 2>,
        batch: &Batch<X>,
        n_real: usize,
        task: &Task,
        wanted: bool,
    ) where
        A: AutodiffBackend<InnerBackend = B>,
    {
        let first_kept = self.metrics_from.saturating_sub(self.events).min(n_real);
        if !wanted || first_kept >= n_real {
            return;
        }
        let detached = logits.clone().inner(); // [n_rows, n_out]
        let [n_rows, n_out] = detached.dims();
        self.seen_logits
            .push(if first_kept == 0 && n_rows == n_real {
                detached
            } else {
                detached.slice([first_kept..n_real, 0..n_out])
            });
        self.seen.push_targets_rows(batch, task, first_kept..n_real);
    }

    /// Every rank's outputs kept for the training metrics so far, in rank order (empty when no
    /// rank kept any).
    pub(crate) fn kept_so_far(&mut self, world: &World) -> Vec<Predictions> {
        let own = Predictions {
            logits: self.seen_logits.values().to_vec(),
            ..self.seen.clone()
        };
        let kept = own.into_per_rank(world);
        if kept.iter().all(|p| p.labels.is_empty()) {
            return Vec::new();
        }
        kept
    }

    /// Adds a batch's loss (`loss` × its Σ|w| `s_b`) and its `n_real` events.
    pub(crate) fn add_loss(&mut self, loss: Tensor<B, 1>, s_b: f64, n_real: usize) {
        let contribution = loss.mul_scalar(s_b);
        self.loss_sum = Some(match self.loss_sum.take() {
            Some(s) => s + contribution,
            None => contribution,
        });
        self.abs_sum += s_b;
        self.events += n_real;
        self.batches += 1;
    }
}

/// The value of a running loss sum (0 before the first batch).
pub(crate) fn loss_value<B: Backend>(sum: &Option<Tensor<B, 1>>) -> f32 {
    sum.as_ref().map_or(0.0, |s| {
        s.clone()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 loss")[0]
    })
}
