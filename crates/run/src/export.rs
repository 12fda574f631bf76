//! The export step: a run's (or a checkpoint's) model as a PyTorch-named safetensors file, or as
//! an ONNX model (with its input recipe and a sample batch of the run's test events and their
//! logits beside it).

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::backend::Flex;
use gnn4c_data::{Split, check_output_path};
use gnn4c_family::{ArrayValues, Classifier, EventSource, NamedArray, write_atomic};
use gnn4c_training::{Checkpoint, read_checkpoint};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::NpzWriter;

use crate::cached_events::CachedEvents;
use crate::family::{FamilyJob, Registered, load_model};
use crate::recipe::input_recipe;
use crate::run_dir::RunDir;
use crate::settings::{ResolvedRun, cache_dir, standardization_of};

/// What `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// The weights, PyTorch state-dict names (safetensors).
    Safetensors,
    /// The model, ONNX (opset 17).
    Onnx,
}

impl ExportFormat {
    /// The format `out`'s extension names (`.onnx`; anything else is safetensors).
    pub fn of_path(out: &Path) -> ExportFormat {
        match out.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("onnx") => ExportFormat::Onnx,
            _ => ExportFormat::Safetensors,
        }
    }
}

/// Events in an ONNX export's sample batch (the first of the run's test split).
pub const SAMPLE_EVENTS: usize = 64;

/// What [`export`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The checkpoint read.
    pub checkpoint: PathBuf,
    /// Its epoch.
    pub epoch: u64,
    /// The model family.
    pub family: &'static str,
    /// Parameters written.
    pub parameters: usize,
    /// Outputs of the head.
    pub n_out: usize,
    /// ONNX: the sample batch written beside the model, or why there is none.
    pub sample: Option<Result<PathBuf, String>>,
}

/// The sample batch's path beside the ONNX model `out`: `model.onnx` → `model.sample.npz`.
pub fn sample_path(out: &Path) -> PathBuf {
    out.with_extension("sample.npz")
}

/// The input recipe's path beside the ONNX model `out`: `model.onnx` → `model.inputs.json`.
pub fn recipe_path(out: &Path) -> PathBuf {
    out.with_extension("inputs.json")
}

/// Writes the model of `run` (a run folder's `best.ckpt`, or a checkpoint file) to `out` in
/// `format` (atomically; an existing file only with `overwrite`).
pub fn export(
    run: &Path,
    out: &Path,
    format: ExportFormat,
    overwrite: bool,
) -> anyhow::Result<Exported> {
    let ck_path = if run.is_dir() {
        RunDir::new(run).checkpoint("best")
    } else {
        run.to_path_buf()
    };
    check_output_path(out, overwrite)?;
    if format == ExportFormat::Onnx {
        check_output_path(&sample_path(out), overwrite)?;
        check_output_path(&recipe_path(out), overwrite)?;
    }
    let ck = read_checkpoint(&ck_path)?;
    let resolved = ResolvedRun::from_value(&ck.state.config, &ck_path)?;
    let model = &resolved.model;
    let job = ExportJob {
        ck: &ck,
        resolved: &resolved,
        out,
        format,
    };
    let (parameters, sample) = model.run(job)?;
    Ok(Exported {
        checkpoint: ck_path,
        epoch: ck.state.epoch,
        family: model.name(),
        parameters,
        n_out: model.n_out(),
        sample,
    })
}

struct ExportJob<'a> {
    ck: &'a Checkpoint,
    resolved: &'a ResolvedRun,
    out: &'a Path,
    format: ExportFormat,
}

type ExportOutput = anyhow::Result<(usize, Option<Result<PathBuf, String>>)>;

impl FamilyJob for ExportJob<'_> {
    type Output = ExportOutput;

    fn run<F: Registered>(self, config: &F::Config) -> ExportOutput {
        let device = Default::default();
        let net = load_model::<F, Flex>(self.ck, config, &device)?;
        let parameters = burn::module::Module::num_params(&net);
        match self.format {
            ExportFormat::Safetensors => {
                gnn4c_data::write_atomically(self.out, |tmp| {
                    F::save_weights(&net, tmp).map_err(|e| gnn4c_data::DataError::Write {
                        path: self.out.to_path_buf(),
                        message: e.to_string(),
                    })
                })?;
                Ok((parameters, None))
            }
            ExportFormat::Onnx => {
                let recipe = input_recipe(self.resolved, self.ck.state.epoch)?;
                let metadata = onnx_metadata(self.resolved, self.ck, &recipe)?;
                let bytes = F::to_onnx(config, &net, metadata);
                let recipe_text = serde_json::to_string_pretty(&recipe)? + "\n";
                for (path, bytes) in [
                    (self.out.to_path_buf(), bytes),
                    (recipe_path(self.out), recipe_text.into_bytes()),
                ] {
                    write_atomic(&path, &bytes)
                        .with_context(|| format!("writing {}", path.display()))?;
                }
                let sample = write_sample::<F>(self.resolved, config, &net, self.out);
                Ok((parameters, Some(sample)))
            }
        }
    }
}

/// What the ONNX file says about the model: classes, task, inputs, standardisation, origin,
/// and the whole input `recipe`.
fn onnx_metadata(
    r: &ResolvedRun,
    ck: &Checkpoint,
    recipe: &serde_json::Value,
) -> anyhow::Result<Vec<(String, String)>> {
    let spec = r.dataset.inputs_spec()?;
    let features = gnn4c_data::FeatureNames::of(&spec);
    let json = |v: serde_json::Value| v.to_string();
    Ok(vec![
        ("gnn4colliders.family".into(), r.model.name().into()),
        (
            "gnn4colliders.task".into(),
            json(serde_json::to_value(r.task)?),
        ),
        (
            "class_names".into(),
            json(serde_json::json!(r.dataset.classes)),
        ),
        (
            "node_features".into(),
            json(serde_json::json!(features.node)),
        ),
        (
            "global_features".into(),
            json(serde_json::json!(features.global)),
        ),
        (
            "pair_features".into(),
            json(serde_json::json!(features.pair)),
        ),
        (
            "standardization".into(),
            json(serde_json::to_value(&r.standardization)?),
        ),
        (
            "gnn4colliders.model".into(),
            json(serde_json::to_value(&r.model)?),
        ),
        ("gnn4colliders.contract".into(), r.contract_version.clone()),
        ("gnn4colliders.epoch".into(), ck.state.epoch.to_string()),
        ("gnn4colliders.inputs".into(), recipe.to_string()),
    ])
}

/// The first [`SAMPLE_EVENTS`] events of the run's test split as the ONNX inputs, with the
/// model's logits (`logits`), in `<out>.sample.npz`; or why not (no cache here).
fn write_sample<F: Registered>(
    r: &ResolvedRun,
    config: &F::Config,
    net: &F::Model<Flex>,
    out: &Path,
) -> Result<PathBuf, String> {
    let cache = cache_dir(r.run.cache.as_deref(), &r.dataset, Path::new("cache"));
    let sample = || -> anyhow::Result<PathBuf> {
        let standardization = standardization_of(r)?;
        let (_, data) = CachedEvents::<F>::open(
            &cache,
            &r.run.folds,
            &[Split::Test],
            None,
            config,
            &standardization,
        )?;
        let mut events = Vec::new();
        for block in 0..data.block_sizes().len() {
            events.extend(data.read_block(block)?);
            if events.len() >= SAMPLE_EVENTS {
                break;
            }
        }
        events.truncate(SAMPLE_EVENTS);
        let batch = data.batch(events)?;
        let logits: Vec<f32> = net
            .logits(&batch.input, &Default::default())
            .into_data()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("logits: {e:?}"))?;
        let mut arrays = F::onnx_inputs(config, &batch.input);
        let n_out = F::n_out(config);
        arrays.push(NamedArray {
            name: "logits",
            shape: vec![logits.len() / n_out, n_out],
            values: ArrayValues::F32(logits),
        });
        let path = sample_path(out);
        write_npz(&path, &arrays)?;
        Ok(path)
    };
    sample().map_err(|e| format!("no sample batch ({e:#})"))
}

/// `arrays` as an NPZ file, atomically.
pub(crate) fn write_npz(path: &Path, arrays: &[NamedArray]) -> anyhow::Result<()> {
    gnn4c_data::write_atomically(path, |tmp| {
        let write = || -> Result<(), Box<dyn std::error::Error>> {
            let mut z = NpzWriter::new(std::fs::File::create(tmp)?);
            for a in arrays {
                let shape = IxDyn(&a.shape);
                match &a.values {
                    ArrayValues::F32(v) => {
                        z.add_array(a.name, &ArrayD::from_shape_vec(shape, v.clone())?)?
                    }
                    ArrayValues::I64(v) => {
                        z.add_array(a.name, &ArrayD::from_shape_vec(shape, v.clone())?)?
                    }
                    ArrayValues::Bool(v) => {
                        z.add_array(a.name, &ArrayD::from_shape_vec(shape, v.clone())?)?
                    }
                }
            }
            z.finish()?.sync_all()?;
            Ok(())
        };
        write().map_err(|e| gnn4c_data::DataError::Write {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    })?;
    Ok(())
}
