//! A dataset's own inputs, declared in YAML alone: a tau collection, jet and lepton variables
//! and a global from the CMS NanoAOD file, through preprocess, both families and predict.

use super::*;

fn declaration(file: &Path, qgl_branch: &str) -> String {
    format!(
        r#"name: nano_custom
tree: Events
classes: [first, second]
inputs:
  event_number: event
  weight: genWeight
  objects:
    - name: jets
      pt: Jet_pt
      eta: Jet_eta
      phi: Jet_phi
      mass: Jet_mass
      fields: {{btag: Jet_btagDeepB > 0.6321, qgl: {qgl_branch}}}
      select: pt >= 25 && abs(eta) <= 4.5
      max_objects: 12
    - name: electrons
      pt: Electron_pt
      eta: Electron_eta
      phi: Electron_phi
      mass: 0.000511
      fields: {{charge: sign(Electron_charge), iso: Electron_pfRelIso03_all}}
      select: pt >= 10 && abs(eta) <= 2.5
      max_objects: 4
    - name: muons
      pt: Muon_pt
      eta: Muon_eta
      phi: Muon_phi
      mass: 0.10566
      fields: {{charge: sign(Muon_charge), iso: Muon_pfRelIso04_all}}
      select: pt >= 10 && abs(eta) <= 2.5
      max_objects: 4
    - name: taus
      pt: Tau_pt
      eta: Tau_eta
      phi: Tau_phi
      mass: Tau_mass
      fields: {{charge: sign(Tau_charge)}}
      select: pt >= 20 && abs(eta) <= 2.3
      max_objects: 4
    - {{name: met, single: true, pt: MET_pt, eta: 0, phi: MET_phi}}
  node_features:
    - {{name: pt, expr: log(pt), standardize: auto}}
    - {{name: eta, expr: eta, standardize: {{scale: 3}}}}
    - {{name: phi, expr: phi, standardize: {{scale: 3.141592653589793}}}}
    - {{name: energy, expr: e, standardize: {{scale: 100}}}}
    - {{name: btag, expr: btag, fill: 0}}
    - {{name: charge, expr: charge, fill: 0}}
    - {{name: type, expr: type}}
    - {{name: qgl, expr: qgl, fill: -1}}
    - {{name: iso, expr: 'min(iso, 1)', fill: -1}}
  globals:
    - {{name: n_nodes, expr: n_nodes, standardize: {{scale: 10}}}}
    - {{name: ht, expr: sum(jets.pt), standardize: {{scale: 1000}}}}
    - {{name: npv, expr: PV_npvs, standardize: auto}}
  pairs: [deta, dphi, dr, mass, log_kt]
samples:
  - {{name: first, files: ['{f}'], label: 0, entry_stop: 100}}
  - {{name: second, files: ['{f}'], label: 1, entry_start: 100}}
"#,
        f = file.display()
    )
}

#[test]
fn a_declared_tau_collection_and_new_variables_train_both_families() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let nano = shared("data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root");
    let ok = |args: &[&str]| run_ok(cwd, args);

    // A misspelt branch: one line, exit 2, the closest branch named, before any event is read.
    std::fs::write(cwd.join("typo.yaml"), declaration(&nano, "Jet_qgll")).expect("write");
    let o = run(cwd, &["preprocess", "typo.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("Jet_qgll")
            && err.contains("closest branch: Jet_qgl")
            && err.contains("typo.yaml"),
        "{err}"
    );
    assert!(!cwd.join("cache/nano_custom").exists());

    let o = run(
        cwd,
        &[
            "inspect",
            "--inputs",
            "typo.yaml",
            nano.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(
        text(&o).1.contains("closest branch: Jet_qgl"),
        "{}",
        text(&o).1
    );

    std::fs::write(cwd.join("custom.yaml"), declaration(&nano, "Jet_qgl")).expect("write");
    // What the model will see, before anything is cached: the declaration and a first event.
    let shown = ok(&[
        "inspect",
        "--inputs",
        "custom.yaml",
        "--show",
        "1",
        nano.to_str().expect("utf-8"),
    ]);
    assert!(
        shown.contains("taus") && shown.contains("pairs    deta, dphi, dr, mass, log_kt"),
        "{shown}"
    );
    assert!(
        shown.contains("tree 'Events': ") && shown.contains("qgl"),
        "{shown}"
    );
    assert!(
        !cwd.join("cache/nano_custom").exists(),
        "inspect writes nothing"
    );
    ok(&["preprocess", "custom.yaml"]);
    let manifest = json(&cwd.join("cache/nano_custom/manifest.json"));
    assert_eq!(
        manifest["features"]["node"].as_array().map(Vec::len),
        Some(9),
        "{manifest}"
    );
    assert_eq!(manifest["features"]["global"][2], "npv", "{manifest}");
    assert_eq!(manifest["features"]["pair"][3], "mass", "{manifest}");
    std::fs::write(
        cwd.join("exp.yaml"),
        "name: custom\ndata: custom.yaml\ntask: binary\ntrainer: {batch_size: 32, max_epochs: 1, seed: 3, checkpoint_every_steps: null}\n",
    )
    .expect("write");
    for family in ["root_gnn", "root_transformer"] {
        let run_dir = format!("runs/{family}");
        ok(&[
            "train",
            "exp.yaml",
            &format!("model={family}"),
            "--run",
            &run_dir,
        ]);
        let config = json(&cwd.join(&run_dir).join("config.json"));
        assert_eq!(config["model"]["d_node"], 9, "{family}: {config}");
        // `auto`: the training folds' (2, 3, 4) mean and standard deviation, as recorded.
        for feature in ["pt", "npv"] {
            let (count, sum) = manifest["shards"]
                .as_array()
                .expect("shards")
                .iter()
                .filter(|s| s["fold"].as_u64().is_some_and(|f| f >= 2))
                .map(|s| &s["moments"][feature])
                .fold((0.0, 0.0), |(n, t), m| {
                    let c = m["count"].as_f64().expect("count");
                    (n + c, t + c * m["mean"].as_f64().expect("mean"))
                });
            let s = &config["standardization"][feature];
            let center = s["center"].as_f64().expect("center");
            assert!(
                (center - sum / count).abs() < 1e-9 * center.abs().max(1.0),
                "{feature}: {s}"
            );
            assert!(s["scale"].as_f64().expect("scale") > 0.0, "{feature}: {s}");
        }
        assert_eq!(config["model"]["d_global"], 3, "{family}: {config}");
        let d_pair = if family == "root_gnn" {
            "d_edge"
        } else {
            "d_pair"
        };
        assert_eq!(config["model"][d_pair], 5, "{family}: {config}");
        ok(&["predict", &run_dir]);
        assert!(
            cwd.join(&run_dir)
                .join("predictions/nano_custom_test/predictions.npz")
                .is_file()
        );
    }
    // The widths are the declaration's, never a setting.
    let o = run(
        cwd,
        &["train", "exp.yaml", "model.d_node=7", "--run", "runs/x"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o)
            .1
            .contains("set by the dataset's input declaration"),
        "{}",
        text(&o).1
    );
}
