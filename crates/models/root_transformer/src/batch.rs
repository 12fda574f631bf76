//! A padded batch of events as the ROOT-Transformer reads it: tokens, a padding mask, the globals
//! and the pair features, built on loader threads (plain vectors, no tensors).

/// One event's inputs.
#[derive(Debug, Clone, Copy)]
pub struct TokenEvent<'a> {
    /// `[n, d_token]` row-major: the selected objects' node features, in node order.
    pub tokens: &'a [f32],
    /// `[d_global]`.
    pub globals: &'a [f32],
    /// `[n, n, d_pair]` row-major: entry (i, j) holds the features of the edge j → i
    /// (Δη, Δφ, ΔR); the diagonal is not read.
    pub pair: &'a [f32],
}

/// Events given as graphs in plain arrays (the layout of `model_inputs.npz` and of the
/// Edge_Network's host batches).
#[derive(Debug, Clone, Copy)]
pub struct FlatGraphs<'a> {
    /// `[Σn, d_token]` row-major, event after event.
    pub node_features: &'a [f32],
    /// Nodes per event.
    pub n_nodes: &'a [usize],
    /// Source node of each edge (index into all the nodes).
    pub edge_src: &'a [usize],
    /// Destination node of each edge (index into all the nodes).
    pub edge_dst: &'a [usize],
    /// `[ΣE, d_pair]` row-major.
    pub edge_features: &'a [f32],
    /// `[events, d_global]` row-major.
    pub globals: &'a [f32],
}

/// Events padded to the longest one's token count.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBatch {
    /// Events.
    pub n_events: usize,
    /// Tokens per event after padding (l).
    pub n_tokens: usize,
    /// Token feature width.
    pub d_token: usize,
    /// Global feature width.
    pub d_global: usize,
    /// Pair feature width.
    pub d_pair: usize,
    /// `[n_events, l, d_token]`, zero on padding.
    pub tokens: Vec<f32>,
    /// `[n_events, l]`: true where there is no object.
    pub padding: Vec<bool>,
    /// `[n_events, d_global]`.
    pub globals: Vec<f32>,
    /// `[n_events, l, l, d_pair]`, zero on the diagonal and on padding.
    pub pair: Vec<f32>,
}

impl TokenBatch {
    /// Pads `events` (each with `tokens.len() / d_token` objects) into one batch.
    pub fn collate(
        events: &[TokenEvent<'_>],
        d_token: usize,
        d_global: usize,
        d_pair: usize,
    ) -> TokenBatch {
        let counts: Vec<usize> = events
            .iter()
            .map(|e| e.tokens.len() / d_token.max(1))
            .collect();
        let l = counts.iter().copied().max().unwrap_or(0).max(1);
        let n = events.len();
        let mut b = TokenBatch {
            n_events: n,
            n_tokens: l,
            d_token,
            d_global,
            d_pair,
            tokens: vec![0.0; n * l * d_token],
            padding: vec![true; n * l],
            globals: Vec::with_capacity(n * d_global),
            pair: vec![0.0; n * l * l * d_pair],
        };
        for (e, (ev, &k)) in events.iter().zip(&counts).enumerate() {
            b.tokens[e * l * d_token..(e * l + k) * d_token].copy_from_slice(ev.tokens);
            b.padding[e * l..e * l + k].fill(false);
            b.globals.extend_from_slice(ev.globals);
            for i in 0..k {
                for j in (0..k).filter(|&j| j != i) {
                    let from = (i * k + j) * d_pair;
                    let to = ((e * l + i) * l + j) * d_pair;
                    b.pair[to..to + d_pair].copy_from_slice(&ev.pair[from..from + d_pair]);
                }
            }
        }
        b
    }

    /// The events of `g` as tokens, pair (i, j) of an event from its edge j → i.
    pub fn from_graphs(g: FlatGraphs<'_>, d_token: usize, d_global: usize, d_pair: usize) -> Self {
        let mut starts = Vec::with_capacity(g.n_nodes.len());
        let mut graph_of = Vec::with_capacity(g.node_features.len() / d_token.max(1));
        for (e, &n) in g.n_nodes.iter().enumerate() {
            starts.push(graph_of.len());
            graph_of.extend(std::iter::repeat_n(e, n));
        }
        let mut pairs: Vec<Vec<f32>> = g
            .n_nodes
            .iter()
            .map(|&n| vec![0.0; n * n * d_pair])
            .collect();
        for (k, (&s, &d)) in g.edge_src.iter().zip(g.edge_dst).enumerate() {
            let e = graph_of[s];
            let n = g.n_nodes[e];
            let at = ((d - starts[e]) * n + (s - starts[e])) * d_pair;
            pairs[e][at..at + d_pair]
                .copy_from_slice(&g.edge_features[k * d_pair..(k + 1) * d_pair]);
        }
        let events: Vec<TokenEvent<'_>> = (0..g.n_nodes.len())
            .map(|e| TokenEvent {
                tokens: &g.node_features[starts[e] * d_token..(starts[e] + g.n_nodes[e]) * d_token],
                globals: &g.globals[e * d_global..(e + 1) * d_global],
                pair: &pairs[e],
            })
            .collect();
        TokenBatch::collate(&events, d_token, d_global, d_pair)
    }
}
