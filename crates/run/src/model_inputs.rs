//! The `features` step: a trained model's ONNX inputs for any ROOT files, exactly as the model
//! reads them (the run's declaration, selection, standardisation and pair features), so that an
//! analysis feeds ONNX Runtime without re-implementing anything, or checks its own
//! implementation of the input recipe.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use gnn4c_data::{CacheManifest, SampleConfig, Split, check_output_path};
use gnn4c_family::{ArrayValues, EventSource, NamedArray};
use gnn4c_inference::Identified;
use gnn4c_training::{StopFlag, read_checkpoint};

use crate::cached_events::{CachedEvents, check_cache_features};
use crate::export::write_npz;
use crate::family::{FamilyJob, Registered};
use crate::pipeline::{CacheBuild, CacheMode, ensure_cache};
use crate::run_dir::RunDir;
use crate::settings::{ResolvedRun, cache_dir, standardization_of};

/// What `features` is asked.
#[derive(Debug, Clone)]
pub struct InputsRequest {
    /// A run folder (its `config.json`) or a checkpoint file (its stored config).
    pub run: PathBuf,
    /// ROOT files or URLs, in the order their events are written.
    pub files: Vec<String>,
    /// The tree in every file [default: the run's dataset's].
    pub tree: Option<String>,
    /// The NPZ file written.
    pub out: PathBuf,
    /// Replace an existing `out`.
    pub overwrite: bool,
    /// Stops the cache build between chunks, writing nothing.
    pub stop: StopFlag,
}

/// What `features` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputsWritten {
    /// Events written (those the model scores: the others are skipped as `preprocess` skips
    /// them).
    pub events: usize,
    /// The arrays of the NPZ file, in order: the model's inputs, then `file`, `entry` and
    /// `event_number`.
    pub arrays: Vec<String>,
    /// The event cache the inputs were read from (`cache/<dataset>_inputs`).
    pub cache: PathBuf,
}

/// Writes the ONNX inputs of the model `req.run` trained for every event of `req.files` to
/// `req.out` (atomically), with each event's file index, entry and event number.
pub fn model_inputs(req: &InputsRequest, out: &mut dyn Write) -> anyhow::Result<InputsWritten> {
    check_output_path(&req.out, req.overwrite)?;
    if req.files.is_empty() {
        return Err(crate::ConfigError("name at least one ROOT file".into()).into());
    }
    let resolved = if req.run.is_file() {
        let ck = read_checkpoint(&req.run)?;
        ResolvedRun::from_value(&ck.state.config, &req.run)?
    } else {
        RunDir::new(&req.run).read_config()?
    };
    let mut dataset = resolved.dataset.clone();
    dataset.name = format!("{}_inputs", resolved.dataset.name);
    // One sample per file; the label and weight only fill the cache's columns.
    let label = resolved
        .dataset
        .samples
        .first()
        .map(|s| s.label.clone())
        .ok_or_else(|| anyhow::anyhow!("the run's dataset has no samples"))?;
    dataset.samples = req
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| SampleConfig {
            name: format!("file{i}"),
            files: vec![f.clone()],
            files_from: None,
            tree: req.tree.clone(),
            label: label.clone(),
            weight: Some(String::new()),
            scale: 1.0,
            entry_start: 0,
            entry_stop: None,
        })
        .collect();
    dataset.source = None;
    let cache = cache_dir(None, &dataset, Path::new("cache"));
    let manifest = ensure_cache(
        out,
        &dataset,
        &cache,
        CacheMode::Auto,
        &resolved.run.folds,
        &CacheBuild::stopped_by(&req.stop),
    )?;
    let job = InputsJob {
        resolved: &resolved,
        manifest: &manifest,
        cache: &cache,
        files: req.files.len(),
        out: &req.out,
    };
    let (events, arrays) = resolved.model.run(job)?;
    Ok(InputsWritten {
        events,
        arrays,
        cache,
    })
}

/// The step with the family's types.
struct InputsJob<'a> {
    resolved: &'a ResolvedRun,
    manifest: &'a CacheManifest,
    cache: &'a Path,
    /// How many files the samples `file0`, `file1`, … read.
    files: usize,
    out: &'a Path,
}

impl FamilyJob for InputsJob<'_> {
    type Output = anyhow::Result<(usize, Vec<String>)>;

    fn run<F: Registered>(self, config: &F::Config) -> Self::Output {
        check_cache_features(
            self.manifest,
            self.cache,
            &self.resolved.dataset,
            "the model",
        )?;
        let (_, data) = CachedEvents::<F>::open(
            self.cache,
            &self.resolved.run.folds,
            &[Split::Train, Split::Validation, Split::Test],
            None,
            config,
            &standardization_of(self.resolved)?,
        )?;
        let mut events = Vec::with_capacity(data.events());
        for block in 0..data.block_sizes().len() {
            events.extend(data.read_block(block)?);
        }
        // File by file, entry by entry (the cache holds them by fold).
        let file_of: HashMap<String, i64> = (0..self.files)
            .map(|i| (format!("file{i}"), i as i64))
            .collect();
        let file = |id: &gnn4c_events::EventId| file_of.get(&*id.sample).copied().unwrap_or(-1);
        let mut keyed: Vec<_> = events.into_iter().map(|e| (data.identity(&e), e)).collect();
        keyed.sort_by_key(|(id, _)| (file(id), id.entry));
        let (ids, events): (Vec<_>, Vec<_>) = keyed.into_iter().unzip();
        let n = events.len();
        anyhow::ensure!(
            n > 0,
            "no event of the files passes the model's selection (see the cache build's skip counts above)"
        );
        let batch = data.batch(events)?;
        let mut arrays = F::onnx_inputs(config, &batch.input);
        let column = |name: &'static str, values: Vec<i64>| NamedArray {
            name,
            shape: vec![n],
            values: ArrayValues::I64(values),
        };
        arrays.push(column("file", ids.iter().map(file).collect()));
        arrays.push(column(
            "entry",
            ids.iter().map(|id| id.entry as i64).collect(),
        ));
        arrays.push(column(
            "event_number",
            ids.iter().map(|id| id.event_number as i64).collect(),
        ));
        write_npz(self.out, &arrays)?;
        Ok((n, arrays.iter().map(|a| a.name.to_owned()).collect()))
    }
}
