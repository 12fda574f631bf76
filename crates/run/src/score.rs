//! The scoring steps behind `predict` and `evaluate`: a run's checkpoint scores a split of the
//! run's data, or another dataset; NPZ, ROOT friend trees, and for `evaluate` metrics and plots.
//!
//! Output folder (default `<run>/predictions/<dataset>_<split>/` for `predict`,
//! `<run>/evaluation/<dataset>_<split>/` for `evaluate`, so the two never refuse each other):
//! `predictions.npz`, `friends/<sample>__<file stem>.root` (one per input file, aligned 1:1 with
//! its tree) and, for `evaluate`, `metrics.json` and the plots.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use gnn4c_data::{
    CacheManifest, DatasetConfig, FriendTree, PredictionTable, Split, check_output_path, fold_of,
    open_tree, write_friend_tree, write_predictions_npz,
};
use gnn4c_family::write_atomic;
use gnn4c_inference::{Scored, score};
use gnn4c_tasks::{Task, metrics_from_logits};
use gnn4c_training::{
    Checkpoint, MetricsRecord, StopFlag, TrainingError, fmt_metric, progress_bar, progress_wanted,
    read_checkpoint,
};
use serde::{Deserialize, Serialize};

use crate::backend::InferenceBackend;
use crate::cached_events::{CachedEvents, check_cache_features};
use crate::device::{DeviceChoice, check_device};
use crate::error::ConfigError;
use crate::family::{FamilyJob, Registered, load_model};
use crate::pipeline::{CacheBuild, CacheMode, ensure_cache};
use crate::run_dir::RunDir;
use crate::settings::{
    ResolvedRun, cache_dir, check_same_inputs, load_dataset, standardization_of,
};

/// Which events to score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitChoice {
    /// The test fold.
    Test,
    /// The validation fold.
    Validation,
    /// The training folds.
    Train,
    /// Every event.
    All,
}

impl SplitChoice {
    /// Its name in folder names and reports.
    pub fn name(self) -> &'static str {
        match self {
            SplitChoice::Test => "test",
            SplitChoice::Validation => "validation",
            SplitChoice::Train => "train",
            SplitChoice::All => "all",
        }
    }

    fn splits(self) -> &'static [Split] {
        match self {
            SplitChoice::Test => &[Split::Test],
            SplitChoice::Validation => &[Split::Validation],
            SplitChoice::Train => &[Split::Train],
            SplitChoice::All => &[Split::Train, Split::Validation, Split::Test],
        }
    }
}

/// What to score with which checkpoint, and what to write.
#[derive(Debug, Clone)]
pub struct ScoreRequest {
    /// A run folder, or a checkpoint file (its stored config is used).
    pub run: PathBuf,
    /// In a run folder: `best`, `last`, or a path.
    pub checkpoint: String,
    /// Another dataset config (same schema) instead of the run's dataset.
    pub data: Option<PathBuf>,
    /// Events to score [default: test for the run's dataset, all for `data`].
    pub split: Option<SplitChoice>,
    /// Output folder [default: the run folder's, see [`RunDir::scores`]].
    pub out: Option<PathBuf>,
    /// Write `predictions.npz`.
    pub npz: bool,
    /// Write one ROOT friend tree per input file.
    pub friend_trees: bool,
    /// Replace existing outputs.
    pub overwrite: bool,
    /// Events per batch (results do not depend on it).
    pub batch_size: usize,
    /// Compute threads, 0 = all cores.
    pub threads: usize,
    /// Threads building batches from the cache (results do not depend on it).
    pub loader_threads: usize,
    /// Where to run.
    pub device: DeviceChoice,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
    /// Stops scoring between batches, writing nothing.
    pub stop: StopFlag,
}

impl ScoreRequest {
    /// Score the test split of the run in `run` with its best checkpoint, writing both formats.
    pub fn new(run: impl Into<PathBuf>) -> ScoreRequest {
        ScoreRequest {
            run: run.into(),
            checkpoint: "best".into(),
            data: None,
            split: None,
            out: None,
            npz: true,
            friend_trees: true,
            overwrite: false,
            batch_size: 256,
            threads: 0,
            loader_threads: 2,
            device: DeviceChoice::Cpu,
            progress: false,
            stop: StopFlag::new(),
        }
    }
}

/// What `evaluate` writes to `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The checkpoint scored.
    pub checkpoint: PathBuf,
    /// Its epoch.
    pub epoch: u64,
    /// The dataset's name.
    pub dataset: String,
    /// The split's name.
    pub split: String,
    /// Events scored.
    pub events: usize,
    /// The cache's fingerprint.
    pub cache_fingerprint: String,
    /// The metrics.
    pub metrics: MetricsRecord,
}

/// `predict`: scores as `req` says and writes the NPZ table and friend trees; returns the
/// output folder.
pub fn predict(req: &ScoreRequest, out: &mut dyn Write) -> anyhow::Result<PathBuf> {
    score_step(req, false, out).map(|(dir, _)| dir)
}

/// `evaluate`: [`predict`] plus `metrics.json` and the plots; returns the output folder and
/// the metrics.
pub fn evaluate(req: &ScoreRequest, out: &mut dyn Write) -> anyhow::Result<(PathBuf, Evaluation)> {
    let (dir, evaluation) = score_step(req, true, out)?;
    Ok((dir, evaluation.expect("evaluate writes metrics")))
}

fn score_step(
    req: &ScoreRequest,
    evaluate: bool,
    out: &mut dyn Write,
) -> anyhow::Result<(PathBuf, Option<Evaluation>)> {
    if req.batch_size == 0 {
        return Err(ConfigError("--batch-size must be at least 1".into()).into());
    }
    check_device(req.device).map_err(anyhow::Error::msg)?;
    crate::device::init_compute_pool(req.threads);
    // The run and its checkpoint: a run folder (config.json), or a checkpoint file alone.
    let (resolved, ck_path, ck, run_dir) = if req.run.is_file() {
        let ck = read_checkpoint(&req.run)?;
        let resolved = ResolvedRun::from_value(&ck.state.config, &req.run)?;
        let dir = RunDir::new(req.run.parent().unwrap_or(Path::new(".")));
        (resolved, req.run.clone(), ck, dir)
    } else {
        let dir = RunDir::new(&req.run);
        let resolved = dir.read_config()?;
        let ck_path = dir.checkpoint(&req.checkpoint);
        let ck = read_checkpoint(&ck_path)?;
        (resolved, ck_path, ck, dir)
    };
    // The model as the checkpoint stored it (a checkpoint of another run is named below).
    let model = ResolvedRun::from_value(&ck.state.config, &ck_path)?.model;
    let job = ScoreFamily {
        req,
        evaluate,
        resolved: &resolved,
        ck_path: &ck_path,
        ck: &ck,
        run_dir: &run_dir,
        out,
    };
    model.run(job)
}

/// The scoring step with the family's types; picks the backend.
struct ScoreFamily<'a> {
    req: &'a ScoreRequest,
    evaluate: bool,
    resolved: &'a ResolvedRun,
    ck_path: &'a Path,
    ck: &'a Checkpoint,
    run_dir: &'a RunDir,
    out: &'a mut dyn Write,
}

impl FamilyJob for ScoreFamily<'_> {
    type Output = anyhow::Result<(PathBuf, Option<Evaluation>)>;

    fn run<F: Registered>(self, config: &F::Config) -> Self::Output {
        crate::on_backend!(self.req.device, |B, dev| score_on::<F, B>(
            self, config, &dev
        ))
    }
}

fn score_on<F: Registered, B: InferenceBackend>(
    job: ScoreFamily<'_>,
    config: &F::Config,
    device: &B::Device,
) -> anyhow::Result<(PathBuf, Option<Evaluation>)> {
    let ScoreFamily {
        req,
        evaluate,
        resolved,
        ck_path,
        ck,
        run_dir,
        out,
    } = job;
    let task = resolved.task;
    let model = load_model::<F, B>(ck, config, device)?;
    let n_out = F::n_out(config);
    if n_out != task.n_out() {
        bail!(
            "checkpoint {} has {n_out} outputs but the run's task {task:?} needs {}: it belongs to another run",
            ck_path.display(),
            task.n_out()
        );
    }
    let target = Target::of(req, evaluate, resolved, ck_path, run_dir)?;
    let manifest = target.cache(req, resolved, ck_path, out)?;
    let t0 = Instant::now();
    let (_, data) = CachedEvents::<F>::open(
        &target.cache,
        &resolved.run.folds,
        target.split.splits(),
        None,
        config,
        &standardization_of(resolved)?,
    )?;
    let load_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let model = B::for_scoring::<F>(model);
    let bar = progress_bar(
        req.progress && progress_wanted(),
        data.events() as u64,
        "scoring",
        "events",
    );
    let scored = score(
        &model,
        &data,
        &task,
        req.batch_size,
        req.loader_threads,
        device,
        &bar,
        &req.stop,
    )
    .map_err(|e| match e {
        TrainingError::StopRequested => {
            crate::Stopped("scoring stopped on request: nothing written".into()).into()
        }
        e => anyhow::Error::from(e),
    })?;
    let score_s = t1.elapsed().as_secs_f64();
    writeln!(
        out,
        "scored {} events of '{}' ({} split) with {} (epoch {}) in {score_s:.2} s ({:.0} events/s; cache opened in {load_s:.2} s)",
        scored.len(),
        target.dataset.name,
        target.split.name(),
        ck_path.display(),
        ck.state.epoch,
        scored.len() as f64 / score_s.max(1e-9),
    )?;
    target.write_predictions(&scored, req, resolved.run.folds.n_folds, out)?;
    if !evaluate {
        return Ok((target.out_dir, None));
    }
    let evaluation = Evaluation {
        checkpoint: ck_path.to_path_buf(),
        epoch: ck.state.epoch,
        dataset: target.dataset.name.clone(),
        split: target.split.name().to_owned(),
        events: scored.len(),
        cache_fingerprint: manifest.fingerprint,
        metrics: MetricsRecord::from(&metrics_from_logits(
            &scored.task,
            &scored.logits,
            &scored.labels,
            &scored.multilabels,
            &scored.weights,
        )),
    };
    target.write_evaluation(&evaluation, &scored, run_dir, out)?;
    Ok((target.out_dir, Some(evaluation)))
}

/// What a scoring step reads and where it writes.
struct Target {
    /// The run's dataset, or another dataset config with the same inputs.
    dataset: DatasetConfig,
    /// Its event cache.
    cache: PathBuf,
    split: SplitChoice,
    out_dir: PathBuf,
}

impl Target {
    /// The data `req` names (the run's own, with its cache as trained, or another dataset
    /// config of the same inputs) and the output folder, whose outputs must not exist unless
    /// `--overwrite`.
    fn of(
        req: &ScoreRequest,
        evaluate: bool,
        resolved: &ResolvedRun,
        ck_path: &Path,
        run_dir: &RunDir,
    ) -> anyhow::Result<Target> {
        let (dataset, cache) = match &req.data {
            Some(p) => {
                let d = load_dataset(p)?;
                check_same_inputs(&resolved.dataset, &d, ck_path)?;
                let c = cache_dir(None, &d, Path::new("cache"));
                (d, c)
            }
            None => (
                resolved.dataset.clone(),
                cache_dir(
                    resolved.run.cache.as_deref(),
                    &resolved.dataset,
                    Path::new("cache"),
                ),
            ),
        };
        let split = req.split.unwrap_or(if req.data.is_some() {
            SplitChoice::All
        } else {
            SplitChoice::Test
        });
        let out_dir = req
            .out
            .clone()
            .unwrap_or_else(|| run_dir.scores(evaluate, &dataset.name, split.name()));
        if req.npz {
            check_output_path(&out_dir.join("predictions.npz"), req.overwrite)?;
        }
        if evaluate {
            check_output_path(&out_dir.join("metrics.json"), req.overwrite)?;
        }
        Ok(Target {
            dataset,
            cache,
            split,
            out_dir,
        })
    }

    /// The cache, built or checked, holding the features the run's model reads.
    fn cache(
        &self,
        req: &ScoreRequest,
        resolved: &ResolvedRun,
        ck_path: &Path,
        out: &mut dyn Write,
    ) -> anyhow::Result<CacheManifest> {
        let manifest = ensure_cache(
            out,
            &self.dataset,
            &self.cache,
            CacheMode::Auto,
            &resolved.run.folds,
            &CacheBuild::stopped_by(&req.stop),
        )?;
        check_cache_features(
            &manifest,
            &self.cache,
            &resolved.dataset,
            &ck_path.display().to_string(),
        )?;
        Ok(manifest)
    }

    /// `predictions.npz` and the friend trees, as `req` asks.
    fn write_predictions(
        &self,
        scored: &Scored,
        req: &ScoreRequest,
        n_folds: u32,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let out_dir = &self.out_dir;
        std::fs::create_dir_all(out_dir)
            .with_context(|| format!("creating {}", out_dir.display()))?;
        if req.npz {
            let npz_path = out_dir.join("predictions.npz");
            write_predictions_npz(&npz_path, &table_of(scored, n_folds), req.overwrite)?;
            writeln!(out, "wrote {}", npz_path.display())?;
        }
        if req.friend_trees {
            let n = write_friends(scored, &self.dataset, out_dir, req.overwrite)?;
            writeln!(
                out,
                "wrote {n} friend tree(s) in {}",
                out_dir.join("friends").display()
            )?;
        }
        Ok(())
    }

    /// `metrics.json` and the evaluation plots.
    fn write_evaluation(
        &self,
        evaluation: &Evaluation,
        scored: &Scored,
        run_dir: &RunDir,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let path = self.out_dir.join("metrics.json");
        write_atomic(&path, serde_json::to_string_pretty(evaluation)?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        let m = &evaluation.metrics;
        writeln!(
            out,
            "loss {:.4}  accuracy {:.4}  auc {} (weighted {}); wrote {}",
            m.loss,
            m.accuracy,
            fmt_metric(m.auc_macro),
            fmt_metric(m.auc_macro_weighted),
            path.display()
        )?;
        let split = self.split.name();
        let pngs = write_plots(scored, &self.dataset, run_dir.path(), &self.out_dir, split)?;
        writeln!(out, "wrote {}", pngs.join(", "))?;
        Ok(())
    }
}

/// Output branch names: `score`, or `score_<class>` per output.
fn branch_names(task: &Task, classes: &[String]) -> Vec<String> {
    match task {
        Task::Binary => vec!["score".into()],
        _ => (0..task.n_out())
            .map(|i| {
                let name = classes.get(i).map_or_else(|| i.to_string(), Clone::clone);
                let clean: String = name
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                format!("score_{clean}")
            })
            .collect(),
    }
}

/// ROC curves, score distributions per class and the run's training curves, as PNG.
fn write_plots(
    s: &Scored,
    dataset: &DatasetConfig,
    run: &Path,
    out_dir: &Path,
    split: &str,
) -> anyhow::Result<Vec<String>> {
    let k = s.task.n_out();
    let name = |c: usize| {
        dataset
            .classes
            .get(c)
            .cloned()
            .unwrap_or_else(|| format!("class {c}"))
    };
    let col = |j: usize| -> Vec<f64> {
        (0..s.len())
            .map(|i| f64::from(s.scores[i * k + j]))
            .collect()
    };
    let weights: Vec<f64> = s.weights.iter().map(|&w| f64::from(w)).collect();
    let mut written = Vec::new();

    // ROC: binary one curve; one-vs-rest per class; per label for multilabel.
    let mut curves = Vec::new();
    for j in 0..k {
        let labels: Vec<bool> = (0..s.len()).map(|i| s.is_positive(i, j)).collect();
        let scores = col(j);
        if let Some(points) = gnn4c_tasks::roc_curve(&labels, &scores, None) {
            let auc = gnn4c_tasks::roc_auc(&labels, &scores, None);
            let label = match s.task {
                Task::Binary => format!("{} vs {}", name(1), name(0)),
                Task::Multiclass { .. } => format!("{} vs rest", name(j)),
                Task::Multilabel { .. } => name(j),
            };
            curves.push((label, auc, points));
        }
    }
    let title = format!("{} ({split})", dataset.name);
    crate::plots::roc_curves(
        &out_dir.join("roc.png"),
        &out_dir.join("roc_linear.png"),
        &format!("ROC, {title}"),
        &curves,
    )?;
    written.extend(["roc.png", "roc_linear.png"]);

    // Per output: its score for the events of its class (the signal) against the rest.
    let panels: Vec<crate::plots::ScorePanel> = (0..k)
        .filter_map(|j| {
            let scores = col(j);
            let pick = |positive: bool| -> (Vec<f64>, Vec<f64>) {
                (0..s.len())
                    .filter(|&i| s.is_positive(i, j) == positive)
                    .map(|i| (scores[i], weights[i]))
                    .unzip()
            };
            let (signal, rest) = (pick(true), pick(false));
            if signal.0.is_empty() || rest.0.is_empty() {
                return None;
            }
            let name = match s.task {
                Task::Binary => name(1),
                _ => name(j),
            };
            Some(crate::plots::ScorePanel { name, signal, rest })
        })
        .collect();
    for (file, log_y) in [("scores.png", true), ("scores_linear.png", false)] {
        crate::plots::score_panels(
            &out_dir.join(file),
            &format!("Scores, {title}"),
            &panels,
            log_y,
        )?;
        written.push(file);
    }

    // Training curves from the run's history, when there is one.
    written.extend(crate::plots::training_plots(
        &run.join("history.jsonl"),
        out_dir,
    )?);
    Ok(written
        .into_iter()
        .map(|p| out_dir.join(p).display().to_string())
        .collect())
}

/// The NPZ table: every scored event with its identity.
fn table_of(s: &Scored, n_folds: u32) -> PredictionTable {
    let mut samples: Vec<String> = Vec::new();
    let mut index: BTreeMap<String, i64> = BTreeMap::new();
    let sample_index = s
        .ids
        .iter()
        .map(|id| {
            *index.entry(id.sample.to_string()).or_insert_with(|| {
                samples.push(id.sample.to_string());
                samples.len() as i64 - 1
            })
        })
        .collect();
    PredictionTable {
        n_out: s.task.n_out(),
        scores: s.scores.clone(),
        logits: s.logits.clone(),
        labels: s.labels.clone(),
        weights: s.weights.clone(),
        entry: s.ids.iter().map(|id| id.entry).collect(),
        event_number: s.ids.iter().map(|id| id.event_number).collect(),
        fold: s
            .ids
            .iter()
            .map(|id| fold_of(id.event_number, n_folds))
            .collect(),
        sample_index,
        samples,
    }
}

/// `(entry, scores)` of the scored entries of one input file.
type ScoredEntries = Vec<(u64, Vec<f32>)>;

/// The path as the file system resolves it (cached identities may be relative or absolute).
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// One friend tree per input file of the dataset, aligned 1:1 with its tree.
fn write_friends(
    s: &Scored,
    dataset: &DatasetConfig,
    out_dir: &Path,
    overwrite: bool,
) -> anyhow::Result<usize> {
    let branches = branch_names(&s.task, &dataset.classes);
    let base = std::env::current_dir().context("reading the current folder")?;
    // Scored entries per (sample, file).
    let mut by_file: BTreeMap<(String, PathBuf), ScoredEntries> = BTreeMap::new();
    for (i, id) in s.ids.iter().enumerate() {
        by_file
            .entry((id.sample.to_string(), canonical(&id.source_file)))
            .or_default()
            .push((id.entry, s.scores_of(i).to_vec()));
    }
    let dir = out_dir.join("friends");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut used = std::collections::BTreeSet::new();
    let mut n = 0;
    for sample in &dataset.samples {
        let tree = dataset.tree_of(sample);
        for file in dataset.sample_files(sample, &base)? {
            let entries = open_tree(&file, tree)?.entries();
            let stem = file
                .file_stem()
                .map_or_else(|| "file".into(), |s| s.to_string_lossy().into_owned());
            let mut name = format!("{}__{stem}", sample.name);
            let mut k = 1;
            while !used.insert(name.clone()) {
                k += 1;
                name = format!("{}__{stem}_{k}", sample.name);
            }
            let scored = by_file
                .remove(&(sample.name.clone(), canonical(&file)))
                .unwrap_or_default();
            write_friend_tree(
                &FriendTree {
                    path: dir.join(format!("{name}.root")),
                    tree: tree.to_owned(),
                    entries,
                    branches: branches.clone(),
                    scored,
                },
                overwrite,
            )?;
            n += 1;
        }
    }
    Ok(n)
}
