//! `gnn4colliders predict` and `evaluate`: arguments → a `gnn4c_run::ScoreRequest` → the run
//! layer's scoring step (NPZ, ROOT friend trees, and for `evaluate` metrics and plots).

use std::path::PathBuf;

use gnn4c_run::device::DeviceChoice;
use gnn4c_run::{ScoreRequest, SplitChoice};

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

impl From<SplitArg> for SplitChoice {
    fn from(s: SplitArg) -> SplitChoice {
        match s {
            SplitArg::Test => SplitChoice::Test,
            SplitArg::Validation => SplitChoice::Validation,
            SplitArg::Train => SplitChoice::Train,
            SplitArg::All => SplitChoice::All,
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

impl Args {
    fn request(&self) -> anyhow::Result<ScoreRequest> {
        Ok(ScoreRequest {
            run: self.run.clone(),
            checkpoint: self.checkpoint.clone(),
            data: self.data.clone(),
            split: self.split.map(SplitChoice::from),
            out: self.out.clone(),
            npz: self.format != FormatArg::Root,
            friend_trees: self.format != FormatArg::Npz,
            overwrite: self.overwrite,
            batch_size: self.batch_size,
            threads: self.threads,
            loader_threads: self.loader_threads,
            device: self.device,
            progress: !self.no_progress,
            stop: gnn4c_run::stop_on_signals()?,
        })
    }
}

pub(crate) fn run_predict(args: &Args) -> anyhow::Result<()> {
    gnn4c_run::predict(&args.request()?, &mut std::io::stdout().lock())?;
    Ok(())
}

pub(crate) fn run_evaluate(args: &Args) -> anyhow::Result<()> {
    gnn4c_run::evaluate(&args.request()?, &mut std::io::stdout().lock())?;
    Ok(())
}
