//! Run configs: what a user writes (`RunConfig`, composed by `config`) and what a run records
//! (`ResolvedRun`, its `config.json` and every checkpoint's state), with the dataset and task
//! they resolve to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use figment::Figment;
use figment::providers::{Format, Yaml};
use gnn4c_data::{DatasetConfig, Folds};
use gnn4c_features::{Scale, Standardization};
use gnn4c_tasks::Task;
use gnn4c_training::TrainConfig;
use serde::{Deserialize, Serialize};

use crate::config;
use crate::device::DeviceChoice;
use crate::error::ConfigError;
use crate::family::{ModelConfig, ModelSection};

/// How much of a pretrained model fine-tuning trains (contract §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinetuneMode {
    /// Only the new `classify` head; the backbone gets no gradients and no optimiser state.
    #[default]
    FrozenBackbone,
    /// Everything.
    Full,
}

impl FinetuneMode {
    /// The name configs use.
    pub fn name(self) -> &'static str {
        match self {
            FinetuneMode::FrozenBackbone => "frozen_backbone",
            FinetuneMode::Full => "full",
        }
    }
}

/// The task kind; the number of outputs comes from the dataset's classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// Two classes, one output.
    Binary,
    /// K classes, K outputs.
    Multiclass,
    /// K independent labels.
    Multilabel,
}

/// The `task` section (`configs/task/*.yaml`); `task: binary` is short for `task: {kind: binary}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSection {
    /// Binary, multiclass or multilabel.
    pub kind: TaskKind,
}

fn task_section<'de, D: serde::Deserializer<'de>>(d: D) -> Result<TaskSection, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = TaskSection;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("binary, multiclass, multilabel, or {kind: ...}")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TaskSection, E> {
            let kind = TaskKind::deserialize(serde::de::value::StrDeserializer::<E>::new(s))?;
            Ok(TaskSection { kind })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<TaskSection, A::Error> {
            TaskSection::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(V)
}

/// Where a run executes (`configs/environment/*.yaml`): none of it changes the results on CPU
/// except through the device, so a resume may change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvironmentSection {
    /// cpu, cuda or cuda:N.
    pub device: String,
    /// Compute threads (the CPU backend's pool); 0 = all cores.
    pub threads: usize,
    /// Run folders: `<runs_dir>/<name>`.
    pub runs_dir: PathBuf,
    /// Event caches: `<cache_dir>/<dataset name>` (unless the run sets `cache`).
    pub cache_dir: PathBuf,
}

impl Default for EnvironmentSection {
    fn default() -> Self {
        EnvironmentSection {
            device: "cpu".into(),
            threads: 0,
            runs_dir: PathBuf::from("runs"),
            cache_dir: PathBuf::from("cache"),
        }
    }
}

/// Seeded random subsets of the splits (small-data studies, quick runs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubsetSection {
    /// Training events to keep [default: all].
    pub train_events: Option<usize>,
    /// Validation events to keep [default: all].
    pub val_events: Option<usize>,
    /// Test events to keep for the final evaluation [default: all].
    pub test_events: Option<usize>,
}

/// What `finetune` starts from (`configs/experiment/finetune_*.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinetuneSection {
    /// The pretrained checkpoint.
    pub from: Option<PathBuf>,
    /// Frozen backbone or full.
    #[serde(default)]
    pub mode: FinetuneMode,
}

/// A run config, composed from `configs/experiment/*.yaml` and its groups (see `config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Run name (the default run folder is `<environment.runs_dir>/<name>`).
    pub name: String,
    /// Dataset config file (or a name in configs/data/).
    pub data: PathBuf,
    /// Cache folder [default: `<environment.cache_dir>/<dataset name>`].
    #[serde(default)]
    pub cache: Option<PathBuf>,
    /// Which folds are test and validation.
    #[serde(default)]
    pub folds: Folds,
    /// The task kind.
    #[serde(deserialize_with = "task_section")]
    pub task: TaskSection,
    /// The model family and its settings.
    #[serde(default)]
    pub model: ModelSection,
    /// Optimisation, batching and checkpointing.
    #[serde(default)]
    pub trainer: TrainConfig,
    /// Device, threads and folders.
    #[serde(default)]
    pub environment: EnvironmentSection,
    /// Seeded subsets of the splits.
    #[serde(default)]
    pub subset: SubsetSection,
    /// Fine-tuning's starting point.
    #[serde(default)]
    pub finetune: Option<FinetuneSection>,
}

/// `data=nanoaod` (Hydra's group form) means `configs/data/nanoaod.yaml` when `nanoaod` is not
/// itself a file.
pub(crate) fn resolve_data_group(data: &Path) -> PathBuf {
    let group = Path::new("configs/data").join(data).with_extension("yaml");
    if !data.is_file() && data.extension().is_none() && group.is_file() {
        group
    } else {
        data.to_path_buf()
    }
}

/// The task `kind` on `data`'s classes; a mismatch is a [`ConfigError`].
pub(crate) fn task_of(kind: TaskKind, data: &DatasetConfig) -> anyhow::Result<Task> {
    let k = data.classes.len();
    Ok(match kind {
        TaskKind::Binary if k == 2 => Task::Binary,
        TaskKind::Binary => {
            return Err(ConfigError(format!(
                "task binary needs a dataset with 2 classes, dataset '{}' has {k}: {:?}",
                data.name, data.classes
            ))
            .into());
        }
        TaskKind::Multiclass if k >= 2 => Task::Multiclass { n_classes: k },
        TaskKind::Multilabel if k >= 1 => Task::Multilabel { n_labels: k },
        _ => {
            return Err(ConfigError(format!(
                "dataset '{}' lists no classes: add `classes: [...]` to it",
                data.name
            ))
            .into());
        }
    })
}

/// What `config.json` holds, and the state of every checkpoint: the run config as resolved
/// (dataset file and cache folder filled in), the model it builds (when fine-tuning, the
/// backbone's shape from the pretrained checkpoint), the dataset config it names, the `auto`
/// standardisation of its inputs, the task and the layers it was composed from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedRun {
    /// The contract the run follows.
    pub contract_version: String,
    /// The run config.
    pub run: RunConfig,
    /// The model: its family and every setting, the head's width included.
    pub model: ModelConfig,
    /// The dataset config `run.data` names.
    pub dataset: DatasetConfig,
    /// The mean and standard deviation of each `auto`-standardised feature (by name), from the
    /// training folds of the cache the model was first trained on; every later reader of the
    /// model's inputs applies these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub standardization: BTreeMap<String, Scale>,
    /// Written by runs before declared inputs (the contract's fixed selection); ignored.
    #[serde(default, rename = "selection", skip_serializing)]
    pub legacy_selection: Option<serde::de::IgnoredAny>,
    /// The task.
    pub task: Task,
    /// The config layers, in merge order.
    pub composed_from: Vec<String>,
}

impl ResolvedRun {
    /// A resolved run stored as JSON (`config.json`, a checkpoint's state); `origin` names it.
    pub fn from_value(v: &serde_json::Value, origin: &Path) -> anyhow::Result<ResolvedRun> {
        serde_json::from_value(v.clone())
            .with_context(|| format!("{}: not a resolved run config", origin.display()))
    }

    /// This run with what a resume may change (epochs, step checkpoints, TensorBoard, loader
    /// and environment settings, the composition) set aside, as JSON to compare.
    pub fn comparable(&self) -> anyhow::Result<serde_json::Value> {
        let mut r = self.clone();
        let t = &mut r.run.trainer;
        t.max_epochs = 0;
        t.loader_threads = 0;
        t.prefetch = 0;
        t.eval_batch_size = 0;
        t.checkpoint_every_steps = None;
        t.tensorboard = true;
        t.log_every_steps = 1;
        r.run.environment = EnvironmentSection::default();
        r.composed_from.clear();
        Ok(serde_json::to_value(r)?)
    }
}

/// Loads a dataset config, naming the file and the key on any error.
/// Every problem is a [`ConfigError`] (exit code 2): the user must fix the file.
pub fn load_dataset(path: &Path) -> anyhow::Result<DatasetConfig> {
    if !path.is_file() {
        return Err(ConfigError(format!("dataset config not found: {}", path.display())).into());
    }
    let mut cfg: DatasetConfig = Figment::from(Yaml::file_exact(path))
        .extract()
        .map_err(|e| ConfigError(format!("reading dataset config {}: {e}", path.display())))?;
    cfg.validate()
        .map_err(|e| ConfigError(format!("in dataset config {}: {e}", path.display())))?;
    cfg.source = Some(path.to_path_buf());
    Ok(cfg)
}

/// The input widths of a dataset's declaration.
pub(crate) fn input_widths(cfg: &DatasetConfig) -> anyhow::Result<gnn4c_family::InputWidths> {
    let inputs = cfg.inputs().map_err(|e| ConfigError(e.to_string()))?;
    Ok(gnn4c_family::InputWidths {
        d_node: inputs.d_node(),
        d_global: inputs.d_global(),
        d_pair: inputs.d_pair(),
    })
}

/// What a model trained on `cfg` depends on in its input declaration: the collections' names
/// in node order (a node's type), the node and global features and the pair features — not
/// which branches feed them. Compared as JSON, so the order of keys does not matter.
fn model_inputs(cfg: &DatasetConfig) -> anyhow::Result<serde_json::Value> {
    let spec = cfg.inputs_spec()?;
    let objects: Vec<&str> = spec.objects.iter().map(|o| o.name.as_str()).collect();
    Ok(serde_json::json!({
        "objects": objects,
        "node_features": spec.node_features,
        "globals": spec.globals,
        "pairs": spec.pairs,
    }))
}

/// Refuses to run a model trained on `trained`'s inputs (recorded in `checkpoint`) on
/// `other`'s when their features differ, naming the first difference.
pub(crate) fn check_same_inputs(
    trained: &DatasetConfig,
    other: &DatasetConfig,
    checkpoint: &Path,
) -> anyhow::Result<()> {
    let (a, b) = (model_inputs(trained)?, model_inputs(other)?);
    if let Some(what) = gnn4c_data::first_difference(&a, &b) {
        return Err(ConfigError(format!(
            "{} was trained on other inputs than dataset '{}' declares ({what}): a model reads the features it was trained on; declare the same features (`inputs:`) or train a new model",
            checkpoint.display(),
            other.name
        ))
        .into());
    }
    Ok(())
}

/// The standardisation a model of `run` reads its inputs with (its `auto` features').
pub(crate) fn standardization_of(run: &ResolvedRun) -> anyhow::Result<Standardization> {
    Standardization::new(&run.dataset.inputs_spec()?, &run.standardization)
        .map_err(|e| anyhow::anyhow!("dataset '{}': {e}", run.dataset.name))
}

/// The cache folder: `arg`, or `<root>/<dataset name>`.
pub fn cache_dir(arg: Option<&Path>, cfg: &DatasetConfig, root: &Path) -> PathBuf {
    arg.map_or_else(|| root.join(&cfg.name), Path::to_path_buf)
}

/// Composes the run config `path` (a file or an experiment name) with `overrides` and `flags`
/// (a flag's name and the `key=value` it stands for) and checks it; returns it with the labels
/// of the layers it was composed from. Config problems are [`ConfigError`]s (exit code 2).
pub fn load_run_config(
    path: &Path,
    overrides: &[String],
    flags: &[(&str, String)],
) -> anyhow::Result<(RunConfig, Vec<String>)> {
    let path = config::resolve_primary(path)?;
    let composed = config::compose(&path, overrides, flags)?;
    let cfg: RunConfig = composed.extract()?;
    let label = path.display();
    let check = |r: Result<(), String>| -> anyhow::Result<()> {
        r.map_err(|e| ConfigError(format!("in run config {label}: {e}")).into())
    };
    check(cfg.folds.validate().map_err(|e| e.to_string()))?;
    check(cfg.trainer.validate().map_err(|e| e.to_string()))?;
    check(
        cfg.environment
            .device
            .parse::<DeviceChoice>()
            .map(|_| ())
            .map_err(|e| format!("environment.device: {e}")),
    )?;
    // The model section is checked against its family's config (for any head width).
    ModelConfig::resolve(&cfg.model, 1)
        .map_err(|e| ConfigError(format!("in run config {label}: {e}")))?;
    Ok((cfg, composed.sources()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::FAMILIES;

    #[test]
    fn the_group_files_state_the_code_defaults() {
        // Each family's configs/model/<name>.yaml sets every key of its config to the default.
        for name in FAMILIES {
            let text = crate::config::builtin("model", name).expect("a built-in model file");
            let section: ModelSection = Figment::from(Yaml::string(text)).extract().expect(name);
            assert_eq!(section.name, *name);
            let defaults = ModelConfig::resolve(
                &ModelSection {
                    name: (*name).to_owned(),
                    settings: Default::default(),
                },
                1,
            )
            .expect("defaults");
            let file = ModelConfig::resolve(&section, 1).expect("the file's settings");
            assert_eq!(
                serde_json::to_value(&file).unwrap(),
                serde_json::to_value(&defaults).unwrap(),
                "{name}"
            );
            let mut keys: Vec<String> = defaults
                .settings()
                .into_keys()
                .filter(|k| k != "n_out" && !gnn4c_family::INPUT_WIDTH_KEYS.contains(&k.as_str()))
                .collect();
            keys.sort();
            let mut written: Vec<String> = section.settings.into_keys().collect();
            written.push("name".into());
            written.sort();
            assert_eq!(
                written, keys,
                "configs/model/{name}.yaml lists every setting"
            );
        }
        let trainer: TrainConfig = Figment::from(Yaml::string(
            crate::config::builtin("trainer", "default").expect("built in"),
        ))
        .extract()
        .expect("configs/trainer/default.yaml");
        assert_eq!(trainer, TrainConfig::default());
    }

    #[test]
    fn a_model_setting_the_family_lacks_is_named_with_the_closest_one() {
        let section = ModelSection {
            name: "root_transformer".into(),
            settings: [("n_layer".to_owned(), serde_json::json!(2))].into(),
        };
        let e = ModelConfig::resolve(&section, 3).unwrap_err().to_string();
        assert!(e.contains("unknown key `model.n_layer` for model root_transformer (did you mean `model.n_layers`?)"), "{e}");
        let bad = ModelSection {
            name: "transformer".into(),
            settings: Default::default(),
        };
        let e = ModelConfig::resolve(&bad, 3).unwrap_err().to_string();
        assert!(e.contains("root_gnn, root_transformer"), "{e}");
        let n_out = ModelSection {
            name: "root_gnn".into(),
            settings: [("n_out".to_owned(), serde_json::json!(2))].into(),
        };
        assert!(
            ModelConfig::resolve(&n_out, 3)
                .unwrap_err()
                .to_string()
                .contains("set by the task")
        );
        // A value of the wrong type is named by its key, the others being right.
        let wrong = ModelSection {
            name: "pfn".into(),
            settings: [
                ("dropout".to_owned(), serde_json::json!(0.1)),
                ("phi_sizes".to_owned(), serde_json::json!(7)),
            ]
            .into(),
        };
        let e = ModelConfig::resolve(&wrong, 3).unwrap_err().to_string();
        assert!(e.contains("model.phi_sizes for model pfn"), "{e}");
    }

    #[test]
    fn a_resolved_model_round_trips_through_json_with_its_family() {
        let section = ModelSection {
            name: "root_transformer".into(),
            settings: [("n_layers".to_owned(), serde_json::json!(2))].into(),
        };
        let m = ModelConfig::resolve(&section, 12).expect("resolves");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["name"], "root_transformer");
        assert_eq!(v["n_layers"], 2);
        assert_eq!(v["n_out"], 12);
        let back: ModelConfig = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), v);
    }
}
