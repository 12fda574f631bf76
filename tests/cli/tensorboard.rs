//! A run's TensorBoard event files, read by TensorBoard's own reader (`EventAccumulator`, from
//! PyPI's `tensorboard` in the test venv, [`test_python`]): the per-epoch scalars equal
//! `history.jsonl`, the test metrics `metrics.json`, the per-step lines come every
//! `log_every_steps`, the hparams plugin holds the run's settings, and a run resumed from an
//! earlier checkpoint leaves each step once. Built with `--features python-tests`.

use super::*;

/// TensorBoard's view of the event files in `folder`: `{"scalars": {tag: [[step, value]…]},
/// "hparams": {tag: HParamsPluginData as JSON}}`.
fn read_events(folder: &Path) -> serde_json::Value {
    serde_json::from_str(&test_python("read_events.py", &[folder])).expect("JSON")
}

/// A tag's (step, value) pairs.
fn series(events: &serde_json::Value, tag: &str) -> Vec<(u64, f32)> {
    events["scalars"][tag]
        .as_array()
        .unwrap_or_else(|| panic!("no scalar {tag}"))
        .iter()
        .map(|p| {
            (
                p[0].as_u64().expect("step"),
                p[1].as_f64().expect("value") as f32,
            )
        })
        .collect()
}

#[test]
fn tensorboard_reads_the_runs_scalars_and_hparams_equal_to_its_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    run_ok(cwd, &["generate", "--out", "demo", "--events", "150"]);
    write_demo_configs(cwd);
    let train = |epochs: u64, resume: bool| {
        let epochs = format!("trainer.max_epochs={epochs}");
        let mut args = vec!["train", "pre.yaml", "--run", "runs/tb", &epochs];
        args.push("trainer.log_every_steps=4");
        if resume {
            args.push("--resume");
        }
        run_ok(cwd, &args);
    };
    // One epoch; its end-of-epoch checkpoint kept. Then a second epoch, and from the kept
    // checkpoint again to three: as a run killed after logging epoch 2 but before its
    // checkpoint, resumed. TensorBoard must show epoch 2 once, as the rerun logged it.
    let run = cwd.join("runs/tb");
    train(1, false);
    let kept = std::fs::read(run.join("last.ckpt")).expect("checkpoint");
    train(2, true);
    std::fs::write(run.join("last.ckpt"), kept).expect("restore");
    train(3, true);

    let events = read_events(&run.join("tensorboard"));
    let history: Vec<serde_json::Value> = std::fs::read_to_string(run.join("history.jsonl"))
        .expect("history")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(history.len(), 3);
    let steps: Vec<u64> = history
        .iter()
        .map(|h| h["global_step"].as_u64().expect("step"))
        .collect();
    let f = |v: &serde_json::Value| v.as_f64().expect("number") as f32;
    // Each epoch tag against its history field (a JSON pointer into the epoch's line).
    for (tag, field) in [
        ("epoch/epoch", "/epoch"),
        ("epoch/lr", "/lr"),
        ("epoch/train_loss", "/train_loss"),
        ("epoch/val_objective", "/val_objective"),
        ("epoch/val_loss", "/val/loss"),
        ("epoch/val_accuracy", "/val/accuracy"),
        ("epoch/val_auc_macro", "/val/auc_macro"),
        ("epoch/val_auc/ttH", "/val/auc/4"),
        ("epoch/train_accuracy", "/train/accuracy"),
        ("epoch/train_auc_macro", "/train/auc_macro"),
    ] {
        let want: Vec<(u64, f32)> = history
            .iter()
            .zip(&steps)
            .map(|(h, &s)| (s, f(h.pointer(field).expect(field))))
            .collect();
        assert_eq!(series(&events, tag), want, "{tag}");
    }

    // A line every 4 steps, each step once, over the whole run.
    let last = *steps.last().expect("steps");
    let want: Vec<u64> = (1..=last / 4).map(|k| 4 * k).collect();
    for tag in ["train/loss", "train/lr", "train/events_per_s"] {
        let got: Vec<u64> = series(&events, tag).iter().map(|p| p.0).collect();
        assert_eq!(got, want, "{tag}");
    }
    // Each step's learning rate is its epoch's.
    for (s, lr) in series(&events, "train/lr") {
        let epoch = steps
            .iter()
            .position(|&end| s <= end)
            .expect("a step of the run");
        assert_eq!(lr, f(&history[epoch]["lr"]), "step {s}");
    }
    assert!(
        series(&events, "train/loss")
            .iter()
            .all(|p| p.1.is_finite() && p.1 > 0.0)
    );

    // Each finished session's best model on the test split, at its last step: the first's
    // (1 epoch) and the last's (the second's, past the restart, is dropped); the last as
    // metrics.json has it.
    let metrics = json(&run.join("metrics.json"));
    for (tag, field) in [("test/auc_macro", "auc_macro"), ("test/loss", "loss")] {
        let got = series(&events, tag);
        let at: Vec<u64> = got.iter().map(|p| p.0).collect();
        assert_eq!(at, vec![steps[0], last], "{tag}");
        assert_eq!(got[1].1, f(&metrics["test"][field]), "{tag}");
    }

    // The hparams plugin: the settings the run started with, and a finished session.
    let hp = &events["hparams"];
    let start = &hp["_hparams_/session_start_info"]["sessionStartInfo"]["hparams"];
    assert_eq!(start["trainer.lr"], 1.0e-3, "{start}");
    assert_eq!(start["trainer.max_epochs"], 1.0, "{start}");
    assert_eq!(start["trainer.class_balance"], true, "{start}");
    assert_eq!(start["data"], "pre", "{start}");
    assert_eq!(start["task"], "multiclass", "{start}");
    let names = start.as_object().expect("hparams");
    assert!(names.keys().any(|k| k.starts_with("model.")), "{start}");
    // No experiment summary: TensorBoard makes it from the runs' sessions (a sweep's side by side).
    assert!(hp.get("_hparams_/experiment").is_none(), "{hp}");
    assert_eq!(
        hp["_hparams_/session_end_info"]["sessionEndInfo"]["status"],
        "STATUS_SUCCESS"
    );

    // Off with a setting: no folder.
    run_ok(
        cwd,
        &[
            "train",
            "pre.yaml",
            "--run",
            "runs/off",
            "trainer.max_epochs=1",
            "trainer.tensorboard=false",
        ],
    );
    assert!(!cwd.join("runs/off/tensorboard").exists());
}
