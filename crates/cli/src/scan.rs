//! `gnn4colliders scan`: read a dataset through its input declaration, select objects and compute
//! the declared features, and report what was kept and skipped (a cut flow per sample).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use gnn4c_run::{EntryProgress, load_dataset, samples_to_scan, scan_sample};
use gnn4c_training::progress_wanted;

use crate::declaration::{show_declaration, show_event, truncate};

/// Arguments of `scan`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Prints the dataset's input declaration (objects, node, global and pair features) and a cut flow per sample.\n\nExamples:\n  gnn4colliders scan configs/data/demo_pretrain.yaml\n  gnn4colliders scan configs/data/hzz.yaml --show 1"
)]
pub(crate) struct Args {
    /// Dataset config (YAML).
    config: PathBuf,
    /// Only this sample.
    #[arg(long)]
    sample: Option<String>,
    /// Print the node and global features of the first N kept events of each sample.
    #[arg(long, default_value_t = 0)]
    show: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let cfg = load_dataset(&args.config)?;
    let base = std::env::current_dir().context("reading the current folder")?;
    let samples = samples_to_scan(&cfg, &args.config, args.sample.as_deref())?;
    let inputs = cfg.inputs()?;
    writeln!(
        out,
        "dataset '{}' ({}): {} node, {} global and {} pair features",
        cfg.name,
        args.config.display(),
        inputs.d_node(),
        inputs.d_global(),
        inputs.d_pair()
    )?;
    show_declaration(&mut out, &inputs)?;
    let collections: Vec<String> = inputs
        .objects
        .iter()
        .map(|o| format!("{:>7}", truncate(&o.decl.name, 7)))
        .collect();
    writeln!(
        out,
        "\n  {:<14} {:>5} {:>9} {:>9} {} {:>6} {:>7} {:>12}  skipped",
        "sample",
        "files",
        "entries",
        "events",
        collections.join(" "),
        "nodes",
        "pairs",
        "Σ weight"
    )?;
    let start = Instant::now();
    let mut grand = 0u64;
    let mut all_shown = Vec::new();
    let mut progress = EntryProgress::new(
        progress_wanted(),
        &cfg,
        samples.iter().copied(),
        &base,
        "scanning",
    )?;
    for s in samples {
        let t = scan_sample(&cfg, s, &inputs, &base, args.show, &mut progress)?;
        let per = |n: u64| n as f64 / t.kept.max(1) as f64;
        let objects: Vec<String> = t
            .objects
            .iter()
            .map(|&n| format!("{:>7.2}", per(n)))
            .collect();
        writeln!(
            out,
            "  {:<14} {:>5} {:>9} {:>9} {} {:>6.2} {:>7.1} {:>12.4}  {}",
            s.name,
            t.files,
            t.read,
            t.kept,
            objects.join(" "),
            per(t.nodes),
            per(t.edges),
            t.weight,
            t.skipped
        )?;
        grand += t.read;
        all_shown.extend(t.shown);
    }
    progress.finish();
    let secs = start.elapsed().as_secs_f64();
    writeln!(
        out,
        "read {grand} entries in {secs:.2} s ({:.0} entries/s); collection, node and pair columns are means per kept event (objects before selection)",
        grand as f64 / secs
    )?;
    for e in &all_shown {
        show_event(&mut out, e, &inputs)?;
    }
    Ok(())
}
