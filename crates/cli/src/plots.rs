//! PNG plots for `evaluate`: ROC curves, score distributions per class, training curves.
//!
//! Drawn with plotters' bitmap backend and DejaVu Sans embedded by the `dejavu` crate (no system
//! fonts needed).

use std::path::Path;

use anyhow::anyhow;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

fn ensure_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The embedded font is valid; a failure would only mean text is not drawn.
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

fn err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> anyhow::Error + '_ {
    move |e| anyhow!("drawing {}: {e:?}", path.display())
}

const COLORS: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 128),
    RGBColor(128, 128, 0),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Every chart here: f64 × f64 axes on the bitmap backend.
type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A line in series colour `i`, with its legend entry.
fn labelled_line(
    chart: &mut Chart<'_, '_>,
    points: Vec<(f64, f64)>,
    i: usize,
    label: String,
    path: &Path,
) -> anyhow::Result<()> {
    let c = color(i);
    chart
        .draw_series(LineSeries::new(points, c.stroke_width(2)))
        .map_err(err(path))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    Ok(())
}

/// The legend at `position`, then the image written out.
fn finish<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    position: SeriesLabelPosition,
    path: &Path,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(err(path))?;
    root.present().map_err(err(path))?;
    Ok(())
}

/// One ROC curve: legend name, AUC, (false-positive rate, true-positive rate) points.
pub(crate) type RocCurve = (String, f64, Vec<(f64, f64)>);

/// One ROC curve per output, written atomically to `path`.
pub(crate) fn roc_curves(path: &Path, title: &str, curves: &[RocCurve]) -> anyhow::Result<()> {
    ensure_font();
    save(path, |tmp| {
        let root = BitMapBackend::new(tmp, (900, 800)).into_drawing_area();
        root.fill(&WHITE).map_err(err(path))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0f64..1.0, 0.0f64..1.0)
            .map_err(err(path))?;
        chart
            .configure_mesh()
            .x_desc("background efficiency (false-positive rate)")
            .y_desc("signal efficiency (true-positive rate)")
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(err(path))?;
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (1.0, 1.0)],
                BLACK.mix(0.3).stroke_width(1),
            ))
            .map_err(err(path))?;
        for (i, (name, auc, points)) in curves.iter().enumerate() {
            let label = format!("{name} (AUC {auc:.4})");
            labelled_line(&mut chart, points.clone(), i, label, path)?;
        }
        finish(&mut chart, &root, SeriesLabelPosition::LowerRight, path)
    })
}

/// Weighted, unit-area score histograms: `(name, scores, weights)` per class, 40 bins on [0, 1].
pub(crate) fn score_distributions(
    path: &Path,
    title: &str,
    x_desc: &str,
    classes: &[(String, Vec<f64>, Vec<f64>)],
) -> anyhow::Result<()> {
    ensure_font();
    const BINS: usize = 40;
    let hists: Vec<Vec<f64>> = classes
        .iter()
        .map(|(_, s, w)| {
            let mut h = vec![0.0f64; BINS];
            for (&x, &wi) in s.iter().zip(w) {
                let b = ((x * BINS as f64) as usize).min(BINS - 1);
                h[b] += wi;
            }
            let total: f64 = h.iter().sum::<f64>().abs().max(f64::MIN_POSITIVE);
            h.iter().map(|v| v / total * BINS as f64).collect()
        })
        .collect();
    let y_max = hists
        .iter()
        .flatten()
        .fold(0.0f64, |a, &b| a.max(b))
        .max(1e-9)
        * 1.15;
    save(path, |tmp| {
        let root = BitMapBackend::new(tmp, (900, 700)).into_drawing_area();
        root.fill(&WHITE).map_err(err(path))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0f64..1.0, 0.0f64..y_max)
            .map_err(err(path))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("weighted events, unit area")
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(err(path))?;
        for (i, ((name, _, _), h)) in classes.iter().zip(&hists).enumerate() {
            // A step outline per class.
            let mut pts = Vec::with_capacity(2 * BINS + 2);
            pts.push((0.0, 0.0));
            for (b, &v) in h.iter().enumerate() {
                pts.push((b as f64 / BINS as f64, v));
                pts.push(((b + 1) as f64 / BINS as f64, v));
            }
            pts.push((1.0, 0.0));
            labelled_line(&mut chart, pts, i, name.clone(), path)?;
        }
        finish(&mut chart, &root, SeriesLabelPosition::UpperRight, path)
    })
}

/// Curves against the epoch: `(name, values)` per series (`None` where undefined).
pub(crate) fn training_curves(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<Option<f64>>)],
) -> anyhow::Result<()> {
    ensure_font();
    let n = series.iter().map(|s| s.1.len()).max().unwrap_or(0).max(1);
    let values: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().flatten().copied())
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        let pad = ((hi - lo) * 0.1).max(1e-3);
        (lo - pad, hi + pad)
    } else {
        (0.0, 1.0)
    };
    save(path, |tmp| {
        let root = BitMapBackend::new(tmp, (900, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(err(path))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 24))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5f64..n as f64 + 0.5, lo..hi)
            .map_err(err(path))?;
        chart
            .configure_mesh()
            .x_desc("epoch")
            .y_desc(y_desc)
            // Epochs are whole numbers: label only the ticks that fall on one.
            .x_labels(n.min(20) + 1)
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-9 && *x >= 1.0 {
                    format!("{x:.0}")
                } else {
                    String::new()
                }
            })
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(err(path))?;
        for (i, (name, v)) in series.iter().enumerate() {
            let pts: Vec<(f64, f64)> = v
                .iter()
                .enumerate()
                .filter_map(|(e, x)| x.map(|x| ((e + 1) as f64, x)))
                .collect();
            labelled_line(&mut chart, pts.clone(), i, name.clone(), path)?;
            let c = color(i);
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(err(path))?;
        }
        finish(&mut chart, &root, SeriesLabelPosition::UpperRight, path)
    })
}

/// Draws into a temporary sibling of `path` and renames it into place (no half PNG is left).
fn save(path: &Path, draw: impl FnOnce(&Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
    gnn4c_data::write_atomically(path, |tmp| {
        draw(tmp).map_err(|e| gnn4c_data::DataError::Write {
            path: path.to_owned(),
            message: format!("{e:#}"),
        })
    })?;
    Ok(())
}

/// `training_loss.png` and `training_auc.png` in `out_dir` from a run's `history.jsonl` (none
/// when it is missing or empty); returns the file names written.
pub(crate) fn training_plots(history: &Path, out_dir: &Path) -> anyhow::Result<Vec<&'static str>> {
    let mut written = Vec::new();
    if let Ok(text) = std::fs::read_to_string(history) {
        let rows: Vec<gnn4c_training::EpochRecord> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if !rows.is_empty() {
            training_curves(
                &out_dir.join("training_loss.png"),
                "Loss per epoch",
                "weighted loss",
                &[
                    (
                        "train".into(),
                        rows.iter().map(|r| Some(r.train_loss)).collect(),
                    ),
                    (
                        "validation".into(),
                        rows.iter().map(|r| Some(r.val.loss)).collect(),
                    ),
                    (
                        "validation, as trained (early stopping)".into(),
                        rows.iter().map(|r| Some(r.val_objective)).collect(),
                    ),
                ],
            )?;
            training_curves(
                &out_dir.join("training_auc.png"),
                "AUC and accuracy per epoch",
                "value",
                &[
                    (
                        "validation AUC (macro)".into(),
                        rows.iter().map(|r| r.val.auc_macro).collect(),
                    ),
                    (
                        "validation accuracy".into(),
                        rows.iter().map(|r| Some(r.val.accuracy)).collect(),
                    ),
                    (
                        "train accuracy".into(),
                        rows.iter()
                            .map(|r| r.train.as_ref().map(|t| t.accuracy))
                            .collect(),
                    ),
                ],
            )?;
            written.push("training_loss.png");
            written.push("training_auc.png");
        }
    }
    Ok(written)
}
