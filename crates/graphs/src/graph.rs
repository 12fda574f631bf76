//! `GraphSample` and edge features.

use std::f64::consts::PI;
use std::sync::Arc;

use gnn4c_events::{EventId, Label};
use gnn4c_features::PairFeature;

use crate::Topology;

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
    /// `[n_nodes, d_node]` row-major.
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

/// What pair features are computed from, per node: raw η and φ, and where a pair feature needs
/// them ([`PairFeature::needs_momenta`]), pt and mass (GeV).
#[derive(Debug, Clone, Copy)]
pub struct NodeKinematics<'a> {
    /// Raw η (MET: 0).
    pub eta: &'a [f64],
    /// Raw φ (rad).
    pub phi: &'a [f64],
    /// pt, or empty when no pair feature needs it.
    pub pt: &'a [f64],
    /// Mass, or empty like `pt`.
    pub mass: &'a [f64],
}

/// ParT's logarithm: of the value clamped below at 1e-8.
fn log_clamped(x: f64) -> f64 {
    x.max(1e-8).ln()
}

/// Appends the declared `pairs` of every edge of `topology` to `out`, in menu order per edge;
/// for the contract's menu (`deta`, `dphi`, `dr`) exactly [`edge_features`]. Computed in f64,
/// stored f32.
///
/// # Panics
/// When `nodes` lacks a node's η or φ, or its pt or mass where a pair feature needs them: the
/// caller checks a cached event first.
pub fn pair_features(
    pairs: &[PairFeature],
    topology: &Topology,
    nodes: NodeKinematics<'_>,
    out: &mut Vec<f32>,
) {
    if pairs == PairFeature::ALL {
        return edge_features(topology, nodes.eta, nodes.phi, out);
    }
    let (eta, phi) = (nodes.eta, nodes.phi);
    assert_eq!(eta.len(), topology.n_nodes, "one eta per node");
    assert_eq!(phi.len(), topology.n_nodes, "one phi per node");
    // Cartesian four-momenta, where a pair feature needs them.
    let momenta: Vec<[f64; 4]> = if pairs.iter().any(|p| p.needs_momenta()) {
        assert_eq!(nodes.pt.len(), topology.n_nodes, "one pt per node");
        assert_eq!(nodes.mass.len(), topology.n_nodes, "one mass per node");
        (0..topology.n_nodes)
            .map(|k| {
                let (pt, m) = (nodes.pt[k], nodes.mass[k]);
                let pz = pt * eta[k].sinh();
                let p = pt * eta[k].cosh();
                [
                    pt * phi[k].cos(),
                    pt * phi[k].sin(),
                    pz,
                    (p * p + m * m).sqrt(),
                ]
            })
            .collect()
    } else {
        Vec::new()
    };
    out.reserve(topology.n_edges() * pairs.len());
    for (&s, &d) in topology.edge_src.iter().zip(&topology.edge_dst) {
        let (s, d) = (s as usize, d as usize);
        let deta = eta[d] - eta[s];
        let dphi = wrap_phi(phi[d] - phi[s]);
        let dr = (deta * deta + dphi * dphi).sqrt();
        let (kt, z, m2) = if momenta.is_empty() {
            (0.0, 0.0, 0.0)
        } else {
            let (a, b) = (momenta[s], momenta[d]);
            let (pa, pb) = (nodes.pt[s], nodes.pt[d]);
            let low = pa.min(pb);
            let sum = [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]];
            let m2 = sum[3] * sum[3] - sum[0] * sum[0] - sum[1] * sum[1] - sum[2] * sum[2];
            let z = if pa + pb > 0.0 { low / (pa + pb) } else { 0.0 };
            (low * dr, z, m2)
        };
        out.extend(pairs.iter().map(|p| {
            (match p {
                PairFeature::Deta => deta,
                PairFeature::Dphi => dphi,
                PairFeature::Dr => dr,
                PairFeature::Mass => m2.max(0.0).sqrt(),
                PairFeature::Kt => kt,
                PairFeature::Z => z,
                PairFeature::LogDr => log_clamped(dr),
                PairFeature::LogKt => log_clamped(kt),
                PairFeature::LogZ => log_clamped(z),
                PairFeature::LogM2 => log_clamped(m2),
            }) as f32
        }));
    }
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

    #[test]
    fn momentum_pair_features_of_two_back_to_back_objects() {
        // Massless, pt 50 each, η = 0, opposite in φ: m = 100, kt = 50·π, z = 1/2.
        let nodes = NodeKinematics {
            eta: &[0.0, 0.0],
            phi: &[0.0, PI / 2.0 + PI / 2.0],
            pt: &[50.0, 50.0],
            mass: &[0.0, 0.0],
        };
        let pairs = [
            PairFeature::Mass,
            PairFeature::Kt,
            PairFeature::Z,
            PairFeature::LogM2,
            PairFeature::Dr,
        ];
        let mut out = Vec::new();
        pair_features(&pairs, &Topology::new(2), nodes, &mut out);
        assert_eq!(out.len(), 10);
        let want = [100.0, 50.0 * PI, 0.5, (1e4f64).ln(), PI];
        for (k, w) in want.iter().enumerate() {
            assert!(
                (f64::from(out[k]) - w).abs() < 1e-4 * w.abs(),
                "{k}: {out:?}"
            );
            assert_eq!(out[k], out[5 + k], "symmetric in the pair");
        }
        // A subset of the contract's menu, in the declared order: the same numbers.
        let (mut all, mut some) = (Vec::new(), Vec::new());
        let nodes = NodeKinematics {
            eta: &[0.5, -1.0, 2.0],
            phi: &[3.0, -3.0, 0.1],
            pt: &[],
            mass: &[],
        };
        edge_features(&Topology::new(3), nodes.eta, nodes.phi, &mut all);
        pair_features(
            &[PairFeature::Dr, PairFeature::Deta],
            &Topology::new(3),
            nodes,
            &mut some,
        );
        let want: Vec<f32> = all.chunks(3).flat_map(|e| [e[2], e[0]]).collect();
        assert_eq!(some, want);
    }
}
