//! Every model family through the same commands, configs and event cache: generate →
//! preprocess → train → resume → finetune → evaluate → predict → export.

use super::*;

/// The weights outside the head (`classify.*`), by PyTorch name.
fn backbone(bits: Vec<(String, Vec<u32>)>) -> Vec<(String, Vec<u32>)> {
    bits.into_iter()
        .filter(|(k, _)| !k.starts_with("classify"))
        .collect()
}

#[test]
fn every_family_trains_resumes_finetunes_evaluates_and_predicts_from_one_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let ok = |args: &[&str]| run_ok(cwd, args);
    ok(&["generate", "--out", "demo", "--events", "150"]);
    write_demo_configs(cwd);
    ok(&["preprocess", "pre_data.yaml"]);
    let cache_before = folder_files(&cwd.join("cache/pre"));

    // A family the registry does not know is a config error naming the families.
    let o = run(cwd, &["train", "pre.yaml", "model.name=transformer"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(
        text(&o).1.contains(&gnn4c_run::FAMILIES.join(", ")),
        "{}",
        text(&o).1
    );

    // Setting the name over another family's group file names the keys that do not fit and
    // how to switch families.
    let o = run(
        cwd,
        &[
            "train",
            "pre.yaml",
            "model=root_gnn",
            "model.name=root_transformer",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(
        text(&o)
            .1
            .contains("unknown key `model.d_hidden` for model root_transformer")
            && text(&o).1.contains("`model=root_transformer`"),
        "{}",
        text(&o).1
    );

    for (k, &family) in gnn4c_run::FAMILIES.iter().enumerate() {
        let model = format!("model={family}");
        let pre = format!("runs/{family}_pre");
        let small = [
            "trainer.max_epochs=2",
            "trainer.checkpoint_every_steps=null",
        ];
        let mut args = vec!["train", "pre.yaml", model.as_str(), "--run", pre.as_str()];
        args.extend(small);
        ok(&args);
        let run_dir = cwd.join(&pre);
        let config = json(&run_dir.join("config.json"));
        assert_eq!(config["model"]["name"], family, "{config}");
        assert_eq!(config["model"]["n_out"], 12, "{config}");
        let history = std::fs::read_to_string(run_dir.join("history.jsonl")).expect("history");
        assert_eq!(history.lines().count(), 2, "{history}");
        let metrics = json(&run_dir.join("metrics.json"));
        let auc = metrics["test"]["auc_macro"].as_f64().expect("test AUC");
        assert!((0.5..=1.0).contains(&auc), "{family}: test AUC {auc}");
        assert!(run_dir.join("best.safetensors").is_file());

        // Resume: one epoch, then the second, gives the straight run's bytes.
        let res = format!("runs/{family}_res");
        ok(&[
            "train",
            "pre.yaml",
            &model,
            "--run",
            &res,
            "trainer.max_epochs=1",
            "trainer.checkpoint_every_steps=null",
        ]);
        let out = ok(&[
            "train",
            "pre.yaml",
            &model,
            "--run",
            &res,
            "--resume",
            "trainer.max_epochs=2",
            "trainer.checkpoint_every_steps=null",
        ]);
        assert!(out.contains("resuming after epoch 1"), "{out}");
        assert_eq!(
            std::fs::read(cwd.join(&res).join("last.ckpt")).expect("resumed"),
            std::fs::read(run_dir.join("last.ckpt")).expect("straight"),
            "{family}: a resumed run writes the straight run's checkpoint"
        );

        // Fine-tuning with a frozen backbone trains the new head alone.
        let ft = format!("runs/{family}_ft");
        let from = format!("{pre}/best.ckpt");
        let out = ok(&[
            "finetune",
            "ft.yaml",
            &model,
            "--from",
            &from,
            "--mode",
            "frozen_backbone",
            "--run",
            &ft,
        ]);
        assert!(out.contains(&format!("model {family}")), "{out}");
        let ft_dir = cwd.join(&ft);
        assert_eq!(json(&ft_dir.join("config.json"))["model"]["n_out"], 1);
        assert_eq!(
            backbone(checkpoint_bits(&ft_dir.join("best.ckpt"))),
            backbone(checkpoint_bits(&run_dir.join("best.ckpt"))),
            "{family}: a frozen backbone keeps the pretrained weights"
        );
        assert_ne!(
            checkpoint_bits(&ft_dir.join("best.ckpt")).len(),
            backbone(checkpoint_bits(&ft_dir.join("best.ckpt"))).len(),
            "the head is there"
        );
        // Another family's checkpoint is refused, naming what to select.
        let other = gnn4c_run::FAMILIES[(k + 1) % gnn4c_run::FAMILIES.len()];
        let o = run(
            cwd,
            &[
                "finetune",
                "ft.yaml",
                &format!("model={other}"),
                "--from",
                &from,
                "--run",
                "runs/mismatch",
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
        assert!(
            text(&o)
                .1
                .contains(&format!("select it with model={family}")),
            "{}",
            text(&o).1
        );

        // Evaluate and predict read the family from the run's config.json.
        ok(&["evaluate", &ft]);
        let evaluation = json(&ft_dir.join("evaluation/ft_test/metrics.json"));
        let events = evaluation["events"].as_u64().expect("events");
        assert!(events > 0, "{evaluation}");
        assert!(
            evaluation["metrics"]["loss"]
                .as_f64()
                .is_some_and(f64::is_finite),
            "{evaluation}"
        );
        ok(&["predict", &ft, "--split", "all", "--format", "npz"]);
        assert!(ft_dir.join("predictions/ft_all/predictions.npz").is_file());
        let exported = cwd.join(format!("{family}.safetensors"));
        let out = ok(&["export", &pre, "--out", exported.to_str().expect("utf-8")]);
        assert!(out.contains(family), "{out}");
        assert_eq!(
            std::fs::read(&exported).expect("export"),
            std::fs::read(run_dir.join("best.safetensors")).expect("best"),
            "export writes the run's best weights"
        );

        // ONNX, 12-class and binary: tract runs the model on the sample batch of test events
        // the export wrote beside it, and gives the logits Burn gave.
        for (from, outputs) in [(&pre, 12), (&ft, 1)] {
            let onnx = cwd.join(format!("{family}_{outputs}.onnx"));
            let out = ok(&["export", from, "--out", onnx.to_str().expect("utf-8")]);
            assert!(
                out.contains("as an ONNX model") && out.contains("sample.npz"),
                "{out}"
            );
            let bytes = std::fs::read(&onnx).expect("onnx");
            check_recipe(&onnx, &bytes, &cwd.join(from));
            let names = onnx_input_names(family);
            let sample = gnn4c_run::sample_path(&onnx);
            let inputs = gnn4c_testkit::npz_arrays(&sample, names);
            let got = gnn4c_testkit::tract_run(&bytes, &inputs);
            let want = match &gnn4c_testkit::npz_arrays(&sample, &["logits"])[0].values {
                gnn4c_family::ArrayValues::F32(v) => v.clone(),
                other => panic!("logits: {other:?}"),
            };
            assert_eq!(got.len(), want.len(), "{family}: {} logits", want.len());
            // The first 64 test events, or all of them where there are fewer.
            let events = want.len() / outputs;
            assert!(
                events > 0 && events <= gnn4c_run::SAMPLE_EVENTS && want.len() == events * outputs,
                "{family}: {} logits for {outputs} outputs",
                want.len()
            );
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "{family} {outputs} outputs, logit {k}: tract {g}, Burn {w}"
                );
            }
        }
    }
    // One event cache served every family: no second cache, the first one untouched.
    assert_eq!(folder_files(&cwd.join("cache/pre")), cache_before);
    let caches: Vec<_> = std::fs::read_dir(cwd.join("cache"))
        .expect("cache/")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(caches.len(), 2, "pre and ft: {caches:?}");
}

/// The input recipe beside an ONNX export of run `run` and in its metadata: the same JSON, and
/// from it alone every input's formula with its numbers (the run's `auto` scales included).
fn check_recipe(onnx: &Path, bytes: &[u8], run: &Path) {
    let recipe = json(&gnn4c_run::recipe_path(onnx));
    let metadata = gnn4c_testkit::onnx_metadata(bytes);
    let embedded: serde_json::Value =
        serde_json::from_str(&metadata["gnn4colliders.inputs"]).expect("JSON");
    assert_eq!(embedded, recipe);
    assert_eq!(recipe["recipe_version"], gnn4c_run::RECIPE_VERSION);
    let config = json(&run.join("config.json"));
    let auto = &config["standardization"];
    for (list, names) in [
        ("node_features", "node_features"),
        ("global_features", "global_features"),
    ] {
        let features = recipe[list].as_array().expect(list);
        let want: serde_json::Value = serde_json::from_str(&metadata[names]).expect("names");
        let got: Vec<&serde_json::Value> = features.iter().map(|f| &f["name"]).collect();
        assert_eq!(serde_json::json!(got), want, "{list} in input order");
        for f in features {
            let input = f["input"].as_str().expect("input");
            assert!(input.contains(f["expr"].as_str().expect("expr")), "{f}");
            match f["standardize"].as_str().expect("kind") {
                "none" => assert_eq!(input, f["expr"], "{f}"),
                kind => {
                    let (center, scale) = (&f["center"], &f["scale"]);
                    assert!(center.is_f64() && scale.is_f64(), "{f}");
                    if kind == "auto" {
                        let name = f["name"].as_str().expect("name");
                        assert_eq!(center, &auto[name]["center"], "{f}");
                        assert_eq!(scale, &auto[name]["scale"], "{f}");
                    }
                }
            }
        }
    }
    for p in recipe["pair_features"].as_array().expect("pairs") {
        assert!(p["formula"].as_str().is_some_and(|s| !s.is_empty()), "{p}");
    }
    let collections = recipe["collections"].as_array().expect("collections");
    assert!(!collections.is_empty());
    for (i, c) in collections.iter().enumerate() {
        assert_eq!(c["type"], i, "{c}");
        assert!(c["name"].is_string() && c["pt"].is_string(), "{c}");
    }
}
