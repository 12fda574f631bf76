//! `gnn4colliders preprocess`: ROOT files → selected events → the sharded Parquet cache.

use std::path::{Path, PathBuf};

use gnn4c_cli::pipeline::{CacheBuild, CacheMode, ensure_cache};
use gnn4c_data::{DatasetConfig, Folds};
use gnn4c_features::SelectionConfig;

use crate::scan::load_dataset;

/// Arguments of `preprocess`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders preprocess configs/data/demo_pretrain.yaml\n  gnn4colliders preprocess configs/data/nanoaod.yaml --cache /scratch/cache/nano --mode rebuild"
)]
pub(crate) struct Args {
    /// Dataset config (YAML).
    config: PathBuf,
    /// Cache folder [default: cache/<dataset name>].
    #[arg(long)]
    cache: Option<PathBuf>,
    /// What to do with an existing cache.
    #[arg(long, value_enum, default_value_t = CacheMode::Auto)]
    mode: CacheMode,
    /// Number of folds (fold = event_number mod n_folds).
    #[arg(long, default_value_t = 5)]
    n_folds: u32,
    /// Events per Parquet shard (of one fold).
    #[arg(long, default_value_t = 100_000)]
    shard_events: usize,
    /// Input files read at once [default: the machine's cores]; the cache does not depend on it.
    #[arg(long)]
    threads: Option<usize>,
}

/// The cache folder for a dataset.
/// The cache folder: `arg`, or `<root>/<dataset name>`.
pub(crate) fn cache_dir(arg: Option<&Path>, cfg: &DatasetConfig, root: &Path) -> PathBuf {
    arg.map_or_else(|| root.join(&cfg.name), Path::to_path_buf)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let cfg = load_dataset(&args.config)?;
    let folds = Folds {
        n_folds: args.n_folds,
        ..Folds::default()
    };
    folds.validate()?;
    let dir = cache_dir(args.cache.as_deref(), &cfg, Path::new("cache"));
    let selection = SelectionConfig::default();
    ensure_cache(
        &mut out,
        &cfg,
        &dir,
        args.mode,
        &folds,
        &CacheBuild {
            shard_events: args.shard_events,
            threads: args.threads.unwrap_or(CacheBuild::default().threads).max(1),
        },
        &selection,
    )?;
    Ok(())
}
