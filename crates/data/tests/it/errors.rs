//! Bad input: each gets a clear error naming the file, tree, branch and reason, never a panic.

use std::path::Path;

use gnn4c_data::{
    ColumnRequest, DataError, EntryRange, SampleMeta, SchemaSpec, WriteColumn, list_trees,
    open_tree, write_tree,
};
use gnn4c_events::Label;
use gnn4c_reference::{builtin_schema, read_file_events};

use crate::shared;

fn meta() -> SampleMeta {
    SampleMeta {
        name: "s".into(),
        label: Label::Class(0),
        weight_branch: None,
        scale: 1.0,
    }
}

const ALL: EntryRange = EntryRange {
    entry_start: 0,
    entry_stop: u64::MAX,
    step_size: 1000,
    threads: 0,
};

fn read_err(path: &Path, tree: &str, spec: &SchemaSpec) -> DataError {
    read_file_events(path, tree, spec, &meta(), ALL, &mut |_| Ok(())).expect_err("must fail")
}

#[test]
fn files_of_every_root_version_and_codec_open() {
    // zstd, ROOT ≥ 6.34 streamers, offset maps, real Delphes TClonesArray branches: every file
    // opens and lists its tree. (Their values are checked against uproot's in crates/rootio.)
    let cases = [
        ("data/real/uproot-HZZ-zstd.root", "events", 2421),
        ("data/generated/nano_zstd.root", "Events", 2000),
        ("data/generated/nano_zlib1.root", "Events", 2000),
        ("data/generated/nano_offsetmap.root", "Events", 2000),
        ("data/generated/delphes_gen.root", "Delphes", 2000),
        ("data/generated/vec_zlib1.root", "tree", 2000),
        ("data/generated/nested_unsplit.root", "t", 500),
        ("data/real/uproot-issue-1502.root", "tree", 10),
        ("data/real/uproot-issue513.root", "Delphes", 10),
    ];
    for (file, tree, entries) in cases {
        let trees = list_trees(&shared(file)).expect(file);
        assert!(
            trees.contains(&(tree.to_owned(), entries)),
            "{file}: {trees:?}"
        );
    }
}

#[test]
fn offset_map_branches_read_exactly() {
    // uproot-small-dy-nooffsets.root stores Jet_pt without entry offsets (kGenerateOffsetMap):
    // the counter places the values, and they sum to uproot's on the twin file with offsets.
    let path = shared("data/real/uproot-small-dy-nooffsets.root");
    let reader = open_tree(&path, "tree").expect("the file opens");
    let req = [ColumnRequest {
        branch: "Jet_pt".into(),
        counter: Some("nJet".into()),
    }];
    let mut sum = 0.0;
    reader
        .read(&req, ALL, &mut |c| {
            for j in 0..c.columns[0].values.len() {
                sum += c.columns[0].values.f64_at(j);
            }
            Ok(())
        })
        .expect("read");
    assert_eq!(sum, 68349.8125);
}

#[test]
fn missing_file_tree_and_branch_name_the_closest() {
    let spec = builtin_schema("hzz").expect("built-in");
    let err = read_err(Path::new("/nonexistent/file.root"), "events", &spec);
    assert!(matches!(err, DataError::FileNotFound { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/file.root"));

    let hzz = shared("data/real/uproot-HZZ.root");
    let err = read_err(&hzz, "Events", &spec);
    let msg = err.to_string();
    assert!(
        msg.contains("no tree or RNTuple 'Events'") && msg.contains("events"),
        "{msg}"
    );

    // NanoAOD branch names on the HZZ file: the error names the field and the closest branches.
    let nano = builtin_schema("nanoaod").expect("built-in");
    let err = read_err(&hzz, "events", &nano);
    let msg = err.to_string();
    assert!(matches!(err, DataError::BranchNotFound { .. }), "{msg}");
    assert!(
        msg.contains("'Jet_pt'") && msg.contains("jets.pt") && msg.contains("Jet_Px"),
        "{msg}"
    );
}

#[test]
fn wrong_branch_type_is_an_error() {
    // A float used as a counter.
    let mut spec = builtin_schema("hzz").expect("built-in");
    if let Some(j) = spec.jets.as_mut() {
        j.counter = Some("MET_px".into());
    }
    let err = read_err(&shared("data/real/uproot-HZZ.root"), "events", &spec);
    let msg = err.to_string();
    assert!(matches!(err, DataError::BranchType { .. }), "{msg}");
    assert!(
        msg.contains("MET_px") && msg.contains("float") && msg.contains("counter"),
        "{msg}"
    );

    // A string branch used as a kinematic field.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("strings.root");
    {
        let mut f = oxyroot::RootFile::create(&path).expect("create");
        let mut t = oxyroot::WriterTree::new("t");
        t.new_branch("label", vec!["a".to_string(), "b".to_string()].into_iter());
        t.new_branch("met", vec![1.0f32, 2.0].into_iter());
        t.write(&mut f).expect("write");
        f.close().expect("close");
    }
    let spec: SchemaSpec = serde_yaml::from_str("{met: {pt: label, phi: met}}").expect("yaml");
    let err = read_err(&path, "t", &spec);
    let msg = err.to_string();
    assert!(matches!(err, DataError::BranchType { .. }), "{msg}");
    assert!(msg.contains("'label'") && msg.contains("met.pt"), "{msg}");
}

#[test]
fn counter_disagreeing_with_arrays_is_an_error() {
    // Jet_Px read with the muon counter: the per-entry baskets do not line up.
    let hzz = shared("data/real/uproot-HZZ.root");
    let reader = open_tree(&hzz, "events").expect("open");
    let req = [ColumnRequest {
        branch: "Jet_Px".into(),
        counter: Some("NMuon".into()),
    }];
    let err = reader
        .read(&req, ALL, &mut |_| Ok(()))
        .expect_err("mismatch");
    let msg = err.to_string();
    assert!(matches!(err, DataError::CounterMismatch { .. }), "{msg}");
    assert!(
        msg.contains("Jet_Px") && msg.contains("NMuon") && msg.contains("entry"),
        "{msg}"
    );

    // Two arrays of one collection with different lengths.
    let yaml = "{jets: {pt: Jet_pt, eta: Muon_eta, phi: Jet_phi}}";
    let spec: SchemaSpec = serde_yaml::from_str(yaml).expect("yaml");
    let nano = shared("data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root");
    let err = read_err(&nano, "Events", &spec);
    let msg = err.to_string();
    assert!(
        msg.contains("Muon_eta") && msg.contains("must agree"),
        "{msg}"
    );
}

#[test]
fn non_finite_events_are_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nan.root");
    let cols = vec![
        WriteColumn::U64("event_number".into(), vec![10, 11, 12, 13]),
        WriteColumn::F32("weight".into(), vec![1.0, 1.0, f32::NAN, 1.0]),
        WriteColumn::VecF32(
            "jet_pt".into(),
            vec![vec![50.0], vec![f32::NAN], vec![30.0], vec![]],
        ),
        WriteColumn::VecF32(
            "jet_eta".into(),
            vec![vec![0.1], vec![0.2], vec![0.3], vec![]],
        ),
        WriteColumn::VecF32(
            "jet_phi".into(),
            vec![vec![0.1], vec![0.2], vec![0.3], vec![]],
        ),
        WriteColumn::F32("met".into(), vec![10.0, 20.0, 30.0, f32::INFINITY]),
        WriteColumn::F32("met_phi".into(), vec![0.0; 4]),
    ];
    write_tree(&path, "output", cols).expect("write");
    let spec: SchemaSpec = serde_yaml::from_str(
        "{event_number: event_number, weight: weight, jets: {pt: jet_pt, eta: jet_eta, phi: jet_phi}, met: {pt: met, phi: met_phi}}",
    )
    .expect("yaml");
    let mut kept = Vec::new();
    let report = read_file_events(&path, "output", &spec, &meta(), ALL, &mut |evs| {
        kept.extend(evs.iter().map(|e| e.id.event_number));
        Ok(())
    })
    .expect("NaN is data, not an error");
    assert_eq!(kept, vec![10]);
    assert_eq!(report.skipped.get("non_finite"), 3);
    assert_eq!(report.entries_read, 4);
}

#[test]
fn schema_config_typos_are_rejected_by_name() {
    let err =
        serde_yaml::from_str::<SchemaSpec>("{jets: {pt: a, eta: b, phi: c, btag_treshold: 0.5}}")
            .expect_err("typo");
    assert!(err.to_string().contains("btag_treshold"), "{err}");
}

#[test]
fn a_jagged_weight_branch_is_a_config_error() {
    let path = shared("data/real/uproot-HZZ.root");
    let spec = builtin_schema("hzz").expect("built-in");
    let meta = SampleMeta {
        weight_branch: Some("Muon_Px".into()),
        ..meta()
    };
    let err = read_file_events(&path, "events", &spec, &meta, ALL, &mut |_| Ok(()))
        .expect_err("a jagged weight");
    let msg = err.to_string();
    assert!(matches!(err, DataError::Config(_)), "{msg}");
    for part in [
        path.display().to_string().as_str(),
        "tree 'events'",
        "'Muon_Px'",
        "at entry 0",
        "one number per entry",
    ] {
        assert!(msg.contains(part), "{part} missing from: {msg}");
    }
}

#[test]
fn damaged_copies_of_every_test_file_inspect_and_read_cleanly() {
    // Truncated and byte-flipped copies through `inspect` and a full read of every branch the
    // data layer reads: errors name the copy, nothing panics.
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("damaged.root");
    let mut files: Vec<_> = ["data/real", "data/generated"]
        .iter()
        .flat_map(|d| std::fs::read_dir(shared(d)).expect("folder").flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "root"))
        .collect();
    files.sort();
    for file in files {
        let bytes = std::fs::read(&file).expect("read");
        let n = bytes.len();
        let mut damaged: Vec<Vec<u8>> = [n / 3, n - 7].map(|k| bytes[..k].to_vec()).into();
        for k in 1..6 {
            let mut b = bytes.clone();
            for x in &mut b[k * n / 6..(k * n / 6 + 16).min(n)] {
                *x = !*x;
            }
            damaged.push(b);
        }
        for d in damaged {
            std::fs::write(&copy, d).expect("write");
            if let Err(e) = gnn4c_data::inspect_file(&copy) {
                assert!(
                    e.to_string().contains("damaged.root"),
                    "{}: {e}",
                    file.display()
                );
            }
            let Ok(trees) = list_trees(&copy) else {
                continue;
            };
            for (tree, _) in trees {
                let Ok(reader) = open_tree(&copy, &tree) else {
                    continue;
                };
                let requests: Vec<ColumnRequest> = reader
                    .branches()
                    .iter()
                    .filter(|b| !matches!(b.kind, gnn4c_data::BranchKind::Other))
                    .map(|b| ColumnRequest {
                        branch: b.name.clone(),
                        counter: None,
                    })
                    .collect();
                if let Err(e) = reader.read(&requests, ALL, &mut |_| Ok(())) {
                    assert!(
                        e.to_string().contains("damaged.root"),
                        "{}: {e}",
                        file.display()
                    );
                }
            }
        }
    }
}
