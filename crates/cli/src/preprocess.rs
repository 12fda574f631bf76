//! `gnn4colliders preprocess`: ROOT files → selected events → the sharded Parquet cache.

use std::path::PathBuf;

use gnn4c_data::Folds;
use gnn4c_distributed::World;
use gnn4c_run::load_dataset;
use gnn4c_run::pipeline::{CacheBuild, CacheMode, preprocess};

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
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    mode: ModeArg,
    /// Number of folds (fold = event_number mod n_folds).
    #[arg(long, default_value_t = 5)]
    n_folds: u32,
    /// Events per Parquet shard (of one fold).
    #[arg(long, default_value_t = 100_000)]
    shard_events: usize,
    /// Threads that read input files [default: the machine's cores]: files at once, and with
    /// fewer files than threads the rest decompress inside each file, where the next chunk is
    /// also read while this one's events are built; the cache does not depend on it.
    #[arg(long)]
    threads: Option<usize>,
    /// K/N: read only input files K, K+N, K+2N, … (K from 0) and write no manifest; when all N
    /// parts are done, `preprocess` without --part writes it (the same cache as one process).
    #[arg(long, value_parser = parse_part)]
    part: Option<(u32, u32)>,
}

fn parse_part(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--part takes K/N with 0 <= K < N (e.g. 3/8), got {s:?}");
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n) = (
        k.trim().parse::<u32>().map_err(|_| bad())?,
        n.trim().parse::<u32>().map_err(|_| bad())?,
    );
    if n == 0 || k >= n {
        return Err(bad());
    }
    Ok((k, n))
}

/// `--mode`: what to do with an existing cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    /// Use it when it matches the config and files, rebuild it otherwise.
    Auto,
    /// Always rebuild.
    Rebuild,
    /// Use it when it matches; refuse (naming what differs) otherwise.
    ReadOnly,
}

impl From<ModeArg> for CacheMode {
    fn from(m: ModeArg) -> CacheMode {
        match m {
            ModeArg::Auto => CacheMode::Auto,
            ModeArg::Rebuild => CacheMode::Rebuild,
            ModeArg::ReadOnly => CacheMode::ReadOnly,
        }
    }
}

/// Preprocesses (under an MPI launcher the ranks share the input files).
pub(crate) fn run(args: &Args, world: &World) -> anyhow::Result<()> {
    let mut out: Box<dyn std::io::Write> = if world.is_root() {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::sink())
    };
    let folds = Folds {
        n_folds: args.n_folds,
        ..Folds::default()
    };
    let build = CacheBuild {
        shard_events: args.shard_events,
        threads: args.threads.unwrap_or(CacheBuild::default().threads).max(1),
        part: args.part,
        stop: gnn4c_run::stop_on_signals()?,
    };
    let dataset = load_dataset(&args.config)?;
    preprocess(
        &dataset,
        args.cache.as_deref(),
        args.mode.into(),
        &folds,
        build,
        world,
        &mut *out,
    )?;
    Ok(())
}
