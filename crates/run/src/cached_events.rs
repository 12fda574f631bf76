//! The event cache as a model family reads it: [`CachedEvents`], the trainer's and scorer's
//! [`EventSource`] over a split of the cache for any registered family, and what turns a cached
//! event into the family's inputs (features checked against the model's widths, the declared
//! pair features of every ordered pair of objects).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use gnn4c_data::{CacheManifest, CachedSplit, EventRecord, Folds, Split};
use gnn4c_events::Label;
use gnn4c_family::{Batch, EventInputs, EventSource, InputWidths, SourceError, Target};
use gnn4c_features::{PairFeature, Standardization};
use gnn4c_graphs::{GraphSample, NodeKinematics, TopologyCache};

use crate::family::Registered;

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
                    .iter()
                    .copied()
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

/// An error unless the cache of `manifest` in `dir` holds the features `run`'s model reads
/// (`reader` names the model).
pub(crate) fn check_cache_features(
    manifest: &CacheManifest,
    dir: &Path,
    run: &gnn4c_data::DatasetConfig,
    reader: &str,
) -> anyhow::Result<()> {
    let trained = gnn4c_data::FeatureNames::of(&run.inputs_spec()?);
    anyhow::ensure!(
        manifest.features == trained,
        "cache {} holds the features {:?} but {reader} reads {:?}: rebuild the cache from the run's dataset config",
        dir.display(),
        manifest.features,
        trained
    );
    Ok(())
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
