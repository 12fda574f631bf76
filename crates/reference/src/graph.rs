//! The contract's graph of one event (§4) from its fixed features.

use gnn4c_events::{EventId, EventSample, Label};
use gnn4c_features::SelectionConfig;
use gnn4c_graphs::{D_EDGE, GraphSample, TopologyCache, Widths, edge_features};

use crate::{D_GLOBAL, D_NODE, EventFeatures, build_features};

/// The contract's widths (§3–§4): 7 node, 3 edge and 2 global features.
pub const CONTRACT_WIDTHS: Widths = Widths {
    d_node: D_NODE,
    d_edge: D_EDGE,
    d_global: D_GLOBAL,
};

/// Builds the graph of one event from its features.
pub fn build_graph(
    features: &EventFeatures,
    id: EventId,
    label: Label,
    weight: f32,
    cache: &mut TopologyCache,
) -> GraphSample {
    let topology = cache.get(features.n_nodes);
    let mut edges = Vec::with_capacity(topology.n_edges() * D_EDGE);
    edge_features(&topology, &features.eta, &features.phi, &mut edges);
    GraphSample {
        id,
        label,
        weight,
        topology,
        node_features: features.node_features.clone(),
        edge_features: edges,
        global_features: features.global_features.to_vec(),
    }
}

/// Selection, features and graph of one event in one call: the graph, or the reason the event
/// is skipped. `features` and `cache` are reused across events.
pub fn graph_of_event(
    event: &EventSample,
    selection: &SelectionConfig,
    features: &mut EventFeatures,
    cache: &mut TopologyCache,
) -> Result<GraphSample, &'static str> {
    build_features(event, selection, features)?;
    Ok(build_graph(
        features,
        event.id.clone(),
        event.label.clone(),
        event.weight,
        cache,
    ))
}
