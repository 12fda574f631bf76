//! What a run tells TensorBoard besides the loop's scalars: the names of the model's outputs
//! and the run's hyperparameters (the `hparams` plugin's table), from its resolved config.

use gnn4c_tasks::Task;
use gnn4c_training::{EventWriter, HParam};

use crate::run_dir::RunDir;
use crate::settings::ResolvedRun;

/// A new event file in the run folder's `tensorboard/`; a run's first also holds its
/// hyperparameters (TensorBoard keeps the first it reads: a resumed run's are the same, but
/// for what a resume may change).
pub(crate) fn open_board(
    run_dir: &RunDir,
    r: &ResolvedRun,
    resumed: bool,
) -> anyhow::Result<EventWriter> {
    let mut board = EventWriter::create(&run_dir.tensorboard(), output_names(r))?;
    if !resumed {
        board.hparams_start(&hparams(r))?;
    }
    Ok(board)
}

/// The model's outputs by class name (a binary model's one output is its last class's score).
fn output_names(r: &ResolvedRun) -> Vec<String> {
    match r.task {
        Task::Binary => r.dataset.classes.last().cloned().into_iter().collect(),
        Task::Multiclass { .. } | Task::Multilabel { .. } => r.dataset.classes.clone(),
    }
}

/// The dataset, the task, and every `trainer.` and `model.` setting, flattened to dotted names.
fn hparams(r: &ResolvedRun) -> Vec<(String, HParam)> {
    let mut out = vec![
        ("data".to_owned(), HParam::Text(r.dataset.name.clone())),
        ("task".to_owned(), HParam::Text(task_name(r.task).into())),
    ];
    for (prefix, value) in [
        ("trainer", serde_json::to_value(&r.run.trainer)),
        ("model", serde_json::to_value(&r.model)),
    ] {
        if let Ok(v) = value {
            flatten(prefix, &v, &mut out);
        }
    }
    out
}

fn task_name(t: Task) -> &'static str {
    match t {
        Task::Binary => "binary",
        Task::Multiclass { .. } => "multiclass",
        Task::Multilabel { .. } => "multilabel",
    }
}

/// `v`'s scalars under `name` (objects by dotted keys; lists and nulls as their JSON text).
fn flatten(name: &str, v: &serde_json::Value, out: &mut Vec<(String, HParam)>) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                flatten(&format!("{name}.{k}"), v, out);
            }
        }
        Value::Number(n) => out.push((name.into(), HParam::Number(n.as_f64().unwrap_or(f64::NAN)))),
        Value::Bool(b) => out.push((name.into(), HParam::Flag(*b))),
        Value::String(s) => out.push((name.into(), HParam::Text(s.clone()))),
        Value::Array(_) | Value::Null => out.push((name.into(), HParam::Text(v.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_flatten_to_dotted_names_of_their_kind() {
        let mut out = Vec::new();
        let v = serde_json::json!({"lr": 1e-3, "block": {"width": 4, "residual": true},
            "name": "root_gnn", "widths": [8, 8], "limit": null});
        flatten("model", &v, &mut out);
        out.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            out,
            vec![
                ("model.block.residual".into(), HParam::Flag(true)),
                ("model.block.width".into(), HParam::Number(4.0)),
                ("model.limit".into(), HParam::Text("null".into())),
                ("model.lr".into(), HParam::Number(1e-3)),
                ("model.name".into(), HParam::Text("root_gnn".into())),
                ("model.widths".into(), HParam::Text("[8,8]".into())),
            ]
        );
    }
}
