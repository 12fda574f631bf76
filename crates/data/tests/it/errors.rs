//! Bad input: each gets a clear error naming the file, tree, branch and reason, never a panic.

use std::path::Path;

use gnn4c_data::{
    ColumnRequest, DataError, EntryRange, SampleMeta, SchemaSpec, WriteColumn, list_trees,
    open_tree, read_file_events, write_tree,
};
use gnn4c_events::Label;

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
};

fn read_err(path: &Path, tree: &str, spec: &SchemaSpec) -> DataError {
    read_file_events(path, tree, spec, &meta(), ALL, &mut |_| Ok(())).expect_err("must fail")
}

#[test]
fn unsupported_files_name_the_limit() {
    // (file, a phrase the message must contain)
    let cases = [
        ("data/real/uproot-HZZ-zstd.root", "zstd"),
        ("data/generated/nano_zstd.root", "zstd"),
        ("data/generated/nano_zlib1.root", "ROOT ≥ 6.34"),
        ("data/generated/nano_offsetmap.root", "ROOT ≥ 6.34"),
        ("data/generated/delphes_gen.root", "ROOT ≥ 6.34"),
        ("data/generated/vec_zlib1.root", "ROOT ≥ 6.34"),
        ("data/generated/nested_unsplit.root", "ROOT ≥ 6.34"),
        ("data/real/uproot-issue-1502.root", "ROOT ≥ 6.34"),
        ("data/real/uproot-issue513.root", "TClonesArray"),
    ];
    for (file, phrase) in cases {
        let path = shared(file);
        let err = list_trees(&path).expect_err(file);
        let msg = err.to_string();
        assert!(
            matches!(err, DataError::Unsupported { .. }),
            "{file}: {msg}"
        );
        assert!(
            msg.contains(phrase),
            "{file}: '{msg}' should mention {phrase}"
        );
        assert!(
            msg.contains(&path.display().to_string()),
            "{file}: names the file: {msg}"
        );
    }
}

#[test]
fn offset_map_file_is_refused_not_misread() {
    // uproot-small-dy-nooffsets.root stores Jet_pt without entry offsets (kGenerateOffsetMap);
    // oxyroot 0.1.25 opens it, but the values cannot be placed: the read must fail loudly.
    let path = shared("data/real/uproot-small-dy-nooffsets.root");
    let reader = open_tree(&path, "tree").expect("the file opens");
    let req = [ColumnRequest {
        branch: "Jet_pt".into(),
        counter: Some("nJet".into()),
    }];
    let mut sum = 0.0;
    let result = reader.read(&req, ALL, &mut |c| {
        for j in 0..c.columns[0].values.len() {
            sum += c.columns[0].values.f64_at(j);
        }
        Ok(())
    });
    // Either a clear error, or (if oxyroot placed them right) exactly uproot's sum on the twin file.
    match result {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("Jet_pt") && msg.contains("nooffsets"), "{msg}");
        }
        Ok(()) => assert!(
            (sum - 68349.8125).abs() < 1e-3,
            "silently wrong values: sum {sum}"
        ),
    }
}

#[test]
fn missing_file_tree_and_branch_name_the_closest() {
    let spec = SchemaSpec::builtin("hzz").expect("built-in");
    let err = read_err(Path::new("/nonexistent/file.root"), "events", &spec);
    assert!(matches!(err, DataError::FileNotFound { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/file.root"));

    let hzz = shared("data/real/uproot-HZZ.root");
    let err = read_err(&hzz, "Events", &spec);
    let msg = err.to_string();
    assert!(
        msg.contains("no tree 'Events'") && msg.contains("events"),
        "{msg}"
    );

    // NanoAOD branch names on the HZZ file: the error names the field and the closest branches.
    let nano = SchemaSpec::builtin("nanoaod").expect("built-in");
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
    let mut spec = SchemaSpec::builtin("hzz").expect("built-in");
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
    let spec = SchemaSpec::builtin("hzz").expect("built-in");
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
