//! `gnn4colliders scan`: read a dataset end to end and report what was kept and skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use figment::Figment;
use figment::providers::{Format, Yaml};
use gnn4c_data::DatasetConfig;
use gnn4c_events::EventSample;

/// Arguments of `scan`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders scan configs/data/demo_pretrain.yaml\n  gnn4colliders scan configs/data/nanoaod.yaml --sample ttbar"
)]
pub(crate) struct Args {
    /// Dataset config (YAML).
    config: PathBuf,
    /// Only this sample.
    #[arg(long)]
    sample: Option<String>,
}

/// Loads a dataset config, naming the file and the key on any error.
pub(crate) fn load_dataset(path: &Path) -> anyhow::Result<DatasetConfig> {
    if !path.is_file() {
        anyhow::bail!("dataset config not found: {}", path.display());
    }
    let cfg: DatasetConfig = Figment::from(Yaml::file_exact(path))
        .extract()
        .with_context(|| format!("reading dataset config {}", path.display()))?;
    cfg.validate()
        .with_context(|| format!("in dataset config {}", path.display()))?;
    Ok(cfg)
}

#[derive(Default)]
struct Totals {
    events: u64,
    objects: [u64; 4],
    weight: f64,
}

impl Totals {
    fn add(&mut self, evs: &[EventSample]) {
        for e in evs {
            self.events += 1;
            self.objects[0] += e.jets.len() as u64;
            self.objects[1] += e.electrons.len() as u64;
            self.objects[2] += e.muons.len() as u64;
            self.objects[3] += e.photons.len() as u64;
            self.weight += f64::from(e.weight);
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
        {
            let names: Vec<&str> = cfg.samples.iter().map(|s| s.name.as_str()).collect();
            anyhow::bail!(
                "no sample '{name}' in {}; samples: {}",
                args.config.display(),
                names.join(", ")
            );
        }
    }
    writeln!(out, "dataset '{}' ({})", cfg.name, args.config.display())?;
    writeln!(
        out,
        "  {:<14} {:>6} {:>10} {:>8} {:>7} {:>7} {:>7} {:>7} {:>12}  skipped",
        "sample", "files", "events", "kept", "jets", "el", "mu", "ph", "Σ weight"
    )?;
    let start = Instant::now();
    let mut grand = 0u64;
    for s in cfg
        .samples
        .iter()
        .filter(|s| args.sample.as_ref().is_none_or(|n| n == &s.name))
    {
        let mut t = Totals::default();
        let report = cfg
            .read_sample(s, &base, &mut |evs| {
                t.add(evs);
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
        let read: u64 = report.files.iter().map(|(_, r)| r.entries_read).sum();
        let per = |n: u64| n as f64 / t.events.max(1) as f64;
        writeln!(
            out,
            "  {:<14} {:>6} {:>10} {:>8} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>12.4}  {}",
            s.name,
            report.files.len(),
            read,
            t.events,
            per(t.objects[0]),
            per(t.objects[1]),
            per(t.objects[2]),
            per(t.objects[3]),
            t.weight,
            report.skipped()
        )?;
        grand += read;
    }
    let secs = start.elapsed().as_secs_f64();
    writeln!(
        out,
        "read {grand} entries in {secs:.2} s ({:.0} entries/s); object columns are means per kept event",
        grand as f64 / secs
    )?;
    Ok(())
}
