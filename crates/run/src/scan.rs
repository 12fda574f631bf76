//! What `scan` and `inspect --inputs` read: a dataset's samples, or a file's first entries,
//! through an input declaration, counted per sample (the cut flow), with a few kept events kept
//! for printing. The binary prints them.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use gnn4c_data::{
    DataError, DatasetConfig, EntryRange, InputChunk, SampleConfig, SampleMeta, builtin_inputs,
    entry_id, read_file_inputs,
};
use gnn4c_events::{EventId, Label, SkipCounts};
use gnn4c_features::{ChunkFeatures, Inputs, InputsSpec};

use crate::{ConfigError, EntryProgress, load_dataset};

/// One kept event's identity, weight and features, as the declaration computed them.
#[derive(Debug, Clone, PartialEq)]
pub struct ShownEvent {
    /// Identity.
    pub id: EventId,
    /// Weight.
    pub weight: f32,
    /// `[n_nodes, d_node]` row-major.
    pub node_features: Vec<f32>,
    /// `[d_global]`.
    pub global_features: Vec<f32>,
}

impl ShownEvent {
    /// Entry `i` of a chunk the reader handed over and the declaration computed `features` of.
    fn of(
        meta: &SampleMeta,
        source: &Arc<Path>,
        tree: &Arc<str>,
        chunk: &InputChunk,
        features: &ChunkFeatures,
        i: usize,
    ) -> ShownEvent {
        ShownEvent {
            id: entry_id(meta, source, tree, chunk, i),
            weight: chunk.weights[i],
            node_features: features.node_features_of(i).to_vec(),
            global_features: features.global_features_of(i).to_vec(),
        }
    }
}

/// One sample's cut flow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleScan {
    /// Files read.
    pub files: usize,
    /// Entries read.
    pub read: u64,
    /// Events kept.
    pub kept: u64,
    /// Nodes over the kept events.
    pub nodes: u64,
    /// Pairs (edges) over the kept events.
    pub edges: u64,
    /// Objects per collection over the entries read, before selection.
    pub objects: Vec<u64>,
    /// Σ weight over the kept events.
    pub weight: f64,
    /// Entries not kept, by reason.
    pub skipped: SkipCounts,
    /// The first kept events, as many as asked for.
    pub shown: Vec<ShownEvent>,
}

/// The samples of `cfg` (read from `config`) that `scan` reads: every one, or the one named.
pub fn samples_to_scan<'c>(
    cfg: &'c DatasetConfig,
    config: &Path,
    only: Option<&str>,
) -> Result<Vec<&'c SampleConfig>, ConfigError> {
    if let Some(name) = only
        && !cfg.samples.iter().any(|s| s.name == name)
    {
        let names: Vec<&str> = cfg.samples.iter().map(|s| s.name.as_str()).collect();
        return Err(ConfigError(format!(
            "no sample '{name}' in {}; samples: {}",
            config.display(),
            names.join(", ")
        )));
    }
    Ok(cfg
        .samples
        .iter()
        .filter(|s| only.is_none_or(|n| n == s.name))
        .collect())
}

/// Reads every file of `sample` through `inputs` (the dataset's declaration) and counts what it
/// keeps and skips, keeping the first `show` kept events; files named relative to `base`.
pub fn scan_sample(
    cfg: &DatasetConfig,
    sample: &SampleConfig,
    inputs: &Inputs,
    base: &Path,
    show: usize,
    progress: &mut EntryProgress,
) -> anyhow::Result<SampleScan> {
    let mut t = SampleScan {
        objects: vec![0; inputs.objects.len()],
        ..SampleScan::default()
    };
    progress.start_sample(sample);
    let plan = cfg.sample_plan(sample, base)?;
    t.files = plan.files.len();
    let mut features = ChunkFeatures::default();
    for path in &plan.files {
        let source: Arc<Path> = Arc::from(path.as_path());
        let tree: Arc<str> = Arc::from(plan.tree.as_str());
        let prefix = cfg.source_prefix();
        read_file_inputs(
            path,
            &plan.tree,
            inputs,
            &plan.meta,
            plan.range,
            &prefix,
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
                    let n = features.nodes(i).len() as u64;
                    t.kept += 1;
                    t.nodes += n;
                    t.edges += n * n.saturating_sub(1);
                    t.weight += f64::from(chunk.weights[i]);
                    if t.shown.len() < show {
                        let e = ShownEvent::of(&plan.meta, &source, &tree, chunk, &features, i);
                        t.shown.push(e);
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
            format!("reading sample '{}'{hint}", sample.name)
        })?;
    }
    progress.end_sample();
    Ok(t)
}

/// The declaration `inspect --inputs` names: a built-in's name (`nanoaod`), a dataset config (a
/// YAML file with `samples`) or a YAML file holding a declaration.
pub fn load_declaration(arg: &str) -> anyhow::Result<Inputs> {
    let path = Path::new(arg);
    let (spec, origin) = if path.is_file() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: serde_yaml::Value = serde_yaml::from_str(&text)
            .map_err(|e| ConfigError(format!("{}: not YAML: {e}", path.display())))?;
        let spec = if value.get("samples").is_some() {
            load_dataset(path)?.inputs_spec()?
        } else {
            serde_yaml::from_value::<InputsSpec>(value).map_err(|e| {
                ConfigError(format!("{}: not an input declaration: {e}", path.display()))
            })?
        };
        (spec, format!("{}: ", path.display()))
    } else {
        let spec = builtin_inputs(arg).unwrap_or_else(|| {
            Err(DataError::Config(format!(
                "--inputs {arg}: no such file and no built-in declaration of that name (built-ins: {})",
                gnn4c_data::BUILTIN_DECLARATIONS.join(", ")
            )))
        })?;
        (spec, format!("built-in declaration {arg}: "))
    };
    Inputs::new(&spec).map_err(|e| ConfigError(format!("{origin}{e}")).into())
}

/// What `inspect --inputs` found in one tree: how many of the entries read were kept, and the
/// first `show` kept events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TreeScan {
    /// Entries read.
    pub read: u64,
    /// Events kept.
    pub kept: u64,
    /// The first kept events.
    pub shown: Vec<ShownEvent>,
}

/// Reads the first `entries` entries of `tree` in `path` through `inputs`: the events kept,
/// the first `show` of them kept for printing (the sample is named after the file).
pub fn scan_tree_start(
    path: &Path,
    tree: &str,
    entries: u64,
    inputs: &Inputs,
    show: usize,
) -> Result<TreeScan, DataError> {
    let meta = SampleMeta {
        name: Arc::from(
            path.file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
        ),
        label: Label::Class(0),
        weight_branch: None,
        scale: 1.0,
    };
    let range = EntryRange {
        entry_start: 0,
        entry_stop: entries,
        step_size: 1000,
        threads: 0,
    };
    let source: Arc<Path> = Arc::from(path);
    let tree_name: Arc<str> = Arc::from(tree);
    let mut t = TreeScan::default();
    let mut features = ChunkFeatures::default();
    t.read = read_file_inputs(path, tree, inputs, &meta, range, "", &mut |chunk| {
        inputs.build_chunk(&chunk.inputs, &mut features);
        for (i, k) in features.kept.iter().enumerate() {
            if k.is_err() {
                continue;
            }
            t.kept += 1;
            if t.shown.len() < show {
                let e = ShownEvent::of(&meta, &source, &tree_name, chunk, &features, i);
                t.shown.push(e);
            }
        }
        Ok(())
    })?;
    Ok(t)
}
