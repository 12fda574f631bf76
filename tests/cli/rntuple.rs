//! An RNTuple dataset through the product: `inspect` lists it, and `preprocess` → `train` →
//! `predict` on ROOT's RNTuple import of the NanoAOD-like test file give the cache of its TTree
//! twin, feature for feature.

use super::*;

fn config(name: &str, file: &Path) -> String {
    format!(
        "name: {name}\ntree: Events\nschema: nanoaod\nclasses: [first, second]\nsamples:\n  - {{name: first, files: ['{f}'], label: 0, entry_stop: 1000}}\n  - {{name: second, files: ['{f}'], label: 1, entry_start: 1000}}\n",
        f = file.display()
    )
}

/// Every cached event of the cache in `dir`, without its file's name, in cache order.
fn cached(dir: &Path) -> Vec<gnn4c_data::EventRecord> {
    let manifest = gnn4c_data::read_manifest(dir).expect("manifest");
    gnn4c_data::read_cache(dir, &manifest, &|_| true)
        .expect("cache")
        .into_iter()
        .map(|mut r| {
            r.id.source_file = std::sync::Arc::from(Path::new(""));
            r
        })
        .collect()
}

#[test]
fn an_rntuple_trains_and_predicts_with_its_ttree_twins_features() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let ntuple = shared("data/rntuple/nano_rntuple_zstd.root");
    let tree = shared("data/generated/nano_zlib1.root");
    let ok = |args: &[&str]| run_ok(cwd, args);

    let listed = ok(&[
        "inspect",
        "--filter",
        "Jet_pt",
        ntuple.to_str().expect("utf-8"),
    ]);
    assert!(
        listed.contains("RNTuple 'Events': 2000 entries, 1 clusters")
            && listed.contains("schema: nanoaod")
            && listed.contains("_collection1.Jet_pt"),
        "{listed}"
    );

    std::fs::write(cwd.join("ntuple.yaml"), config("nano_ntuple", &ntuple)).expect("write");
    std::fs::write(cwd.join("tree.yaml"), config("nano_tree", &tree)).expect("write");
    ok(&["preprocess", "ntuple.yaml"]);
    ok(&["preprocess", "tree.yaml"]);
    let (a, b) = (
        cached(&cwd.join("cache/nano_ntuple")),
        cached(&cwd.join("cache/nano_tree")),
    );
    assert!(a.len() > 1000, "{} events", a.len());
    assert_eq!(a, b, "the RNTuple's cache equals its TTree twin's");

    std::fs::write(
        cwd.join("exp.yaml"),
        "name: nt\ndata: ntuple.yaml\ntask: binary\ntrainer: {batch_size: 64, max_epochs: 1, seed: 3, checkpoint_every_steps: null}\n",
    )
    .expect("write");
    ok(&["train", "exp.yaml", "--run", "runs/nt"]);
    ok(&["predict", "runs/nt"]);
    assert!(
        cwd.join("runs/nt/predictions/nano_ntuple_test/predictions.npz")
            .is_file()
    );

    // A file with neither a TTree nor this RNTuple: the error names what it holds.
    std::fs::write(
        cwd.join("wrong.yaml"),
        config("wrong", &ntuple).replace("tree: Events", "tree: Event"),
    )
    .expect("write");
    let o = run(cwd, &["preprocess", "wrong.yaml"]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("no tree or RNTuple 'Event'") && text(&o).1.contains("Events"),
        "{}",
        text(&o).1
    );
}
