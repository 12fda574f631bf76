//! The input recipe an exported model carries (ONNX metadata `gnn4colliders.inputs`, and
//! `<model>.inputs.json` beside the file): everything an analysis needs to compute the model's
//! inputs from its own ROOT files and to read its outputs, without the training run's config.
//! `docs/onnx.md` documents it field by field.

use gnn4c_features::{FeatureDecl, PairFeature, Scale, Standardize};
use gnn4c_tasks::Task;
use serde_json::{Value, json};

use crate::settings::ResolvedRun;

/// The recipe's own format version (a change to its fields bumps it).
pub const RECIPE_VERSION: u32 = 1;

/// The recipe of the model `r` trained, at checkpoint epoch `epoch`.
pub(crate) fn input_recipe(r: &ResolvedRun, epoch: u64) -> anyhow::Result<Value> {
    let spec = r.dataset.inputs_spec()?;
    let feature = |f: &FeatureDecl| feature_recipe(f, r);
    let collections: Vec<Value> = spec
        .objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("type".into(), json!(i));
            }
            v
        })
        .collect();
    let (scores, outputs) = match r.task {
        Task::Binary => (
            "sigmoid(logits[:, 0]): the probability of the last class",
            r.dataset.classes.last().cloned().into_iter().collect(),
        ),
        Task::Multiclass { .. } => (
            "softmax(logits) over the classes, in class_names' order",
            r.dataset.classes.clone(),
        ),
        Task::Multilabel { .. } => (
            "sigmoid of each logit: one probability per label, in class_names' order",
            r.dataset.classes.clone(),
        ),
    };
    Ok(json!({
        "recipe_version": RECIPE_VERSION,
        "contract_version": r.contract_version,
        "written_by": format!("gnn4colliders {}", env!("CARGO_PKG_VERSION")),
        "family": r.model.name(),
        "epoch": epoch,
        "task": r.task,
        "class_names": r.dataset.classes,
        "outputs": outputs,
        "scores": scores,
        "units": {"momentum": "GeV", "mass": "GeV", "energy": "GeV", "angle": "rad"},
        "tree": r.dataset.tree,
        "event_number": spec.event_number,
        "weight": spec.weight,
        "collections": collections,
        "objects": "a collection's objects that pass its `select` (an expression over the object's fields), sorted by pt, descending (stable: equal pt keeps the file's order; a `single` collection is not sorted), and the first `max_objects` of them; the nodes are the collections' objects in the order the collections are listed, each node's `type` field its collection's index",
        "min_nodes": spec.min_nodes,
        "events": "an event is not scored when it has fewer than `min_nodes` nodes, when a node's pt, eta, phi or mass or any feature is not a finite number, when a `single` collection holds other than one object, or when its branches are otherwise malformed (each a skip reason `preprocess` counts)",
        "node_features": spec.node_features.iter().map(feature).collect::<Vec<_>>(),
        "global_features": spec.globals.iter().map(feature).collect::<Vec<_>>(),
        "pair_features": spec.pairs.iter().map(|&p| pair_recipe(p)).collect::<Vec<_>>(),
    }))
}

/// A declared feature: its expression, fill and the standardisation applied, with the numbers.
fn feature_recipe(f: &FeatureDecl, r: &ResolvedRun) -> Value {
    let (kind, scale): (&str, Option<Scale>) = match &f.standardize {
        None => ("none", None),
        Some(Standardize::Fixed(s)) => ("fixed", Some(*s)),
        Some(Standardize::Auto) => ("auto", r.standardization.get(&f.name).copied()),
    };
    let input = match scale {
        Some(s) => format!("(({}) - {}) / {}", f.expr, s.center, s.scale),
        None => f.expr.clone(),
    };
    json!({
        "name": f.name,
        "expr": f.expr,
        "fill": f.fill,
        "standardize": kind,
        "center": scale.map(|s| s.center),
        "scale": scale.map(|s| s.scale),
        "input": input,
    })
}

/// A pair feature and its formula over the two nodes' raw (not standardised) kinematics.
fn pair_recipe(p: PairFeature) -> Value {
    json!({"name": p.name(), "formula": p.formula()})
}
