//! Sweeps, as Hydra's `--multirun`: overrides with several comma-separated values
//! (`trainer.lr=1e-3,1e-4 model=root_gnn,pfn`) span a grid of runs, each in its own folder
//! `<run>/multirun/<k>-<overrides>/`; a sweep run again skips its finished points and resumes the
//! others; `summary.csv` and `summary.md` list every finished point's best epoch and metrics,
//! the best validation objective first.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gnn4c_distributed::World;

use crate::error::ConfigError;
use crate::run_dir::{RunDir, Start};
use crate::train::{RunSummary, TrainRequest, train};

/// The overrides of a sweep: those that hold one value, and the axes (a key and its values, in
/// the order given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// `key=value` overrides every point shares.
    pub fixed: Vec<String>,
    /// The swept keys with their values.
    pub axes: Vec<(String, Vec<String>)>,
}

/// One point of a sweep: its number and the value of every axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// From 0, in grid order (the first axis varies slowest).
    pub index: usize,
    /// `key=value` of every axis.
    pub overrides: Vec<String>,
}

impl Point {
    /// Its folder's name: `<index>-<key=value,key=value>` (a `/` in a value becomes `_`).
    pub fn folder(&self) -> String {
        format!(
            "{}-{}",
            self.index,
            self.overrides.join(",").replace('/', "_")
        )
    }
}

impl Sweep {
    /// The sweep `overrides` describe: a value with commas outside brackets, braces and quotes
    /// is an axis (`lr=1e-3,1e-4`); `widths=[64,64]` stays one value. A key given again
    /// replaces its earlier value, where it stood (as overrides do without a sweep).
    pub fn parse(overrides: &[String]) -> Result<Sweep, ConfigError> {
        let mut last: Vec<(&str, &str)> = Vec::new();
        for o in overrides {
            let Some((key, value)) = o.split_once('=') else {
                return Err(ConfigError(format!(
                    "override '{o}' is not KEY=VALUE (sweep a key with KEY=A,B,C)"
                )));
            };
            match last.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => last.push((key, value)),
            }
        }
        let mut sweep = Sweep {
            fixed: Vec::new(),
            axes: Vec::new(),
        };
        for (key, value) in last {
            let o = format!("{key}={value}");
            let values = split_values(value);
            if values.iter().any(String::is_empty) {
                return Err(ConfigError(format!(
                    "override '{o}': an empty value in the sweep"
                )));
            }
            if values.len() == 1 {
                sweep.fixed.push(o);
            } else {
                sweep.axes.push((key.to_owned(), values));
            }
        }
        Ok(sweep)
    }

    /// Every point of the grid, the first axis varying slowest (Hydra's order).
    pub fn points(&self) -> Vec<Point> {
        let mut points = vec![Vec::new()];
        for (key, values) in &self.axes {
            points = points
                .into_iter()
                .flat_map(|p: Vec<String>| {
                    values.iter().map(move |v| {
                        let mut p = p.clone();
                        p.push(format!("{key}={v}"));
                        p
                    })
                })
                .collect();
        }
        points
            .into_iter()
            .enumerate()
            .map(|(index, overrides)| Point { index, overrides })
            .collect()
    }
}

/// `value` split at the commas outside brackets, braces and quotes.
fn split_values(value: &str) -> Vec<String> {
    let (mut out, mut current, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    for c in value.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[' | '{' | '(') => depth += 1,
            (None, ']' | '}' | ')') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out
}

/// What a sweep did with one point.
#[derive(Debug, Clone)]
pub struct PointOutcome {
    /// The point.
    pub point: Point,
    /// Its run folder.
    pub run: PathBuf,
    /// Its results, where it is finished (read on rank 0 after the sweep's runs).
    pub summary: Option<RunSummary>,
    /// Trained by this call (not finished before it, and not another task's point).
    pub trained: bool,
}

/// Runs the points of `sweep` (every one, or only point `only`: a Slurm array task's) under
/// `root` (`<root>/<k>-<overrides>/`): a finished one (`metrics.json`) is skipped, one with a
/// checkpoint resumed, the rest started (`overwrite`: started again). `request` makes a
/// point's request from its overrides (the fixed ones, then the point's). Rank 0 then writes
/// `summary.csv` and `summary.md` in `root` from every finished point.
pub fn run_sweep(
    sweep: &Sweep,
    root: &Path,
    overwrite: bool,
    only: Option<usize>,
    request: &dyn Fn(&[String]) -> anyhow::Result<TrainRequest>,
    world: &World,
    out: &mut dyn Write,
) -> anyhow::Result<Vec<PointOutcome>> {
    let points = sweep.points();
    if let Some(k) = only
        && k >= points.len()
    {
        return Err(ConfigError(format!(
            "--point {k}: the sweep has {} points (0 to {})",
            points.len(),
            points.len() - 1
        ))
        .into());
    }
    writeln!(
        out,
        "sweep of {} points ({}) in {}",
        points.len(),
        sweep
            .axes
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.join(", ")))
            .collect::<Vec<_>>()
            .join("; "),
        root.display()
    )?;
    let mut outcomes = Vec::with_capacity(points.len());
    for point in points {
        let run = RunDir::new(root.join(point.folder()));
        let ours = only.is_none_or(|k| k == point.index);
        let finished = run.metrics().is_file() && !(overwrite && ours);
        let what = point.overrides.join(" ");
        if ours && finished {
            writeln!(out, "\n[{}] {what}: finished, skipped", point.index)?;
        } else if ours {
            let mut overrides = sweep.fixed.clone();
            overrides.extend(point.overrides.iter().cloned());
            let mut req = request(&overrides)?;
            req.run_dir = run.clone();
            req.start = if overwrite {
                Start::Overwrite
            } else if run.files().last.is_file() {
                Start::Resume
            } else {
                Start::New
            };
            let how = if req.start == Start::Resume {
                "resumed"
            } else {
                "started"
            };
            writeln!(out, "\n[{}] {what}: {how}", point.index)?;
            train(&req, world, out)
                .with_context(|| format!("sweep point {} ({what})", point.index))?;
        }
        outcomes.push(PointOutcome {
            point,
            run: run.path().to_path_buf(),
            summary: None,
            trained: ours && !finished,
        });
    }
    if world.is_root() {
        summarise(root, sweep, &mut outcomes)?;
    }
    Ok(outcomes)
}

/// Reads every finished point's results into `outcomes` and writes `summary.csv` and
/// `summary.md`. Array tasks end side by side: each does this under a lock on
/// `<root>/.summary.lock`, so the last to write has seen every point finished before it.
fn summarise(root: &Path, sweep: &Sweep, outcomes: &mut [PointOutcome]) -> anyhow::Result<()> {
    let lock_path = root.join(".summary.lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    for o in outcomes.iter_mut() {
        let run = RunDir::new(&o.run);
        if run.metrics().is_file() {
            o.summary = Some(read_summary(&run)?);
        }
    }
    let keys: Vec<&str> = sweep.axes.iter().map(|(k, _)| k.as_str()).collect();
    write_summaries(root, &keys, outcomes)
}

/// A finished point's `metrics.json`.
fn read_summary(run: &RunDir) -> anyhow::Result<RunSummary> {
    let path = run.metrics();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
}

/// Writes `<root>/submit.sh`: `sbatch --array=0-<points - 1> [its arguments]
/// scripts/slurm/sweep-array.sh ARGS…`, each array task running `command` (`train` or
/// `finetune`) with `args` (the config, the overrides and flags, `--run`) on one point of the
/// sweep (`--multirun --point $SLURM_ARRAY_TASK_ID`); its path.
pub fn write_sweep_job(
    root: &Path,
    command: &str,
    args: &[String],
    points: usize,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let path = root.join("submit.sh");
    let text = format!(
        "#!/usr/bin/env bash\n\
         # A sweep of {points} points as a Slurm array, one point per task (written by\n\
         # `gnn4colliders {command} … --multirun --slurm`). From the repository root:\n\
         #   bash {script} [SBATCH OPTIONS…]   (-A, --qos, --time; --array=0-{last}%4: 4 at a time)\n\
         # Run it again for the points not finished; the summary is {summary}.\n\
         set -euo pipefail\n\
         export GNN4C_SWEEP_COMMAND={command}\n\
         exec sbatch --array=0-{last} \"$@\" scripts/slurm/sweep-array.sh {args}\n",
        script = path.display(),
        summary = root.join("summary.md").display(),
        last = points.saturating_sub(1),
        command = quoted(command),
        args = args.iter().map(|a| quoted(a)).collect::<Vec<_>>().join(" "),
    );
    gnn4c_family::write_atomic(&path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))?;
    Ok(path)
}

/// `s` as one shell word.
fn quoted(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:+@%".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The summary's rows: every point with a summary, the lowest validation objective first.
fn rows(outcomes: &[PointOutcome]) -> Vec<(&PointOutcome, &RunSummary)> {
    let mut rows: Vec<_> = outcomes
        .iter()
        .filter_map(|o| o.summary.as_ref().map(|s| (o, s)))
        .collect();
    rows.sort_by(|a, b| {
        a.1.best_validation_objective
            .total_cmp(&b.1.best_validation_objective)
    });
    rows
}

/// `summary.csv` and `summary.md` in `root`, atomically.
fn write_summaries(root: &Path, keys: &[&str], outcomes: &[PointOutcome]) -> anyhow::Result<()> {
    let metric = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v:.6}"));
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(keys.iter().map(|k| (*k).to_owned()));
    header.extend(
        [
            "best_epoch",
            "val_objective",
            "val_loss",
            "val_auc_macro",
            "test_loss",
            "test_accuracy",
            "test_auc_macro",
            "epochs_run",
            "run",
        ]
        .map(str::to_owned),
    );
    let mut table: Vec<Vec<String>> = Vec::new();
    for (o, s) in rows(outcomes) {
        let mut row = vec![o.point.index.to_string()];
        row.extend(o.point.overrides.iter().map(|kv| {
            kv.split_once('=')
                .map_or(kv.as_str(), |(_, v)| v)
                .to_owned()
        }));
        row.extend([
            s.best_epoch.to_string(),
            metric(Some(s.best_validation_objective)),
            metric(Some(s.validation.loss)),
            metric(s.validation.auc_macro),
            metric(Some(s.test.loss)),
            metric(Some(s.test.accuracy)),
            metric(s.test.auc_macro),
            s.epochs_run.to_string(),
            o.run.display().to_string(),
        ]);
        table.push(row);
    }
    let csv_field = |f: &String| {
        if f.contains([',', '"', '\n']) {
            format!("\"{}\"", f.replace('"', "\"\""))
        } else {
            f.clone()
        }
    };
    let mut csv = String::new();
    for row in std::iter::once(&header).chain(&table) {
        csv.push_str(&row.iter().map(csv_field).collect::<Vec<_>>().join(","));
        csv.push('\n');
    }
    let mut md = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for row in &table {
        md.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    for (name, text) in [("summary.csv", csv), ("summary.md", md)] {
        let path = root.join(name);
        gnn4c_family::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn comma_values_are_axes_and_the_grid_varies_the_last_fastest() {
        let s = Sweep::parse(&strings(&[
            "trainer.lr=1e-3,1e-4",
            "trainer.max_epochs=2",
            "model=root_gnn,pfn",
            "model.widths=[64,64]",
        ]))
        .expect("a sweep");
        assert_eq!(
            s.fixed,
            strings(&["trainer.max_epochs=2", "model.widths=[64,64]"])
        );
        let points: Vec<Vec<String>> = s.points().into_iter().map(|p| p.overrides).collect();
        assert_eq!(
            points,
            vec![
                strings(&["trainer.lr=1e-3", "model=root_gnn"]),
                strings(&["trainer.lr=1e-3", "model=pfn"]),
                strings(&["trainer.lr=1e-4", "model=root_gnn"]),
                strings(&["trainer.lr=1e-4", "model=pfn"]),
            ]
        );
        assert_eq!(s.points()[3].folder(), "3-trainer.lr=1e-4,model=pfn");
        assert_eq!(split_values("'a,b',c"), strings(&["'a,b'", "c"]));
        assert_eq!(quoted("trainer.lr=1e-3,1e-4"), "trainer.lr=1e-3,1e-4");
        assert_eq!(quoted("a b'c"), "'a b'\\''c'");
    }

    #[test]
    fn a_bad_override_is_named() {
        for (bad, says) in [("lr", "not KEY=VALUE"), ("lr=1,", "empty value")] {
            let e = Sweep::parse(&strings(&[bad])).expect_err(bad);
            assert!(e.0.contains(says), "{bad}: {}", e.0);
        }
        // Given again: the last value, where the key first stood.
        let s = Sweep::parse(&strings(&["a=1", "b=2", "a=3,4"])).expect("a sweep");
        assert_eq!(s.fixed, strings(&["b=2"]));
        assert_eq!(s.axes, vec![("a".to_owned(), strings(&["3", "4"]))]);
    }
}
