//! The model families a run can name (`model.name`), each registered by one line in
//! [`families!`] (its crate, its name; its config group file is `configs/model/<name>.yaml`), and
//! the event source that reads the event cache for any of them ([`CachedEvents`]).
//!
//! Nothing here knows a family: a family's crate implements `gnn4c_family::ModelFamily` (config,
//! batches, weights, export) and `gnn4c_family::Kernels` (how it runs on the CPU backend and on
//! the others); the run layer is generic over [`Registered`], which every such family is.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use burn::backend::Flex;
use gnn4c_data::{CacheManifest, CachedSplit, EventRecord, Folds, Split};
use gnn4c_events::Label;
use gnn4c_family::{
    Batch, EventInputs, EventSource, InputWidths, Kernels, ModelFamily, SourceError, Target,
};
use gnn4c_features::{PairFeature, Standardization};
use gnn4c_graphs::{GraphSample, NodeKinematics, TopologyCache};
use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

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

thread_local! {
    /// Each loader thread's topologies, built once per node count.
    static TOPOLOGIES: std::cell::RefCell<TopologyCache> = std::cell::RefCell::new(TopologyCache::new(64));
}

/// The pair features a model reads must be as many as the cache declares (or none).
fn check_widths(widths: InputWidths, pairs: &[PairFeature]) -> Result<(), SourceError> {
    if widths.d_pair == pairs.len() || widths.d_pair == 0 {
        return Ok(());
    }
    Err(SourceError(format!(
        "the model reads {} pair features but the cache declares {}: rebuild the cache or train on it",
        widths.d_pair,
        pairs.len()
    )))
}

/// A cached event as a family reads it: features checked against the model's `widths`, and the
/// declared `pairs` of every ordered pair of objects in the contract's edge order (from the
/// function that builds them from an event, so bitwise equal) when the model reads them.
fn event_inputs(
    r: EventRecord,
    widths: InputWidths,
    pairs: &[PairFeature],
    topologies: &mut TopologyCache,
) -> Result<EventInputs, SourceError> {
    check_record(&r, widths)?;
    let n = usize::from(r.n_nodes);
    let d_pair = if widths.d_pair == 0 { 0 } else { pairs.len() };
    let mut edges = Vec::new();
    if d_pair > 0 {
        let topology = topologies.get(n);
        edges.reserve(topology.n_edges() * d_pair);
        gnn4c_graphs::pair_features(pairs, &topology, node_kinematics(&r, pairs)?, &mut edges);
    }
    let target = match r.label {
        Label::Class(c) => Target {
            label: i64::from(c),
            multilabel: Vec::new(),
            weight: r.weight,
        },
        Label::Multi(v) => Target {
            label: -1,
            multilabel: v.iter().map(|&x| f32::from(x)).collect(),
            weight: r.weight,
        },
    };
    Ok(EventInputs {
        n_objects: n,
        objects: r.node_features,
        globals: r.global_features,
        pairs: edges,
        target,
    })
}

/// A cached event whose feature lengths disagree with its node count and the model's widths is
/// named.
fn check_record(r: &EventRecord, widths: InputWidths) -> Result<(), SourceError> {
    let n = usize::from(r.n_nodes);
    if r.node_features.len() != n * widths.d_node
        || r.eta.len() != n
        || r.phi.len() != n
        || r.global_features.len() != widths.d_global
    {
        return Err(SourceError(format!(
            "cached event {} of {}: its features do not match n_nodes {} with {} node and {} global features (the model's): rebuild the cache",
            r.id.entry,
            r.id.source_file.display(),
            r.n_nodes,
            widths.d_node,
            widths.d_global
        )));
    }
    Ok(())
}

/// What a cached event's pair features are computed from; an event without the nodes' pt and
/// mass where `pairs` need them is an error (the cache was built for other pair features).
fn node_kinematics<'a>(
    r: &'a EventRecord,
    pairs: &[PairFeature],
) -> Result<NodeKinematics<'a>, SourceError> {
    let n = usize::from(r.n_nodes);
    if let Some(p) = pairs.iter().find(|p| p.needs_momenta())
        && (r.pt.len() != n || r.mass.len() != n)
    {
        return Err(SourceError(format!(
            "cached event {} of {}: pair feature '{}' needs the nodes' pt and mass, which the cache lacks: rebuild the cache",
            r.id.entry,
            r.id.source_file.display(),
            p.name()
        )));
    }
    Ok(NodeKinematics {
        eta: &r.eta,
        phi: &r.phi,
        pt: &r.pt,
        mass: &r.mass,
    })
}

/// Back from the cache: the graph of a cached event, its topology from `cache` and its edge
/// features (the declared `pairs`) from the raw η/φ (the function that builds them from an
/// event, so bitwise equal).
pub fn graph_of_record(
    r: EventRecord,
    widths: InputWidths,
    pairs: &[PairFeature],
    cache: &mut TopologyCache,
) -> Result<GraphSample, SourceError> {
    check_record(&r, widths)?;
    let topology = cache.get(usize::from(r.n_nodes));
    let mut edges = Vec::with_capacity(topology.n_edges() * pairs.len());
    gnn4c_graphs::pair_features(pairs, &topology, node_kinematics(&r, pairs)?, &mut edges);
    Ok(GraphSample {
        id: r.id,
        label: r.label,
        weight: r.weight,
        topology,
        node_features: r.node_features,
        edge_features: edges,
        global_features: r.global_features,
    })
}

/// A split of the event cache as the trainer's [`EventSource`] for family `F`: cached events read
/// block by block, batched for `F` on loader threads.
pub struct CachedEvents<F: Registered> {
    /// The split.
    pub split: CachedSplit,
    config: F::Config,
    /// The cache's declared pair features.
    pairs: Vec<PairFeature>,
    /// The `auto` standardisation the model reads its inputs with.
    standardization: Standardization,
}

impl<F: Registered> CachedEvents<F> {
    /// Opens the events of `splits` in the cache in `dir` (with an optional seeded subset
    /// `(n, seed)`) for a model of `config` that reads its `auto` features with
    /// `standardization`, checking the folds match.
    pub fn open(
        dir: &Path,
        folds: &Folds,
        splits: &[Split],
        subset: Option<(usize, u64)>,
        config: &F::Config,
        standardization: &Standardization,
    ) -> anyhow::Result<(CacheManifest, Arc<CachedEvents<F>>)> {
        let (manifest, split) = gnn4c_data::open_split(dir, folds, splits, subset)?;
        let pairs = manifest
            .features
            .pair
            .iter()
            .map(|p| {
                PairFeature::MENU
                    .into_iter()
                    .find(|m| m.name() == p)
                    .with_context(|| {
                        format!(
                            "cache {}: unknown pair feature '{p}'; rebuild it",
                            dir.display()
                        )
                    })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok((
            manifest,
            Arc::new(CachedEvents {
                split,
                config: config.clone(),
                pairs,
                standardization: standardization.clone(),
            }),
        ))
    }

    /// Events (after any subset).
    pub fn events(&self) -> usize {
        self.split.events()
    }
}

fn data_err(e: impl std::fmt::Display) -> SourceError {
    SourceError(e.to_string())
}

impl<F: Registered> EventSource for CachedEvents<F> {
    type Event = EventRecord;
    type Input = F::Input;

    fn block_sizes(&self) -> &[usize] {
        self.split.block_sizes()
    }

    fn read_block(&self, block: usize) -> Result<Vec<EventRecord>, SourceError> {
        let mut records = self.split.read_block(block).map_err(data_err)?;
        if !self.standardization.is_empty() {
            for r in &mut records {
                let d_node = r.node_features.len() / usize::from(r.n_nodes.max(1));
                self.standardization
                    .apply(&mut r.node_features, d_node, &mut r.global_features);
            }
        }
        Ok(records)
    }

    fn read_targets(&self, block: usize) -> Result<Vec<(i64, f32)>, SourceError> {
        let targets = self.split.read_targets(block).map_err(data_err)?;
        Ok(targets
            .into_iter()
            .map(|(label, w)| (i64::from(label), w))
            .collect())
    }

    fn target(&self, r: &EventRecord) -> (i64, f32) {
        let label = match &r.label {
            Label::Class(c) => i64::from(*c),
            Label::Multi(_) => -1,
        };
        (label, r.weight)
    }

    fn batch(&self, events: Vec<EventRecord>) -> Result<Batch<F::Input>, SourceError> {
        let widths = F::inputs(&self.config);
        check_widths(widths, &self.pairs)?;
        let events = TOPOLOGIES.with(|t| {
            let mut topologies = t.borrow_mut();
            events
                .into_iter()
                .map(|r| event_inputs(r, widths, &self.pairs, &mut topologies))
                .collect::<Result<Vec<_>, _>>()
        })?;
        F::batch(&self.config, events)
    }
}

impl<F: Registered> gnn4c_inference::Identified for CachedEvents<F> {
    fn identity(&self, r: &EventRecord) -> gnn4c_events::EventId {
        r.id.clone()
    }
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
}
