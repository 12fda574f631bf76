//! From columns to `EventSample`s through a [`SchemaSpec`]: resolve the schema against a tree,
//! then assemble chunk by chunk (contract §1).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gnn4c_data::{
    BranchKind, ColumnChunk, ColumnRequest, DataError, DatasetConfig, EntryRange, MetSpec,
    ObjectSpec, SampleConfig, SampleMeta, SchemaRef, SchemaSpec, TreeReader, infer_counter,
    not_numbers, open_tree, request,
};
use gnn4c_events::{EventId, EventSample, SkipCounts, polar_from_cartesian};
use gnn4c_features::closest_names;

use crate::builtin_schema;

/// What reading one file did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileReport {
    /// Entries read (kept + skipped).
    pub entries_read: u64,
    /// Events handed on.
    pub kept: u64,
    /// Events skipped, by reason.
    pub skipped: SkipCounts,
}

/// What reading a whole sample did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleReport {
    /// One report per file, in read order.
    pub files: Vec<(PathBuf, FileReport)>,
}

impl SampleReport {
    /// Events kept over all files.
    pub fn kept(&self) -> u64 {
        self.files.iter().map(|(_, r)| r.kept).sum()
    }

    /// Skip counts over all files.
    pub fn skipped(&self) -> SkipCounts {
        let mut s = SkipCounts::default();
        for (_, r) in &self.files {
            s.merge(&r.skipped);
        }
        s
    }
}

/// Reads every file of `sample` of `dataset` through the dataset's schema (a built-in's name or
/// one written out), handing events on in chunks of at most `step_size`.
pub fn read_sample(
    dataset: &DatasetConfig,
    sample: &SampleConfig,
    base_dir: &Path,
    on_events: &mut dyn FnMut(&[EventSample]) -> Result<(), DataError>,
) -> Result<SampleReport, DataError> {
    let plan = dataset.sample_plan(sample, base_dir)?;
    let schema = match &dataset.schema {
        Some(SchemaRef::Builtin(name)) => builtin_schema(name).ok_or_else(|| {
            DataError::Config(format!(
                "unknown schema '{name}'; built-in schemas: {}",
                gnn4c_data::BUILTIN_DECLARATIONS.join(", ")
            ))
        })?,
        Some(SchemaRef::Custom(spec)) => {
            spec.validate()?;
            spec.as_ref().clone()
        }
        None => {
            return Err(DataError::Config(format!(
                "dataset '{}' declares `inputs`: read it through its declaration (gnn4c_data::read_file_inputs)",
                dataset.name
            )));
        }
    };
    let mut report = SampleReport::default();
    for path in plan.files {
        let r = read_file_events(
            &path, &plan.tree, &schema, &plan.meta, plan.range, on_events,
        )?;
        report.files.push((path, r));
    }
    Ok(report)
}

/// Column indices of one collection's kinematics.
#[derive(Debug, Clone, Copy)]
enum Kin {
    /// pt, eta, phi, and for jets mass or energy.
    Polar {
        pt: usize,
        eta: usize,
        phi: usize,
        mass: Option<usize>,
        energy: Option<usize>,
    },
    /// px, py, pz, e.
    Cartesian {
        px: usize,
        py: usize,
        pz: usize,
        e: Option<usize>,
    },
}

#[derive(Debug, Clone)]
struct ObjectPlan {
    kin: Kin,
    btag: Option<(usize, Option<f64>)>,
    charge: Option<usize>,
    /// Every column of the collection, with its branch name, for length checks.
    columns: Vec<(usize, String)>,
}

#[derive(Debug, Clone, Copy)]
enum MetPlan {
    Polar { pt: usize, phi: usize },
    Cartesian { px: usize, py: usize },
}

/// A schema resolved against one tree: the columns to request and where each field is.
#[derive(Debug, Clone)]
struct Plan {
    requests: Vec<ColumnRequest>,
    objects: [Option<ObjectPlan>; 4],
    met: Option<MetPlan>,
    /// The weight column and its branch name.
    weight: Option<(usize, String)>,
    event_number: Option<usize>,
    energy_scale: f64,
}

struct Resolver<'a> {
    reader: &'a dyn TreeReader,
    requests: Vec<ColumnRequest>,
}

impl Resolver<'_> {
    fn missing(&self, branch: &str, needed_for: &str) -> DataError {
        DataError::BranchNotFound {
            path: self.reader.path().to_owned(),
            tree: self.reader.tree_name().to_owned(),
            branch: branch.to_owned(),
            needed_for: needed_for.to_owned(),
            closest: closest_names(
                branch,
                self.reader.branches().iter().map(|b| b.name.as_str()),
                5,
            ),
        }
    }

    /// Counter of a leaf-count array: the explicit one, else `X_size`, `nX`, `NX`.
    fn counter_for(&self, branch: &str, explicit: Option<&str>) -> Result<String, DataError> {
        if let Some(c) = explicit {
            return if self.reader.branch(c).is_some() {
                Ok(c.to_owned())
            } else {
                Err(self.missing(c, &format!("the counter of '{branch}'")))
            };
        }
        infer_counter(self.reader, branch, "in the schema")
    }

    /// Adds a column for `branch` (once) and returns its index.
    fn column(
        &mut self,
        branch: &str,
        counter: Option<&str>,
        needed_for: &str,
    ) -> Result<usize, DataError> {
        let info = self
            .reader
            .branch(branch)
            .ok_or_else(|| self.missing(branch, needed_for))?;
        let counter = match info.kind {
            BranchKind::Array(_) => Some(self.counter_for(branch, counter)?),
            BranchKind::Scalar(_) | BranchKind::Vector(_) => None,
            BranchKind::Other => return Err(not_numbers(self.reader, info, needed_for)),
        };
        Ok(request(&mut self.requests, branch, counter))
    }

    fn object(&mut self, field: &str, spec: &ObjectSpec) -> Result<Option<ObjectPlan>, DataError> {
        let first = spec
            .pt
            .as_deref()
            .or(spec.px.as_deref())
            .unwrap_or_default();
        if spec.optional && self.reader.branch(first).is_none() {
            return Ok(None);
        }
        let counter = spec.counter.as_deref();
        let mut columns = Vec::new();
        let mut col = |r: &mut Self,
                       branch: &Option<String>,
                       what: &str|
         -> Result<Option<usize>, DataError> {
            let Some(b) = branch.as_deref() else {
                return Ok(None);
            };
            let k = r.column(b, counter, &format!("{field}.{what}"))?;
            columns.push((k, b.to_owned()));
            Ok(Some(k))
        };
        let kin = if let (Some(_), Some(_), Some(_)) = (&spec.pt, &spec.eta, &spec.phi) {
            let pt = col(self, &spec.pt, "pt")?.unwrap_or_default();
            let eta = col(self, &spec.eta, "eta")?.unwrap_or_default();
            let phi = col(self, &spec.phi, "phi")?.unwrap_or_default();
            let (mass, energy) = if field == "jets" {
                (col(self, &spec.mass, "mass")?, col(self, &spec.e, "e")?)
            } else {
                (None, None)
            };
            Kin::Polar {
                pt,
                eta,
                phi,
                mass,
                energy,
            }
        } else {
            let px = col(self, &spec.px, "px")?.unwrap_or_default();
            let py = col(self, &spec.py, "py")?.unwrap_or_default();
            let pz = col(self, &spec.pz, "pz")?.unwrap_or_default();
            let e = if field == "jets" {
                col(self, &spec.e, "e")?
            } else {
                None
            };
            Kin::Cartesian { px, py, pz, e }
        };
        let btag = col(self, &spec.btag, "btag")?.map(|k| (k, spec.btag_threshold));
        let charge = col(self, &spec.charge, "charge")?;
        Ok(Some(ObjectPlan {
            kin,
            btag,
            charge,
            columns,
        }))
    }

    fn met(&mut self, spec: &MetSpec) -> Result<MetPlan, DataError> {
        let counter = spec.counter.as_deref();
        Ok(match (&spec.pt, &spec.phi, &spec.px, &spec.py) {
            (Some(pt), Some(phi), _, _) => MetPlan::Polar {
                pt: self.column(pt, counter, "met.pt")?,
                phi: self.column(phi, counter, "met.phi")?,
            },
            (_, _, Some(px), Some(py)) => MetPlan::Cartesian {
                px: self.column(px, counter, "met.px")?,
                py: self.column(py, counter, "met.py")?,
            },
            _ => {
                return Err(DataError::Config(
                    "met: give pt and phi or px and py".into(),
                ));
            }
        })
    }
}

fn plan(
    reader: &dyn TreeReader,
    schema: &SchemaSpec,
    weight_branch: Option<&str>,
) -> Result<Plan, DataError> {
    schema.validate()?;
    let mut r = Resolver {
        reader,
        requests: Vec::new(),
    };
    let mut objects: [Option<ObjectPlan>; 4] = [None, None, None, None];
    for (slot, (field, spec)) in objects.iter_mut().zip(schema.collections()) {
        if let Some(spec) = spec {
            *slot = r.object(field, spec)?;
        }
    }
    let met = schema.met.as_ref().map(|m| r.met(m)).transpose()?;
    let weight = weight_branch
        .or(schema.weight.as_deref())
        .filter(|w| !w.is_empty())
        .map(|w| Ok((r.column(w, None, "weight")?, w.to_owned())))
        .transpose()?;
    let event_number = schema
        .event_number
        .as_deref()
        .map(|b| r.column(b, None, "event_number"))
        .transpose()?;
    Ok(Plan {
        requests: r.requests,
        objects,
        met,
        weight,
        event_number,
        energy_scale: schema.energy_scale,
    })
}

/// Reads the events of one tree of one file, `range.step_size` entries at a time.
///
/// Events with a NaN or infinite value, or a MET / event-number branch without exactly one value,
/// are skipped and counted by reason; arrays of one collection that disagree in length, and a
/// weight branch without exactly one value in an entry, are errors (the file or the config is
/// wrong).
pub fn read_file_events(
    path: &Path,
    tree: &str,
    schema: &SchemaSpec,
    meta: &SampleMeta,
    range: EntryRange,
    on_events: &mut dyn FnMut(&[EventSample]) -> Result<(), DataError>,
) -> Result<FileReport, DataError> {
    let reader = open_tree(path, tree)?;
    read_tree_events(reader.as_ref(), schema, meta, range, on_events)
}

/// [`read_file_events`] on an already opened tree.
pub fn read_tree_events(
    reader: &dyn TreeReader,
    schema: &SchemaSpec,
    meta: &SampleMeta,
    range: EntryRange,
    on_events: &mut dyn FnMut(&[EventSample]) -> Result<(), DataError>,
) -> Result<FileReport, DataError> {
    let plan = plan(reader, schema, meta.weight_branch.as_deref())?;
    let source_file: Arc<Path> = Arc::from(reader.path());
    let tree_name: Arc<str> = Arc::from(reader.tree_name());
    let mut report = FileReport::default();
    let mut events = Vec::with_capacity(range.step_size.min(1 << 16));
    reader.read(&plan.requests, range, &mut |chunk| {
        events.clear();
        for i in 0..chunk.n_entries {
            let entry = chunk.entry_start + i as u64;
            let id = EventId {
                sample: meta.name.clone(),
                source_file: source_file.clone(),
                tree: tree_name.clone(),
                entry,
                event_number: entry,
            };
            report.entries_read += 1;
            match assemble(reader, &plan, chunk, i, id, meta)? {
                Ok(ev) => events.push(ev),
                Err(reason) => report.skipped.add(reason),
            }
        }
        report.kept += events.len() as u64;
        on_events(&events)
    })?;
    Ok(report)
}

/// The one value of a per-event field, or the skip reason.
fn single(
    chunk: &ColumnChunk,
    k: usize,
    i: usize,
    reason: &'static str,
) -> Result<usize, &'static str> {
    let r = chunk.columns[k].range(i);
    if r.len() == 1 {
        Ok(r.start)
    } else {
        Err(reason)
    }
}

fn assemble(
    reader: &dyn TreeReader,
    plan: &Plan,
    chunk: &ColumnChunk,
    i: usize,
    id: EventId,
    meta: &SampleMeta,
) -> Result<Result<EventSample, &'static str>, DataError> {
    let mut ev = EventSample::empty(id);
    ev.label = meta.label.clone();
    let scale = plan.energy_scale;
    let val = |k: usize, j: usize| chunk.columns[k].values.f64_at(j);
    for (c, obj) in plan.objects.iter().enumerate() {
        if let Some(obj) = obj {
            push_objects(reader, chunk, i, c, obj, scale, &mut ev)?;
        }
    }
    let w = entry_weight(reader, plan, chunk, i, ev.id.entry)?;
    ev.weight = (w * meta.scale) as f32;
    let mut fields = || -> Result<(), &'static str> {
        match plan.met {
            Some(MetPlan::Polar { pt, phi }) => {
                ev.met.magnitude = val(pt, single(chunk, pt, i, "met_count")?) * scale;
                ev.met.phi = val(phi, single(chunk, phi, i, "met_count")?);
            }
            Some(MetPlan::Cartesian { px, py }) => {
                let x = val(px, single(chunk, px, i, "met_count")?) * scale;
                let y = val(py, single(chunk, py, i, "met_count")?) * scale;
                ev.met.magnitude = x.hypot(y);
                ev.met.phi = y.atan2(x);
            }
            None => {}
        }
        if let Some(k) = plan.event_number {
            let j = single(chunk, k, i, "event_number_count")?;
            ev.id.event_number = chunk.columns[k].values.u64_at(j);
        }
        Ok(())
    };
    if let Err(reason) = fields() {
        return Ok(Err(reason));
    }
    if ev.first_non_finite().is_some() {
        return Ok(Err("non_finite"));
    }
    Ok(Ok(ev))
}

/// Collection `c`'s objects of entry `i` onto `ev` (its kinematics times `scale`); arrays of the
/// collection that disagree in length are an error naming the branch.
fn push_objects(
    reader: &dyn TreeReader,
    chunk: &ColumnChunk,
    i: usize,
    c: usize,
    obj: &ObjectPlan,
    scale: f64,
    ev: &mut EventSample,
) -> Result<(), DataError> {
    let val = |k: usize, j: usize| chunk.columns[k].values.f64_at(j);
    // Every column of a collection must hold the same number of objects in this entry.
    let (k0, b0) = &obj.columns[0];
    let r0 = chunk.columns[*k0].range(i);
    for (k, b) in &obj.columns[1..] {
        let r = chunk.columns[*k].range(i);
        if r.len() != r0.len() {
            return Err(DataError::CounterMismatch {
                path: reader.path().to_owned(),
                tree: reader.tree_name().to_owned(),
                branch: b.clone(),
                detail: format!(
                    "entry {}: {} values but '{b0}' has {} (one collection's arrays must agree)",
                    ev.id.entry,
                    r.len(),
                    r0.len()
                ),
            });
        }
    }
    for j in 0..r0.len() {
        let at = |k: usize| val(k, chunk.columns[k].range(i).start + j);
        let (pt, eta, phi, mass) = match obj.kin {
            Kin::Polar {
                pt,
                eta,
                phi,
                mass,
                energy,
            } => {
                let (pt, eta) = (at(pt) * scale, at(eta));
                let m = match (mass, energy) {
                    (Some(m), _) => at(m) * scale,
                    (None, Some(e)) => {
                        let e = at(e) * scale;
                        let p = pt * eta.cosh();
                        (e * e - p * p).max(0.0).sqrt()
                    }
                    (None, None) => 0.0,
                };
                (pt, eta, at(phi), m)
            }
            Kin::Cartesian { px, py, pz, e } => {
                let e = e.map_or(0.0, |e| at(e) * scale);
                polar_from_cartesian(at(px) * scale, at(py) * scale, at(pz) * scale, e)
            }
        };
        match c {
            0 => {
                let btag = obj.btag.is_some_and(|(k, thr)| match thr {
                    Some(t) => at(k) > t,
                    None => at(k) != 0.0,
                });
                ev.jets.push(pt, eta, phi, mass, btag);
            }
            1 | 2 => {
                let q = obj.charge.map_or(0.0, at);
                let q = if q > 0.0 {
                    1
                } else if q < 0.0 {
                    -1
                } else {
                    0
                };
                let coll = if c == 1 {
                    &mut ev.electrons
                } else {
                    &mut ev.muons
                };
                coll.push(pt, eta, phi, q);
            }
            _ => ev.photons.push(pt, eta, phi),
        }
    }
    Ok(())
}

/// Entry `i`'s weight branch value (1 without one). The weight is one number per entry: a
/// branch that holds another count is the wrong branch (a config error), never a reason to
/// drop events.
fn entry_weight(
    reader: &dyn TreeReader,
    plan: &Plan,
    chunk: &ColumnChunk,
    i: usize,
    entry: u64,
) -> Result<f64, DataError> {
    let val = |k: usize, j: usize| chunk.columns[k].values.f64_at(j);
    match plan.weight {
        Some((k, ref branch)) => {
            let n = chunk.columns[k].range(i).len();
            if n != 1 {
                return Err(DataError::Config(format!(
                    "{}: tree '{}': the weight branch '{branch}' holds {n} values at entry {}, \
                     but an event weight is one number per entry: name such a branch in the \
                     sample's `weight:` (or `weight: \"\"` for none)",
                    reader.path().display(),
                    reader.tree_name(),
                    entry
                )));
            }
            Ok(val(k, chunk.columns[k].range(i).start))
        }
        None => Ok(1.0),
    }
}
