//! PNG plots for `evaluate`: ROC curves (background rejection and linear), per-class score
//! distributions (log and linear y), training curves. Legends sit in a column beside the chart.
//!
//! Drawn with plotters' bitmap backend and DejaVu Sans embedded by the `dejavu` crate (no system
//! fonts needed).

use std::path::Path;

use anyhow::anyhow;
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

/// Width of the legend column to the right of every chart: legends never cover data.
const LEGEND_W: u32 = 330;

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// The chart area and, to its right, the legend column.
fn with_legend_column<'a>(root: &Area<'a>) -> (Area<'a>, Area<'a>) {
    let (w, _) = root.dim_in_pixel();
    root.split_horizontally(w.saturating_sub(LEGEND_W))
}

/// `entries` (label, colour) as a column of line samples and labels, from the top of `area`.
fn legend(area: &Area<'_>, entries: &[(String, RGBColor)], path: &Path) -> anyhow::Result<()> {
    let font = ("sans-serif", 15).into_font().color(&BLACK);
    for (k, (label, c)) in entries.iter().enumerate() {
        let y = 60 + 24 * k as i32;
        area.draw(&PathElement::new(vec![(8, y), (36, y)], c.stroke_width(3)))
            .map_err(err(path))?;
        area.draw(&Text::new(label.clone(), (44, y - 8), font.clone()))
            .map_err(err(path))?;
    }
    Ok(())
}

/// A `size` image at `tmp`: `draw` fills the chart area, the legend column lists `entries`.
fn chart_with_legend(
    tmp: &Path,
    size: (u32, u32),
    entries: &[(String, RGBColor)],
    path: &Path,
    draw: impl FnOnce(&Area<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let root = BitMapBackend::new(tmp, size).into_drawing_area();
    root.fill(&WHITE).map_err(err(path))?;
    let (area, side) = with_legend_column(&root);
    draw(&area)?;
    legend(&side, entries, path)?;
    root.present().map_err(err(path))?;
    Ok(())
}

/// A step outline of the histogram `h` over [0, 1], values below `floor` drawn at `floor`.
fn steps(h: &[f64], floor: f64) -> Vec<(f64, f64)> {
    let bins = h.len() as f64;
    let mut pts = Vec::with_capacity(2 * h.len() + 2);
    pts.push((0.0, floor));
    for (b, &v) in h.iter().enumerate() {
        let v = v.max(floor);
        pts.push((b as f64 / bins, v));
        pts.push(((b + 1) as f64 / bins, v));
    }
    pts.push((1.0, floor));
    pts
}

/// One ROC curve: legend name, AUC, (false-positive rate, true-positive rate) points.
pub(crate) type RocCurve = (String, f64, Vec<(f64, f64)>);

/// The ROC curves twice, written atomically: `path` shows background rejection 1/ε_B (log
/// axis) against signal efficiency ε_S, as HEP papers do; `linear_path` ε_S against ε_B.
pub(crate) fn roc_curves(
    path: &Path,
    linear_path: &Path,
    title: &str,
    curves: &[RocCurve],
) -> anyhow::Result<()> {
    ensure_font();
    let entries: Vec<(String, RGBColor)> = curves
        .iter()
        .enumerate()
        .map(|(i, (name, auc, _))| (format!("{name} (AUC {auc:.4})"), color(i)))
        .collect();
    roc_rejection(path, title, curves, &entries)?;
    roc_linear(linear_path, title, curves, &entries)
}

/// Background rejection 1/ε_B (log axis) against signal efficiency ε_S.
fn roc_rejection(
    path: &Path,
    title: &str,
    curves: &[RocCurve],
    entries: &[(String, RGBColor)],
) -> anyhow::Result<()> {
    // Rejection: points with ε_B = 0 have no finite rejection and are left out.
    let rejection: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|(_, _, pts)| {
            pts.iter()
                .filter(|(fpr, tpr)| *fpr > 0.0 && *tpr > 0.0)
                .map(|&(fpr, tpr)| (tpr, 1.0 / fpr))
                .collect()
        })
        .collect();
    let top = rejection
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(10.0f64, f64::max)
        * 2.0;
    save(path, |tmp| {
        chart_with_legend(tmp, (1100, 750), entries, path, |area| {
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 24))
                .margin(15)
                .x_label_area_size(50)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0f64..1.0, (1.0f64..top).log_scale())
                .map_err(err(path))?;
            chart
                .configure_mesh()
                .x_desc("signal efficiency ε_S")
                .y_desc("background rejection 1/ε_B")
                .y_label_formatter(&|y| format!("{y:.0}"))
                .label_style(("sans-serif", 15))
                .draw()
                .map_err(err(path))?;
            for (i, pts) in rejection.iter().enumerate() {
                chart
                    .draw_series(LineSeries::new(pts.clone(), color(i).stroke_width(2)))
                    .map_err(err(path))?;
            }
            Ok(())
        })
    })
}

/// Signal efficiency ε_S against background efficiency ε_B.
fn roc_linear(
    path: &Path,
    title: &str,
    curves: &[RocCurve],
    entries: &[(String, RGBColor)],
) -> anyhow::Result<()> {
    save(path, |tmp| {
        chart_with_legend(tmp, (1100, 750), entries, path, |area| {
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 24))
                .margin(15)
                .x_label_area_size(50)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0f64..1.0, 0.0f64..1.0)
                .map_err(err(path))?;
            chart
                .configure_mesh()
                .x_desc("background efficiency ε_B (false-positive rate)")
                .y_desc("signal efficiency ε_S (true-positive rate)")
                .label_style(("sans-serif", 15))
                .draw()
                .map_err(err(path))?;
            chart
                .draw_series(LineSeries::new(
                    [(0.0, 0.0), (1.0, 1.0)],
                    BLACK.mix(0.3).stroke_width(1),
                ))
                .map_err(err(path))?;
            for (i, (_, _, pts)) in curves.iter().enumerate() {
                chart
                    .draw_series(LineSeries::new(pts.clone(), color(i).stroke_width(2)))
                    .map_err(err(path))?;
            }
            Ok(())
        })
    })
}

/// One panel of the score plots: the output's name, then (scores, weights) of the events of
/// that class (signal) and of the rest.
pub(crate) struct ScorePanel {
    /// The class (or label) whose score is shown.
    pub name: String,
    /// Scores and weights of the events of that class.
    pub signal: (Vec<f64>, Vec<f64>),
    /// Scores and weights of the other events.
    pub rest: (Vec<f64>, Vec<f64>),
}

/// A weighted histogram of `scores` in `BINS` bins on [0, 1], scaled to unit area (|Σw| = 1).
fn unit_area(scores: &[f64], weights: &[f64]) -> Vec<f64> {
    const BINS: usize = 40;
    let mut h = vec![0.0f64; BINS];
    for (&x, &w) in scores.iter().zip(weights) {
        let b = ((x * BINS as f64) as usize).min(BINS - 1);
        h[b] += w;
    }
    let total: f64 = h.iter().sum::<f64>().abs().max(f64::MIN_POSITIVE);
    h.iter().map(|v| v / total * BINS as f64).collect()
}

/// Per output, that output's score for the events of its class against the rest (weighted,
/// unit area), one panel each, on a log (`log_y`) or linear y axis; written atomically.
pub(crate) fn score_panels(
    path: &Path,
    title: &str,
    panels: &[ScorePanel],
    log_y: bool,
) -> anyhow::Result<()> {
    ensure_font();
    let hists: Vec<[Vec<f64>; 2]> = panels
        .iter()
        .map(|p| {
            [
                unit_area(&p.signal.0, &p.signal.1),
                unit_area(&p.rest.0, &p.rest.1),
            ]
        })
        .collect();
    let cols = (panels.len() as f64).sqrt().ceil().max(1.0) as usize;
    let rows = panels.len().div_ceil(cols).max(1);
    let (w, h) = if panels.len() == 1 {
        (900, 650)
    } else {
        (420 * cols as u32, 330 * rows as u32 + 60)
    };
    let (sig, rest) = (color(0), color(1));
    save(path, |tmp| {
        let root = BitMapBackend::new(tmp, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err(path))?;
        let root = root
            .titled(
                &format!("{title}: the class (blue) vs the rest (orange), weighted, unit area"),
                ("sans-serif", 20),
            )
            .map_err(err(path))?;
        let cells = root.split_evenly((rows, cols));
        for ((p, [hs, hr]), cell) in panels.iter().zip(&hists).zip(&cells) {
            let top = hs.iter().chain(hr).fold(0.0f64, |a, &b| a.max(b)).max(1e-9);
            let mut chart = ChartBuilder::on(cell);
            chart
                .caption(&p.name, ("sans-serif", 17))
                .margin(8)
                .x_label_area_size(35)
                .y_label_area_size(50);
            let x_desc = format!("score ({})", p.name);
            if log_y {
                // Down to 1e-4 of the peak; emptier bins are drawn at the floor.
                let floor = top * 1e-4;
                let mut c = chart
                    .build_cartesian_2d(0.0f64..1.0, (floor..top * 3.0).log_scale())
                    .map_err(err(path))?;
                c.configure_mesh()
                    .x_desc(x_desc)
                    .y_label_formatter(&|y| format!("{y:.0e}"))
                    .label_style(("sans-serif", 12))
                    .draw()
                    .map_err(err(path))?;
                for (hist, c_) in [(hr, rest), (hs, sig)] {
                    c.draw_series(LineSeries::new(steps(hist, floor), c_.stroke_width(2)))
                        .map_err(err(path))?;
                }
            } else {
                let mut c = chart
                    .build_cartesian_2d(0.0f64..1.0, 0.0f64..top * 1.1)
                    .map_err(err(path))?;
                c.configure_mesh()
                    .x_desc(x_desc)
                    .label_style(("sans-serif", 12))
                    .draw()
                    .map_err(err(path))?;
                for (hist, c_) in [(hr, rest), (hs, sig)] {
                    c.draw_series(LineSeries::new(steps(hist, 0.0), c_.stroke_width(2)))
                        .map_err(err(path))?;
                }
            }
        }
        root.present().map_err(err(path))?;
        Ok(())
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
    let entries: Vec<(String, RGBColor)> = series
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.clone(), color(i)))
        .collect();
    save(path, |tmp| {
        chart_with_legend(tmp, (1100, 600), &entries, path, |area| {
            let mut chart = ChartBuilder::on(area)
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
            for (i, (_, v)) in series.iter().enumerate() {
                let pts: Vec<(f64, f64)> = v
                    .iter()
                    .enumerate()
                    .filter_map(|(e, x)| x.map(|x| ((e + 1) as f64, x)))
                    .collect();
                let c = color(i);
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(err(path))?;
                chart
                    .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                    .map_err(err(path))?;
            }
            Ok(())
        })
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
