//! Benchmarks for every pipeline stage: shared helpers (timing statistics, machine metadata) for the
//! benchmark binaries in `benchmarks/src/bin/`.
//!
//! The bench crate may depend on every workspace crate and choose a backend; nothing depends on it.
//! Results are printed as JSON lines plus a table; speed is measured here, never asserted in tests.

use std::path::Path;
use std::time::Instant;

use gnn4c_cli::device::DeviceChoice;
use gnn4c_data::{
    EntryRange, PRETRAIN_PROCESSES, SampleMeta, SchemaSpec, read_file_events, write_demo,
};
use gnn4c_events::{EventSample, Label};
use gnn4c_features::{EventFeatures, SelectionConfig};
use gnn4c_graphs::{GraphSample, HostBatch, Padding, TopologyCache, collate, graph_of_event};

/// Summary statistics of repeated timings, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Repetitions.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Fastest.
    pub min: f64,
    /// Slowest.
    pub max: f64,
    /// Sample standard deviation (0 for one repetition).
    pub std: f64,
}

impl Stats {
    /// Statistics of `samples` (seconds); panics on an empty slice (a benchmark bug).
    pub fn of(samples: &[f64]) -> Stats {
        assert!(!samples.is_empty(), "no timing samples");
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let mean = s.iter().sum::<f64>() / n as f64;
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            0.5 * (s[n / 2 - 1] + s[n / 2])
        };
        let var = if n > 1 {
            s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Stats {
            n,
            mean,
            median,
            min: s[0],
            max: s[n - 1],
            std: var.sqrt(),
        }
    }
}

/// Runs `f` `warmup` times untimed, then `reps` times timed; returns the seconds of each timed run.
pub fn time_reps(warmup: usize, reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..warmup {
        f();
    }
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect()
}

/// The CPU model (from /proc/cpuinfo on Linux) and logical core count.
pub fn machine() -> (String, usize) {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (model, cores)
}

/// Every event of `tree` in `path`, read with the built-in `schema` as sample `sample` with
/// class `label` (benchmarks read their fixed inputs once, untimed).
pub fn read_events(
    path: &Path,
    tree: &str,
    schema: &str,
    sample: &str,
    label: u32,
) -> anyhow::Result<Vec<EventSample>> {
    let spec = SchemaSpec::builtin(schema)
        .ok_or_else(|| anyhow::anyhow!("no built-in schema '{schema}'"))?;
    let meta = SampleMeta {
        name: sample.into(),
        label: Label::Class(label),
        weight_branch: None,
        scale: 1.0,
    };
    let range = EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        step_size: 10_000,
    };
    let mut out = Vec::new();
    read_file_events(path, tree, &spec, &meta, range, &mut |evs| {
        out.extend_from_slice(evs);
        Ok(())
    })?;
    Ok(out)
}

/// The demo pretraining graphs of `per_process` events per process (seed 42), interleaved by
/// (entry, sample) so any prefix mixes the 12 processes (written and read untimed).
pub fn demo_graphs(per_process: usize, cores: usize) -> anyhow::Result<Vec<GraphSample>> {
    let tmp = tempfile::tempdir()?;
    let files = write_demo(tmp.path(), per_process, 42, cores)?;
    let selection = SelectionConfig::default();
    let mut topo = TopologyCache::new(selection.max_nodes());
    let mut feats = EventFeatures::default();
    let mut graphs = Vec::new();
    for f in files.iter().take(PRETRAIN_PROCESSES.len()) {
        for ev in read_events(&f.path, "output", "vector", f.sample, f.label)? {
            if let Ok(g) = graph_of_event(&ev, &selection, &mut feats, &mut topo) {
                graphs.push(g);
            }
        }
    }
    graphs.sort_by_key(|g| (g.id.entry, g.id.sample.clone()));
    Ok(graphs)
}

/// One batch of `batch` mixed demo pretraining graphs (the benchmarks' fixed input).
pub fn demo_batch(batch: usize, cores: usize) -> anyhow::Result<HostBatch> {
    let graphs = demo_graphs(batch.div_ceil(PRETRAIN_PROCESSES.len()) * 2, cores)?;
    let refs: Vec<&GraphSample> = graphs.iter().take(batch).collect();
    collate(&refs, Padding::None).map_err(anyhow::Error::msg)
}

/// Removes `--device X` from `args` and returns the device (CPU when absent).
pub fn take_device(args: &mut Vec<String>) -> anyhow::Result<DeviceChoice> {
    let Some(i) = args.iter().position(|a| a == "--device") else {
        return Ok(DeviceChoice::Cpu);
    };
    args.remove(i);
    if i >= args.len() {
        anyhow::bail!("--device needs a value: cpu, cuda or cuda:N");
    }
    args.remove(i).parse().map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_known_samples() {
        let s = Stats::of(&[3.0, 1.0, 2.0, 4.0]);
        assert_eq!((s.n, s.median, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!((s.mean - 2.5).abs() < 1e-12);
        assert!((s.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }
}
