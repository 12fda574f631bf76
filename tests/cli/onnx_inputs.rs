//! A model an analysis can use alone: on a real NanoAOD file (CMS Open Data), every family's ONNX
//! export run on `features`' output gives the logits `predict` gives, event by event — in tract
//! always, and with `--features python-tests` in ONNX Runtime ([`test_python`]).

use super::*;

/// The logits `predict` wrote, by entry.
fn predicted(npz: &Path) -> std::collections::BTreeMap<i64, Vec<f32>> {
    let table = gnn4c_data::read_predictions_npz(npz).expect("predictions");
    table
        .entry
        .iter()
        .zip(table.logits.chunks(table.n_out))
        .map(|(&e, l)| (e as i64, l.to_vec()))
        .collect()
}

#[test]
fn onnx_on_the_features_of_a_nanoaod_file_gives_predicts_logits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    copy_configs(cwd);
    let file = shared("data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root");
    let file = file.to_str().expect("utf-8");
    // Two classes from one file's halves: a model to export, not a physics result.
    std::fs::write(
        cwd.join("nano.yaml"),
        format!(
            "name: nano\ntree: Events\nschema: nanoaod\nclasses: [low, high]\nsamples:\n  - {{name: low, files: ['{file}'], label: 0, entry_stop: 100}}\n  - {{name: high, files: ['{file}'], label: 1, entry_start: 100}}\n"
        ),
    )
    .expect("write");
    std::fs::write(
        cwd.join("all.yaml"),
        format!(
            "name: nano_all\ntree: Events\nschema: nanoaod\nclasses: [low, high]\nsamples:\n  - {{name: all, files: ['{file}'], label: 0}}\n"
        ),
    )
    .expect("write");
    std::fs::write(
        cwd.join("run.yaml"),
        "name: nano\ndata: nano.yaml\ntask: binary\ntrainer: {batch_size: 32, max_epochs: 1, lr: 1.0e-3, seed: 3}\n",
    )
    .expect("write");
    for family in gnn4c_run::FAMILIES {
        let run = format!("runs/{family}");
        run_ok(
            cwd,
            &[
                "train",
                "run.yaml",
                "--run",
                &run,
                &format!("model={family}"),
            ],
        );
        let onnx = format!("{family}.onnx");
        run_ok(cwd, &["export", &run, "--out", &onnx]);
        let inputs = format!("{family}.npz");
        let out = run_ok(cwd, &["features", &run, file, "--out", &inputs]);
        assert!(out.contains("entry, event_number"), "{out}");
        let pred = format!("pred_{family}");
        run_ok(
            cwd,
            &[
                "predict", &run, "--data", "all.yaml", "--out", &pred, "--format", "npz",
            ],
        );
        let want = predicted(&cwd.join(&pred).join("predictions.npz"));

        // The model's inputs by name, then each event's file, entry and event number.
        let bytes = std::fs::read(cwd.join(&onnx)).expect("onnx");
        let names = onnx_input_names(family);
        let npz = cwd.join(&inputs);
        let model_inputs = gnn4c_testkit::npz_arrays(&npz, names);
        let ids = gnn4c_testkit::npz_arrays(&npz, &["file", "entry"]);
        let (gnn4c_family::ArrayValues::I64(files), gnn4c_family::ArrayValues::I64(entries)) =
            (&ids[0].values, &ids[1].values)
        else {
            panic!("file and entry i64");
        };
        assert!(files.iter().all(|&f| f == 0));
        assert!(entries.windows(2).all(|w| w[0] < w[1]), "entry order");
        assert_eq!(
            entries.to_vec(),
            want.keys().copied().collect::<Vec<_>>(),
            "{family}: the events predict scores"
        );
        let close = |runtime: &str, got: &[f32]| {
            assert_eq!(
                got.len(),
                entries.len(),
                "{family} {runtime}: one logit an event"
            );
            for ((e, g), w) in entries.iter().zip(got).zip(want.values()) {
                assert!(
                    (g - w[0]).abs() <= 1e-5,
                    "{family} {runtime}, entry {e}: {g} against predict's {}",
                    w[0]
                );
            }
        };
        close("tract", &gnn4c_testkit::tract_run(&bytes, &model_inputs));
        #[cfg(feature = "python-tests")]
        {
            let printed = test_python("run_onnx.py", &[&cwd.join(&onnx), &npz]);
            let v: serde_json::Value = serde_json::from_str(&printed).expect("JSON");
            let got: Vec<f32> = v["logits"]
                .as_array()
                .expect("logits")
                .iter()
                .map(|row| row[0].as_f64().expect("logit") as f32)
                .collect();
            close("ONNX Runtime", &got);
        }
    }

    // Bad input is named: a file that is not there.
    let o = run(
        cwd,
        &["features", "runs/pfn", "missing.root", "--out", "x.npz"],
    );
    assert!(!o.status.success());
    assert!(text(&o).1.contains("missing.root"), "{}", text(&o).1);
    assert!(!cwd.join("x.npz").exists());
}
