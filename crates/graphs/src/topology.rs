//! Fully connected directed topology without self loops, cached by node count.

use std::sync::Arc;

/// `edge_src`/`edge_dst` (local node indices) of the complete directed graph on `n_nodes` nodes,
/// source-major: for src in 0..N, for dst in 0..N, dst ≠ src. N·(N − 1) edges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Node count.
    pub n_nodes: usize,
    /// Source node of each edge.
    pub edge_src: Vec<u32>,
    /// Destination node of each edge.
    pub edge_dst: Vec<u32>,
}

impl Topology {
    /// Builds the topology for `n_nodes` nodes.
    pub fn new(n_nodes: usize) -> Topology {
        let n_edges = n_nodes * n_nodes.saturating_sub(1);
        let mut edge_src = Vec::with_capacity(n_edges);
        let mut edge_dst = Vec::with_capacity(n_edges);
        for src in 0..n_nodes as u32 {
            for dst in 0..n_nodes as u32 {
                if dst != src {
                    edge_src.push(src);
                    edge_dst.push(dst);
                }
            }
        }
        Topology {
            n_nodes,
            edge_src,
            edge_dst,
        }
    }

    /// Number of edges.
    pub fn n_edges(&self) -> usize {
        self.edge_src.len()
    }
}

/// Topologies for node counts up to a bound, built once and shared; larger graphs are built on
/// demand and not kept, so memory stays bounded. Edge features are never cached.
#[derive(Debug, Clone)]
pub struct TopologyCache {
    by_n: Vec<Option<Arc<Topology>>>,
}

impl TopologyCache {
    /// A cache for graphs of up to `max_cached_nodes` nodes (the selection's maximum fits:
    /// `SelectionConfig::max_nodes()`).
    pub fn new(max_cached_nodes: usize) -> TopologyCache {
        TopologyCache {
            by_n: vec![None; max_cached_nodes + 1],
        }
    }

    /// The topology for `n_nodes` nodes.
    pub fn get(&mut self, n_nodes: usize) -> Arc<Topology> {
        match self.by_n.get_mut(n_nodes) {
            Some(slot) => slot
                .get_or_insert_with(|| Arc::new(Topology::new(n_nodes)))
                .clone(),
            None => Arc::new(Topology::new(n_nodes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_topologies() {
        assert_eq!(Topology::new(0).n_edges(), 0);
        assert_eq!(Topology::new(1).n_edges(), 0, "one node: no self loop");
        let t2 = Topology::new(2);
        assert_eq!(
            (t2.edge_src.as_slice(), t2.edge_dst.as_slice()),
            (&[0u32, 1][..], &[1u32, 0][..])
        );
        let t3 = Topology::new(3);
        assert_eq!(t3.edge_src, vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(t3.edge_dst, vec![1, 2, 0, 2, 0, 1]);
    }

    #[test]
    fn cache_reuses_and_stays_bounded() {
        let mut c = TopologyCache::new(4);
        let a = c.get(3);
        let b = c.get(3);
        assert!(Arc::ptr_eq(&a, &b), "reused");
        let big1 = c.get(10);
        let big2 = c.get(10);
        assert!(!Arc::ptr_eq(&big1, &big2), "beyond the bound: not kept");
        assert_eq!(big1.n_edges(), 90);
    }
}
