//! Reading a declaration's inputs (`inputs:`) from a tree: every name bound to a branch once per
//! file, every expression evaluated column-wise per chunk of entries.

use std::path::Path;
use std::sync::Arc;

use gnn4c_features::{Bound, ChunkInputs, Expr, Inputs, Kinematics, NameRef, ObjectColumns, Skip};

use crate::root::{
    BranchKind, ColumnChunk, EntryRange, TreeReader, infer_counter, not_numbers, open_tree, request,
};
use crate::{DataError, SampleMeta};
use gnn4c_features::closest_names;

/// A chunk as read: the declaration's inputs, each entry's weight and event number.
#[derive(Debug, Clone, Default)]
pub struct InputChunk {
    /// The chunk's first entry.
    pub entry_start: u64,
    /// The inputs for [`Inputs::build_chunk`].
    pub inputs: ChunkInputs,
    /// Per entry: the weight (the weight expression times the sample's scale).
    pub weights: Vec<f32>,
    /// Per entry: the event number (the entry without an event-number branch).
    pub event_numbers: Vec<u64>,
}

/// One collection bound to a tree: its branches (columns of the read) and its expressions
/// bound to them.
struct ObjectPlan {
    /// Columns of the read, with their branch names.
    columns: Vec<(usize, String)>,
    /// pt, eta, phi, mass, e (polar) or px, py, pz, e, mass (cartesian): bound or absent.
    kinematics: Vec<(&'static str, Bound)>,
    fields: Vec<Bound>,
    cartesian: bool,
}

struct Plan {
    requests: Vec<crate::ColumnRequest>,
    /// Per collection; `None` for an optional collection the tree lacks.
    objects: Vec<Option<ObjectPlan>>,
    /// The weight's branches and its expression bound to them.
    weight: Option<(Vec<(usize, String)>, Bound)>,
    event_number: Option<usize>,
    /// Columns of the global features' branches.
    event_branches: Vec<(usize, String)>,
}

struct Binder<'a> {
    reader: &'a dyn TreeReader,
    requests: Vec<crate::ColumnRequest>,
    source: &'a str,
}

impl Binder<'_> {
    fn unknown(&self, place: &str, text: &str, e: &gnn4c_features::ExprError) -> DataError {
        DataError::Config(format!(
            "{}inputs.{place} \"{text}\": {e}: no such branch in tree '{}' of {}{}",
            self.source,
            self.reader.tree_name(),
            self.reader.path().display(),
            closest_branches(self.reader, e.unknown.as_deref().unwrap_or_default())
        ))
    }

    /// Counter of a leaf-count array: the explicit one, else `X_size`, `nX`, `NX`.
    fn counter_for(&self, branch: &str, explicit: Option<&str>) -> Result<String, DataError> {
        if let Some(c) = explicit {
            return if self.reader.branch(c).is_some() {
                Ok(c.to_owned())
            } else {
                Err(DataError::Config(format!(
                    "{}counter '{c}' of '{branch}' is not a branch of tree '{}' in {}",
                    self.source,
                    self.reader.tree_name(),
                    self.reader.path().display()
                )))
            };
        }
        infer_counter(self.reader, branch, "in the collection")
    }

    /// The column of `branch` (requested once).
    fn column(
        &mut self,
        branch: &str,
        counter: Option<&str>,
        place: &str,
    ) -> Result<usize, DataError> {
        let info = self.reader.branch(branch).ok_or_else(|| {
            DataError::Config(format!(
                "{}inputs.{place}: no branch '{branch}'",
                self.source
            ))
        })?;
        let counter = match info.kind {
            BranchKind::Array(_) => Some(self.counter_for(branch, counter)?),
            BranchKind::Scalar(_) | BranchKind::Vector(_) => None,
            BranchKind::Other => {
                return Err(not_numbers(self.reader, info, &format!("inputs.{place}")));
            }
        };
        Ok(request(&mut self.requests, branch, counter))
    }

    /// Binds `expr`'s names to branches, adding them to `columns` (the expression's own list).
    fn bind(
        &mut self,
        expr: &Expr,
        place: &str,
        counter: Option<&str>,
        columns: &mut Vec<(usize, String)>,
    ) -> Result<Bound, DataError> {
        let mut names = Vec::new();
        let bound = expr.bind(&mut |r| {
            let NameRef::Plain(name) = r else { return None };
            self.reader.branch(name)?;
            match columns.iter().position(|(_, n)| n == name) {
                Some(k) => Some(k),
                None => {
                    names.push(name.clone());
                    columns.push((usize::MAX, name.clone()));
                    Some(columns.len() - 1)
                }
            }
        });
        let bound = bound.map_err(|e| self.unknown(place, expr.text(), &e))?;
        for name in names {
            let k = self.column(&name, counter, place)?;
            if let Some(slot) = columns.iter_mut().find(|(_, n)| *n == name) {
                slot.0 = k;
            }
        }
        Ok(bound)
    }
}

/// ` (closest branch: …)` for a name the tree lacks, or nothing when no branch is close.
fn closest_branches(reader: &dyn TreeReader, name: &str) -> String {
    let branches = reader.branches();
    let closest = closest_names(name, branches.iter().map(|b| b.name.as_str()), 3);
    if closest.is_empty() {
        String::new()
    } else {
        format!(" (closest branch: {})", closest.join(", "))
    }
}

fn plan(
    reader: &dyn TreeReader,
    inputs: &Inputs,
    weight: Option<&Expr>,
    source: &str,
) -> Result<Plan, DataError> {
    let mut b = Binder {
        reader,
        requests: Vec::new(),
        source,
    };
    let mut objects = Vec::new();
    for o in &inputs.objects {
        let name = &o.decl.name;
        let counter = o.decl.counter.as_deref();
        let sources = o.kinematics.sources();
        if o.decl.optional {
            let first = sources.first().and_then(|(_, e)| {
                e.names().into_iter().find_map(|(r, _)| match r {
                    NameRef::Plain(n) => Some(n),
                    NameRef::Aggregate { .. } => None,
                })
            });
            if first.is_some_and(|f| reader.branch(&f).is_none()) {
                objects.push(None);
                continue;
            }
        }
        let mut columns = Vec::new();
        let mut kinematics = Vec::new();
        for (what, expr) in sources {
            let bound = b.bind(
                expr,
                &format!("objects.{name}.{what}"),
                counter,
                &mut columns,
            )?;
            kinematics.push((what, bound));
        }
        let mut fields = Vec::new();
        for (field, expr) in &o.fields {
            fields.push(b.bind(
                expr,
                &format!("objects.{name}.fields.{field}"),
                counter,
                &mut columns,
            )?);
        }
        objects.push(Some(ObjectPlan {
            columns,
            kinematics,
            fields,
            cartesian: matches!(o.kinematics, Kinematics::Cartesian { .. }),
        }));
    }
    let weight = weight
        .map(|expr| {
            let mut columns = Vec::new();
            let bound = b.bind(expr, "weight", None, &mut columns)?;
            Ok::<_, DataError>((columns, bound))
        })
        .transpose()?;
    let event_number = inputs
        .spec
        .event_number
        .as_deref()
        .map(|n| b.column(n, None, "event_number"))
        .transpose()?;
    let mut event_branches = Vec::new();
    for name in &inputs.event_branches {
        if reader.branch(name).is_none() {
            return Err(DataError::Config(format!(
                "{source}inputs.globals: unknown name '{name}': not n_nodes, an aggregate or a branch of tree '{}' in {}{}",
                reader.tree_name(),
                reader.path().display(),
                closest_branches(reader, name)
            )));
        }
        let k = b.column(name, None, "globals")?;
        event_branches.push((k, name.clone()));
    }
    Ok(Plan {
        requests: b.requests,
        objects,
        weight,
        event_number,
        event_branches,
    })
}

/// Reads the declared inputs of one tree, `range.step_size` entries at a time. The weight is the
/// sample's `weight` expression, else the declaration's; `source` prefixes configuration errors
/// (the config file).
///
/// A collection's arrays that disagree in length, and a weight or global-feature branch without
/// exactly one value in an entry, are errors; a single-object collection without exactly one
/// object, or an event-number branch without one value, skips the entry.
pub fn read_file_inputs(
    path: &Path,
    tree: &str,
    inputs: &Inputs,
    meta: &SampleMeta,
    range: EntryRange,
    source: &str,
    on_chunk: &mut dyn FnMut(&InputChunk) -> Result<(), DataError>,
) -> Result<u64, DataError> {
    let reader = open_tree(path, tree)?;
    let reader = reader.as_ref();
    // The sample's own weight, else the declaration's (parsed once, with the declaration).
    let weight = match meta.weight_branch.as_deref() {
        None => inputs.weight.clone(),
        Some("") => None,
        Some(text) => Some(
            Expr::parse(text)
                .map_err(|e| DataError::Config(format!("{source}weight \"{text}\": {e}")))?,
        ),
    };
    let plan = plan(reader, inputs, weight.as_ref(), source)?;
    let mut out = InputChunk::default();
    let mut entries = 0u64;
    reader.read(&plan.requests, range, &mut |chunk| {
        fill_chunk(reader, inputs, &plan, meta, chunk, &mut out)?;
        entries += chunk.n_entries as u64;
        on_chunk(&out)
    })?;
    Ok(entries)
}

/// The one value of entry `i` in column `k`, if it has exactly one.
fn single_value(chunk: &ColumnChunk, k: usize, i: usize) -> Option<f64> {
    let r = chunk.columns[k].range(i);
    (r.len() == 1).then(|| chunk.columns[k].values.f64_at(r.start))
}

fn fill_chunk(
    reader: &dyn TreeReader,
    inputs: &Inputs,
    plan: &Plan,
    meta: &SampleMeta,
    chunk: &ColumnChunk,
    out: &mut InputChunk,
) -> Result<(), DataError> {
    let n = chunk.n_entries;
    out.entry_start = chunk.entry_start;
    let ci = &mut out.inputs;
    ci.n_entries = n;
    ci.skipped.clear();
    ci.skipped.resize(n, None);
    ci.objects.clear();
    for (c, (o, p)) in inputs.objects.iter().zip(&plan.objects).enumerate() {
        let mut cols = ObjectColumns {
            offsets: vec![0; n + 1],
            fields: vec![Vec::new(); o.fields.len()],
            ..ObjectColumns::default()
        };
        if let Some(p) = p {
            object_columns(
                reader,
                o.decl.single,
                c,
                p,
                chunk,
                &mut ci.skipped,
                &mut cols,
            )?;
        }
        ci.objects.push(cols);
    }
    out.weights.clear();
    entry_weights(reader, plan, meta, chunk, &mut out.weights)?;
    out.event_numbers.clear();
    for i in 0..n {
        let entry = chunk.entry_start + i as u64;
        let number = match plan.event_number {
            Some(k) => {
                let r = chunk.columns[k].range(i);
                if r.len() == 1 {
                    chunk.columns[k].values.u64_at(r.start)
                } else {
                    if ci.skipped[i].is_none() {
                        ci.skipped[i] = Some(Skip::Reason("event_number_count"));
                    }
                    entry
                }
            }
            None => entry,
        };
        out.event_numbers.push(number);
        if ci.skipped[i].is_none() && !out.weights[i].is_finite() {
            ci.skipped[i] = Some(Skip::Reason(gnn4c_features::SKIP_NON_FINITE));
        }
    }
    ci.event_branches.clear();
    for (k, branch) in &plan.event_branches {
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let Some(x) = single_value(chunk, *k, i) else {
                return Err(DataError::Config(format!(
                    "{}: tree '{}': branch '{branch}' holds {} values at entry {}, but a global feature \
                     takes one value per entry (use an aggregate over a collection: sum(jets.pt), count(jets))",
                    reader.path().display(),
                    reader.tree_name(),
                    chunk.columns[*k].range(i).len(),
                    chunk.entry_start + i as u64
                )));
            };
            v.push(x);
        }
        ci.event_branches.push(v);
    }
    Ok(())
}

/// Each entry's weight onto `weights`: the weight expression over its branches times the
/// sample's scale (the scale alone without one). A weight is one number per entry: a branch
/// with another count is a config error naming it.
fn entry_weights(
    reader: &dyn TreeReader,
    plan: &Plan,
    meta: &SampleMeta,
    chunk: &ColumnChunk,
    weights: &mut Vec<f32>,
) -> Result<(), DataError> {
    let n = chunk.n_entries;
    match &plan.weight {
        Some((columns, bound)) => {
            let mut values: Vec<Vec<f64>> = vec![Vec::with_capacity(n); columns.len()];
            for i in 0..n {
                for (v, (k, branch)) in values.iter_mut().zip(columns) {
                    let Some(x) = single_value(chunk, *k, i) else {
                        return Err(DataError::Config(format!(
                            "{}: tree '{}': the weight branch '{branch}' holds {} values at entry {}, \
                             but an event weight is one number per entry: name such a branch in the \
                             sample's `weight:` (or `weight: \"\"` for none)",
                            reader.path().display(),
                            reader.tree_name(),
                            chunk.columns[*k].range(i).len(),
                            chunk.entry_start + i as u64
                        )));
                    };
                    v.push(x);
                }
            }
            let refs: Vec<&[f64]> = values.iter().map(Vec::as_slice).collect();
            let mut w = Vec::new();
            bound.eval(&refs, n, &mut w);
            weights.extend(w.iter().map(|w| (w * meta.scale) as f32));
        }
        None => weights.resize(n, meta.scale as f32),
    }
    Ok(())
}

/// One collection's columns for a chunk: objects per entry from its arrays (scalars broadcast),
/// its expressions evaluated over them, and its kinematics converted.
#[allow(clippy::needless_range_loop)] // `i` indexes the columns, the skips and the offsets
fn object_columns(
    reader: &dyn TreeReader,
    single: bool,
    c: usize,
    p: &ObjectPlan,
    chunk: &ColumnChunk,
    skipped: &mut [Option<Skip>],
    cols: &mut ObjectColumns,
) -> Result<(), DataError> {
    let n = chunk.n_entries;
    let jagged: Vec<bool> = p
        .columns
        .iter()
        .map(|(k, _)| chunk.columns[*k].offsets.is_some())
        .collect();
    count_objects(
        reader,
        single,
        c,
        p,
        chunk,
        &jagged,
        skipped,
        &mut cols.offsets,
    )?;
    let n_objects = cols.offsets[n];
    // The collection's branch values, flat over its objects.
    let flat: Vec<Vec<f64>> = p
        .columns
        .iter()
        .zip(&jagged)
        .map(|((k, _), &j)| {
            let col = &chunk.columns[*k];
            let mut v = Vec::with_capacity(n_objects);
            for i in 0..n {
                let m = cols.offsets[i + 1] - cols.offsets[i];
                let r = col.range(i);
                if j {
                    v.extend(r.take(m).map(|x| col.values.f64_at(x)));
                } else {
                    v.extend(std::iter::repeat_n(col.values.f64_at(r.start), m));
                }
            }
            v
        })
        .collect();
    let refs: Vec<&[f64]> = flat.iter().map(Vec::as_slice).collect();
    let mut values: Vec<(&str, Vec<f64>)> = Vec::with_capacity(p.kinematics.len());
    for (what, bound) in &p.kinematics {
        let mut v = Vec::new();
        bound.eval(&refs, n_objects, &mut v);
        values.push((what, v));
    }
    // Each source's column, found once per chunk (not per object).
    let get = |what: &str| {
        values
            .iter()
            .find(|(w, _)| *w == what)
            .map(|(_, v)| v.as_slice())
    };
    let [pt, eta, phi, mass, e, px, py, pz] =
        ["pt", "eta", "phi", "mass", "e", "px", "py", "pz"].map(get);
    let at = |v: Option<&[f64]>, k: usize| v.map(|v| v[k]);
    cols.pt.clear();
    cols.eta.clear();
    cols.phi.clear();
    cols.mass.clear();
    for k in 0..n_objects {
        let (pt, eta, phi, mass) = if p.cartesian {
            let (px, py) = (at(px, k).unwrap_or(0.0), at(py, k).unwrap_or(0.0));
            let (pt, eta, phi, m) = match at(pz, k) {
                Some(pz) => gnn4c_events::polar_from_cartesian(px, py, pz, at(e, k).unwrap_or(0.0)),
                // A transverse quantity (MET): η 0, massless.
                None => (px.hypot(py), 0.0, py.atan2(px), 0.0),
            };
            (pt, eta, phi, at(mass, k).unwrap_or(m))
        } else {
            let (pt, eta) = (at(pt, k).unwrap_or(0.0), at(eta, k).unwrap_or(0.0));
            let mass = match (at(mass, k), at(e, k)) {
                (Some(m), _) => m,
                (None, Some(e)) => {
                    let p = pt * eta.cosh();
                    (e * e - p * p).max(0.0).sqrt()
                }
                (None, None) => 0.0,
            };
            (pt, eta, at(phi, k).unwrap_or(0.0), mass)
        };
        cols.pt.push(pt);
        cols.eta.push(eta);
        cols.phi.push(phi);
        cols.mass.push(mass);
    }
    for (f, bound) in cols.fields.iter_mut().zip(&p.fields) {
        bound.eval(&refs, n_objects, f);
    }
    Ok(())
}

/// Objects per entry into `offsets`: the common length of the collection's arrays (scalars
/// broadcast; one object when all are scalars). A single-object collection needs exactly one
/// value in each (else the entry is skipped as `<name>_count`).
#[allow(clippy::too_many_arguments)] // object_columns' arguments and its jagged columns
#[allow(clippy::needless_range_loop)] // `i` indexes the columns, the skips and the offsets
fn count_objects(
    reader: &dyn TreeReader,
    single: bool,
    c: usize,
    p: &ObjectPlan,
    chunk: &ColumnChunk,
    jagged: &[bool],
    skipped: &mut [Option<Skip>],
    offsets: &mut [usize],
) -> Result<(), DataError> {
    let n = chunk.n_entries;
    for i in 0..n {
        let mut count: Option<(usize, &str)> = None;
        let mut single_ok = true;
        for ((k, b), &j) in p.columns.iter().zip(jagged) {
            let len = chunk.columns[*k].range(i).len();
            single_ok &= len == 1;
            if !j || single {
                continue;
            }
            match count {
                None => count = Some((len, b)),
                Some((m, b0)) if m != len => {
                    return Err(DataError::CounterMismatch {
                        path: reader.path().to_owned(),
                        tree: reader.tree_name().to_owned(),
                        branch: b.clone(),
                        detail: format!(
                            "entry {}: {len} values but '{b0}' has {m} (one collection's arrays must agree)",
                            chunk.entry_start + i as u64
                        ),
                    });
                }
                Some(_) => {}
            }
        }
        let count = if single {
            if !single_ok && skipped[i].is_none() {
                skipped[i] = Some(Skip::Count(c));
            }
            usize::from(single_ok)
        } else {
            count.map_or(1, |(m, _)| m)
        };
        offsets[i + 1] = offsets[i] + count;
    }
    Ok(())
}

/// The identity of entry `i` of a chunk read from `path`'s `tree` for sample `meta`.
pub fn entry_id(
    meta: &SampleMeta,
    source_file: &Arc<Path>,
    tree: &Arc<str>,
    chunk: &InputChunk,
    i: usize,
) -> gnn4c_events::EventId {
    gnn4c_events::EventId {
        sample: meta.name.clone(),
        source_file: source_file.clone(),
        tree: tree.clone(),
        entry: chunk.entry_start + i as u64,
        event_number: chunk.event_numbers[i],
    }
}
