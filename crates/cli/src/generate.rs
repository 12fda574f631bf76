//! `gnn4colliders generate`: the demo dataset.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// Arguments of `generate`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders generate\n  gnn4colliders generate --out /scratch/demo --events 100000 --seed 7"
)]
pub(crate) struct Args {
    /// Output folder (files go to OUT/pretrain/ and OUT/finetune/).
    #[arg(long, default_value = "data/demo")]
    out: PathBuf,
    /// Events per process.
    #[arg(long, default_value_t = 20_000)]
    events: usize,
    /// Random seed: the same seed gives the same events.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Writer threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write the demo dataset again even when one is there (with the same or other settings).
    #[arg(long)]
    overwrite: bool,
}

/// What a demo folder was generated with; a rerun with the same settings does nothing.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Manifest {
    events: usize,
    seed: u64,
    generator_version: String,
    /// The toy process table's version (0: written before versions were recorded).
    #[serde(default)]
    demo_version: u32,
    files: Vec<String>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.events == 0 {
        return Err(gnn4c_run::ConfigError("--events must be at least 1".into()).into());
    }
    let manifest_path = args.out.join("demo.json");
    let wanted = |files: Vec<String>| Manifest {
        events: args.events,
        seed: args.seed,
        generator_version: env!("CARGO_PKG_VERSION").to_owned(),
        demo_version: gnn4c_data::DEMO_VERSION,
        files,
    };
    if let Some(existing) = read_manifest(&manifest_path) {
        let complete = existing.files.iter().all(|f| args.out.join(f).is_file());
        if complete && existing == wanted(existing.files.clone()) && !args.overwrite {
            writeln!(
                out,
                "demo dataset already in {} ({} events per process, seed {}): nothing to do",
                args.out.display(),
                args.events,
                args.seed
            )?;
            return Ok(());
        }
        if !args.overwrite {
            bail!(
                "{} holds a demo dataset generated with other settings ({} events, seed {}, demo \
                 version {}; this build writes version {}); pass --overwrite to replace it",
                args.out.display(),
                existing.events,
                existing.seed,
                existing.demo_version,
                gnn4c_data::DEMO_VERSION
            );
        }
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let start = Instant::now();
    let files = gnn4c_data::write_demo(&args.out, args.events, args.seed, threads)
        .with_context(|| format!("generating the demo dataset in {}", args.out.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    let total: usize = files.iter().map(|f| f.events).sum();
    let rel = |p: &Path| p.strip_prefix(&args.out).unwrap_or(p).display().to_string();
    let manifest = wanted(files.iter().map(|f| rel(&f.path)).collect());
    write_manifest(&manifest_path, &manifest)?;
    for f in &files {
        writeln!(
            out,
            "  {:<14} label {:>2}  {}",
            f.sample,
            f.label,
            f.path.display()
        )?;
    }
    writeln!(
        out,
        "wrote {total} events in {} files to {} in {seconds:.2} s ({:.0} events/s, {threads} threads)",
        files.len(),
        args.out.display(),
        total as f64 / seconds
    )?;
    writeln!(
        out,
        "a toy, not physics: see docs/demo-dataset.md; dataset configs: configs/data/demo_*.yaml"
    )?;
    Ok(())
}

fn read_manifest(path: &Path) -> Option<Manifest> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_manifest(path: &Path, m: &Manifest) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(m)?;
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
