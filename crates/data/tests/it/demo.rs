//! The demo dataset: written by oxyroot's writer, read back exactly through our reader.

use gnn4c_data::{
    DatasetConfig, EntryRange, FINETUNE_PROCESSES, PRETRAIN_PROCESSES, SampleMeta, inspect_file,
    toy_events, write_demo,
};
use gnn4c_events::Label;
use gnn4c_reference::{builtin_schema, read_file_events, read_sample};

#[test]
fn demo_reads_back_exactly_and_is_seeded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = write_demo(dir.path(), 300, 7, 2).expect("generate");
    assert_eq!(files.len(), 14);
    let spec = builtin_schema("vector").expect("built-in");
    let all = EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        step_size: 64,
        threads: 0,
    };
    for (k, f) in files.iter().enumerate() {
        let (process, id) = if k < 12 {
            (PRETRAIN_PROCESSES[k], k as u32)
        } else {
            (FINETUNE_PROCESSES[k - 12], 100 + (k - 12) as u32)
        };
        assert_eq!(f.sample, process.name);
        let want = toy_events(&process, id, 300, 7);
        let meta = SampleMeta {
            name: f.sample.into(),
            label: Label::Class(f.label),
            weight_branch: None,
            scale: 1.0,
        };
        let mut i = 0;
        read_file_events(&f.path, "output", &spec, &meta, all, &mut |evs| {
            for ev in evs {
                assert_eq!(ev.id.event_number, want.event_number[i]);
                assert_eq!(ev.weight, want.weight[i]);
                let wf = |v: &[f32]| v.iter().map(|x| f64::from(*x)).collect::<Vec<_>>();
                assert_eq!(ev.jets.pt, wf(&want.jet[0][i]), "{} entry {i}", f.sample);
                assert_eq!(ev.jets.eta, wf(&want.jet[1][i]));
                assert_eq!(ev.jets.phi, wf(&want.jet[2][i]));
                let btag: Vec<u8> = want.jet_btag[i].iter().map(|b| *b as u8).collect();
                assert_eq!(ev.jets.btag, btag);
                assert_eq!(ev.electrons.pt, wf(&want.el[0][i]));
                assert_eq!(ev.muons.eta, wf(&want.mu[1][i]));
                let q: Vec<i8> = want.mu_charge[i].iter().map(|c| *c as i8).collect();
                assert_eq!(ev.muons.charge, q);
                assert_eq!(ev.photons.phi, wf(&want.ph[2][i]));
                assert_eq!(ev.met.magnitude, f64::from(want.met[0][i]));
                i += 1;
            }
            Ok(())
        })
        .expect("read back");
        assert_eq!(i, 300);
    }
    // Same seed on one thread: the same events (files are written independently per process).
    let again = tempfile::tempdir().expect("tempdir");
    let files1 = write_demo(again.path(), 300, 7, 1).expect("generate");
    assert_eq!(
        files1.iter().map(|f| f.sample).collect::<Vec<_>>(),
        files.iter().map(|f| f.sample).collect::<Vec<_>>()
    );
    // A different seed gives different events.
    assert_ne!(
        toy_events(&PRETRAIN_PROCESSES[4], 4, 50, 7),
        toy_events(&PRETRAIN_PROCESSES[4], 4, 50, 8)
    );
}

#[test]
fn demo_processes_differ_where_physics_says() {
    // Mean multiplicities over 2000 toy events: tttt has more jets than ttbar, ZH more leptons
    // than ggF, ggF more photons than ttbar; some weights are negative.
    let mean = |c: &[Vec<f32>]| c.iter().map(Vec::len).sum::<usize>() as f64 / c.len() as f64;
    let ev = |k: usize| toy_events(&PRETRAIN_PROCESSES[k], k as u32, 2000, 1);
    let (ggf, zh, ttbar, tttt) = (ev(0), ev(3), ev(7), ev(11));
    assert!(mean(&tttt.jet[0]) > mean(&ttbar.jet[0]) + 1.0);
    assert!(mean(&zh.el[0]) + mean(&zh.mu[0]) > mean(&ggf.el[0]) + mean(&ggf.mu[0]) + 1.0);
    assert!(mean(&ggf.ph[0]) > mean(&ttbar.ph[0]) + 1.0);
    assert!(ttbar.weight.iter().any(|w| *w < 0.0));
}

#[test]
fn inspect_recognises_the_schemas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = write_demo(dir.path(), 20, 1, 1).expect("generate");
    let demo = inspect_file(&files[0].path).expect("inspect");
    assert_eq!(demo[0].name, "output");
    assert_eq!(demo[0].entries, 20);
    assert_eq!(demo[0].matching_schemas, vec!["vector"]);
    let ty = |name: &str| {
        demo[0]
            .branches
            .iter()
            .find(|b| b.name == name)
            .map(|b| b.type_name.clone())
    };
    assert_eq!(ty("jet_pt").as_deref(), Some("vector<float>"));
    for (file, schema) in [
        ("data/real/uproot-HZZ.root", "hzz"),
        ("data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root", "nanoaod"),
        ("data/generated/delphes_flat_uproot.root", "delphes_flat"),
    ] {
        let trees = inspect_file(&crate::shared(file)).expect("inspect");
        assert_eq!(trees[0].matching_schemas, vec![schema], "{file}");
        assert_eq!(trees[0].closest_schema, None);
    }
    // A NanoAOD-like skim without leptons' charge, b-tags or weights: the closest schema and what
    // it lacks are named.
    let dy = inspect_file(&crate::shared("data/real/uproot-small-dy-withoffsets.root"))
        .expect("inspect");
    assert!(dy[0].matching_schemas.is_empty());
    let (closest, gone) = dy[0].closest_schema.clone().expect("a closest schema");
    assert_eq!(closest, "nanoaod");
    assert!(gone.iter().any(|b| b == "genWeight"), "{gone:?}");
}

#[test]
fn dataset_config_reads_samples_and_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_demo(dir.path(), 50, 3, 2).expect("generate");
    let yaml = r#"
name: demo_finetune
tree: output
schema: vector
step_size: 16
classes: [CPeven, CPodd]
samples:
  - {name: ttH_CPeven, files: ["finetune/ttH_CPeven.root"], label: 0, scale: 2.0}
  - {name: ttH_CPodd, files: ["finetune/*odd*.root"], label: 1, entry_stop: 20}
"#;
    let cfg: DatasetConfig = serde_yaml::from_str(yaml).expect("yaml");
    cfg.validate().expect("valid");
    let mut seen = Vec::new();
    for s in &cfg.samples {
        let report = read_sample(&cfg, s, dir.path(), &mut |evs| {
            seen.extend(
                evs.iter()
                    .map(|e| (e.id.sample.to_string(), e.label.clone())),
            );
            Ok(())
        })
        .expect("read");
        assert_eq!(report.skipped().total(), 0);
    }
    assert_eq!(seen.len(), 70);
    assert_eq!(seen[0], ("ttH_CPeven".to_string(), Label::Class(0)));
    assert_eq!(seen[69], ("ttH_CPodd".to_string(), Label::Class(1)));

    let bad = yaml.replace("step_size", "stepsize");
    let err = serde_yaml::from_str::<DatasetConfig>(&bad).expect_err("typo");
    assert!(err.to_string().contains("stepsize"), "{err}");
    let missing: DatasetConfig =
        serde_yaml::from_str(&yaml.replace("*odd*", "*nothing*")).expect("yaml");
    let err = read_sample(&missing, &missing.samples[1], dir.path(), &mut |_| Ok(()))
        .expect_err("no match");
    assert!(
        err.to_string().contains("ttH_CPodd") && err.to_string().contains("*nothing*"),
        "{err}"
    );
}
