//! Drives the `gnn4colliders` binary end to end on real files: exit codes, outputs, error texts.

use std::path::Path;

use gnn4c_testkit::shared;
use std::process::{Command, Output};

mod families;
mod inputs;
mod onnx_inputs;
#[cfg(feature = "pythia-tests")]
mod pythia;
#[cfg(feature = "remote-tests")]
mod remote;
mod rntuple;
#[cfg(feature = "slurm-tests")]
mod slurm;
mod sweep;
#[cfg(feature = "python-tests")]
mod tensorboard;

/// Runs `script` of `tests/cli/python/` with `args` in the test venv's Python
/// (`GNN4C_TEST_PYTHON`; `.ci/run` makes it from `tests/cli/python/requirements.txt`); its
/// standard output.
#[cfg(feature = "python-tests")]
fn test_python(script: &str, args: &[&Path]) -> String {
    let python = std::env::var("GNN4C_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/cli/python")
        .join(script);
    let o = Command::new(&python)
        .arg(path)
        .args(args)
        .output()
        .expect("the Python of GNN4C_TEST_PYTHON runs");
    let (stdout, stderr) = text(&o);
    assert!(
        o.status.success(),
        "{script} with {python} (GNN4C_TEST_PYTHON):\n{stderr}"
    );
    stdout
}

/// A family's ONNX inputs, in the graph's order (`docs/onnx.md`).
fn onnx_input_names(family: &str) -> &'static [&'static str] {
    match family {
        "root_gnn" => &[
            "node_features",
            "edge_features",
            "global_features",
            "edge_src",
            "edge_dst",
            "node_graph",
            "edge_graph",
        ],
        "root_transformer" => &["tokens", "padding", "globals", "pair"],
        "pfn" => &["objects", "object_event", "globals"],
        other => panic!("no ONNX inputs listed for the family {other}: add them here"),
    }
}

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

/// The binary with `args` in `cwd`, which must succeed (else the failure with its outputs);
/// its stdout.
#[track_caller]
fn run_ok(cwd: &Path, args: &[&str]) -> String {
    let o = run(cwd, args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?}\n{out}{err}");
    out
}

/// The binary with `args` (a shell word list) on a pseudo-terminal (util-linux's `script`), so
/// that it draws what it draws on a terminal; the terminal's output is the stdout.
fn run_on_terminal(cwd: &Path, args: &str) -> Output {
    let command = format!("'{}' {args}", env!("CARGO_BIN_EXE_gnn4colliders"));
    Command::new("script")
        .current_dir(cwd)
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("script runs")
}

/// A JSON file's value.
fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
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

    // A typo in a key: the error names the key and the file; a config error exits with 2.
    std::fs::write(cwd.join("typo.yaml"), config.replace("schema:", "shema:")).expect("write");
    let o = run(cwd, &["scan", "typo.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
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

    // A file that cannot be read does not hide the next one: both are reported, exit 1.
    let o = run(
        dir.path(),
        &["inspect", "missing.root", hzz.to_str().expect("utf-8 path")],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(out.contains("2421 entries"), "{out}");
    assert!(
        err.contains("missing.root") && err.contains("1 of 2 files"),
        "{err}"
    );
    // An OS error is printed once, after the path.
    let o = run(
        dir.path(),
        &["export", "runs/nope", "--out", "w.safetensors"],
    );
    let err = text(&o).1;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");

    // zstd, and a real Delphes file (split TClonesArray branches): read, with the schema named.
    let zstd = shared("data/real/uproot-HZZ-zstd.root");
    let o = run(dir.path(), &["inspect", zstd.to_str().expect("utf-8 path")]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("2421 entries") && out.contains("schema: hzz"),
        "{out}"
    );
    let delphes = shared("data/generated/delphes_gen.root");
    let o = run(
        dir.path(),
        &["inspect", delphes.to_str().expect("utf-8 path")],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("2000 entries") && out.contains("Jet.PT") && out.contains("schema: delphes"),
        "{out}"
    );

    // Real Delphes output end to end: scan and preprocess with the built-in `delphes` schema.
    let cfg = format!(
        "name: d\ntree: Delphes\nschema: delphes\nsamples:\n  - {{name: d, files: ['{}'], label: 0}}\n",
        delphes.display()
    );
    std::fs::write(dir.path().join("d.yaml"), cfg).expect("write");
    let o = run(dir.path(), &["scan", "d.yaml"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("read 2000 entries"), "{out}");
    let o = run(dir.path(), &["preprocess", "d.yaml"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("cache cache/d:"), "{out}");

    // A damaged file: an error naming it, no panic.
    let bytes = std::fs::read(&zstd).expect("read");
    std::fs::write(dir.path().join("cut.root"), &bytes[..bytes.len() / 2]).expect("write");
    let o = run(dir.path(), &["inspect", "cut.root"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("cut.root") && err.contains("truncated") && !err.contains("panicked"),
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
        err.contains("no tree or RNTuple 'Events'") && err.contains("events"),
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

    // Config problems the user must fix exit with 2 (README), naming the file and the key.
    let o = run(dir.path(), &["scan", "missing.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("missing.yaml"));
    let good = std::fs::read_to_string(dir.path().join("h.yaml")).expect("read");
    for (what, bad, names) in [
        ("an unknown key", good.replace("tree:", "treee:"), "treee"),
        (
            "an unknown schema",
            good.replace("schema: hzz", "schema: hzzz"),
            "hzzz",
        ),
        (
            "a wrong type",
            good.replace("label: 0", "label: zero"),
            "label",
        ),
        (
            "bad YAML",
            good.replace("samples:", "samples: [:"),
            "h_bad.yaml",
        ),
        (
            "a jagged weight branch",
            good.replace("label: 0}", "label: 0, weight: Muon_Px}"),
            "'Muon_Px' holds",
        ),
    ] {
        std::fs::write(dir.path().join("h_bad.yaml"), bad).expect("write");
        let o = run(dir.path(), &["scan", "h_bad.yaml"]);
        let err = text(&o).1;
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(names), "{what}: {err}");
    }
    let o = run(dir.path(), &["generate", "--events", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);

    // Usage errors exit with 2; --help succeeds.
    assert_eq!(run(dir.path(), &["frobnicate"]).status.code(), Some(2));
    assert!(run(dir.path(), &["generate", "--help"]).status.success());
}

#[test]
fn every_test_file_with_physics_objects_scans_and_preprocesses() {
    // Each file of ../shared/data that holds objects with (pt, eta, phi), with a built-in schema
    // where one matches and a written one otherwise. (uproot-small-dy-* hold no eta/phi and
    // uproot-issue-1502 no physics objects: nothing to build events from.)
    let dir = tempfile::tempdir().expect("tempdir");
    let hzz = ["", "-lz4", "-lzma", "-uncompressed", "-zlib", "-zstd"].map(|v| {
        (
            format!("real/uproot-HZZ{v}.root"),
            "events",
            "hzz".to_owned(),
        )
    });
    let mut cases: Vec<(String, &str, String)> = hzz.into_iter().collect();
    for (file, tree, schema) in [
        (
            "real/nanoAOD_2015_CMS_Open_Data_ttbar.root",
            "Events",
            "nanoaod",
        ),
        ("real/uproot-issue121.root", "Events", "nanoaod"),
        ("generated/nano_zlib1.root", "Events", "nanoaod"),
        ("generated/nano_zstd.root", "Events", "nanoaod"),
        ("generated/nano_offsetmap.root", "Events", "nanoaod"),
        ("generated/delphes_gen.root", "Delphes", "delphes"),
        (
            "generated/delphes_flat_uproot.root",
            "Delphes",
            "delphes_flat",
        ),
        (
            "generated/vec_zlib1.root",
            "tree",
            "{jets: {pt: jet_pt, eta: jet_eta, phi: jet_phi, e: jet_e, btag: jet_btag}, weight: weight}",
        ),
        (
            "generated/nested_unsplit.root",
            "t",
            "{jets: {pt: JetSplit.PT, eta: JetSplit.Eta, phi: JetSplit.Phi, mass: JetSplit.Mass, counter: JetSplit}}",
        ),
        (
            "real/uproot-issue513.root",
            "Delphes",
            "{jets: {pt: Jet.PT, eta: Jet.Eta, phi: Jet.Phi, mass: Jet.Mass, btag: Jet.BTag, counter: Jet}, weight: Event.Weight}",
        ),
    ] {
        cases.push((file.to_owned(), tree, schema.to_owned()));
    }
    for (k, (file, tree, schema)) in cases.iter().enumerate() {
        let cfg = format!(
            "name: f{k}\ntree: {tree}\nschema: {schema}\nsamples:\n  - {{name: s, files: ['{}'], label: 0}}\n",
            shared(&format!("data/{file}")).display()
        );
        let name = format!("f{k}.yaml");
        std::fs::write(dir.path().join(&name), cfg).expect("write");
        for command in ["scan", "preprocess"] {
            let o = run(dir.path(), &[command, &name]);
            let (out, err) = text(&o);
            assert!(o.status.success(), "{file}: {command}: {err}");
            let done = if command == "scan" {
                "read "
            } else {
                "events in"
            };
            assert!(out.contains(done), "{file}: {command}: {out}");
        }
    }
}

#[test]
fn preprocess_builds_validates_and_rebuilds_the_cache() {
    let dir = with_demo(300);
    let cwd = dir.path();
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
        out.contains("cache cache/ft: 599 events in 10 shards"),
        "{out}"
    );
    assert!(out.contains("events per fold"), "{out}");
    assert!(cwd.join("cache/ft/manifest.json").is_file());

    let o = pre(&[]);
    assert!(text(&o).0.contains("up to date"), "{}", text(&o).0);

    // On a terminal (a pseudo-terminal from util-linux's `script`) a rebuild shows its progress:
    // entries read of the total, the rate and the time left.
    let o = run_on_terminal(cwd, "preprocess ft.yaml --shard-events 200 --mode rebuild");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("preprocessing [")
            && out.contains("/600 entries, ")
            && out.contains("/s, ")
            && out.contains(" left"),
        "{out}"
    );

    // 16 flipped bytes inside a shard (same size): read_only refuses naming the shard, auto rebuilds.
    let shard = cwd.join("cache/ft/part-f1-u000000-0000.parquet");
    let mut bytes = std::fs::read(&shard).expect("read shard");
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 16] {
        *b ^= 0xFF;
    }
    std::fs::write(&shard, &bytes).expect("corrupt shard");
    let o = pre(&["--mode", "read-only"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("part-f1-u000000-0000.parquet") && err.contains("SHA-256"),
        "{err}"
    );
    let o = pre(&[]);
    assert!(
        o.status.success() && text(&o).0.contains("rebuilding"),
        "{}",
        text(&o).0
    );
    assert!(text(&pre(&[])).0.contains("up to date"));

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

    // Files read in parallel: the same cache, byte for byte, for any thread count.
    std::fs::write(
        cwd.join("many.yaml"),
        "name: many\ntree: output\nschema: vector\nsamples:\n  - {name: t, files: ['demo/pretrain/t*.root'], label: 0}\n  - {name: w, files: ['demo/pretrain/W*.root', 'demo/pretrain/Z*.root'], label: 1}\n",
    )
    .expect("write");
    let shards = |threads: &str| {
        let dir = format!("cache/many{threads}");
        let o = run(
            cwd,
            &[
                "preprocess",
                "many.yaml",
                "--cache",
                &dir,
                "--threads",
                threads,
                "--shard-events",
                "300",
            ],
        );
        assert!(o.status.success(), "{}", text(&o).1);
        let m: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(cwd.join(&dir).join("manifest.json")).expect("manifest"),
        )
        .expect("json");
        (m["shards"].clone(), m["samples"].clone())
    };
    let one = shards("1");
    assert!(one.0.as_array().is_some_and(|a| a.len() > 5), "{}", one.0);
    assert_eq!(one, shards("3"));

    // Split across processes (array tasks): each part writes its input files, then one run
    // without --part writes the manifest. A part alone is an interrupted build, named as such
    // and continued; the result is the single-process cache, byte for byte.
    let parts = |extra: &[&str]| {
        let mut a = vec![
            "preprocess",
            "many.yaml",
            "--cache",
            "cache/parts",
            "--shard-events",
            "300",
        ];
        a.extend_from_slice(extra);
        run(cwd, &a)
    };
    let o = parts(&["--part", "0/3"]);
    assert!(
        o.status.success() && text(&o).0.contains("part 0/3"),
        "{}",
        text(&o).1
    );
    let o = parts(&["--mode", "read-only"]);
    assert!(
        text(&o).1.contains("interrupted with")
            && text(&o).1.contains("rerun `gnn4colliders preprocess`"),
        "{}",
        text(&o).1
    );
    assert!(parts(&["--part", "2/3"]).status.success());
    let o = parts(&[]);
    let (out, err) = text(&o);
    assert!(
        o.status.success()
            && out.contains("input files already done")
            && out.contains("of them by this run"),
        "{out}{err}"
    );
    assert!(
        folder_files(&cwd.join("cache/parts")) == folder_files(&cwd.join("cache/many1")),
        "the same cache, byte for byte"
    );
    let o = parts(&["--part", "3/3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(text(&o).1.contains("K/N"), "{}", text(&o).1);

    // A cache killed half-way (no manifest) is never read.
    std::fs::remove_file(cwd.join("cache/ft/manifest.json")).expect("rm");
    let o = pre(&["--mode", "read-only"]);
    assert!(text(&o).1.contains("half-written"), "{}", text(&o).1);
    assert!(pre(&[]).status.success());
}

#[test]
fn bad_input_files_fail_the_build_or_are_skipped_named_and_read_again() {
    let dir = with_demo(200);
    let cwd = dir.path();
    std::fs::write(cwd.join("broken.root"), b"not a ROOT file").expect("write");
    let config = |on_bad_file: &str, even: &str| {
        format!(
            "name: ft\ntree: output\nschema: vector\n{on_bad_file}samples:\n  - {{name: even, files: [{even}], label: 0}}\n  - {{name: odd, files: [demo/finetune/ttH_CPodd.root], label: 1}}\n"
        )
    };
    let good = "demo/finetune/ttH_CPeven.root";
    let with_bad = format!("{good}, broken.root, missing.root");
    std::fs::write(cwd.join("good.yaml"), config("", good)).expect("config");
    std::fs::write(cwd.join("fail.yaml"), config("", &with_bad)).expect("config");
    std::fs::write(
        cwd.join("skip.yaml"),
        config("on_bad_file: skip\n", &with_bad),
    )
    .expect("config");
    let pre = |config: &str, cache: &str| run(cwd, &["preprocess", config, "--cache", cache]);

    // By default a bad file stops the build, named.
    let o = pre("fail.yaml", "fail");
    let err = text(&o).1;
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("missing.root"), "{err}");
    assert!(!cwd.join("fail/manifest.json").exists());

    // `skip`: the others are cached (the events of the good files alone), the bad ones named
    // in the report and the manifest with why.
    let o = pre("good.yaml", "good");
    assert!(o.status.success(), "{}", text(&o).1);
    let o = pre("skip.yaml", "skip");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("2 input files could not be read and were left out")
            && out.contains("broken.root (sample 'even'): ")
            && out.contains("missing.root (sample 'even'): "),
        "{out}"
    );
    let manifest = json(&cwd.join("skip/manifest.json"));
    let skipped = manifest["skipped_files"].as_array().expect("skipped_files");
    assert_eq!(skipped.len(), 2, "{manifest}");
    assert!(
        skipped
            .iter()
            .all(|s| s["sample"] == "even" && s["error"] != "")
    );
    let events = |cache: &str| {
        json(&cwd.join(format!("{cache}/manifest.json")))["shards"]
            .as_array()
            .expect("shards")
            .iter()
            .map(|s| s["events"].as_u64().expect("events"))
            .sum::<u64>()
    };
    assert!(events("good") > 0);
    assert_eq!(events("skip"), events("good"));

    // A rerun reads the skipped files again, and only them (the other files' shards are kept):
    // still bad, still named.
    let o = pre("skip.yaml", "skip");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("left out 2 input files it could not read: reading them again (the other 2 input files' shards are kept)")
            && out.contains("2 input files could not be read")
            && out.contains("(0 of them by this run"),
        "{out}"
    );
    // Once the files read, the rerun caches them, and only them, and names none: the cache
    // is the one a build from nothing writes.
    for f in ["broken.root", "missing.root"] {
        std::fs::copy(cwd.join(good), cwd.join(f)).expect("copy");
    }
    let o = pre("skip.yaml", "skip");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(!out.contains("could not be read"), "{out}");
    let even = json(&cwd.join("good/manifest.json"))["samples"]["even"]["cached"]
        .as_u64()
        .expect("cached");
    assert!(
        out.contains("(the other 2 input files' shards are kept)")
            && out.contains(&format!("({} of them by this run", 2 * even)),
        "{out}"
    );
    assert!(
        json(&cwd.join("skip/manifest.json"))
            .get("skipped_files")
            .is_none()
    );
    assert!(events("skip") > events("good"));
    let o = run(
        cwd,
        &[
            "preprocess",
            "skip.yaml",
            "--cache",
            "scratch",
            "--mode",
            "rebuild",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(
        folder_files(&cwd.join("skip")) == folder_files(&cwd.join("scratch")),
        "the cache completed by reruns is the one built from nothing"
    );
}

#[test]
fn files_added_to_or_removed_from_a_dataset_are_the_only_work_of_a_rerun() {
    let dir = with_demo(200);
    let cwd = dir.path();
    let config = |even: &str| {
        format!(
            "name: ft\ntree: output\nschema: vector\nsamples:\n  - {{name: even, files: [{even}], label: 0}}\n  - {{name: odd, files: [demo/finetune/ttH_CPodd.root], label: 1}}\n"
        )
    };
    let pre = |even: &str, cache: &str, mode: &str| {
        std::fs::write(cwd.join("ft.yaml"), config(even)).expect("config");
        run_ok(
            cwd,
            &["preprocess", "ft.yaml", "--cache", cache, "--mode", mode],
        )
    };
    let cached = |cache: &str, sample: &str| {
        json(&cwd.join(format!("{cache}/manifest.json")))["samples"][sample]["cached"]
            .as_u64()
            .expect("cached")
    };
    let (even, added) = ("demo/finetune/ttH_CPeven.root", "demo/pretrain/ttH.root");
    pre(even, "ft", "auto");
    pre(added, "added_alone", "rebuild");
    // A file added before the sample's other: only it is read, the other files' shards are
    // kept (under the units they are now), and the cache is the one a build from nothing
    // writes.
    let both = format!("{added}, {even}");
    let out = pre(&both, "ft", "auto");
    assert!(
        out.contains("is stale (")
            && out.contains("(the other 2 input files' shards are kept)")
            && out.contains(&format!(
                "({} of them by this run",
                cached("added_alone", "even")
            )),
        "{out}"
    );
    pre(&both, "scratch", "rebuild");
    assert!(
        folder_files(&cwd.join("ft")) == folder_files(&cwd.join("scratch")),
        "the cache with a file added is the one built from nothing"
    );
    // The file removed again: nothing is read.
    let out = pre(even, "ft", "auto");
    assert!(
        out.contains("(the other 2 input files' shards are kept)")
            && out.contains("(0 of them by this run"),
        "{out}"
    );
    pre(even, "scratch", "rebuild");
    assert!(
        folder_files(&cwd.join("ft")) == folder_files(&cwd.join("scratch")),
        "the cache with the file removed is the one built from nothing"
    );
    // A kept file's shard damaged meanwhile (a byte changed, its size the same): that file is
    // read again too.
    let shard = cwd.join("ft/part-f0-u000000-0000.parquet");
    let mut bytes = std::fs::read(&shard).expect("shard");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&shard, bytes).expect("damage");
    let out = pre(&both, "ft", "auto");
    assert!(
        out.contains("(the other 1 input files' shards are kept)"),
        "{out}"
    );
    pre(&both, "scratch", "rebuild");
    assert!(
        folder_files(&cwd.join("ft")) == folder_files(&cwd.join("scratch")),
        "the cache with a damaged shard read again is the one built from nothing"
    );
}

/// A temporary folder holding the demo dataset (`demo/`) of `events` events per process.
fn with_demo(events: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    run_ok(
        dir.path(),
        &["generate", "--out", "demo", "--events", &events.to_string()],
    );
    dir
}

/// Every file of a folder (not recursive): name and bytes, sorted by name.
fn folder_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| {
            let bytes = std::fs::read(e.path()).expect("read");
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    v.sort();
    v
}

/// A pretraining data config over the generated demo files in `demo/`.
fn write_demo_configs(cwd: &Path) {
    let names = [
        "ggF",
        "VBF",
        "WH",
        "ZH",
        "ttH",
        "tHq",
        "single_top",
        "ttbar",
        "ttgammagamma",
        "ttW",
        "ttt",
        "tttt",
    ];
    let mut pre = format!(
        "name: pre\ntree: output\nschema: vector\nclasses: [{}]\nsamples:\n",
        names.join(", ")
    );
    for (i, n) in names.iter().enumerate() {
        pre.push_str(&format!(
            "  - {{name: {n}, files: [demo/pretrain/{n}.root], label: {i}}}\n"
        ));
    }
    std::fs::write(cwd.join("pre_data.yaml"), pre).expect("write");
    std::fs::write(
        cwd.join("ft_data.yaml"),
        "name: ft\ntree: output\nschema: vector\nclasses: [even, odd]\nsamples:\n  - {name: even, files: [demo/finetune/ttH_CPeven.root], label: 0}\n  - {name: odd, files: [demo/finetune/ttH_CPodd.root], label: 1}\n",
    )
    .expect("write");
    let train = "trainer: {batch_size: 64, eval_batch_size: 200, max_epochs: 4, lr: 1.0e-3, seed: 5, class_balance: true, loader_threads: 2, shuffle_buffer: 200, checkpoint_every_steps: 4}\n";
    std::fs::write(
        cwd.join("pre.yaml"),
        format!("name: pre\ndata: pre_data.yaml\ntask: multiclass\n{train}subset: {{train_events: 960, val_events: 300, test_events: 300}}\n"),
    )
    .expect("write");
    std::fs::write(
        cwd.join("ft.yaml"),
        "name: ft\ndata: ft_data.yaml\ntask: binary\ntrainer: {batch_size: 50, max_epochs: 2, lr: 1.0e-3, seed: 9}\nsubset: {train_events: 200, val_events: 100, test_events: 100}\n",
    )
    .expect("write");
}

/// A run's `history.jsonl` without the wall-clock fields (seconds and events/s differ from run
/// to run).
fn history_without_times(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("history.jsonl"))
        .expect("history")
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            for k in ["events_per_s", "train_s", "allreduce_s", "epoch_s"] {
                v.as_object_mut().expect("a record").remove(k);
            }
            v
        })
        .collect()
}

/// The weights of a checkpoint (of any family) as PyTorch-named f32 bit patterns.
fn checkpoint_bits(path: &Path) -> Vec<(String, Vec<u32>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("w.safetensors");
    gnn4c_run::export(path, &f, gnn4c_run::ExportFormat::Safetensors, false).expect("export");
    let mut v: Vec<(String, Vec<u32>)> = gnn4c_testkit::read_safetensors(&f)
        .into_iter()
        .map(|(k, (_, x))| (k, x.into_iter().map(f32::to_bits).collect()))
        .collect();
    v.sort();
    v
}

#[test]
fn train_kill_resume_and_finetune_from_the_cli() {
    let dir = with_demo(150);
    let cwd = dir.path();
    write_demo_configs(cwd);

    // A binary task on a dataset of one class is a config error (exit code 2).
    std::fs::write(
        cwd.join("one_data.yaml"),
        "name: one\ntree: output\nschema: vector\nclasses: [even]\nsamples:\n  - {name: even, files: [demo/finetune/ttH_CPeven.root], label: 0}\n",
    )
    .expect("write");
    std::fs::write(
        cwd.join("one.yaml"),
        "name: one\ndata: one_data.yaml\ntask: binary\n",
    )
    .expect("write");
    let o = run(cwd, &["train", "one.yaml"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(text(&o).1.contains("2 classes"), "{}", text(&o).1);

    // Straight: 4 epochs.
    let o = run(cwd, &["train", "pre.yaml", "--run", "runs/straight"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    // The best-epoch line shows the balanced loss that chose the epoch, and says the test
    // metrics come from a subset of the fold.
    assert!(
        out.contains("which chose the epoch") && out.contains("test (300 of the fold's"),
        "{out}"
    );
    for f in [
        "config.json",
        "last.ckpt",
        "best.ckpt",
        "history.jsonl",
        "metrics.json",
        "best.safetensors",
    ] {
        assert!(cwd.join("runs/straight").join(f).is_file(), "{f}");
    }
    let history =
        std::fs::read_to_string(cwd.join("runs/straight/history.jsonl")).expect("history");
    assert_eq!(history.lines().count(), 4);
    let first: serde_json::Value =
        serde_json::from_str(history.lines().next().expect("line")).expect("json");
    for key in [
        "epoch",
        "lr",
        "train_loss",
        "val",
        "events_per_s",
        "epoch_s",
    ] {
        assert!(first.get(key).is_some(), "history has {key}: {first}");
    }
    // Epochs are numbered from 1 in the history and metrics.json, as on the console.
    assert_eq!(first["epoch"], 1, "{first}");
    let metrics: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(cwd.join("runs/straight/metrics.json")).expect("metrics"),
    )
    .expect("json");
    let best_line = history
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .rfind(|r| r["best"] == true)
        .expect("a best epoch");
    assert_eq!(metrics["best_epoch"], best_line["epoch"], "{metrics}");
    assert_eq!(
        metrics["best_validation_objective"], best_line["val_objective"],
        "{metrics}"
    );
    assert!(
        out.contains(&format!("best epoch {}:", best_line["epoch"])),
        "{out}"
    );

    // The same run killed (SIGKILL) inside its third epoch, after a step checkpoint, then resumed.
    let mut child = bin()
        .current_dir(cwd)
        .args(["train", "pre.yaml", "--run", "runs/killed"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let hist = cwd.join("runs/killed/history.jsonl");
    let inside_third = || {
        gnn4c_training::read_checkpoint(&cwd.join("runs/killed/last.ckpt"))
            .is_ok_and(|c| c.state.epoch == 2 && c.state.position.is_some())
    };
    while !inside_third() {
        // No clock here: the loop ends when a step checkpoint of epoch 3 is written, or fails if
        // the run ended before.
        let exited = child.try_wait().expect("child status");
        assert!(
            exited.is_none(),
            "the run ended before a step checkpoint in epoch 3: {exited:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().expect("kill");
    child.wait().expect("reaped");
    let before = gnn4c_training::read_checkpoint(&cwd.join("runs/killed/last.ckpt")).expect("last");
    let position = before.state.position.clone().expect("a step checkpoint");
    assert!(
        before.state.epoch < 4 && position.batches.is_multiple_of(4),
        "killed mid-run, in epoch {} after step {}",
        before.state.epoch + 1,
        position.batches
    );

    // Starting again in a used run folder, or resuming with another config, is refused.
    let o = run(cwd, &["train", "pre.yaml", "--run", "runs/killed"]);
    assert!(text(&o).1.contains("--resume"), "{}", text(&o).1);
    let changed = std::fs::read_to_string(cwd.join("pre.yaml"))
        .expect("read")
        .replace("lr: 1.0e-3", "lr: 2.0e-3");
    std::fs::write(cwd.join("pre_lr.yaml"), changed).expect("write");
    let o = run(
        cwd,
        &["train", "pre_lr.yaml", "--run", "runs/killed", "--resume"],
    );
    assert!(text(&o).1.contains("run.trainer.lr"), "{}", text(&o).1);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a changed config is a config error"
    );

    let o = run(
        cwd,
        &["train", "pre.yaml", "--run", "runs/killed", "--resume"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let at = before.state.position.as_ref().map_or(0, |p| p.batches);
    assert!(
        out.contains(&format!(
            "resuming inside epoch {} after {at} of its steps",
            before.state.epoch + 1
        )),
        "{out}"
    );
    assert_eq!(
        checkpoint_bits(&cwd.join("runs/straight/last.ckpt")),
        checkpoint_bits(&cwd.join("runs/killed/last.ckpt")),
        "4 straight epochs and a kill inside epoch 3 + resume give bitwise-identical weights"
    );
    // …and byte-identical files, so a checksum confirms it.
    for f in ["last.ckpt", "best.safetensors"] {
        let read = |run: &str| std::fs::read(cwd.join(run).join(f)).expect(f);
        assert!(read("runs/straight") == read("runs/killed"), "{f} bytes");
    }
    let resumed = std::fs::read_to_string(&hist).expect("history");
    assert_eq!(resumed.lines().count(), 4);

    // The same run stopped by SIGTERM (Slurm's time limit, `scancel`) inside its second epoch:
    // it finishes the step under way, writes last.ckpt with the loader position and exits 75;
    // the resumed run is bitwise the straight one.
    let mut child = bin()
        .current_dir(cwd)
        .args(["train", "pre.yaml", "--run", "runs/stopped"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let inside_second = || {
        gnn4c_training::read_checkpoint(&cwd.join("runs/stopped/last.ckpt"))
            .is_ok_and(|c| c.state.epoch == 1 && c.state.position.is_some())
    };
    while !inside_second() {
        let exited = child.try_wait().expect("child status");
        assert!(exited.is_none(), "the run ended before epoch 2: {exited:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let o = child.wait_with_output().expect("reaped");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(75), "{out}{err}");
    assert!(
        err.contains("SIGTERM received") && err.contains("holds the position to resume from"),
        "{err}"
    );
    let stopped =
        gnn4c_training::read_checkpoint(&cwd.join("runs/stopped/last.ckpt")).expect("last");
    assert!(stopped.state.position.is_some(), "a step checkpoint");
    let o = run(
        cwd,
        &["train", "pre.yaml", "--run", "runs/stopped", "--resume"],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    for f in ["last.ckpt", "best.safetensors", "history.jsonl"] {
        let read = |run: &str| std::fs::read(cwd.join(run).join(f)).expect(f);
        if f == "history.jsonl" {
            // Every field but the wall-clock ones: the interrupted epoch's training metrics
            // too (the outputs kept for them travel in last.ckpt).
            assert_eq!(
                history_without_times(&cwd.join("runs/straight")),
                history_without_times(&cwd.join("runs/stopped")),
                "the history of every epoch"
            );
        } else {
            assert!(read("runs/straight") == read("runs/stopped"), "{f} bytes");
        }
    }

    // A corrupted checkpoint is refused by name.
    let last = cwd.join("runs/killed/last.ckpt");
    let mut bytes = std::fs::read(&last).expect("read");
    let n = bytes.len();
    bytes.truncate(n - 100);
    std::fs::write(&last, bytes).expect("write");
    let o = run(
        cwd,
        &["train", "pre.yaml", "--run", "runs/killed", "--resume"],
    );
    assert!(
        text(&o).1.contains("truncated or corrupted"),
        "{}",
        text(&o).1
    );

    // Fine-tuning: needs a checkpoint; frozen backbone trains only the 65 head parameters and
    // leaves every backbone weight as pretrained.
    let o = run(cwd, &["finetune", "ft.yaml"]);
    assert!(text(&o).1.contains("--from"), "{}", text(&o).1);
    let o = run(cwd, &["finetune", "ft.yaml", "--from", "pre.yaml"]);
    assert!(
        text(&o).1.contains("not a gnn4colliders checkpoint"),
        "{}",
        text(&o).1
    );
    let o = run(
        cwd,
        &["finetune", "ft.yaml", "--from", "runs/straight/best.ckpt"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("65 trainable of 134593 parameters"), "{out}");
    let pre = gnn4c_testkit::read_safetensors(&cwd.join("runs/straight/best.safetensors"));
    let ft = gnn4c_testkit::read_safetensors(&cwd.join("runs/ft_frozen_backbone/best.safetensors"));
    for (k, v) in &pre {
        if !k.starts_with("classify") {
            assert_eq!(&ft[k], v, "{k} is frozen");
        }
    }
    assert_eq!(ft["classify.weight"].0, vec![1, 64]);
    let o = run(
        cwd,
        &[
            "finetune",
            "ft.yaml",
            "--from",
            "runs/straight/best.ckpt",
            "--mode",
            "full",
        ],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("134593 trainable of 134593"), "{out}");
    let full = gnn4c_testkit::read_safetensors(&cwd.join("runs/ft_full/best.safetensors"));
    assert_ne!(
        full["node_encoder.0.weight"], pre["node_encoder.0.weight"],
        "full fine-tuning trains the backbone"
    );

    // A backbone of another width: fine-tuning takes its settings from the checkpoint and the
    // run records them, so the run's own commands rebuild it.
    let o = run(
        cwd,
        &[
            "train",
            "pre.yaml",
            "--run",
            "runs/narrow",
            "model.d_hidden=32",
            "trainer.max_epochs=1",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let narrow = [
        "finetune",
        "ft.yaml",
        "--from",
        "runs/narrow/best.ckpt",
        "--run",
        "runs/ft_narrow",
    ];
    let o = run(cwd, &narrow);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("model.d_hidden 32 (the config says 64)"),
        "{out}"
    );
    let recorded: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(cwd.join("runs/ft_narrow/config.json")).expect("config.json"),
    )
    .expect("json");
    assert_eq!(recorded.pointer("/model/d_hidden"), Some(&32.into()));
    let o = run(cwd, &["predict", "runs/ft_narrow"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = run(
        cwd,
        &[&narrow[..], &["--resume", "--max-epochs", "3"]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let o = run(cwd, &["predict", "runs/ft_full", "--batch-size", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);

    predict_and_evaluate(cwd);
}

/// `predict`/`evaluate` on the runs trained above.
fn predict_and_evaluate(cwd: &Path) {
    use gnn4c_data::{ColumnRequest, EntryRange, open_tree, read_predictions_npz};
    let predict = |extra: &[&str]| {
        let mut a = vec!["predict", "runs/straight"];
        a.extend_from_slice(extra);
        run(cwd, &a)
    };
    // Batch size and loader threads do not change the results.
    let o = predict(&[
        "--split",
        "all",
        "--out",
        "p1",
        "--batch-size",
        "7",
        "--loader-threads",
        "1",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("wrote 12 friend tree(s)"), "{out}");
    let a = read_predictions_npz(&cwd.join("p1/predictions.npz")).expect("npz");
    for (dir, bs, th) in [("p2", "500", "1"), ("p3", "7", "3")] {
        let o = predict(&[
            "--split",
            "all",
            "--out",
            dir,
            "--batch-size",
            bs,
            "--loader-threads",
            th,
            "--format",
            "npz",
        ]);
        assert!(o.status.success(), "{}", text(&o).1);
        let b = read_predictions_npz(&cwd.join(dir).join("predictions.npz")).expect("npz");
        assert_eq!(
            (&a.entry, &a.event_number, &a.sample_index, &a.samples),
            (&b.entry, &b.event_number, &b.sample_index, &b.samples)
        );
        if th == "3" {
            assert_eq!(a.logits, b.logits, "loader threads: exact");
        }
        // Contract §10: results do not depend on the batch size (within 1e-6 on CPU).
        let worst = a
            .scores
            .iter()
            .zip(&b.scores)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= 1e-6, "batch size {bs}: scores differ by {worst}");
    }
    // On a terminal, scoring shows its progress (events, rate, time left).
    let o = run_on_terminal(
        cwd,
        "predict runs/straight --split all --out p5 --format npz",
    );
    let out = text(&o).0;
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("scoring [") && out.contains(" events, ") && out.contains(" left"),
        "{out}"
    );
    // A checkpoint file alone works too (its stored config): the same scores.
    let o = run(
        cwd,
        &[
            "predict",
            "runs/straight/best.ckpt",
            "--split",
            "all",
            "--out",
            "p4",
            "--batch-size",
            "7",
            "--loader-threads",
            "1",
            "--format",
            "npz",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let c = read_predictions_npz(&cwd.join("p4/predictions.npz")).expect("npz");
    assert_eq!(c.logits, a.logits);
    assert_eq!(a.n_out, 12);
    assert_eq!(a.samples.len(), 12);
    assert_eq!(a.len(), a.entry.len());
    let folds: std::collections::BTreeSet<u8> = a.fold.iter().copied().collect();
    assert_eq!(folds.len(), 5, "every fold scored with --split all");
    for (row, (&f, &n)) in a.fold.iter().zip(&a.event_number).enumerate() {
        assert_eq!(u64::from(f), n % 5, "row {row}");
    }
    for r in a.scores.chunks(12) {
        assert!(
            (r.iter().sum::<f32>() - 1.0).abs() < 1e-5,
            "softmax rows sum to 1"
        );
    }

    // The friend tree of ttbar: one entry per input entry, aligned, NaN and passed 0 where skipped.
    let friend = open_tree(&cwd.join("p1/friends/ttbar__ttbar.root"), "output").expect("friend");
    let input = open_tree(&cwd.join("demo/pretrain/ttbar.root"), "output").expect("input");
    assert_eq!(friend.entries(), input.entries());
    let req = |b: &str| ColumnRequest {
        branch: b.into(),
        counter: None,
    };
    let mut passed = Vec::new();
    let mut ttbar_score = Vec::new();
    let all = EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        step_size: 1000,
        threads: 0,
    };
    friend
        .read(&[req("passed"), req("score_ttbar")], all, &mut |c| {
            for i in 0..c.n_entries {
                passed.push(c.columns[0].values.f64_at(i));
                ttbar_score.push(c.columns[1].values.f64_at(i));
            }
            Ok(())
        })
        .expect("read friend");
    let si = a.samples.iter().position(|s| s == "ttbar").expect("ttbar") as i64;
    let rows: Vec<usize> = (0..a.len()).filter(|&i| a.sample_index[i] == si).collect();
    assert!(!rows.is_empty());
    assert_eq!(passed.iter().filter(|&&p| p == 1.0).count(), rows.len());
    for &i in &rows {
        let e = a.entry[i] as usize;
        assert_eq!(passed[e], 1.0);
        assert!(
            (ttbar_score[e] - f64::from(a.scores[i * 12 + 7])).abs() < 1e-7,
            "entry {e}"
        );
    }
    for (e, &p) in passed.iter().enumerate() {
        if p == 0.0 {
            assert!(ttbar_score[e].is_nan(), "skipped entry {e} has NaN scores");
        }
    }

    // Evaluate writes metrics.json and the plots; existing outputs are refused without --overwrite.
    let o = run(
        cwd,
        &[
            "evaluate",
            "runs/straight",
            "--out",
            "ev",
            "--format",
            "npz",
        ],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let m: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(cwd.join("ev/metrics.json")).expect("metrics"),
    )
    .expect("json");
    assert!(
        m.pointer("/metrics/auc")
            .and_then(|v| v.as_array())
            .is_some_and(|v| v.len() == 12),
        "{m}"
    );
    for png in [
        "roc.png",
        "roc_linear.png",
        "scores.png",
        "scores_linear.png",
        "training_loss.png",
        "training_auc.png",
    ] {
        let bytes = std::fs::read(cwd.join("ev").join(png)).expect(png);
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
            "{png}"
        );
    }
    let o = run(
        cwd,
        &[
            "evaluate",
            "runs/straight",
            "--out",
            "ev",
            "--format",
            "npz",
        ],
    );
    assert!(text(&o).1.contains("--overwrite"), "{}", text(&o).1);

    // A write cut short (the file-size limit kills the process with SIGXFSZ, or the write fails
    // with EFBIG where the signal is ignored) leaves no file under the final name.
    let o = Command::new("sh")
        .current_dir(cwd)
        .args(["-c", "ulimit -f 64 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_gnn4colliders"))
        .args([
            "predict",
            "runs/straight",
            "--split",
            "all",
            "--out",
            "cut",
            "--format",
            "npz",
        ])
        .output()
        .expect("sh runs");
    assert!(!o.status.success(), "the 32 kB limit stops the write");
    assert!(
        !cwd.join("cut/predictions.npz").exists(),
        "no half file under the final name"
    );

    // Other ROOT files with the same schema: every event scored (split all), one friend tree each.
    let o = predict(&[
        "--data",
        "ft_data.yaml",
        "--out",
        "other",
        "--format",
        "root",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("'ft' (all split)") && out.contains("wrote 2 friend tree(s)"),
        "{out}"
    );
    let f = open_tree(&cwd.join("other/friends/odd__ttH_CPodd.root"), "output").expect("friend");
    assert_eq!(f.entries(), 150);
    assert!(
        !cwd.join("other/predictions.npz").exists(),
        "--format root writes no NPZ"
    );

    // export: the run's best weights with PyTorch names, equal to best.safetensors.
    let o = run(cwd, &["export", "runs/straight", "--out", "w.safetensors"]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(
        gnn4c_testkit::read_safetensors(&cwd.join("w.safetensors")),
        gnn4c_testkit::read_safetensors(&cwd.join("runs/straight/best.safetensors"))
    );
    let o = run(cwd, &["export", "runs/straight", "--out", "w.safetensors"]);
    assert!(text(&o).1.contains("--overwrite"), "{}", text(&o).1);

    // A checkpoint from another run (a 1-output head for a 12-class run) is refused by name.
    let o = predict(&["--checkpoint", "runs/ft_full/best.ckpt", "--out", "bad"]);
    let e = text(&o).1;
    assert!(e.contains("1 outputs") && e.contains("another run"), "{e}");
    // Other files whose schema lacks a branch: the error names it, nothing is written.
    std::fs::write(
        cwd.join("bad_data.yaml"),
        "name: bad\ntree: output\nschema: hzz\nclasses: [a]\nsamples:\n  - {name: a, files: [demo/pretrain/ggF.root], label: 0}\n",
    )
    .expect("write");
    let o = predict(&["--data", "bad_data.yaml", "--out", "bad"]);
    let e = text(&o).1;
    assert_eq!(
        o.status.code(),
        Some(2),
        "a missing branch is a config error"
    );
    assert!(e.contains("Jet_Px"), "{e}");
    assert!(!cwd.join("bad/predictions.npz").exists());
}

#[test]
fn run_config_overrides_env_and_print_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    std::fs::write(
        cwd.join("d.yaml"),
        "name: d\ntree: output\nschema: vector\nclasses: [a, b]\nsamples:\n  - {name: a, files: [a.root], label: 0}\n  - {name: b, files: [b.root], label: 1}\n",
    )
    .expect("write");
    std::fs::write(
        cwd.join("r.yaml"),
        "name: r\ndata: d.yaml\ntask: binary\ntrainer: {max_epochs: 5, lr: 1.0e-4}\n",
    )
    .expect("write");
    let resolved = |o: &Output| -> serde_json::Value {
        let (out, err) = text(o);
        assert!(o.status.success(), "{out}{err}");
        serde_json::from_str(&out).expect("--print-config prints JSON")
    };
    // File values, then GNN4C_ environment variables, then command-line overrides (last wins).
    // Variables without a section (the network's, the Slurm scripts') are not config.
    let o = bin()
        .current_dir(cwd)
        .env("GNN4C_TRAINER__SEED", "9")
        .env("GNN4C_TRAINER__LR", "0.5")
        .env("GNN4C_NET_TIMEOUT_S", "30")
        .env("GNN4C_DEVICE", "cpu")
        .args([
            "train",
            "r.yaml",
            "trainer.max_epochs=2",
            "trainer.lr=3e-4",
            "model.dropout=0.1",
            "--print-config",
        ])
        .output()
        .expect("runs");
    let v = resolved(&o);
    assert_eq!(
        v.pointer("/run/trainer/max_epochs"),
        Some(&serde_json::json!(2))
    );
    assert_eq!(v.pointer("/run/trainer/lr"), Some(&serde_json::json!(3e-4)));
    assert_eq!(v.pointer("/run/trainer/seed"), Some(&serde_json::json!(9)));
    assert_eq!(
        v.pointer("/run/model/dropout"),
        Some(&serde_json::json!(0.1))
    );
    assert_eq!(v.pointer("/task/kind"), Some(&serde_json::json!("binary")));
    assert!(!cwd.join("runs").exists(), "--print-config trains nothing");
    // Hydra's group form: data=NAME is configs/data/NAME.yaml.
    std::fs::create_dir_all(cwd.join("configs/data")).expect("mkdir");
    std::fs::copy(cwd.join("d.yaml"), cwd.join("configs/data/other.yaml")).expect("copy");
    let v = resolved(&run(
        cwd,
        &["train", "r.yaml", "data=other", "--print-config"],
    ));
    assert_eq!(
        v.pointer("/run/data"),
        Some(&serde_json::json!("configs/data/other.yaml"))
    );
    // A typo names the key, where it came from, and the closest valid key.
    let o = run(
        cwd,
        &["train", "r.yaml", "trainer.max_epoch=2", "--print-config"],
    );
    let e = text(&o).1;
    assert_eq!(o.status.code(), Some(2), "a config error is a usage error");
    assert!(
        e.contains("`trainer.max_epoch`")
            && e.contains("command-line override `trainer.max_epoch=2`")
            && e.contains("did you mean `trainer.max_epochs`"),
        "{e}"
    );
    std::fs::write(
        cwd.join("typo.yaml"),
        "name: r\ndata: d.yaml\ntask: binary\ntrainer: {max_epochs: 5, lr: 1.0e-4, pateince: 3}\n",
    )
    .expect("write");
    let o = run(cwd, &["train", "typo.yaml", "--print-config"]);
    let e = text(&o).1;
    assert!(
        e.contains("`trainer.pateince` in typo.yaml") && e.contains("`trainer.patience`"),
        "{e}"
    );
    let o = run(
        cwd,
        &[
            "train",
            "r.yaml",
            "trainer.max_epochs=many",
            "--print-config",
        ],
    );
    let e = text(&o).1;
    assert_eq!(o.status.code(), Some(2));
    assert!(
        e.contains("`trainer.max_epochs`") && e.contains("trainer.max_epochs=many"),
        "{e}"
    );
    let o = run(cwd, &["train", "r.yaml", "max_epochs", "--print-config"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("KEY=VALUE"), "{}", text(&o).1);
    // Group selections from the command line: built-in groups work from any folder.
    let v = resolved(&run(
        cwd,
        &[
            "train",
            "r.yaml",
            "task=multilabel",
            "--seed",
            "11",
            "--print-config",
        ],
    ));
    assert_eq!(
        v.pointer("/task/kind"),
        Some(&serde_json::json!("multilabel"))
    );
    assert_eq!(v.pointer("/run/trainer/seed"), Some(&serde_json::json!(11)));
    let o = run(cwd, &["train", "r.yaml", "model=huge", "--print-config"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("root_gnn"), "{}", text(&o).1);
    let o = run(cwd, &["train", "nope", "--print-config"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("run config not found: nope"),
        "{}",
        text(&o).1
    );
}

/// The repository's own `configs/` tree (experiments and groups), copied into `dst`.
fn copy_configs(dst: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    for group in std::fs::read_dir(&src).expect("configs/") {
        let group = group.expect("entry").path();
        let name = group.file_name().expect("name").to_owned();
        std::fs::create_dir_all(dst.join("configs").join(&name)).expect("mkdir");
        for f in std::fs::read_dir(&group).expect("group") {
            let f = f.expect("file").path();
            std::fs::copy(
                &f,
                dst.join("configs")
                    .join(&name)
                    .join(f.file_name().expect("name")),
            )
            .expect("copy");
        }
    }
}

/// The shipped experiments, composed from their groups, end to end: generate, preprocess,
/// pretrain, fine-tune, the from-scratch baseline, evaluate, predict.
#[test]
fn shipped_experiments_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    copy_configs(cwd);
    let ok = |args: &[&str]| run_ok(cwd, args);
    ok(&["generate", "--events", "120"]);
    let out = ok(&["preprocess", "configs/data/demo_pretrain.yaml"]);
    assert!(cwd.join("cache/demo_pretrain").is_dir(), "{out}");

    // What the experiment is made of, printed and saved.
    let small = [
        "trainer.max_epochs=2",
        "trainer.batch_size=64",
        "subset={train_events: 600, val_events: 200, test_events: 200}",
    ];
    let mut args = vec!["train", "pretrain_multiclass", "--print-config"];
    args.extend(small);
    let v: serde_json::Value = serde_json::from_str(&ok(&args)).expect("JSON");
    let sources = v["composed_from"].as_array().expect("sources");
    assert_eq!(sources.len(), 9, "{sources:?}"); // 5 groups, the file, 3 overrides
    assert!(
        sources[0]
            .as_str()
            .expect("str")
            .starts_with("configs/data/demo_pretrain.yaml")
    );
    assert!(
        sources[3]
            .as_str()
            .expect("str")
            .contains("configs/trainer/demo_pretrain.yaml")
    );
    assert_eq!(
        v.pointer("/run/model/d_hidden"),
        Some(&serde_json::json!(64))
    );
    assert_eq!(
        v.pointer("/task/kind"),
        Some(&serde_json::json!("multiclass"))
    );
    assert_eq!(
        v.pointer("/run/trainer/class_balance"),
        Some(&serde_json::json!(true))
    );

    let mut args = vec!["train", "pretrain_multiclass"];
    args.extend(small);
    let out = ok(&args);
    let pre = cwd.join("runs/pretrain_multiclass");
    for f in [
        "config.json",
        "last.ckpt",
        "best.ckpt",
        "history.jsonl",
        "metrics.json",
        "best.safetensors",
        "training_loss.png",
        "training_auc.png",
    ] {
        assert!(pre.join(f).is_file(), "{f}: {out}");
    }
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(pre.join("config.json")).expect("read"))
            .expect("JSON");
    assert_eq!(saved["composed_from"], v["composed_from"]);

    // Fine-tuning reads finetune.from (runs/pretrain_multiclass/best.ckpt) from the experiment.
    let small_ft = [
        "trainer.max_epochs=2",
        "subset={train_events: 100, val_events: 100, test_events: 100}",
    ];
    let mut args = vec!["finetune", "finetune_ttH_CP"];
    args.extend(small_ft);
    let out = ok(&args);
    assert!(
        out.contains("fine-tuning from runs/pretrain_multiclass/best.ckpt"),
        "{out}"
    );
    let ft = cwd.join("runs/finetune_ttH_CP_full");
    assert!(ft.join("best.safetensors").is_file() && ft.join("metrics.json").is_file());
    // The same experiment from scratch: `train` ignores the finetune section, says so.
    let mut args = vec![
        "train",
        "finetune_ttH_CP",
        "--run",
        "runs/scratch",
        "--threads",
        "1",
    ];
    args.extend(small_ft);
    args.extend(["--profile-trace", "scratch.trace.json"]);
    let out = ok(&args);
    assert!(
        out.contains("trains from scratch") && !out.contains("fine-tuning from"),
        "{out}"
    );
    // A profiled run reports its peak memory (Linux).
    if cfg!(target_os = "linux") {
        let mb: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("peak resident memory: "))
            .and_then(|v| v.trim_end_matches(" MB").parse().ok())
            .unwrap_or_else(|| panic!("no peak memory line in {out}"));
        assert!(mb > 1.0, "{out}");
    }
    // The Chrome trace holds the training stages and the model's blocks.
    let trace: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(cwd.join("scratch.trace.json")).expect("trace written"),
    )
    .expect("the trace is JSON");
    let names: std::collections::BTreeSet<&str> = trace
        .as_array()
        .expect("an array of events")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for stage in [
        "wait_for_batch",
        "make_batch",
        "forward_loss",
        "backward",
        "optimizer_step",
        "validation",
        "checkpoint",
        "edge_update",
    ] {
        assert!(
            names.contains(stage),
            "{stage} missing from the trace: {names:?}"
        );
    }

    // The README's commands on the fine-tuned run: evaluate and predict of the same split write
    // separate folders, so neither refuses the other.
    let out = ok(&["evaluate", "runs/finetune_ttH_CP_full"]);
    let eval = ft.join("evaluation/demo_finetune_test");
    for f in [
        "metrics.json",
        "predictions.npz",
        "roc.png",
        "roc_linear.png",
        "scores.png",
        "scores_linear.png",
    ] {
        assert!(eval.join(f).is_file(), "{f}: {out}");
    }
    let out = ok(&["predict", "runs/finetune_ttH_CP_full"]);
    assert!(
        ft.join("predictions/demo_finetune_test/predictions.npz")
            .is_file(),
        "{out}"
    );
    ok(&[
        "predict",
        "runs/scratch",
        "--split",
        "all",
        "--format",
        "root",
    ]);
    let friends = std::fs::read_dir(cwd.join("runs/scratch/predictions/demo_finetune_all/friends"))
        .expect("friend trees")
        .count();
    assert_eq!(friends, 2);
}

/// The last epoch of a 2-rank run (its history) has the validation metrics `evaluate` finds for
/// its last checkpoint in one process (`cli` runs the binary with the run's environment).
#[cfg(feature = "mpi")]
fn two_ranks_validate_as_one_process(cwd: &Path, run_dir: &str, cli: impl Fn(&[&str]) -> Output) {
    let last = history_without_times(&cwd.join(run_dir))
        .pop()
        .expect("epochs");
    assert!(
        last["train_loss"].as_f64().is_some_and(f64::is_finite),
        "{last}"
    );
    assert_eq!(last["ranks"], 2, "{last}");
    let args = [
        "evaluate",
        run_dir,
        "--checkpoint",
        "last",
        "--split",
        "validation",
    ];
    let o = cli(&args);
    assert!(o.status.success(), "{}", text(&o).1);
    let evaluated = json(
        &cwd.join(run_dir)
            .join("evaluation/demo_finetune_validation/metrics.json"),
    );
    for key in ["loss", "accuracy", "auc_macro"] {
        let x = last["val"][key].as_f64().expect("metric");
        let y = evaluated["metrics"][key].as_f64().unwrap_or(f64::NAN);
        assert!(
            (x - y).abs() <= 1e-6,
            "{run_dir}: val.{key}: {x} (2 ranks) vs {y} (evaluate): {evaluated}"
        );
    }
}

/// Data-parallel training under `mpirun -np 2` (built with `--features mpi`; CI runs it with
/// Debian's MPICH).
#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    fn mpirun(cwd: &Path, args: &[&str]) -> Output {
        Command::new("mpirun")
            .current_dir(cwd)
            .args(args)
            .output()
            .expect("mpirun runs (install MPICH: mpich libmpich-dev)")
    }

    fn weights(path: &Path) -> Vec<(String, Vec<f32>)> {
        checkpoint_bits(path)
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().map(f32::from_bits).collect()))
            .collect()
    }

    #[test]
    fn two_ranks_share_the_data_keep_global_metrics_resume_finetune_and_fail_together() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cwd = dir.path();
        copy_configs(cwd);
        assert!(run(cwd, &["generate", "--events", "150"]).status.success());
        // 200 training events: 100 per rank, in batches of 32 (global batches of 64).
        std::fs::write(
            cwd.join("r.yaml"),
            "defaults:\n  - data: demo_finetune\n  - task: binary\nname: r\ntrainer: {batch_size: 64, max_epochs: 2, lr: 1.0e-4, seed: 5, loader_threads: 1, checkpoint_every_steps: 2}\nsubset: {train_events: 200, val_events: 100, test_events: 100}\n",
        )
        .expect("write");
        let bin = env!("CARGO_BIN_EXE_gnn4colliders");
        let ok = |o: Output| {
            let (out, err) = text(&o);
            assert!(o.status.success(), "{out}{err}");
            out
        };
        let out = ok(mpirun(
            cwd,
            &[
                "-np",
                "2",
                bin,
                "train",
                "r.yaml",
                "trainer.batch_size=32",
                // TensorBoard's step lines every 2 steps: an all-reduce every rank joins.
                "trainer.log_every_steps=2",
                "--run",
                "runs/two",
            ],
        ));
        assert!(
            out.contains("2 MPI ranks (global batch 64 = 32 × 2)"),
            "{out}"
        );
        // Rank 0 alone writes: one history of two epochs, one TensorBoard file.
        let lines = std::fs::read_to_string(cwd.join("runs/two/history.jsonl")).expect("history");
        assert_eq!(lines.lines().count(), 2, "{lines}");
        let boards = std::fs::read_dir(cwd.join("runs/two/tensorboard"))
            .expect("tensorboard/")
            .count();
        assert_eq!(boards, 1);

        // Each rank streams its own share of the split (a disjoint, contiguous run of the
        // epoch's block order, mixed in its own shuffle buffer: unit-tested in the training
        // crate), so the global batches are not the single-process ones. The validation metrics
        // are still global and exact: those of the last epoch are the single-process evaluation
        // of the last checkpoint on the whole validation fold.
        let global_metrics = |run_dir: &str| {
            two_ranks_validate_as_one_process(cwd, run_dir, |args| run(cwd, args));
        };
        global_metrics("runs/two");
        let two = weights(&cwd.join("runs/two/last.ckpt"));

        // The other families (the first is the default, run above) through the same command
        // under 2 ranks: global metrics too.
        for &family in &gnn4c_run::FAMILIES[1..] {
            let extra: &[&str] = match family {
                "root_transformer" => &["model.n_layers=1", "trainer.batch_size=32"],
                _ => &[],
            };
            let model = format!("model={family}");
            let run_dir = format!("runs/two_{family}");
            let mut args = vec!["-np", "2", bin, "train", "r.yaml", &model];
            args.extend_from_slice(extra);
            args.extend(["--run", &run_dir]);
            ok(mpirun(cwd, &args));
            global_metrics(&run_dir);
        }

        // Resume under 2 ranks: 1 epoch, then the second, gives the uninterrupted weights.
        let two_ranks = |extra: &[&str]| {
            let mut a = vec!["-np", "2", bin];
            a.extend_from_slice(extra);
            mpirun(cwd, &a)
        };
        ok(two_ranks(&[
            "train",
            "r.yaml",
            "trainer.batch_size=32",
            "--max-epochs",
            "1",
            "--run",
            "runs/res",
        ]));
        ok(two_ranks(&[
            "train",
            "r.yaml",
            "trainer.batch_size=32",
            "--run",
            "runs/res",
            "--resume",
        ]));
        assert_eq!(
            weights(&cwd.join("runs/res/last.ckpt")),
            two,
            "resume under 2 ranks is exact"
        );
        // Preprocessing under 2 ranks: the ranks share the input files, rank 0 writes the
        // manifest; the cache is the single-process one, byte for byte.
        let data = "configs/data/demo_finetune.yaml";
        ok(run(cwd, &["preprocess", data, "--cache", "cache/single"]));
        let out = ok(two_ranks(&["preprocess", data, "--cache", "cache/mpi"]));
        assert!(out.contains("input files already done"), "{out}");
        assert!(
            folder_files(&cwd.join("cache/mpi")) == folder_files(&cwd.join("cache/single")),
            "the same cache"
        );
        // Fine-tuning under 2 ranks.
        let out = ok(two_ranks(&[
            "finetune",
            "r.yaml",
            "--from",
            "runs/two/best.ckpt",
            "--mode",
            "full",
            "trainer.batch_size=32",
            "--run",
            "runs/ft",
        ]));
        assert!(out.contains("fine-tuning from runs/two/best.ckpt"), "{out}");
        assert!(cwd.join("runs/ft/best.safetensors").is_file());

        // A rank that fails ends the job: rank 1 has no config, rank 0 would otherwise wait in
        // its first collective forever.
        let start = std::time::Instant::now();
        let o = mpirun(
            cwd,
            &[
                "-np",
                "1",
                bin,
                "train",
                "r.yaml",
                "--run",
                "runs/dead",
                ":",
                "-np",
                "1",
                bin,
                "train",
                "missing.yaml",
                "--run",
                "runs/dead",
            ],
        );
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{out}{err}");
        assert!(
            err.contains("rank 1 of 2") && err.contains("missing.yaml"),
            "{out}{err}"
        );
        assert!(
            start.elapsed().as_secs() < 120,
            "the job ended instead of hanging"
        );
    }
}

/// The backend-generic code path through the CLI on Burn's wgpu backend (built with `--features
/// wgpu`; CI runs it on Mesa's software Vulkan driver): each family trains a few steps on
/// `--device wgpu`, and a CPU-trained model predicts the same logits on wgpu as on the CPU.
#[cfg(feature = "wgpu")]
mod wgpu {
    use super::*;

    #[test]
    fn both_families_train_and_predict_on_wgpu() {
        use gnn4c_data::read_predictions_npz;
        let dir = tempfile::tempdir().expect("tempdir");
        let cwd = dir.path();
        copy_configs(cwd);
        assert!(run(cwd, &["generate", "--events", "150"]).status.success());
        std::fs::write(
            cwd.join("w.yaml"),
            "defaults:\n  - data: demo_finetune\n  - task: binary\nname: w\ntrainer: {batch_size: 32, max_epochs: 1, lr: 1.0e-3, seed: 5, loader_threads: 1}\nsubset: {train_events: 96, val_events: 64, test_events: 64}\n",
        )
        .expect("write");
        let ok = |args: &[&str]| run_ok(cwd, args);
        for family in gnn4c_run::FAMILIES {
            let model = format!("model={family}");
            // Three steps on wgpu: a finite loss, a checkpoint, predictions.
            let gpu_run = format!("runs/{family}_wgpu");
            let out = ok(&[
                "train", "w.yaml", &model, "--run", &gpu_run, "--device", "wgpu",
            ]);
            assert!(out.contains("device \"wgpu\""), "{out}");
            let history =
                std::fs::read_to_string(cwd.join(&gpu_run).join("history.jsonl")).expect("history");
            let epoch = serde_json::from_str::<serde_json::Value>(
                history.lines().next().expect("one epoch"),
            )
            .expect("json");
            assert!(
                epoch["train_loss"].as_f64().is_some_and(f64::is_finite),
                "{family}: {epoch}"
            );

            // A CPU-trained model scores the same on wgpu as on the CPU.
            let cpu_run = format!("runs/{family}_cpu");
            ok(&["train", "w.yaml", &model, "--run", &cpu_run]);
            let mut logits = Vec::new();
            for device in ["cpu", "wgpu"] {
                let out_dir = format!("p_{family}_{device}");
                ok(&[
                    "predict", &cpu_run, "--device", device, "--out", &out_dir, "--format", "npz",
                ]);
                let table = read_predictions_npz(&cwd.join(&out_dir).join("predictions.npz"))
                    .expect("predictions");
                logits.push(table.logits);
            }
            assert!(
                !logits[0].is_empty() && logits[0].len() == logits[1].len(),
                "{family}: the test events"
            );
            for (k, (c, g)) in logits[0].iter().zip(&logits[1]).enumerate() {
                assert!(
                    (c - g).abs() <= 1e-5,
                    "{family} event {k}: cpu {c}, wgpu {g}"
                );
            }
        }
    }
}
