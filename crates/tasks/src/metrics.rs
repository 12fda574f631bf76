//! Metrics over a whole split, on the host, in f64 (contract §6).

use crate::Task;

/// ROC AUC of `scores` for `labels` (1 = positive) with optional event `weights` (negative
/// weights kept as they are).
///
/// Exactly scikit-learn's `roc_curve(..., drop_intermediate=False)` integrated with the trapezoid
/// rule: events sorted by score, one ROC point per distinct score (ties together), cumulative
/// signed weights normalised by their totals; the curve may be non-monotonic with negative
/// weights. Returns NaN when a class has zero total weight.
pub fn roc_auc(labels: &[bool], scores: &[f64], weights: Option<&[f64]>) -> f64 {
    let Some(points) = roc_curve(labels, scores, weights) else {
        return f64::NAN;
    };
    points
        .windows(2)
        .map(|p| (p[1].0 - p[0].0) * (p[0].1 + p[1].1) / 2.0)
        .sum()
}

/// The ROC curve behind [`roc_auc`]: `(false-positive rate, true-positive rate)` at every
/// distinct score, from (0, 0) to (1, 1); `None` when a class has zero total weight.
pub fn roc_curve(
    labels: &[bool],
    scores: &[f64],
    weights: Option<&[f64]>,
) -> Option<Vec<(f64, f64)>> {
    let n = scores.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let (mut tp, mut fp) = (0.0f64, 0.0f64);
    let mut points = vec![(0.0f64, 0.0f64)];
    for (k, &i) in order.iter().enumerate() {
        let w = weights.map_or(1.0, |w| w[i]);
        if labels[i] {
            tp += w;
        } else {
            fp += w;
        }
        let last_of_tie = k + 1 == n || scores[order[k + 1]] != scores[i];
        if last_of_tie {
            points.push((fp, tp));
        }
    }
    let (fp_total, tp_total) = (fp, tp);
    if fp_total == 0.0 || tp_total == 0.0 {
        return None;
    }
    Some(
        points
            .into_iter()
            .map(|(f, t)| (f / fp_total, t / tp_total))
            .collect(),
    )
}

/// 0/1 targets per event and output, `[n, n_out]` row-major in one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    n_out: usize,
    values: Vec<u8>,
}

impl Targets {
    /// Targets from one row of `n_out` values per event.
    pub fn from_rows<R: AsRef<[u8]>>(n_out: usize, rows: impl IntoIterator<Item = R>) -> Targets {
        let mut values = Vec::new();
        for r in rows {
            values.extend_from_slice(r.as_ref());
        }
        Targets { n_out, values }
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.values.len() / self.n_out.max(1)
    }

    /// True when there are no events.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The targets of event `i`.
    pub fn row(&self, i: usize) -> &[u8] {
        &self.values[i * self.n_out..(i + 1) * self.n_out]
    }

    /// Every event's targets, in order.
    pub fn rows(&self) -> impl Iterator<Item = &[u8]> {
        self.values.chunks(self.n_out.max(1))
    }
}

/// Fraction of events whose prediction is right: argmax for multiclass, score ≥ 0.5 otherwise
/// (per label for multilabel). `scores` is `[n_events, n_out]` row-major.
pub fn accuracy(task: &Task, scores: &[f64], targets: &Targets) -> f64 {
    let k = task.n_out();
    let n = scores.len() / k.max(1);
    if n == 0 {
        return f64::NAN;
    }
    let mut right = 0usize;
    let mut total = 0usize;
    for i in 0..n {
        let row = &scores[i * k..(i + 1) * k];
        match task {
            Task::Multiclass { .. } => {
                let arg = row
                    .iter()
                    .enumerate()
                    .fold((0, f64::NEG_INFINITY), |best, (j, &s)| {
                        if s > best.1 { (j, s) } else { best }
                    })
                    .0;
                right += usize::from(targets.row(i).get(arg) == Some(&1));
                total += 1;
            }
            Task::Binary | Task::Multilabel { .. } => {
                for (j, &s) in row.iter().enumerate() {
                    right += usize::from((s >= 0.5) == (targets.row(i)[j] == 1));
                    total += 1;
                }
            }
        }
    }
    right as f64 / total as f64
}

/// Metrics of one split.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Σ wᵢℓᵢ / Σ|wᵢ| over the split.
    pub loss: f64,
    /// Accuracy.
    pub accuracy: f64,
    /// AUC per output (binary: one; multiclass: one-vs-rest per class; multilabel: per label).
    pub auc: Vec<f64>,
    /// The same, weighted.
    pub auc_weighted: Vec<f64>,
    /// Mean of `auc` over outputs with a defined AUC.
    pub auc_macro: f64,
    /// Mean of `auc_weighted`.
    pub auc_macro_weighted: f64,
}

fn mean_defined(v: &[f64]) -> f64 {
    let d: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if d.is_empty() {
        f64::NAN
    } else {
        d.iter().sum::<f64>() / d.len() as f64
    }
}

/// Every metric of a split from per-event scores `[n, n_out]`, one-hot / multi-hot `targets`,
/// `weights` and per-event losses.
pub fn evaluate(
    task: &Task,
    scores: &[f64],
    targets: &Targets,
    weights: &[f64],
    per_event_loss: &[f64],
) -> Metrics {
    let k = task.n_out();
    let n = targets.len();
    let sum_abs: f64 = weights.iter().map(|w| w.abs()).sum();
    let loss = if sum_abs > 0.0 {
        per_event_loss
            .iter()
            .zip(weights)
            .map(|(l, w)| l * w)
            .sum::<f64>()
            / sum_abs
    } else {
        0.0
    };
    let mut auc = Vec::with_capacity(k);
    let mut auc_w = Vec::with_capacity(k);
    for j in 0..k {
        let labels: Vec<bool> = targets.rows().map(|t| t[j] == 1).collect();
        let s: Vec<f64> = (0..n).map(|i| scores[i * k + j]).collect();
        auc.push(roc_auc(&labels, &s, None));
        auc_w.push(roc_auc(&labels, &s, Some(weights)));
    }
    Metrics {
        loss,
        accuracy: accuracy(task, scores, targets),
        auc_macro: mean_defined(&auc),
        auc_macro_weighted: mean_defined(&auc_w),
        auc,
        auc_weighted: auc_w,
    }
}

/// The per-event loss ℓᵢ in f64 from f32 logits `[n, n_out]` (host side, for metrics): the same
/// formulas as [`crate::per_event_loss`], computed stably (log-sum-exp, softplus).
pub fn per_event_loss_host(task: &Task, logits: &[f32], targets: &Targets) -> Vec<f64> {
    let k = task.n_out().max(1);
    let softplus = |x: f64| x.max(0.0) + (-x.abs()).exp().ln_1p();
    logits
        .chunks(k)
        .zip(targets.rows())
        .map(|(row, t)| match task {
            Task::Multiclass { .. } => {
                let m = row
                    .iter()
                    .fold(f64::NEG_INFINITY, |a, &x| a.max(f64::from(x)));
                let lse = m + row
                    .iter()
                    .map(|&x| (f64::from(x) - m).exp())
                    .sum::<f64>()
                    .ln();
                let y = t.iter().position(|&v| v == 1).unwrap_or(0);
                lse - f64::from(row[y])
            }
            Task::Binary | Task::Multilabel { .. } => {
                let sum: f64 = row
                    .iter()
                    .zip(t)
                    .map(|(&x, &y)| {
                        let x = f64::from(x);
                        softplus(x) - x * f64::from(y)
                    })
                    .sum();
                sum / k as f64
            }
        })
        .collect()
}

/// Scores in f64 from f32 logits `[n, n_out]`: softmax (multiclass) or sigmoid.
pub fn scores_host(task: &Task, logits: &[f32]) -> Vec<f64> {
    let k = task.n_out().max(1);
    let mut out = Vec::with_capacity(logits.len());
    for row in logits.chunks(k) {
        match task {
            Task::Multiclass { .. } => {
                let m = row
                    .iter()
                    .fold(f64::NEG_INFINITY, |a, &x| a.max(f64::from(x)));
                let e: Vec<f64> = row.iter().map(|&x| (f64::from(x) - m).exp()).collect();
                let z: f64 = e.iter().sum();
                out.extend(e.iter().map(|v| v / z));
            }
            Task::Binary | Task::Multilabel { .. } => {
                out.extend(row.iter().map(|&x| 1.0 / (1.0 + (-f64::from(x)).exp())));
            }
        }
    }
    out
}

/// One-hot (multiclass), 0/1 (binary) or multi-hot (multilabel) targets per event, from class
/// indices `labels` or from `multilabels [n, n_labels]` row-major.
pub fn targets_of(task: &Task, labels: &[i64], multilabels: &[f32]) -> Targets {
    match *task {
        Task::Binary => Targets {
            n_out: 1,
            values: labels.iter().map(|&l| u8::from(l == 1)).collect(),
        },
        Task::Multiclass { n_classes } => {
            let mut values = vec![0u8; labels.len() * n_classes];
            for (i, &l) in labels.iter().enumerate() {
                if let Some(c) = usize::try_from(l).ok().filter(|&c| c < n_classes) {
                    values[i * n_classes + c] = 1;
                }
            }
            Targets {
                n_out: n_classes,
                values,
            }
        }
        Task::Multilabel { n_labels } => Targets {
            n_out: n_labels,
            values: multilabels.iter().map(|&v| u8::from(v >= 0.5)).collect(),
        },
    }
}

/// Every metric of a split from its f32 logits `[n, n_out]`, class `labels` (or `multilabels`)
/// and event `weights` (negative weights kept as they are).
pub fn metrics_from_logits(
    task: &Task,
    logits: &[f32],
    labels: &[i64],
    multilabels: &[f32],
    weights: &[f32],
) -> Metrics {
    let targets = targets_of(task, labels, multilabels);
    let scores = scores_host(task, logits);
    let losses = per_event_loss_host(task, logits, &targets);
    let w: Vec<f64> = weights.iter().map(|&w| f64::from(w)).collect();
    evaluate(task, &scores, &targets, &w, &losses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_of_simple_cases() {
        let l = [true, false, true, false];
        assert_eq!(roc_auc(&l, &[0.9, 0.1, 0.8, 0.2], None), 1.0);
        assert_eq!(roc_auc(&l, &[0.1, 0.9, 0.2, 0.8], None), 0.0);
        // All tied: the diagonal.
        assert_eq!(roc_auc(&l, &[0.5; 4], None), 0.5);
        // A class absent from the split: undefined, not a panic.
        assert!(roc_auc(&[true, true], &[0.2, 0.3], None).is_nan());
    }

    #[test]
    fn large_and_negative_weights() {
        let l = [true, false, true, false];
        let s = [0.9, 0.8, 0.7, 0.1];
        // Scaling every weight leaves the AUC unchanged.
        let w1 = [1.0, 2.0, 3.0, 4.0];
        let w2 = [1e12, 2e12, 3e12, 4e12];
        assert!((roc_auc(&l, &s, Some(&w1)) - roc_auc(&l, &s, Some(&w2))).abs() < 1e-12);
        // A negative weight is kept as is.
        let wn = [1.0, -0.5, 1.0, 1.0];
        let a = roc_auc(&l, &s, Some(&wn));
        assert!(a.is_finite() && a != roc_auc(&l, &s, None));
    }

    #[test]
    fn host_loss_and_scores_match_the_formulas() {
        let task = Task::Multiclass { n_classes: 3 };
        let logits = [1.0f32, 2.0, 3.0, 1000.0, 0.0, -1000.0];
        let t = targets_of(&task, &[2, 1], &[]);
        let l = per_event_loss_host(&task, &logits, &t);
        let lse = 3.0 + ((-2.0f64).exp() + (-1.0f64).exp() + 1.0).ln();
        assert!((l[0] - (lse - 3.0)).abs() < 1e-12);
        assert!(
            (l[1] - 1000.0).abs() < 1e-9,
            "stable for huge logits: {}",
            l[1]
        );
        let s = scores_host(&task, &logits);
        assert!((s[0] + s[1] + s[2] - 1.0).abs() < 1e-12);
        let b = per_event_loss_host(
            &Task::Binary,
            &[0.0, 50.0],
            &Targets::from_rows(1, [[1u8], [0]]),
        );
        assert!((b[0] - std::f64::consts::LN_2).abs() < 1e-12);
        assert!((b[1] - 50.0).abs() < 1e-9);
        // A class absent from the split: its AUC is undefined, the macro mean skips it.
        let m = metrics_from_logits(&task, &logits, &[2, 1], &[], &[1.0, 1.0]);
        assert!(m.auc[0].is_nan() && m.auc_macro.is_finite());
    }
}
