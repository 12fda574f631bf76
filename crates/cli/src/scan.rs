//! `gnn4colliders scan`: read a dataset through its input declaration, select objects and compute
//! the declared features, and report what was kept and skipped (a cut flow per sample).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use std::path::Path;
use std::sync::Arc;

use gnn4c_data::read_file_inputs;
use gnn4c_events::SkipCounts;
use gnn4c_features::ChunkFeatures;
use gnn4c_run::load_dataset;

use crate::declaration::{Shown, show_declaration, show_event, truncate};
use gnn4c_run::EntryProgress;
use gnn4c_training::progress_wanted;

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

/// Per-sample running totals.
#[derive(Default)]
struct Totals {
    read: u64,
    kept: u64,
    nodes: u64,
    edges: u64,
    /// Objects per collection, before selection.
    objects: Vec<u64>,
    weight: f64,
    skipped: SkipCounts,
    shown: Vec<Shown>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let cfg = load_dataset(&args.config)?;
    let base = std::env::current_dir().context("reading the current folder")?;
    if let Some(name) = &args.sample
        && !cfg.samples.iter().any(|s| &s.name == name)
    {
        let names: Vec<&str> = cfg.samples.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!(
            "no sample '{name}' in {}; samples: {}",
            args.config.display(),
            names.join(", ")
        );
    }
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
    let chosen = || {
        cfg.samples
            .iter()
            .filter(|s| args.sample.as_ref().is_none_or(|n| n == &s.name))
    };
    let mut progress = EntryProgress::new(progress_wanted(), &cfg, chosen(), &base, "scanning")?;
    for s in chosen() {
        let mut t = Totals {
            objects: vec![0; inputs.objects.len()],
            ..Totals::default()
        };
        progress.start_sample(s);
        let plan = cfg.sample_plan(s, &base)?;
        let mut features = ChunkFeatures::default();
        for path in &plan.files {
            let source: Arc<Path> = Arc::from(path.as_path());
            let tree: Arc<str> = Arc::from(plan.tree.as_str());
            read_file_inputs(
                path,
                &plan.tree,
                &inputs,
                &plan.meta,
                plan.range,
                &cfg.source_prefix(),
                &mut |chunk| {
                    inputs.build_chunk(&chunk.inputs, &mut features);
                    progress.advance(chunk.inputs.n_entries as u64);
                    t.read += chunk.inputs.n_entries as u64;
                    for (c, cols) in chunk.inputs.objects.iter().enumerate() {
                        t.objects[c] += cols.offsets.last().copied().unwrap_or(0) as u64;
                    }
                    for (i, kept) in features.kept.iter().enumerate() {
                        if let Err(skip) = kept {
                            t.skipped.add(&inputs.skip_name(*skip));
                            continue;
                        }
                        let nodes = features.nodes(i);
                        let n = nodes.len() as u64;
                        t.kept += 1;
                        t.nodes += n;
                        t.edges += n * n.saturating_sub(1);
                        t.weight += f64::from(chunk.weights[i]);
                        if t.shown.len() < args.show {
                            t.shown
                                .push(Shown::of(&plan.meta, &source, &tree, chunk, &features, i));
                        }
                    }
                    Ok(())
                },
            )
            .with_context(|| {
                let hint = if cfg.name.starts_with("demo") {
                    " (the demo dataset is written by `gnn4colliders generate`)"
                } else {
                    ""
                };
                format!("reading sample '{}'{hint}", s.name)
            })?;
        }
        progress.end_sample();
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
            plan.files.len(),
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
