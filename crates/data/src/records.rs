//! One cached event ([`EventRecord`]) and its Parquet columns: the one column table
//! (`COLUMNS`) that writing ([`to_batch`], [`parquet_bytes`]) and reading ([`decode`]) follow,
//! columns found by name, in row groups of [`ROW_GROUP_EVENTS`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    Float32Builder, Float64Builder, Int32Builder, ListBuilder, StringBuilder, UInt8Builder,
    UInt16Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, UInt8Type, UInt16Type, UInt64Type};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use gnn4c_events::{EventId, Label};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// One event as cached: identity, fold, label, weight, node features, the raw η and φ of the
/// nodes, and the global features.
///
/// The cache is event-level: it holds no edges. A graph's topology comes from `n_nodes` and its
/// edge features from `eta`/`phi` when it is read (bitwise what building it from the event
/// gives); another model family reads the same records.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// Identity.
    pub id: EventId,
    /// `event_number mod n_folds`.
    pub fold: u8,
    /// Training target.
    pub label: Label,
    /// Event weight.
    pub weight: f32,
    /// Node count.
    pub n_nodes: u16,
    /// `[n_nodes, d_node]` row-major.
    pub node_features: Vec<f32>,
    /// `[n_nodes]`: each node's raw η (MET: 0), f64, as edge features need it.
    pub eta: Vec<f64>,
    /// `[n_nodes]`: each node's raw φ (rad), f64.
    pub phi: Vec<f64>,
    /// `[n_nodes]`, or empty: each node's pt (GeV), kept where a declared pair feature needs
    /// the nodes' momenta (`mass`, `kt`, `z`, …).
    pub pt: Vec<f64>,
    /// `[n_nodes]` where `pt` is kept, else empty: each node's mass (GeV; MET: 0).
    pub mass: Vec<f64>,
    /// `[d_global]`.
    pub global_features: Vec<f32>,
}

/// A cache column's Arrow type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Utf8,
    U8,
    U16,
    I32,
    U64,
    F32,
    ListU8,
    ListF32,
    ListF64,
}

impl Kind {
    fn data_type(self) -> DataType {
        let list = |item: DataType| DataType::List(Arc::new(Field::new("item", item, false)));
        match self {
            Kind::Utf8 => DataType::Utf8,
            Kind::U8 => DataType::UInt8,
            Kind::U16 => DataType::UInt16,
            Kind::I32 => DataType::Int32,
            Kind::U64 => DataType::UInt64,
            Kind::F32 => DataType::Float32,
            Kind::ListU8 => list(DataType::UInt8),
            Kind::ListF32 => list(DataType::Float32),
            Kind::ListF64 => list(DataType::Float64),
        }
    }
}

/// The cache's columns: the one table writing and reading follow (readers find columns by name).
const COLUMNS: [(&str, Kind); 16] = [
    ("sample", Kind::Utf8),
    ("source_file", Kind::Utf8),
    ("tree", Kind::Utf8),
    ("entry", Kind::U64),
    ("event_number", Kind::U64),
    ("fold", Kind::U8),
    ("label", Kind::I32),
    ("multilabel", Kind::ListU8),
    ("weight", Kind::F32),
    ("n_nodes", Kind::U16),
    ("node_features", Kind::ListF32),
    ("eta", Kind::ListF64),
    ("phi", Kind::ListF64),
    ("pt", Kind::ListF64),
    ("mass", Kind::ListF64),
    ("global_features", Kind::ListF32),
];

/// Events per Parquet row group: the unit a streaming reader fetches and shuffles.
pub const ROW_GROUP_EVENTS: usize = 1024;

fn arrow_schema() -> Arc<Schema> {
    Arc::new(Schema::new(
        COLUMNS
            .iter()
            .map(|&(name, kind)| Field::new(name, kind.data_type(), false))
            .collect::<Vec<_>>(),
    ))
}

/// The column `name` of `batch`, checked against the schema table.
pub(crate) fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, String> {
    let kind = COLUMNS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, k)| k)
        .ok_or_else(|| format!("no cache column {name}"))?;
    let col = batch.column_by_name(name).ok_or_else(|| {
        format!("column {name} is missing: the shard was written by another cache layout; rebuild the cache")
    })?;
    if col.data_type() != &kind.data_type() {
        return Err(format!(
            "column {name} is {} but this build reads {}: rebuild the cache",
            col.data_type(),
            kind.data_type()
        ));
    }
    Ok(col)
}

/// One shard's file contents: `batch` as zstd Parquet.
pub(crate) fn parquet_bytes(batch: &RecordBatch) -> Result<Vec<u8>, String> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(ROW_GROUP_EVENTS))
        // Numbers are nearly all distinct: a dictionary per row group only adds bytes. The
        // strings (sample, file, tree) repeat and keep theirs.
        .set_dictionary_enabled(false)
        .set_column_dictionary_enabled("sample".into(), true)
        .set_column_dictionary_enabled("source_file".into(), true)
        .set_column_dictionary_enabled("tree".into(), true)
        .build();
    let mut bytes = Vec::new();
    let mut w =
        ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).map_err(|e| e.to_string())?;
    w.write(batch).map_err(|e| e.to_string())?;
    w.close().map_err(|e| e.to_string())?;
    Ok(bytes)
}

pub(crate) fn to_batch(records: &[EventRecord]) -> Result<RecordBatch, String> {
    let n = records.len();
    let mut sample = StringBuilder::new();
    let mut source = StringBuilder::new();
    let mut tree = StringBuilder::new();
    let mut entry = UInt64Builder::with_capacity(n);
    let mut event_number = UInt64Builder::with_capacity(n);
    let mut fold = UInt8Builder::with_capacity(n);
    let mut label = Int32Builder::with_capacity(n);
    let mut multi = ListBuilder::new(UInt8Builder::new()).with_field(Field::new(
        "item",
        DataType::UInt8,
        false,
    ));
    let mut weight = Float32Builder::with_capacity(n);
    let mut n_nodes = UInt16Builder::with_capacity(n);
    let item = || Field::new("item", DataType::Float32, false);
    let mut nodes = ListBuilder::new(Float32Builder::new()).with_field(item());
    let item64 = || Field::new("item", DataType::Float64, false);
    let mut eta = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut phi = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut pt = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut mass = ListBuilder::new(Float64Builder::new()).with_field(item64());
    let mut globals = ListBuilder::new(Float32Builder::new()).with_field(item());
    for r in records {
        sample.append_value(&r.id.sample);
        source.append_value(r.id.source_file.display().to_string());
        tree.append_value(&r.id.tree);
        entry.append_value(r.id.entry);
        event_number.append_value(r.id.event_number);
        fold.append_value(r.fold);
        match &r.label {
            Label::Class(c) => {
                label.append_value(i32::try_from(*c).map_err(|_| format!("label {c} too large"))?);
                multi.append(true);
            }
            Label::Multi(v) => {
                label.append_value(-1);
                multi.values().append_slice(v);
                multi.append(true);
            }
        }
        weight.append_value(r.weight);
        n_nodes.append_value(r.n_nodes);
        nodes.values().append_slice(&r.node_features);
        nodes.append(true);
        eta.values().append_slice(&r.eta);
        eta.append(true);
        phi.values().append_slice(&r.phi);
        phi.append(true);
        pt.values().append_slice(&r.pt);
        pt.append(true);
        mass.values().append_slice(&r.mass);
        mass.append(true);
        globals.values().append_slice(&r.global_features);
        globals.append(true);
    }
    let mut by_name: BTreeMap<&str, ArrayRef> = [
        ("sample", Arc::new(sample.finish()) as ArrayRef),
        ("source_file", Arc::new(source.finish())),
        ("tree", Arc::new(tree.finish())),
        ("entry", Arc::new(entry.finish())),
        ("event_number", Arc::new(event_number.finish())),
        ("fold", Arc::new(fold.finish())),
        ("label", Arc::new(label.finish())),
        ("multilabel", Arc::new(multi.finish())),
        ("weight", Arc::new(weight.finish())),
        ("n_nodes", Arc::new(n_nodes.finish())),
        ("node_features", Arc::new(nodes.finish())),
        ("eta", Arc::new(eta.finish())),
        ("phi", Arc::new(phi.finish())),
        ("pt", Arc::new(pt.finish())),
        ("mass", Arc::new(mass.finish())),
        ("global_features", Arc::new(globals.finish())),
    ]
    .into_iter()
    .collect();
    let columns = COLUMNS
        .iter()
        .map(|(name, _)| {
            by_name
                .remove(name)
                .ok_or_else(|| format!("no builder for cache column {name}"))
        })
        .collect::<Result<Vec<ArrayRef>, String>>()?;
    RecordBatch::try_new(arrow_schema(), columns).map_err(|e| e.to_string())
}

fn intern<T: ?Sized>(
    map: &mut BTreeMap<String, Arc<T>>,
    s: &str,
    make: impl Fn(&str) -> Arc<T>,
) -> Arc<T> {
    if let Some(v) = map.get(s) {
        return v.clone();
    }
    let v = make(s);
    map.insert(s.to_owned(), v.clone());
    v
}

/// Appends the rows of `batch` whose fold passes `keep_fold` to `out`, columns found by name.
pub(crate) fn decode(
    batch: &RecordBatch,
    names: &mut BTreeMap<String, Arc<str>>,
    paths: &mut BTreeMap<String, Arc<Path>>,
    keep_fold: &dyn Fn(u8) -> bool,
    out: &mut Vec<EventRecord>,
) -> Result<(), String> {
    let c = |name: &str| column(batch, name);
    let (sample, source, tree) = (
        c("sample")?.as_string::<i32>(),
        c("source_file")?.as_string::<i32>(),
        c("tree")?.as_string::<i32>(),
    );
    let entry = c("entry")?.as_primitive::<UInt64Type>();
    let event_number = c("event_number")?.as_primitive::<UInt64Type>();
    let fold = c("fold")?.as_primitive::<UInt8Type>();
    let label = c("label")?.as_primitive::<Int32Type>();
    let multi = c("multilabel")?.as_list::<i32>();
    let weight = c("weight")?.as_primitive::<Float32Type>();
    let n_nodes = c("n_nodes")?.as_primitive::<UInt16Type>();
    let (nodes, eta, phi, pt, mass, globals) = (
        c("node_features")?.as_list::<i32>(),
        c("eta")?.as_list::<i32>(),
        c("phi")?.as_list::<i32>(),
        c("pt")?.as_list::<i32>(),
        c("mass")?.as_list::<i32>(),
        c("global_features")?.as_list::<i32>(),
    );
    let floats = |l: &arrow_array::ListArray, i: usize| -> Vec<f32> {
        l.value(i).as_primitive::<Float32Type>().values().to_vec()
    };
    let doubles = |l: &arrow_array::ListArray, i: usize| -> Vec<f64> {
        l.value(i).as_primitive::<Float64Type>().values().to_vec()
    };
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        if !keep_fold(fold.value(i)) {
            continue;
        }
        let lab = if label.value(i) >= 0 {
            Label::Class(label.value(i) as u32)
        } else {
            Label::Multi(multi.value(i).as_primitive::<UInt8Type>().values().to_vec())
        };
        out.push(EventRecord {
            id: EventId {
                sample: intern(names, sample.value(i), |s| Arc::from(s)),
                source_file: intern(paths, source.value(i), |s| Arc::from(Path::new(s))),
                tree: intern(names, tree.value(i), |s| Arc::from(s)),
                entry: entry.value(i),
                event_number: event_number.value(i),
            },
            fold: fold.value(i),
            label: lab,
            weight: weight.value(i),
            n_nodes: n_nodes.value(i),
            node_features: floats(nodes, i),
            eta: doubles(eta, i),
            phi: doubles(phi, i),
            pt: doubles(pt, i),
            mass: doubles(mass, i),
            global_features: floats(globals, i),
        });
    }
    Ok(())
}
