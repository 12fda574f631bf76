//! `gnn4colliders scan`: read a dataset through its input declaration, select objects and compute
//! the declared features, and report what was kept and skipped (a cut flow per sample).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use std::path::Path;
use std::sync::Arc;

use gnn4c_data::{entry_id, read_file_inputs};
use gnn4c_events::SkipCounts;
use gnn4c_features::{ChunkFeatures, Inputs};
use gnn4c_run::load_dataset;
use gnn4c_run::pipeline::EntryProgress;
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

/// A kept event's features, to print.
struct Shown {
    id: gnn4c_events::EventId,
    weight: f32,
    node_features: Vec<f32>,
    global_features: Vec<f32>,
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
                            t.shown.push(Shown {
                                id: entry_id(&plan.meta, &source, &tree, chunk, i),
                                weight: chunk.weights[i],
                                node_features: features.node_features_of(i).to_vec(),
                                global_features: features.global_features_of(i).to_vec(),
                            });
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
    let names: Vec<&str> = inputs
        .spec
        .node_features
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    let globals: Vec<&str> = inputs
        .spec
        .globals
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    for e in &all_shown {
        show_event(&mut out, e, &names, &globals)?;
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

/// Every declared feature with its source: what the model will see.
fn show_declaration(out: &mut impl Write, inputs: &Inputs) -> anyhow::Result<()> {
    for (c, o) in inputs.objects.iter().enumerate() {
        let d = &o.decl;
        let kinematics: Vec<String> = o
            .kinematics
            .sources()
            .iter()
            .map(|(k, e)| format!("{k} = {}", e.text()))
            .collect();
        let fields: Vec<String> = d.fields.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let keep = if d.single {
            "one per event".to_owned()
        } else {
            format!(
                "select {}, at most {}",
                d.select.as_deref().unwrap_or("all"),
                d.max_objects
                    .map_or_else(|| "all".to_owned(), |m| m.to_string())
            )
        };
        writeln!(
            out,
            "  objects  {c} {:<10} {}{}; {keep}",
            d.name,
            kinematics.join(", "),
            if fields.is_empty() {
                String::new()
            } else {
                format!("; {}", fields.join(", "))
            }
        )?;
    }
    let describe = |f: &gnn4c_features::FeatureDecl| {
        let mut s = f.expr.clone();
        match f.standardize {
            Some(gnn4c_features::Standardize::Fixed(st)) => {
                s = format!("({s} - {}) / {}", st.center, st.scale);
            }
            Some(gnn4c_features::Standardize::Auto) => {
                s = format!("({s} - mean) / std  (auto: the training folds')");
            }
            None => {}
        }
        if let Some(fill) = f.fill {
            s.push_str(&format!("  (fill {fill})"));
        }
        s
    };
    for f in &inputs.spec.node_features {
        writeln!(out, "  node     {:<12} {}", f.name, describe(f))?;
    }
    for f in &inputs.spec.globals {
        writeln!(out, "  global   {:<12} {}", f.name, describe(f))?;
    }
    let pairs: Vec<&str> = inputs.spec.pairs.iter().map(|p| p.name()).collect();
    writeln!(out, "  pairs    {}", pairs.join(", "))?;
    Ok(())
}

fn show_event(
    out: &mut impl Write,
    e: &Shown,
    names: &[&str],
    globals: &[&str],
) -> anyhow::Result<()> {
    let d = names.len().max(1);
    let g: Vec<String> = globals
        .iter()
        .zip(&e.global_features)
        .map(|(n, v)| format!("{n} {v:.4}"))
        .collect();
    let n = e.node_features.len() / d;
    writeln!(
        out,
        "\n{} entry {} (event {}): {n} nodes, {} edges, weight {}; globals: {}",
        e.id.sample,
        e.id.entry,
        e.id.event_number,
        n * n.saturating_sub(1),
        e.weight,
        g.join(", ")
    )?;
    let header: Vec<String> = names
        .iter()
        .map(|n| format!("{:>9}", truncate(n, 9)))
        .collect();
    writeln!(out, "  node  {}", header.join(""))?;
    for (i, row) in e.node_features.chunks(d).enumerate() {
        let cells: Vec<String> = row.iter().map(|x| format!("{x:>9.4}")).collect();
        writeln!(out, "  {i:>4}  {}", cells.join(""))?;
    }
    Ok(())
}
