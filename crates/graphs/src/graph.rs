//! `GraphSample` and edge features.

use std::f64::consts::PI;
use std::sync::Arc;

use gnn4c_events::{EventId, EventSample, Label};
use gnn4c_features::{EventFeatures, PairFeature, SelectionConfig, build_features};

use crate::{Topology, TopologyCache};

/// Edge feature width: deta, dphi, dR.
pub const D_EDGE: usize = 3;

/// One event as a fully connected graph, with its identity, label and weight.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphSample {
    /// Identity (host only).
    pub id: EventId,
    /// Training target.
    pub label: Label,
    /// Event weight.
    pub weight: f32,
    /// Topology for `n_nodes` (shared, from the cache).
    pub topology: Arc<Topology>,
    /// `[n_nodes, D_NODE]` row-major.
    pub node_features: Vec<f32>,
    /// `[n_edges, D_EDGE]` row-major, edges in topology order.
    pub edge_features: Vec<f32>,
    /// `[d_global]`.
    pub global_features: Vec<f32>,
}

impl GraphSample {
    /// Node count.
    pub fn n_nodes(&self) -> usize {
        self.topology.n_nodes
    }

    /// Edge count, N·(N − 1).
    pub fn n_edges(&self) -> usize {
        self.topology.n_edges()
    }
}

/// Wraps an angle difference into [−π, π) exactly as contract §4 writes it:
/// x ↦ x − 2π·floor((x + π) / 2π).
pub fn wrap_phi(x: f64) -> f64 {
    x - 2.0 * PI * ((x + PI) / (2.0 * PI)).floor()
}

/// Appends the edge features of `topology` over nodes with raw `eta`, `phi` to `out`:
/// deta = eta[dst] − eta[src], dphi = wrap(phi[dst] − phi[src]), dR = hypot; f64, stored f32.
pub fn edge_features(topology: &Topology, eta: &[f64], phi: &[f64], out: &mut Vec<f32>) {
    assert_eq!(eta.len(), topology.n_nodes, "one eta per node");
    assert_eq!(phi.len(), topology.n_nodes, "one phi per node");
    out.reserve(topology.n_edges() * D_EDGE);
    for (&s, &d) in topology.edge_src.iter().zip(&topology.edge_dst) {
        let (s, d) = (s as usize, d as usize);
        let deta = eta[d] - eta[s];
        let dphi = wrap_phi(phi[d] - phi[s]);
        let dr = (deta * deta + dphi * dphi).sqrt();
        out.extend([deta as f32, dphi as f32, dr as f32]);
    }
}

/// Appends the declared `pairs` of every edge of `topology` to `out`, in menu order per edge;
/// for the contract's menu (`deta`, `dphi`, `dr`) exactly [`edge_features`].
pub fn pair_features(
    pairs: &[PairFeature],
    topology: &Topology,
    eta: &[f64],
    phi: &[f64],
    out: &mut Vec<f32>,
) {
    if pairs == PairFeature::ALL {
        return edge_features(topology, eta, phi, out);
    }
    assert_eq!(eta.len(), topology.n_nodes, "one eta per node");
    assert_eq!(phi.len(), topology.n_nodes, "one phi per node");
    out.reserve(topology.n_edges() * pairs.len());
    for (&s, &d) in topology.edge_src.iter().zip(&topology.edge_dst) {
        let (s, d) = (s as usize, d as usize);
        let deta = eta[d] - eta[s];
        let dphi = wrap_phi(phi[d] - phi[s]);
        out.extend(pairs.iter().map(|p| match p {
            PairFeature::Deta => deta as f32,
            PairFeature::Dphi => dphi as f32,
            PairFeature::Dr => (deta * deta + dphi * dphi).sqrt() as f32,
        }));
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phi_wrapping_at_and_across_the_seam() {
        assert_eq!(wrap_phi(0.0), 0.0);
        assert_eq!(wrap_phi(PI), -PI, "+π maps to −π: the interval is [−π, π)");
        assert_eq!(wrap_phi(-PI), -PI);
        // Across the seam: from phi 3.1 to −3.1 is a small positive step, not −6.2.
        let d = wrap_phi(-3.1 - 3.1);
        assert!((d - (2.0 * PI - 6.2)).abs() < 1e-12, "{d}");
        assert!((wrap_phi(3.1 - -3.1) - (6.2 - 2.0 * PI)).abs() < 1e-12);
        for x in [-10.0, -4.0, -PI - 1e-9, 1.0, PI - 1e-12, 7.0, 100.0] {
            let w = wrap_phi(x);
            assert!((-PI..PI).contains(&w), "{x} → {w}");
            assert!(((x - w) / (2.0 * PI) - ((x - w) / (2.0 * PI)).round()).abs() < 1e-9);
        }
    }

    #[test]
    fn edges_of_n1_and_n2_graphs() {
        let mut out = Vec::new();
        edge_features(&Topology::new(1), &[0.3], &[1.0], &mut out);
        assert!(out.is_empty(), "a single node has no edges");
        edge_features(&Topology::new(2), &[0.5, 0.0], &[3.0, -3.0], &mut out);
        let dphi = (2.0 * PI - 6.0) as f32;
        let dr = (0.25f64 + (2.0 * PI - 6.0).powi(2)).sqrt() as f32;
        assert_eq!(out, vec![-0.5, dphi, dr, 0.5, -dphi, dr]);
    }
}
