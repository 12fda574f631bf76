//! Declared features of a chunk of entries, column-wise: selection, node features, globals.

use crate::expr::Aggregate;
use crate::inputs::{FeatureSource, Inputs};
use crate::standardize::Scale;

/// Skip reason: fewer than `min_nodes` nodes after selection.
pub const SKIP_TOO_FEW_NODES: &str = "too_few_nodes";
/// Skip reason: a NaN or infinite input value.
pub const SKIP_NON_FINITE: &str = "non_finite";

/// One collection's objects over a chunk of entries, flat: kinematics (GeV, rad) and declared
/// fields, as the reader evaluated them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectColumns {
    /// `[n_entries + 1]`: entry i's objects are `offsets[i]..offsets[i + 1]`.
    pub offsets: Vec<usize>,
    /// Transverse momentum (GeV).
    pub pt: Vec<f64>,
    /// Pseudorapidity.
    pub eta: Vec<f64>,
    /// Azimuth (rad).
    pub phi: Vec<f64>,
    /// Mass (GeV).
    pub mass: Vec<f64>,
    /// Declared fields, in the collection's field order.
    pub fields: Vec<Vec<f64>>,
}

/// What the reader hands over for a chunk of entries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkInputs {
    /// Entries in the chunk.
    pub n_entries: usize,
    /// Per collection, in declaration order.
    pub objects: Vec<ObjectColumns>,
    /// Per event-level branch of [`Inputs::event_branches`], one value per entry.
    pub event_branches: Vec<Vec<f64>>,
    /// Per entry: the reader's skip reason (a single object's count, an event number), if any.
    pub skipped: Vec<Option<Skip>>,
}

/// Why an entry is not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A named reason (`non_finite`, `too_few_nodes`, `event_number_count`).
    Reason(&'static str),
    /// A single-object collection (by index) without exactly one object: `<name>_count`.
    Count(usize),
}

impl Inputs {
    /// The name a skip reason is counted under.
    pub fn skip_name(&self, skip: Skip) -> std::borrow::Cow<'static, str> {
        match skip {
            Skip::Reason(r) => r.into(),
            Skip::Count(c) => format!("{}_count", self.objects[c].decl.name).into(),
        }
    }
}

/// The features of a chunk's entries; skipped entries have no nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkFeatures {
    /// Per entry: kept, or the skip reason.
    pub kept: Vec<Result<(), Skip>>,
    /// `[n_entries + 1]`: entry i's nodes are rows `node_offsets[i]..node_offsets[i + 1]`.
    pub node_offsets: Vec<usize>,
    /// `[n_nodes, d_node]` row-major.
    pub node_features: Vec<f32>,
    /// `[n_nodes]`: raw η of each node.
    pub eta: Vec<f64>,
    /// `[n_nodes]`: raw φ of each node.
    pub phi: Vec<f64>,
    /// `[n_nodes]` where a declared pair feature needs momenta ([`Inputs::needs_momenta`]),
    /// else empty: pt of each node.
    pub pt: Vec<f64>,
    /// Like `pt`: mass of each node.
    pub mass: Vec<f64>,
    /// `[n_entries, d_global]` row-major.
    pub global_features: Vec<f32>,
    /// Node feature width.
    pub d_node: usize,
    /// Global feature width.
    pub d_global: usize,
}

impl ChunkFeatures {
    /// Entry i's node rows.
    pub fn nodes(&self, i: usize) -> std::ops::Range<usize> {
        self.node_offsets[i]..self.node_offsets[i + 1]
    }

    /// Entry i's node features, `[n_nodes, d_node]` row-major.
    pub fn node_features_of(&self, i: usize) -> &[f32] {
        let r = self.nodes(i);
        &self.node_features[r.start * self.d_node..r.end * self.d_node]
    }

    /// Entry i's node pt and mass: empty where the declaration's pairs do not need them.
    pub fn momenta_of(&self, i: usize) -> (&[f64], &[f64]) {
        if self.pt.is_empty() {
            return (&[], &[]);
        }
        let r = self.nodes(i);
        (&self.pt[r.clone()], &self.mass[r])
    }

    /// Entry i's global features.
    pub fn global_features_of(&self, i: usize) -> &[f32] {
        &self.global_features[i * self.d_global..(i + 1) * self.d_global]
    }
}

/// A derived field of one object from its kinematics: index into `OBJECT_FIELDS`.
fn derived(field: usize, pt: f64, eta: f64, phi: f64, mass: f64, collection: usize) -> f64 {
    match field {
        0 => pt,
        1 => eta,
        2 => phi,
        3 => mass,
        // The contract's energy (§3): sqrt((pt·cosh η)² + m²).
        4 => {
            let p = pt * eta.cosh();
            (p * p + mass * mass).sqrt()
        }
        5 => pt * phi.cos(),
        6 => pt * phi.sin(),
        7 => pt * eta.sinh(),
        _ => collection as f64,
    }
}

/// The columns of fields `wanted` (indices into the collection's field names) for objects
/// `rows` of `objects`; other columns stay empty.
fn field_columns(
    objects: &ObjectColumns,
    rows: &[usize],
    wanted: &[usize],
    n_fields: usize,
    collection: usize,
) -> Vec<Vec<f64>> {
    let n_standard = crate::declare::OBJECT_FIELDS.len();
    let mut cols = vec![Vec::new(); n_fields];
    for &f in wanted {
        cols[f] = if f >= n_standard {
            let src = &objects.fields[f - n_standard];
            rows.iter().map(|&r| src[r]).collect()
        } else {
            rows.iter()
                .map(|&r| {
                    derived(
                        f,
                        objects.pt[r],
                        objects.eta[r],
                        objects.phi[r],
                        objects.mass[r],
                        collection,
                    )
                })
                .collect()
        };
    }
    cols
}

fn standardized(x: f64, s: Option<Scale>) -> f64 {
    s.map_or(x, |s| s.apply(x))
}

impl Inputs {
    /// Selects the objects of every entry of `chunk` and computes its node and global
    /// features into `out`, column-wise (contract §2–§3 for the built-in declarations).
    ///
    /// An entry is skipped (`kept[i]` holds the reason) when the reader skipped it, when an
    /// object's kinematics or a computed feature is not finite (`non_finite`), or when it has
    /// fewer than `min_nodes` nodes (`too_few_nodes`).
    pub fn build_chunk(&self, chunk: &ChunkInputs, out: &mut ChunkFeatures) {
        let n = chunk.n_entries;
        let d_node = self.d_node();
        out.d_node = d_node;
        out.d_global = self.d_global();
        out.kept.clear();
        out.node_offsets.clear();
        out.node_offsets.push(0);
        out.eta.clear();
        out.phi.clear();
        out.pt.clear();
        out.mass.clear();
        let masks = self.selection_masks(chunk);
        let nodes = self.select_nodes(chunk, &masks, out);
        for &(c, k) in &nodes {
            out.eta.push(chunk.objects[c].eta[k]);
            out.phi.push(chunk.objects[c].phi[k]);
        }
        if self.needs_momenta() {
            for &(c, k) in &nodes {
                out.pt.push(chunk.objects[c].pt[k]);
                out.mass.push(chunk.objects[c].mass[k]);
            }
        }
        let (values, gathered) = self.node_values(chunk, &nodes);
        let globals = self.global_values(chunk, &nodes, &gathered, out);
        let d_global = self.d_global();
        // A feature that is not a finite number skips its event.
        for i in 0..n {
            if out.kept[i].is_err() {
                continue;
            }
            let node_ok = values[out.nodes(i).start * d_node..out.nodes(i).end * d_node]
                .iter()
                .all(|x| x.is_finite());
            let global_ok = globals[i * d_global..(i + 1) * d_global]
                .iter()
                .all(|x| x.is_finite());
            if !(node_ok && global_ok) {
                out.kept[i] = Err(Skip::Reason(SKIP_NON_FINITE));
            }
        }
        out.node_features.clear();
        out.node_features.extend(values.iter().map(|&x| x as f32));
        out.global_features.clear();
        out.global_features
            .extend(globals.iter().map(|&x| x as f32));
    }

    /// Each collection's selection over every object of the chunk, column-wise (`None`: no
    /// selection).
    fn selection_masks(&self, chunk: &ChunkInputs) -> Vec<Option<Vec<f64>>> {
        self.objects
            .iter()
            .zip(&chunk.objects)
            .enumerate()
            .map(|(c, (o, cols))| {
                o.select.as_ref().map(|select| {
                    let all: Vec<usize> = (0..cols.pt.len()).collect();
                    let names = o.field_names();
                    let fields = field_columns(cols, &all, &select.columns(), names.len(), c);
                    let refs: Vec<&[f64]> = fields.iter().map(Vec::as_slice).collect();
                    let mut mask = Vec::new();
                    select.eval(&refs, all.len(), &mut mask);
                    mask
                })
            })
            .collect()
    }

    /// Per entry, the selected objects of each collection in node order, as (collection,
    /// row); each entry's skip reason or `Ok` and its node offsets pushed onto `out`.
    fn select_nodes(
        &self,
        chunk: &ChunkInputs,
        masks: &[Option<Vec<f64>>],
        out: &mut ChunkFeatures,
    ) -> Vec<(usize, usize)> {
        let mut nodes: Vec<(usize, usize)> = Vec::new();
        let mut order = Vec::new();
        for i in 0..chunk.n_entries {
            let start = nodes.len();
            let reason = chunk.skipped.get(i).copied().flatten().or_else(|| {
                let finite = chunk.objects.iter().all(|cols| {
                    let r = cols.offsets[i]..cols.offsets[i + 1];
                    [&cols.pt, &cols.eta, &cols.phi, &cols.mass]
                        .iter()
                        .all(|v| v[r.clone()].iter().all(|x| x.is_finite()))
                });
                (!finite).then_some(Skip::Reason(SKIP_NON_FINITE))
            });
            if let Some(reason) = reason {
                out.kept.push(Err(reason));
                out.node_offsets.push(nodes.len());
                continue;
            }
            for (c, (o, cols)) in self.objects.iter().zip(&chunk.objects).enumerate() {
                let r = cols.offsets[i]..cols.offsets[i + 1];
                order.clear();
                order.extend(r.filter(|&k| masks[c].as_ref().is_none_or(|m| m[k] != 0.0)));
                if !o.decl.single {
                    // Stable: equal pt keeps file order.
                    order.sort_by(|&a, &b| cols.pt[b].total_cmp(&cols.pt[a]));
                }
                if let Some(cap) = o.decl.max_objects {
                    order.truncate(cap);
                }
                nodes.extend(order.iter().map(|&k| (c, k)));
            }
            if nodes.len() - start < self.spec.min_nodes {
                nodes.truncate(start);
                out.kept.push(Err(Skip::Reason(SKIP_TOO_FEW_NODES)));
            } else {
                out.kept.push(Ok(()));
            }
            out.node_offsets.push(nodes.len());
        }
        nodes
    }

    /// The node features `[nodes, d_node]` (standardised, f64), computed column-wise per
    /// collection over its selected objects; and each collection's field columns over them,
    /// which the aggregates read.
    fn node_values(
        &self,
        chunk: &ChunkInputs,
        nodes: &[(usize, usize)],
    ) -> (Vec<f64>, Vec<Vec<Vec<f64>>>) {
        let d_node = self.d_node();
        let mut values = vec![0.0f64; nodes.len() * d_node];
        let mut gathered: Vec<Vec<Vec<f64>>> = Vec::with_capacity(self.objects.len());
        for (c, (o, cols)) in self.objects.iter().zip(&chunk.objects).enumerate() {
            let node_rows: Vec<usize> = (0..nodes.len()).filter(|&r| nodes[r].0 == c).collect();
            let rows: Vec<usize> = node_rows.iter().map(|&r| nodes[r].1).collect();
            let names = o.field_names();
            let mut wanted: Vec<usize> = Vec::new();
            for f in &self.node {
                if let FeatureSource::Expr(b) = &f.by_collection[c] {
                    wanted.extend(b.columns());
                }
            }
            for &(_, ac, field) in &self.aggregates {
                if let (true, Some(f)) = (ac == c, field) {
                    wanted.push(f);
                }
            }
            wanted.sort_unstable();
            wanted.dedup();
            let fields = field_columns(cols, &rows, &wanted, names.len(), c);
            let refs: Vec<&[f64]> = fields.iter().map(Vec::as_slice).collect();
            let mut v = Vec::new();
            for (j, f) in self.node.iter().enumerate() {
                match &f.by_collection[c] {
                    FeatureSource::Expr(b) => b.eval(&refs, rows.len(), &mut v),
                    FeatureSource::Fill(x) => {
                        v.clear();
                        v.resize(rows.len(), *x);
                    }
                }
                for (&r, &x) in node_rows.iter().zip(&v) {
                    values[r * d_node + j] = standardized(x, f.standardize);
                }
            }
            gathered.push(fields);
        }
        (values, gathered)
    }

    /// The global features `[entries, d_global]` (standardised, f64) from the event-level
    /// columns: n_nodes, the aggregates over `gathered`, the branches.
    fn global_values(
        &self,
        chunk: &ChunkInputs,
        nodes: &[(usize, usize)],
        gathered: &[Vec<Vec<f64>>],
        out: &ChunkFeatures,
    ) -> Vec<f64> {
        let n = chunk.n_entries;
        let mut event_cols: Vec<Vec<f64>> = Vec::with_capacity(1 + self.aggregates.len());
        event_cols.push(
            (0..n)
                .map(|i| (out.node_offsets[i + 1] - out.node_offsets[i]) as f64)
                .collect(),
        );
        let mut position_in_collection = vec![0usize; nodes.len()];
        let mut seen = vec![0usize; self.objects.len()];
        for (r, &(c, _)) in nodes.iter().enumerate() {
            position_in_collection[r] = seen[c];
            seen[c] += 1;
        }
        for &(kind, c, field) in &self.aggregates {
            let col = (0..n)
                .map(|i| {
                    let mut acc = Aggregated::new(kind);
                    for r in out.nodes(i) {
                        if nodes[r].0 == c {
                            let x =
                                field.map_or(0.0, |f| gathered[c][f][position_in_collection[r]]);
                            acc.add(x);
                        }
                    }
                    acc.value()
                })
                .collect();
            event_cols.push(col);
        }
        let refs: Vec<&[f64]> = event_cols
            .iter()
            .map(Vec::as_slice)
            .chain(chunk.event_branches.iter().map(Vec::as_slice))
            .collect();
        let d_global = self.d_global();
        let mut globals = vec![0.0f64; n * d_global];
        let mut v = Vec::new();
        for (j, g) in self.globals.iter().enumerate() {
            g.bound.eval(&refs, n, &mut v);
            for (i, &x) in v.iter().enumerate() {
                globals[i * d_global + j] = standardized(x, g.standardize);
            }
        }
        globals
    }
}

/// A running aggregate.
struct Aggregated {
    kind: Aggregate,
    acc: f64,
    n: usize,
}

impl Aggregated {
    fn new(kind: Aggregate) -> Self {
        let acc = match kind {
            Aggregate::MaxOf => f64::NEG_INFINITY,
            Aggregate::MinOf => f64::INFINITY,
            _ => 0.0,
        };
        Aggregated { kind, acc, n: 0 }
    }

    fn add(&mut self, x: f64) {
        self.n += 1;
        match self.kind {
            Aggregate::Sum | Aggregate::Mean => self.acc += x,
            Aggregate::MaxOf => self.acc = self.acc.max(x),
            Aggregate::MinOf => self.acc = self.acc.min(x),
            Aggregate::Count => {}
        }
    }

    fn value(&self) -> f64 {
        match (self.kind, self.n) {
            (Aggregate::Count, n) => n as f64,
            (_, 0) => 0.0,
            (Aggregate::Mean, n) => self.acc / n as f64,
            _ => self.acc,
        }
    }
}
