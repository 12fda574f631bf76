//! The Parquet cache: round trip, manifest validation, and every way a cache can be broken.

use std::path::Path;
use std::sync::Arc;

use gnn4c_data::{
    CONTRACT_VERSION, CacheBuilder, CacheManifest, CachedSplit, DataError, EventRecord, Folds,
    MANIFEST, SampleCounts, Split, fingerprint_of, first_difference, fold_of, open_split,
    read_cache, read_manifest, read_split, verify_cache,
};
use gnn4c_events::{EventId, Label};

fn record(i: u64) -> EventRecord {
    let n = 1 + (i % 4) as u16;
    EventRecord {
        id: EventId {
            sample: if i.is_multiple_of(2) { "even" } else { "odd" }.into(),
            source_file: Arc::from(Path::new("/data/x.root")),
            tree: "t".into(),
            entry: i,
            event_number: 1000 + i,
        },
        fold: fold_of(1000 + i, 5),
        label: if i == 7 {
            Label::Multi(vec![1, 0, 1])
        } else {
            Label::Class((i % 3) as u32)
        },
        weight: i as f32 * 0.5 - 3.0,
        n_nodes: n,
        node_features: (0..usize::from(n) * 7)
            .map(|k| k as f32 + i as f32)
            .collect(),
        eta: (0..usize::from(n))
            .map(|k| k as f64 * 0.1 - i as f64)
            .collect(),
        phi: (0..usize::from(n))
            .map(|k| 1e-300 * k as f64 - 3.0)
            .collect(),
        pt: if i.is_multiple_of(3) {
            (0..usize::from(n)).map(|k| 20.0 + k as f64).collect()
        } else {
            Vec::new()
        },
        mass: if i.is_multiple_of(3) {
            (0..usize::from(n)).map(|k| 0.1 * k as f64).collect()
        } else {
            Vec::new()
        },
        global_features: vec![f32::from(n) / 10.0, 0.25],
    }
}

fn manifest() -> CacheManifest {
    let inputs = serde_json::json!({"selection": {"min_pt": 25.0}, "files": ["a"]});
    CacheManifest {
        schema_version: gnn4c_data::CACHE_SCHEMA_VERSION,
        contract_version: CONTRACT_VERSION.into(),
        fingerprint: fingerprint_of(&inputs),
        fingerprint_inputs: inputs,
        n_folds: 5,
        features: gnn4c_data::FeatureNames::default(),
        shards: Vec::new(),
        samples: Default::default(),
        skipped_files: Vec::new(),
        written_by: "test".into(),
    }
}

/// A cache of records `0..n` as one input file (unit 0).
fn write(dir: &Path, n: u64, shard_events: usize) -> CacheManifest {
    let m = manifest();
    let b = CacheBuilder::open(dir, &m.fingerprint, shard_events, true).expect("open");
    let mut w = b.unit(0).expect("unit");
    for i in 0..n {
        w.push(record(i)).expect("push");
    }
    let counts = SampleCounts {
        read: n,
        cached: n,
        ..SampleCounts::default()
    };
    w.finish("all", counts).expect("unit done");
    b.finish(1, m).expect("finish")
}

#[test]
fn round_trip_is_exact_and_sharded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = write(dir.path(), 25, 3);
    // Shards split by fold: 5 events per fold, in shards of 3 + 2.
    assert_eq!(m.shards.len(), 10);
    assert!(
        m.shards
            .iter()
            .all(|s| s.file.starts_with(&format!("part-f{}-", s.fold)))
    );
    assert_eq!(m.events(), 25);
    let again = read_manifest(dir.path()).expect("manifest");
    assert_eq!(again, m);
    let got = read_cache(dir.path(), &m, &|_| true).expect("read");
    // Fold by fold, each in input order.
    let mut want: Vec<EventRecord> = (0..25).map(record).collect();
    want.sort_by_key(|r| r.fold);
    assert_eq!(
        got, want,
        "identity, label (class and multilabel), weight and features exact"
    );
    // Fold filtering (contract §7: event_number mod n_folds).
    let folds = Folds::default();
    let (_, val) = read_split(dir.path(), &folds, Split::Validation).expect("validation");
    assert!(val.iter().all(|r| r.id.event_number % 5 == 1) && !val.is_empty());
    let (_, train) = read_split(dir.path(), &folds, Split::Train).expect("train");
    assert!(
        train
            .iter()
            .all(|r| !matches!(r.id.event_number % 5, 0 | 1))
    );
    assert_eq!(
        train.len()
            + val.len()
            + read_split(dir.path(), &folds, Split::Test)
                .expect("test")
                .1
                .len(),
        25
    );
    // Several splits opened together: their events, in cache order.
    let (_, both) =
        open_split(dir.path(), &folds, &[Split::Train, Split::Validation], None).expect("both");
    let events: Vec<EventRecord> = (0..both.block_sizes().len())
        .flat_map(|b| both.read_block(b).expect("block"))
        .collect();
    assert_eq!(events.len(), train.len() + val.len());
    assert!(events.iter().all(|e| train.contains(e) || val.contains(e)));
}

#[test]
fn auto_features_get_the_training_folds_moments_and_are_cached_raw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = manifest();
    let auto = gnn4c_features::AutoColumns {
        node: vec![(2, "node2".into())],
        global: vec![(0, "n".into())],
    };
    let b = CacheBuilder::open(dir.path(), &m.fingerprint, 7, true)
        .expect("open")
        .with_auto(auto);
    let mut w = b.unit(0).expect("unit");
    for i in 0..200 {
        w.push(record(i)).expect("push");
    }
    let counts = SampleCounts {
        read: 200,
        cached: 200,
        ..SampleCounts::default()
    };
    w.finish("all", counts).expect("unit done");
    let m = b.finish(1, m).expect("finish");
    assert!(m.shards.iter().all(|s| s.moments.len() == 2));
    let folds = Folds::default();
    let train = |f: u8| folds.split_of(f) == Split::Train;
    let scales = m.auto_scales(&train);
    // The same numbers as the raw cached values of the training folds, computed directly.
    let (_, records) = read_split(dir.path(), &folds, Split::Train).expect("train");
    let node2: Vec<f64> = records
        .iter()
        .flat_map(|r| r.node_features.chunks(7).map(|row| f64::from(row[2])))
        .collect();
    let n: Vec<f64> = records
        .iter()
        .map(|r| f64::from(r.global_features[0]))
        .collect();
    for (name, values) in [("node2", node2), ("n", n)] {
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / values.len() as f64;
        let s = scales[name];
        assert!(
            (s.center - mean).abs() < 1e-9 * mean.abs().max(1.0),
            "{name}: {s:?} vs {mean}"
        );
        assert!(
            (s.scale - var.sqrt()).abs() < 1e-9 * var.sqrt(),
            "{name}: {s:?}"
        );
    }
    // The cache holds the values unscaled; the validation fold is not in the statistics.
    assert_eq!(
        records,
        read_split(dir.path(), &folds, Split::Train)
            .expect("again")
            .1
    );
    assert_eq!(
        records[0].node_features,
        record(records[0].id.entry).node_features
    );
    assert_ne!(m.auto_scales(&|f| f == 1), scales);
}

#[test]
fn a_split_streams_in_blocks_and_a_subset_reads_only_its_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 2,400 events per fold in shards of 2,000 + 400: row groups of 1,024, 976 and 400.
    write(dir.path(), 12_000, 2_000);
    let folds = Folds::default();
    let (_, whole) = read_split(dir.path(), &folds, Split::Train).expect("whole");
    let (_, split) = open_split(dir.path(), &folds, &[Split::Train], None).expect("open");
    assert_eq!(
        split.block_sizes(),
        &[1024, 976, 400, 1024, 976, 400, 1024, 976, 400]
    );
    let read = |s: &CachedSplit| -> Vec<EventRecord> {
        (0..s.block_sizes().len())
            .flat_map(|b| s.read_block(b).expect("block"))
            .collect()
    };
    assert_eq!(read(&split), whole, "blocks in order are the split");
    let (_, sub) = open_split(dir.path(), &folds, &[Split::Train], Some((500, 9))).expect("subset");
    assert_eq!((sub.events(), sub.fold_events()), (500, 7200));
    let events = read(&sub);
    assert_eq!(events.len(), 500);
    assert!(
        events.iter().all(|e| whole.contains(e)),
        "a subset of the split"
    );
    let (_, again) =
        open_split(dir.path(), &folds, &[Split::Train], Some((500, 9))).expect("again");
    assert_eq!(read(&again), events, "the same seed keeps the same events");
    let (_, other) =
        open_split(dir.path(), &folds, &[Split::Train], Some((500, 10))).expect("other");
    assert_ne!(read(&other), events);
    for b in 0..sub.block_sizes().len() {
        let targets: Vec<(i32, f32)> = sub
            .read_block(b)
            .expect("block")
            .iter()
            .map(|e| match &e.label {
                Label::Class(c) => (*c as i32, e.weight),
                Label::Multi(_) => (-1, e.weight),
            })
            .collect();
        assert_eq!(sub.read_targets(b).expect("targets"), targets, "block {b}");
    }
}

#[test]
fn an_interrupted_build_keeps_its_finished_units_and_names_itself() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("c");
    let m = manifest();
    // Two of three units done, the third cut short (a shard without its marker).
    let b = CacheBuilder::open(&dir, &m.fingerprint, 4, true).expect("open");
    for u in 0..2u32 {
        let mut w = b.unit(u).expect("unit");
        for i in 0..6 {
            w.push(record(u64::from(u) * 10 + i)).expect("push");
        }
        w.finish(
            "all",
            SampleCounts {
                read: 6,
                cached: 6,
                ..SampleCounts::default()
            },
        )
        .expect("unit");
    }
    let mut w = b.unit(2).expect("unit");
    for i in 0..9 {
        w.push(record(20 + i)).expect("push");
    }
    std::mem::forget(w);
    let err = read_manifest(&dir).expect_err("not built").to_string();
    assert!(err.contains("interrupted with 2 input files done"), "{err}");
    let err = b.finish(3, m.clone()).expect_err("incomplete").to_string();
    assert!(
        err.contains("2 of 3 input files are done (input file 3 is not)"),
        "{err}"
    );
    // The next run keeps units 0 and 1 and redoes unit 2 only.
    let b = CacheBuilder::open(&dir, &m.fingerprint, 4, false).expect("reopen");
    let done = b.done().expect("done");
    assert_eq!(done.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
    let mut w = b.unit(2).expect("unit");
    for i in 0..3 {
        w.push(record(20 + i)).expect("push");
    }
    w.finish(
        "all",
        SampleCounts {
            read: 3,
            cached: 3,
            ..SampleCounts::default()
        },
    )
    .expect("unit");
    let built = b.finish(3, m).expect("finish");
    assert_eq!(built.events(), 15);
    assert_eq!(built.samples["all"].cached, 15);
    assert_eq!(read_cache(&dir, &built, &|_| true).expect("read").len(), 15);
    let files = std::fs::read_dir(&dir).expect("ls").count();
    assert_eq!(
        files,
        built.shards.len() + 3 + 1,
        "only the shards, the units' markers and the manifest"
    );
    let units = gnn4c_data::finished_units(&dir).expect("markers");
    assert_eq!(units.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
}

#[test]
fn a_killed_rebuild_never_touches_the_valid_cache() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("c");
    let m = write(&dir, 12, 5);
    // A rebuild killed half-way (no destructor runs on kill -9): shards in its building folder.
    let b = CacheBuilder::open(&dir, "another", 5, true).expect("open");
    let mut w = b.unit(0).expect("unit");
    for i in 100..112 {
        w.push(record(i)).expect("push");
    }
    std::mem::forget(w);
    assert_eq!(read_manifest(&dir).expect("old cache intact"), m);
    assert_eq!(read_cache(&dir, &m, &|_| true).expect("read").len(), 12);
    // The next build clears the leftover and replaces the cache only when complete.
    let m2 = write(&dir, 7, 5);
    assert_eq!(read_manifest(&dir).expect("new cache").events(), 7);
    assert_eq!(m2.events(), 7);
    let leftovers = std::fs::read_dir(root.path()).expect("ls").count();
    assert_eq!(leftovers, 1, "only the cache folder remains");

    // A folder with shards but no manifest (copied or damaged by hand) is never read.
    std::fs::remove_file(dir.join(MANIFEST)).expect("rm");
    let err = read_manifest(&dir).expect_err("half-written");
    assert!(err.to_string().contains("half-written"), "{err}");
    let empty = tempfile::tempdir().expect("tempdir");
    let err = read_manifest(empty.path()).expect_err("no cache");
    assert!(err.to_string().contains("preprocess"), "{err}");
}

#[test]
fn truncated_corrupted_and_missing_shards_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = write(dir.path(), 20, 10);
    let shard = dir.path().join(&m.shards[1].file);
    let bytes = std::fs::read(&shard).expect("read shard");

    std::fs::write(&shard, &bytes[..bytes.len() / 2]).expect("truncate");
    let err = read_manifest(dir.path()).expect_err("truncated");
    let msg = err.to_string();
    assert!(
        msg.contains(&m.shards[1].file) && msg.contains("truncated"),
        "{msg}"
    );

    // Same size, 16 bytes flipped inside: the sizes pass, the content hash does not.
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    for b in &mut flipped[mid..mid + 16] {
        *b ^= 0xFF;
    }
    std::fs::write(&shard, &flipped).expect("corrupt");
    let m2 = read_manifest(dir.path()).expect("sizes match");
    for err in [
        read_cache(dir.path(), &m2, &|_| true).expect_err("corrupted"),
        verify_cache(dir.path(), &m2).expect_err("corrupted"),
    ] {
        let msg = err.to_string();
        assert!(
            msg.contains(&m2.shards[1].file)
                && msg.contains("corrupted")
                && msg.contains("SHA-256"),
            "{msg}"
        );
    }
    // A split reads only its folds' shards: the test fold (0) reads past the damaged fold-1 one.
    assert_eq!(m2.shards[1].fold, 1);
    let (_, test) = read_split(dir.path(), &Folds::default(), Split::Test).expect("test split");
    assert_eq!(test.len(), 4);
    std::fs::write(&shard, &bytes).expect("restore");
    verify_cache(dir.path(), &m2).expect("intact again");

    // A manifest of an older cache layout names the version and how to rebuild.
    let manifest = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    let mut old: serde_json::Value = serde_json::from_str(&text).expect("json");
    old["schema_version"] = 1.into();
    for s in old["shards"].as_array_mut().expect("shards") {
        s.as_object_mut().expect("shard").remove("sha256");
    }
    std::fs::write(&manifest, old.to_string()).expect("write");
    let msg = read_manifest(dir.path()).expect_err("old").to_string();
    assert!(
        msg.contains("schema version 1") && msg.contains("--mode rebuild"),
        "{msg}"
    );
    std::fs::write(&manifest, text).expect("restore");

    std::fs::remove_file(&shard).expect("remove");
    let err = read_manifest(dir.path()).expect_err("missing");
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn foreign_contract_empty_fold_and_fold_count_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), 3, 10); // event numbers 1000..1003: folds 0, 1, 2 only
    let folds = Folds {
        n_folds: 5,
        test_fold: 0,
        validation_fold: 4,
    };
    let err = read_split(dir.path(), &folds, Split::Validation).expect_err("empty fold");
    assert!(
        err.to_string()
            .contains("validation fold 4 holds no events"),
        "{err}"
    );
    let err = read_split(
        dir.path(),
        &Folds {
            n_folds: 4,
            ..Folds::default()
        },
        Split::Train,
    )
    .expect_err("n_folds");
    assert!(err.to_string().contains("n_folds 5"), "{err}");

    let path = dir.path().join(MANIFEST);
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(
        &path,
        text.replace(
            "\"contract_version\": \"v1\"",
            "\"contract_version\": \"v0\"",
        ),
    )
    .expect("write");
    let err = read_manifest(dir.path()).expect_err("foreign contract");
    assert!(matches!(err, DataError::Cache { .. }));
    assert!(err.to_string().contains("contract v0"), "{err}");
}

#[test]
fn fingerprint_difference_names_the_field() {
    let a =
        serde_json::json!({"selection": {"min_pt": {"jets": 25.0}}, "files": [{"mtime_ns": 1}]});
    let b =
        serde_json::json!({"selection": {"min_pt": {"jets": 30.0}}, "files": [{"mtime_ns": 1}]});
    assert_eq!(
        first_difference(&a, &b).as_deref(),
        Some("selection.min_pt.jets: 25.0 → 30.0")
    );
    let c =
        serde_json::json!({"selection": {"min_pt": {"jets": 25.0}}, "files": [{"mtime_ns": 2}]});
    assert_eq!(
        first_difference(&a, &c).as_deref(),
        Some("files[0].mtime_ns: 1 → 2")
    );
    assert_eq!(first_difference(&a, &a), None);
    assert_ne!(fingerprint_of(&a), fingerprint_of(&b));
    // A file added to a long list is said by the list's length.
    let files: Vec<String> = (0..20).map(|i| format!("/data/file-{i}.root")).collect();
    let more = [files.clone(), vec!["/data/new.root".into()]].concat();
    assert_eq!(
        first_difference(
            &serde_json::json!({"files": files}),
            &serde_json::json!({"files": more})
        )
        .as_deref(),
        Some("files: 20 entries → 21 entries")
    );
}

#[test]
fn counts_that_do_not_add_up_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), 12, 5);
    let path = dir.path().join(MANIFEST);
    let text = std::fs::read_to_string(&path).expect("manifest");
    let mut m: serde_json::Value = serde_json::from_str(&text).expect("json");
    m["samples"]["all"]["cached"] = 11.into();
    std::fs::write(&path, m.to_string()).expect("write");
    let msg = read_manifest(dir.path()).expect_err("11 ≠ 12").to_string();
    assert!(
        msg.contains("do not add up") && msg.contains("--mode rebuild"),
        "{msg}"
    );
    let mut m: serde_json::Value = serde_json::from_str(&text).expect("json");
    m["shards"][0]["fold"] = 7.into();
    std::fs::write(&path, m.to_string()).expect("write");
    let msg = read_manifest(dir.path())
        .expect_err("fold 7 of 5")
        .to_string();
    assert!(msg.contains("fold 7") && msg.contains("5 folds"), "{msg}");
}
