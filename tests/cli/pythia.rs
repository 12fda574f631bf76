//! The Pythia 8 benchmark kept working: its generator (`benchmarks/pythia/generate.py`: Pythia 8
//! and FastJet from PyPI, in the Python `GNN4C_PYTHIA_PYTHON` names) makes a small sample of
//! every process, the same again from its seeds, and the shipped `pythia_*` configs run
//! preprocess → pretrain → fine-tune and the from-scratch baseline on it. Built with
//! `--features pythia-tests`; CI makes the venv from `benchmarks/pythia/requirements.txt`.

use std::path::PathBuf;

use super::*;

fn python() -> String {
    std::env::var("GNN4C_PYTHIA_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn generator() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benchmarks/pythia/generate.py")
}

/// `generate.py OUT ARGS…` in `cwd`; its stderr.
fn generate(cwd: &Path, out: &str, args: &[&str]) -> String {
    let o = Command::new(python())
        .current_dir(cwd)
        .arg(generator())
        .arg(out)
        .args(args)
        .output()
        .expect("the Python of GNN4C_PYTHIA_PYTHON runs");
    let (stdout, stderr) = text(&o);
    assert!(
        o.status.success(),
        "generate.py {out} {args:?} with {} (GNN4C_PYTHIA_PYTHON):\n{stdout}{stderr}",
        python()
    );
    stderr
}

/// The classes a dataset config lists, in order.
fn config_classes(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("config");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("classes: ["))
        .expect("a classes line");
    line.trim_end_matches(']')
        .split(',')
        .map(|c| c.trim().to_owned())
        .collect()
}

#[test]
fn a_pythia_sample_is_made_again_from_its_seeds_and_trains_with_the_shipped_configs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    copy_configs(cwd);
    #[rustfmt::skip]
    let small = ["--events", "120", "--cp-events", "300", "--files", "1", "--jobs", "2"];
    let first = generate(cwd, "data/pythia", &small);
    assert!(first.contains("13 of 13 files to generate"), "{first}");

    // Every process of the configs, as many events as asked, in the configs' order.
    let samples = json(&cwd.join("data/pythia/samples.json"));
    let classes = |key: &str| -> Vec<String> {
        samples[key]
            .as_array()
            .expect("classes")
            .iter()
            .map(|c| c.as_str().expect("name").to_owned())
            .collect()
    };
    assert_eq!(
        classes("classes"),
        config_classes(&cwd.join("configs/data/pythia_pretrain.yaml"))
    );
    assert_eq!(classes("cp_classes"), ["ttH_CPeven", "ttH_CPodd"]);
    let files = samples["files"].as_array().expect("files");
    assert_eq!(files.len(), 13);
    for f in files {
        let want = if f["group"] == "cp" { 300 } else { 120 };
        assert_eq!(f["events"], want, "{f}");
        assert!(
            cwd.join("data/pythia")
                .join(f["file"].as_str().expect("path"))
                .is_file()
        );
    }

    // A rerun keeps what is there; a fresh folder gets the same events from the same seeds.
    let again = generate(cwd, "data/pythia", &small);
    assert!(again.contains("0 of 13 files to generate"), "{again}");
    generate(
        cwd,
        "again",
        &[
            "--only",
            "cp",
            "--cp-events",
            "40",
            "--files",
            "1",
            "--jobs",
            "1",
        ],
    );
    let same = Command::new(python())
        .current_dir(cwd)
        .args([
            "-c",
            "import sys, uproot, awkward as ak\n\
             a = uproot.open('data/pythia/cp/ttH_CPodd_0.root')['Events'].arrays(entry_stop=40)\n\
             b = uproot.open('again/cp/ttH_CPodd_0.root')['Events'].arrays()\n\
             sys.exit(0 if a.fields == b.fields and all(ak.all(a[f] == b[f], axis=None) \
             for f in a.fields) else 1)",
        ])
        .status()
        .expect("python runs");
    assert!(same.success(), "the same seed gave other events");

    // The shipped configs, end to end on the sample.
    let ok = |args: &[&str]| run_ok(cwd, args);
    ok(&["preprocess", "configs/data/pythia_pretrain.yaml"]);
    ok(&["preprocess", "configs/data/pythia_cp.yaml"]);
    let quick = ["trainer.max_epochs=1", "--no-progress"];
    ok(&[
        &["train", "pythia_pretrain", "--run", "runs/pre"][..],
        &quick,
    ]
    .concat());
    let tuned = [
        "finetune",
        "pythia_cp",
        "--from",
        "runs/pre/best.ckpt",
        "--mode",
        "full",
        "subset.train_events=100",
        "--run",
        "runs/full",
    ];
    ok(&[&tuned[..], &quick].concat());
    let scratch = [
        "train",
        "pythia_cp",
        "subset.train_events=100",
        "--run",
        "runs/scratch",
    ];
    ok(&[&scratch[..], &quick].concat());
    for run in ["pre", "full", "scratch"] {
        let m = json(&cwd.join("runs").join(run).join("metrics.json"));
        let auc = m["test"]["auc_macro"].as_f64();
        assert!(
            auc.is_some_and(|a| (0.0..=1.0).contains(&a)),
            "runs/{run}: test AUC {auc:?}"
        );
    }
}
