//! Drives the `gnn4colliders` binary end to end on real files: exit codes, outputs, error texts.

use std::path::Path;

use gnn4c_testkit::shared;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gnn4colliders"))
}

fn run(cwd: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn generate_inspect_scan_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let o = run(
        cwd,
        &[
            "generate", "--out", "demo", "--events", "200", "--seed", "3",
        ],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("wrote 2800 events in 14 files"), "{out}");
    assert!(cwd.join("demo/pretrain/tttt.root").is_file());
    assert!(cwd.join("demo/finetune/ttH_CPodd.root").is_file());

    // Same settings again: nothing to do. Other settings: refused without --overwrite.
    let o = run(
        cwd,
        &[
            "generate", "--out", "demo", "--events", "200", "--seed", "3",
        ],
    );
    assert!(o.status.success() && text(&o).0.contains("nothing to do"));
    let o = run(
        cwd,
        &[
            "generate", "--out", "demo", "--events", "100", "--seed", "3",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("--overwrite"), "{}", text(&o).1);

    let o = run(cwd, &["inspect", "demo/pretrain/ttH.root"]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    assert!(
        out.contains("tree 'output': 200 entries") && out.contains("schema: vector"),
        "{out}"
    );
    assert!(
        out.contains("jet_btag") && out.contains("vector<int32_t>"),
        "{out}"
    );

    let config = "name: demo_finetune\ntree: output\nschema: vector\nsamples:\n  - {name: even, files: [demo/finetune/ttH_CPeven.root], label: 0}\n  - {name: odd, files: [\"demo/finetune/*odd*.root\"], label: 1}\n";
    std::fs::write(cwd.join("ft.yaml"), config).expect("write config");
    let o = run(cwd, &["scan", "ft.yaml"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("even") && out.contains("odd") && out.contains("read 400 entries"),
        "{out}"
    );

    // A typo in a key: the error names the key and the file.
    std::fs::write(cwd.join("typo.yaml"), config.replace("schema:", "shema:")).expect("write");
    let o = run(cwd, &["scan", "typo.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("shema") && err.contains("typo.yaml"), "{err}");
}

#[test]
fn real_files_and_bad_input_from_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hzz = shared("data/real/uproot-HZZ.root");
    let o = run(dir.path(), &["inspect", hzz.to_str().expect("utf-8 path")]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    assert!(
        out.contains("2421 entries") && out.contains("schema: hzz"),
        "{out}"
    );
    assert!(
        out.contains("Jet_Px") && out.contains("leaf-count array"),
        "{out}"
    );

    let zstd = shared("data/real/uproot-HZZ-zstd.root");
    let o = run(dir.path(), &["inspect", zstd.to_str().expect("utf-8 path")]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("zstd") && err.contains("uproot-HZZ-zstd.root"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "no panic noise: {err}");

    let delphes = shared("data/real/uproot-issue513.root");
    let o = run(
        dir.path(),
        &["inspect", delphes.to_str().expect("utf-8 path")],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("TClonesArray") && !err.contains("panicked at"),
        "{err}"
    );

    // A wrong tree name in a dataset config: the closest trees are named.
    let cfg = format!(
        "name: h\ntree: Events\nschema: hzz\nsamples:\n  - {{name: h, files: ['{}'], label: 0}}\n",
        hzz.display()
    );
    std::fs::write(dir.path().join("h.yaml"), cfg).expect("write");
    let o = run(dir.path(), &["scan", "h.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("no tree 'Events'") && err.contains("events"),
        "{err}"
    );

    // The right tree: read, select, build graphs; 5 HZZ events have fewer than 2 nodes.
    std::fs::write(
        dir.path().join("h.yaml"),
        std::fs::read_to_string(dir.path().join("h.yaml"))
            .expect("read")
            .replace("Events", "events"),
    )
    .expect("write");
    let o = run(dir.path(), &["scan", "h.yaml", "--show", "1"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("2416") && out.contains("too_few_nodes: 5"),
        "{out}"
    );
    assert!(
        out.contains("h entry 0 (event 0): 3 nodes, 6 edges"),
        "{out}"
    );

    let o = run(dir.path(), &["scan", "missing.yaml"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("missing.yaml"));

    // Usage errors exit with 2; --help succeeds.
    assert_eq!(run(dir.path(), &["frobnicate"]).status.code(), Some(2));
    assert!(run(dir.path(), &["generate", "--help"]).status.success());
}

#[test]
fn preprocess_builds_validates_and_rebuilds_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    assert!(
        run(cwd, &["generate", "--out", "demo", "--events", "300"])
            .status
            .success()
    );
    let config = "name: ft\ntree: output\nschema: vector\nsamples:\n  - {name: even, files: [demo/finetune/ttH_CPeven.root], label: 0}\n  - {name: odd, files: [demo/finetune/ttH_CPodd.root], label: 1}\n";
    std::fs::write(cwd.join("ft.yaml"), config).expect("write config");
    let pre = |extra: &[&str]| {
        let mut a = vec!["preprocess", "ft.yaml", "--shard-events", "200"];
        a.extend_from_slice(extra);
        run(cwd, &a)
    };
    let o = pre(&[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("cache cache/ft: 599 events in 3 shards"),
        "{out}"
    );
    assert!(out.contains("events per fold"), "{out}");
    assert!(cwd.join("cache/ft/manifest.json").is_file());

    let o = pre(&[]);
    assert!(text(&o).0.contains("up to date"), "{}", text(&o).0);

    // A changed input file makes the cache stale: read_only refuses naming the field, auto rebuilds.
    let f = cwd.join("demo/finetune/ttH_CPodd.root");
    let bytes = std::fs::read(&f).expect("read");
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&f, bytes).expect("rewrite");
    let o = pre(&["--mode", "read-only"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("stale") && err.contains("files[1].mtime_ns"),
        "{err}"
    );
    let o = pre(&[]);
    assert!(text(&o).0.contains("rebuilding"), "{}", text(&o).0);

    // A cache killed half-way (no manifest) is never read.
    std::fs::remove_file(cwd.join("cache/ft/manifest.json")).expect("rm");
    let o = pre(&["--mode", "read-only"]);
    assert!(text(&o).1.contains("half-written"), "{}", text(&o).1);
    assert!(pre(&[]).status.success());
}
