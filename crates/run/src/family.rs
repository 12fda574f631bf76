//! The model families a run can name (`model.name`), each registered by one line in
//! [`families!`] (its crate, its name; its config group file is `configs/model/<name>.yaml`).
//! The event source that reads the event cache for any of them is `cached_events.rs`.
//!
//! Nothing here knows a family: a family's crate implements `gnn4c_family::ModelFamily` (config,
//! batches, weights, export) and `gnn4c_family::Kernels` (how it runs on the CPU backend and on
//! the others); the run layer is generic over [`Registered`], which every such family is.

use std::collections::BTreeMap;

use burn::backend::Flex;
use burn::tensor::backend::Backend;
use gnn4c_data::CONTRACT_VERSION;
use gnn4c_family::{Kernels, ModelFamily};
use gnn4c_training::Checkpoint;
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// A model family the run layer runs: its model, config and batches (`ModelFamily`) and how it
/// runs on burn-flex, the CPU backend, and on the others (`Kernels<Flex>`).
pub trait Registered: Kernels<Flex> {}

impl<F: Kernels<Flex>> Registered for F {}

/// Work to do with whichever family a run's config names: [`ModelConfig::run`] calls `run`
/// with the family's type.
pub trait FamilyJob {
    /// What the work returns.
    type Output;

    /// Does the work with family `F` and its resolved config.
    fn run<F: Registered>(self, config: &F::Config) -> Self::Output;
}

/// The model section of a run config as written: the family's name and the settings that differ
/// from its defaults (`model: {name: root_transformer, n_layers: 2}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSection {
    /// The family: one of [`FAMILIES`] (default: the first registered).
    #[serde(default = "default_family")]
    pub name: String,
    /// Settings of the family's config, by name.
    #[serde(flatten)]
    pub settings: BTreeMap<String, serde_json::Value>,
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            name: default_family(),
            settings: BTreeMap::new(),
        }
    }
}

/// The family a config that names none trains: the first line of `families!`.
fn default_family() -> String {
    FAMILIES[0].into()
}

/// Defines [`ModelConfig`] (one variant per family, tagged by its name) and its dispatch: the
/// one place that lists the families.
macro_rules! families {
    ($($(#[$doc:meta])* $variant:ident($family:ty) = $name:literal,)+) => {
        /// A resolved model: the family (`name`) and every setting of its config.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(tag = "name")]
        pub enum ModelConfig {
            $($(#[$doc])* #[serde(rename = $name)] $variant(<$family as ModelFamily>::Config),)+
        }

        /// The names `model.name` may take.
        pub const FAMILIES: &[&str] = &[$($name),+];

        /// The built-in `model` group files: each family's defaults, by name.
        pub(crate) const MODEL_GROUPS: &[(&str, &str)] = &[
            $(($name, include_str!(concat!("../../../configs/model/", $name, ".yaml"))),)+
        ];

        impl ModelConfig {
            /// The family's name.
            pub fn name(&self) -> &'static str {
                match self {
                    $(ModelConfig::$variant(_) => $name,)+
                }
            }

            /// Outputs of the head.
            pub fn n_out(&self) -> usize {
                match self {
                    $(ModelConfig::$variant(c) => <$family>::n_out(c),)+
                }
            }

            /// This config reading inputs of `widths` (the dataset's declared features).
            pub fn with_inputs(&self, widths: gnn4c_family::InputWidths) -> ModelConfig {
                match self {
                    $(ModelConfig::$variant(c) => ModelConfig::$variant(<$family>::with_inputs(c, widths)),)+
                }
            }

            /// The input widths the model reads.
            pub fn inputs(&self) -> gnn4c_family::InputWidths {
                match self {
                    $(ModelConfig::$variant(c) => <$family>::inputs(c),)+
                }
            }

            /// Runs `job` with this config's family.
            pub fn run<J: FamilyJob>(&self, job: J) -> J::Output {
                match self {
                    $(ModelConfig::$variant(c) => job.run::<$family>(c),)+
                }
            }

            /// The config `section` describes for a head of `n_out` outputs.
            pub fn resolve(section: &ModelSection, n_out: usize) -> Result<ModelConfig, ConfigError> {
                match section.name.as_str() {
                    $($name => Ok(ModelConfig::$variant(resolve_settings::<$family>(
                        $name,
                        &section.settings,
                        n_out,
                    )?)),)+
                    other => Err(ConfigError(format!(
                        "model.name `{other}` is not a model family; the families are {}",
                        FAMILIES.join(", ")
                    ))),
                }
            }

            /// A fine-tuning run's model: `pretrained`'s backbone with this config's training
            /// settings and `n_out` outputs; `None` when the families differ.
            pub fn finetuned(&self, pretrained: &ModelConfig, n_out: usize) -> Option<ModelConfig> {
                #[allow(unreachable_patterns)] // with a single family
                match (pretrained, self) {
                    $((ModelConfig::$variant(p), ModelConfig::$variant(r)) => {
                        Some(ModelConfig::$variant(<$family>::finetuned(p, r, n_out)))
                    })+
                    _ => None,
                }
            }
        }
    };
}

// The first line is the default family.
families! {
    /// The Edge_Network (contract §5).
    RootGnn(gnn4c_root_gnn::RootGnnFamily) = "root_gnn",
    /// The ROOT-Transformer (docs/root-transformer.md).
    RootTransformer(gnn4c_root_transformer::RootTransformerFamily) = "root_transformer",
    /// The Particle Flow Network (docs/families.md).
    Pfn(gnn4c_pfn::PfnFamily) = "pfn",
}

impl ModelConfig {
    /// The settings as `key value` pairs, as JSON values (for comparing and reporting).
    pub fn settings(&self) -> BTreeMap<String, serde_json::Value> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        }
    }

    /// The settings of `self` that differ from `other`'s, as (key, this value, other value),
    /// leaving out the head's width.
    pub fn differences(&self, other: &ModelConfig) -> Vec<(String, String, String)> {
        let (a, b) = (self.settings(), other.settings());
        a.iter()
            .filter(|(k, v)| k.as_str() != "n_out" && b.get(*k) != Some(v))
            .map(|(k, v)| {
                let theirs = b
                    .get(k)
                    .map_or_else(|| "unset".to_owned(), ToString::to_string);
                (k.clone(), v.to_string(), theirs)
            })
            .collect()
    }
}

/// The family's default config for `n_out` outputs with `settings` applied; an unknown key is
/// named with the closest valid one.
fn resolve_settings<F: ModelFamily>(
    family: &str,
    settings: &BTreeMap<String, serde_json::Value>,
    n_out: usize,
) -> Result<F::Config, ConfigError> {
    let defaults = serde_json::to_value(F::config(n_out))
        .map_err(|e| ConfigError(format!("model {family}: {e}")))?;
    let serde_json::Value::Object(mut merged) = defaults else {
        return Err(ConfigError(format!(
            "model {family}: its config is not a map"
        )));
    };
    let base = merged.clone();
    for (key, value) in settings {
        if key == "n_out" {
            return Err(ConfigError(
                "model.n_out is set by the task (the dataset's classes): leave it out".into(),
            ));
        }
        if gnn4c_family::INPUT_WIDTH_KEYS.contains(&key.as_str()) {
            return Err(ConfigError(format!(
                "model.{key} is set by the dataset's input declaration (its features): leave it out"
            )));
        }
        if !merged.contains_key(key) {
            let valid: Vec<&str> = merged
                .keys()
                .map(String::as_str)
                .filter(|k| *k != "n_out" && !gnn4c_family::INPUT_WIDTH_KEYS.contains(k))
                .collect();
            let hint = gnn4c_features::closest_names(key, valid.iter().copied(), 1);
            return Err(ConfigError(format!(
                "unknown key `model.{key}` for model {family}{}; its keys are {} (to change the family, select its group file: `model={family}`, not `model.name={family}`)",
                hint.first()
                    .map(|h| format!(" (did you mean `model.{h}`?)"))
                    .unwrap_or_default(),
                valid.join(", ")
            )));
        }
        merged.insert(key.clone(), value.clone());
    }
    let config: F::Config =
        serde_json::from_value(serde_json::Value::Object(merged)).map_err(|e| {
            // Name the setting that does not fit: the first whose value alone breaks the defaults.
            let culprit = settings.iter().find(|(key, value)| {
                let mut one = base.clone();
                one.insert((*key).clone(), (*value).clone());
                serde_json::from_value::<F::Config>(serde_json::Value::Object(one)).is_err()
            });
            match culprit {
                Some((key, _)) => ConfigError(format!("model.{key} for model {family}: {e}")),
                None => ConfigError(format!("model {family}: {e}")),
            }
        })?;
    F::check(&config).map_err(|e| ConfigError(format!("model {family}: {e}")))?;
    Ok(config)
}

/// The model checkpoint `ck` holds, built from `config`, checked and loaded.
pub(crate) fn load_model<F: Registered, B: Backend>(
    ck: &Checkpoint,
    config: &F::Config,
    device: &B::Device,
) -> anyhow::Result<F::Model<B>> {
    let net = F::init::<B>(config, device);
    ck.check_compatible(&net, CONTRACT_VERSION)?;
    Ok(ck.load_model(net, device)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transformer_whose_heads_do_not_divide_its_width_is_refused_by_name() {
        let section = |heads: i64| ModelSection {
            name: "root_transformer".into(),
            settings: [("n_heads".to_string(), serde_json::json!(heads))].into(),
        };
        let e = ModelConfig::resolve(&section(5), 12).expect_err("64 is not a multiple of 5");
        assert!(
            e.0.contains("model.n_heads 5") && e.0.contains("model.d_model 64"),
            "{}",
            e.0
        );
        assert!(ModelConfig::resolve(&section(0), 12).is_err());
        assert!(ModelConfig::resolve(&section(8), 12).is_ok());
    }

    #[test]
    fn every_model_group_file_is_a_registered_family() {
        // The scripts that run every family (scripts/gpu/device-check.sh, the Pythia
        // benchmark) take the list from configs/model/*.yaml.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/model");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("configs/model")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter_map(|f| f.strip_suffix(".yaml").map(str::to_owned))
            .collect();
        files.sort();
        let mut registered: Vec<String> = FAMILIES.iter().map(|f| f.to_string()).collect();
        registered.sort();
        assert_eq!(files, registered);
    }
}
