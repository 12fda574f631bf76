//! Inference (contract §10): scoring without autodiff, and output rows that keep every event's
//! identity.
//!
//! Generic over `gnn4c_family`'s `Classifier` and `EventSource` traits plus [`Identified`]
//! (which event each is): it never names a graph or a model type and knows no file format (the NPZ and
//! ROOT friend-tree writers live in `gnn4c-data`; the CLI connects the two). Start at [`score`].

use std::sync::Arc;

use burn::prelude::*;
use gnn4c_events::EventId;
use gnn4c_family::{Classifier, EventSource};
use gnn4c_tasks::{Task, scores_host};
use gnn4c_training::{ProgressBar, Scoring, StopFlag, TrainingError, predict_batches, stream};

/// An event source whose events have identities.
pub trait Identified: EventSource {
    /// The identity of an event.
    fn identity(&self, event: &Self::Event) -> EventId;
}

/// Every event of a dataset, scored, in dataset order.
#[derive(Debug, Clone)]
pub struct Scored {
    /// The task the scores follow.
    pub task: Task,
    /// `[n, n_out]` logits.
    pub logits: Vec<f32>,
    /// `[n, n_out]` scores (sigmoid or softmax), computed in f64 and rounded to f32.
    pub scores: Vec<f32>,
    /// Class index per event (−1 for multilabel).
    pub labels: Vec<i64>,
    /// `[n, n_labels]` 0/1 targets (multilabel only, else empty).
    pub multilabels: Vec<f32>,
    /// Event weights as stored.
    pub weights: Vec<f32>,
    /// Identity per event.
    pub ids: Vec<EventId>,
}

impl Scored {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when nothing was scored.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether event `i` is a positive of output `j`: its class (binary: class 1), or its
    /// label `j` (multilabel).
    pub fn is_positive(&self, i: usize, j: usize) -> bool {
        match self.task {
            Task::Binary => self.labels[i] == 1,
            Task::Multiclass { .. } => self.labels[i] == j as i64,
            Task::Multilabel { n_labels } => self.multilabels[i * n_labels + j] >= 0.5,
        }
    }

    /// The scores of event `i`.
    pub fn scores_of(&self, i: usize) -> &[f32] {
        let k = self.task.n_out();
        &self.scores[i * k..(i + 1) * k]
    }
}

/// Scores every event of `data` with `model` (an inference-mode model: no autodiff), in batches
/// of `batch_size` on `threads` loader threads, advancing `bar` by the events scored. The data
/// is streamed in dataset order, never held whole. The result does not depend on the batch size
/// or thread count (the forward is per graph; only float summation order inside a batch can move
/// the last bits). A `stop` request ends it between batches with
/// [`TrainingError::StopRequested`].
#[allow(clippy::too_many_arguments)] // one call site (the run layer's scoring step)
pub fn score<B, M, D>(
    model: &M,
    data: &Arc<D>,
    task: &Task,
    batch_size: usize,
    threads: usize,
    device: &B::Device,
    bar: &ProgressBar,
    stop: &StopFlag,
) -> Result<Scored, TrainingError>
where
    B: Backend,
    M: Classifier<B, Input = D::Input>,
    D: Identified,
{
    let scoring = Scoring::whole(batch_size, threads);
    let (_, loader) = stream(data, scoring.pass(), threads, 2, |d: &D, events, n| {
        let ids: Vec<EventId> = events[..n].iter().map(|e| d.identity(e)).collect();
        Ok((d.batch(events)?, n, ids))
    });
    let mut ids = Vec::with_capacity(data.len());
    let batches = loader.map(|item| {
        stop.check()?;
        item.map(|(b, n, batch_ids)| {
            ids.extend(batch_ids);
            (b, n)
        })
    });
    let p = predict_batches(model, batches, task, device, bar)?;
    let scores = scores_host(task, &p.logits)
        .into_iter()
        .map(|s| s as f32)
        .collect();
    Ok(Scored {
        task: *task,
        scores,
        logits: p.logits,
        labels: p.labels,
        multilabels: p.multilabels,
        weights: p.weights,
        ids,
    })
}
