//! `gnn4colliders scan`: read a dataset end to end, select objects and build graphs, and report
//! what was kept and skipped (a cut flow per sample).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use gnn4c_events::{EventSample, SkipCounts};
use gnn4c_features::{D_NODE, EventFeatures, NODE_FEATURE_NAMES, SelectionConfig};
use gnn4c_graphs::{D_EDGE, GraphSample, TopologyCache, graph_of_event};
use gnn4c_run::load_dataset;
use gnn4c_run::pipeline::EntryProgress;
use gnn4c_training::progress_wanted;

/// Arguments of `scan`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Uses the contract's default object selection (contract §2).\n\nExamples:\n  gnn4colliders scan configs/data/demo_pretrain.yaml\n  gnn4colliders scan configs/data/hzz.yaml --show 1"
)]
pub(crate) struct Args {
    /// Dataset config (YAML).
    config: PathBuf,
    /// Only this sample.
    #[arg(long)]
    sample: Option<String>,
    /// Print the node and edge features of the first N graphs of each sample.
    #[arg(long, default_value_t = 0)]
    show: usize,
}

/// Per-sample running totals.
#[derive(Default)]
struct Totals {
    read: u64,
    graphs: u64,
    nodes: u64,
    edges: u64,
    objects: [u64; 4],
    weight: f64,
    skipped: SkipCounts,
    shown: Vec<GraphSample>,
}

impl Totals {
    fn add(&mut self, ev: &EventSample, g: &GraphSample, show: usize) {
        self.graphs += 1;
        self.nodes += g.n_nodes() as u64;
        self.edges += g.n_edges() as u64;
        for (k, n) in [
            ev.jets.len(),
            ev.electrons.len(),
            ev.muons.len(),
            ev.photons.len(),
        ]
        .into_iter()
        .enumerate()
        {
            self.objects[k] += n as u64;
        }
        self.weight += f64::from(g.weight);
        if self.shown.len() < show {
            self.shown.push(g.clone());
        }
    }
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
    let selection = SelectionConfig::default();
    let mut cache = TopologyCache::new(selection.max_nodes());
    let mut features = EventFeatures::default();
    writeln!(
        out,
        "dataset '{}' ({}), contract default selection",
        cfg.name,
        args.config.display()
    )?;
    writeln!(
        out,
        "  {:<14} {:>5} {:>9} {:>9} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>12}  skipped",
        "sample",
        "files",
        "entries",
        "graphs",
        "jets",
        "el",
        "mu",
        "ph",
        "nodes",
        "edges",
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
        let mut t = Totals::default();
        progress.start_sample(s);
        let report = cfg
            .read_sample(s, &base, &mut |evs| {
                progress.saw(evs);
                for ev in evs {
                    match graph_of_event(ev, &selection, &mut features, &mut cache) {
                        Ok(g) => {
                            t.add(ev, &g, args.show);
                        }
                        Err(reason) => t.skipped.add(reason),
                    }
                }
                Ok(())
            })
            .with_context(|| {
                let hint = if cfg.name.starts_with("demo") {
                    " (the demo dataset is written by `gnn4colliders generate`)"
                } else {
                    ""
                };
                format!("reading sample '{}'{hint}", s.name)
            })?;
        progress.end_sample();
        t.read = report.files.iter().map(|(_, r)| r.entries_read).sum();
        t.skipped.merge(&report.skipped());
        let per = |n: u64| n as f64 / t.graphs.max(1) as f64;
        writeln!(
            out,
            "  {:<14} {:>5} {:>9} {:>9} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>7.1} {:>12.4}  {}",
            s.name,
            report.files.len(),
            t.read,
            t.graphs,
            per(t.objects[0]),
            per(t.objects[1]),
            per(t.objects[2]),
            per(t.objects[3]),
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
        "read {grand} entries in {secs:.2} s ({:.0} entries/s); object, node and edge columns are means per graph (objects before selection)",
        grand as f64 / secs
    )?;
    for g in &all_shown {
        show_graph(&mut out, g)?;
    }
    Ok(())
}

fn show_graph(out: &mut impl Write, g: &GraphSample) -> anyhow::Result<()> {
    writeln!(
        out,
        "\n{} entry {} (event {}): {} nodes, {} edges, globals {:?}, weight {}",
        g.id.sample,
        g.id.entry,
        g.id.event_number,
        g.n_nodes(),
        g.n_edges(),
        g.global_features,
        g.weight
    )?;
    writeln!(
        out,
        "  node  {}",
        NODE_FEATURE_NAMES.map(|n| format!("{n:>9}")).join("")
    )?;
    for (i, row) in g.node_features.chunks(D_NODE).enumerate() {
        let cells: Vec<String> = row.iter().map(|x| format!("{x:>9.4}")).collect();
        writeln!(out, "  {i:>4}  {}", cells.join(""))?;
    }
    let shown = g.n_edges().min(6);
    writeln!(out, "  first {shown} edges (src → dst: deta, dphi, dR)")?;
    for k in 0..shown {
        let f = &g.edge_features[k * D_EDGE..(k + 1) * D_EDGE];
        writeln!(
            out,
            "  {:>4} → {:<4} {:>9.4} {:>9.4} {:>9.4}",
            g.topology.edge_src[k], g.topology.edge_dst[k], f[0], f[1], f[2]
        )?;
    }
    Ok(())
}
