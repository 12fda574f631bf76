//! `gnn4colliders predict` and `evaluate`: score a split of the run's data, or other ROOT files,
//! with a run's checkpoint; write NPZ, ROOT friend trees and metrics.
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
use gnn4c_cli::backend::InferenceBackend;
use gnn4c_cli::device::{DeviceChoice, check_device};
use gnn4c_cli::pipeline::{CacheBuild, CacheMode, GraphStream, ensure_cache};
use gnn4c_data::{
    DatasetConfig, Folds, FriendTree, PredictionTable, Split, check_output_path, fold_of,
    open_tree, write_friend_tree, write_predictions_npz,
};
use gnn4c_family::write_atomic;
use gnn4c_features::SelectionConfig;
use gnn4c_inference::{Scored, score};
use gnn4c_root_gnn::EdgeNetwork;
use gnn4c_tasks::{Task, metrics_from_logits};
use gnn4c_training::{MetricsRecord, progress_bar, progress_wanted, read_checkpoint};

use crate::preprocess::cache_dir;
use crate::scan::load_dataset;
use crate::train::{ResolvedRun, model_from_checkpoint};

/// Which events to score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SplitArg {
    /// The test fold.
    Test,
    /// The validation fold.
    Validation,
    /// The training folds.
    Train,
    /// Every event.
    All,
}

impl SplitArg {
    fn name(self) -> &'static str {
        match self {
            SplitArg::Test => "test",
            SplitArg::Validation => "validation",
            SplitArg::Train => "train",
            SplitArg::All => "all",
        }
    }
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FormatArg {
    /// `predictions.npz`.
    Npz,
    /// One ROOT friend tree per input file.
    Root,
    /// Both.
    Both,
}

/// Arguments of `predict` and `evaluate`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders predict runs/pretrain_multiclass\n  gnn4colliders predict runs/finetune_ttH_CP_full --data configs/data/other.yaml --format root\n  gnn4colliders evaluate runs/pretrain_multiclass --split validation"
)]
pub(crate) struct Args {
    /// Run folder (holds config.json and the checkpoints), or a checkpoint file (its stored
    /// config is used).
    run: PathBuf,
    /// Checkpoint: best, last, or a path [default: best].
    #[arg(long, default_value = "best")]
    checkpoint: String,
    /// Score this dataset config (same schema) instead of the run's dataset.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Events to score [default: test for the run's dataset, all for --data].
    #[arg(long, value_enum)]
    split: Option<SplitArg>,
    /// Output folder [default: <run>/predictions/<dataset>_<split> for predict,
    /// <run>/evaluation/<dataset>_<split> for evaluate].
    #[arg(long)]
    out: Option<PathBuf>,
    /// What to write.
    #[arg(long, value_enum, default_value_t = FormatArg::Both)]
    format: FormatArg,
    /// Replace existing outputs.
    #[arg(long)]
    overwrite: bool,
    /// Events per batch (results do not depend on it).
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Compute threads, 0 = all cores (as in `train`).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Threads building batches from the cache (results do not depend on it).
    #[arg(long, default_value_t = 2)]
    loader_threads: usize,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: DeviceChoice,
    /// No progress bar (it is off anyway when standard error is not a terminal).
    #[arg(long)]
    no_progress: bool,
}

/// What a run folder's config.json says about the run.
struct RunInfo {
    dataset: DatasetConfig,
    cache: PathBuf,
    folds: Folds,
    task: Task,
}

fn read_run(run: &Path) -> anyhow::Result<RunInfo> {
    let path = run.join("config.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} is not a run folder (no config.json)", run.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    run_info(&v, &path)
}

/// The run described by a resolved config (`config.json`, or the copy inside a checkpoint).
fn run_info(v: &serde_json::Value, path: &Path) -> anyhow::Result<RunInfo> {
    let r = ResolvedRun::from_value(v, path)?;
    Ok(RunInfo {
        cache: cache_dir(r.run.cache.as_deref(), &r.dataset, Path::new("cache")),
        dataset: r.dataset,
        folds: r.run.folds,
        task: r.task,
    })
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

pub(crate) fn run_predict(args: &Args) -> anyhow::Result<()> {
    run(args, false)
}

pub(crate) fn run_evaluate(args: &Args) -> anyhow::Result<()> {
    run(args, true)
}

fn run(args: &Args, evaluate: bool) -> anyhow::Result<()> {
    check_device(args.device).map_err(anyhow::Error::msg)?;
    gnn4c_cli::device::init_compute_pool(args.threads);
    match args.device {
        DeviceChoice::Cpu => run_on::<burn::backend::Flex>(args, evaluate, &Default::default()),
        #[cfg(feature = "cuda")]
        DeviceChoice::Cuda(i) => {
            run_on::<burn::backend::Cuda>(args, evaluate, &burn::backend::cuda::CudaDevice::new(i))
        }
        #[cfg(not(feature = "cuda"))]
        DeviceChoice::Cuda(_) => unreachable!("check_device refuses CUDA without the cuda feature"),
    }
}

fn run_on<B: InferenceBackend>(
    args: &Args,
    evaluate: bool,
    device: &B::Device,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.batch_size == 0 {
        return Err(crate::config::ConfigError("--batch-size must be at least 1".into()).into());
    }
    let (info, ck_path, ck, run_dir) = if args.run.is_file() {
        let ck = read_checkpoint(&args.run)?;
        let info = run_info(&ck.state.config, &args.run)?;
        let dir = args.run.parent().unwrap_or(Path::new(".")).to_path_buf();
        (info, args.run.clone(), ck, dir)
    } else {
        let info = read_run(&args.run)?;
        let ck_path = match args.checkpoint.as_str() {
            "best" | "last" => args.run.join(format!("{}.ckpt", args.checkpoint)),
            other => PathBuf::from(other),
        };
        let ck = read_checkpoint(&ck_path)?;
        (info, ck_path, ck, args.run.clone())
    };
    let model: EdgeNetwork<B> = model_from_checkpoint(&ck, device)?;
    let n_out = model.n_out();
    if n_out != info.task.n_out() {
        bail!(
            "checkpoint {} has {n_out} outputs but the run's task {:?} needs {}: it belongs to another run",
            ck_path.display(),
            info.task,
            info.task.n_out()
        );
    }

    // The data: the run's own (cache as trained), or another dataset config (same schema).
    let (dataset, cache) = match &args.data {
        Some(p) => {
            let d = load_dataset(p)?;
            let c = cache_dir(None, &d, Path::new("cache"));
            (d, c)
        }
        None => (info.dataset.clone(), info.cache.clone()),
    };
    let split = args.split.unwrap_or(if args.data.is_some() {
        SplitArg::All
    } else {
        SplitArg::Test
    });
    let out_dir = args.out.clone().unwrap_or_else(|| {
        run_dir
            .join(if evaluate {
                "evaluation"
            } else {
                "predictions"
            })
            .join(format!("{}_{}", dataset.name, split.name()))
    });
    let npz_path = out_dir.join("predictions.npz");
    let want_npz = args.format != FormatArg::Root;
    let want_root = args.format != FormatArg::Npz;
    if want_npz {
        check_output_path(&npz_path, args.overwrite)?;
    }
    if evaluate {
        check_output_path(&out_dir.join("metrics.json"), args.overwrite)?;
    }
    let manifest = ensure_cache(
        &mut out,
        &dataset,
        &cache,
        CacheMode::Auto,
        &info.folds,
        &CacheBuild::default(),
        &SelectionConfig::default(),
    )?;
    let t0 = Instant::now();
    let splits: &[Split] = match split {
        SplitArg::Test => &[Split::Test],
        SplitArg::Validation => &[Split::Validation],
        SplitArg::Train => &[Split::Train],
        SplitArg::All => &[Split::Train, Split::Validation, Split::Test],
    };
    let (_, data) = GraphStream::open(&cache, &info.folds, splits, None)?;
    let load_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let model = B::inference_model(model);
    let bar = progress_bar(
        !args.no_progress && progress_wanted(),
        data.events() as u64,
        "scoring",
        "events",
    );
    let scored = score(
        &model,
        &data,
        &info.task,
        args.batch_size,
        args.loader_threads,
        device,
        &bar,
    )?;
    let score_s = t1.elapsed().as_secs_f64();
    writeln!(
        out,
        "scored {} events of '{}' ({} split) with {} (epoch {}) in {score_s:.2} s ({:.0} events/s; cache opened in {load_s:.2} s)",
        scored.len(),
        dataset.name,
        split.name(),
        ck_path.display(),
        ck.state.epoch,
        scored.len() as f64 / score_s.max(1e-9),
    )?;
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    if want_npz {
        let table = table_of(&scored, info.folds.n_folds);
        write_predictions_npz(&npz_path, &table, args.overwrite)?;
        writeln!(out, "wrote {}", npz_path.display())?;
    }
    if want_root {
        let n = write_friends(&scored, &dataset, &out_dir, args.overwrite)?;
        writeln!(
            out,
            "wrote {n} friend tree(s) in {}",
            out_dir.join("friends").display()
        )?;
    }
    if evaluate {
        let m = metrics_from_logits(
            &scored.task,
            &scored.logits,
            &scored.labels,
            &scored.multilabels,
            &scored.weights,
        );
        let summary = serde_json::json!({
            "checkpoint": ck_path,
            "epoch": ck.state.epoch,
            "dataset": dataset.name,
            "split": split.name(),
            "events": scored.len(),
            "cache_fingerprint": manifest.fingerprint,
            "metrics": MetricsRecord::from(&m),
        });
        let path = out_dir.join("metrics.json");
        write_atomic(&path, serde_json::to_string_pretty(&summary)?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(
            out,
            "loss {:.4}  accuracy {:.4}  auc {:.4} (weighted {:.4}); wrote {}",
            m.loss,
            m.accuracy,
            m.auc_macro,
            m.auc_macro_weighted,
            path.display()
        )?;
        let pngs = write_plots(&scored, &dataset, &run_dir, &out_dir, split.name())?;
        writeln!(out, "wrote {}", pngs.join(", "))?;
    }
    Ok(())
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
        let tree = sample
            .tree
            .as_deref()
            .or(dataset.tree.as_deref())
            .unwrap_or_default();
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
