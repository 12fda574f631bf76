//! Reading real files: raw columns and assembled events agree with uproot.

use gnn4c_data::{ColumnRequest, ColumnValues, EntryRange, SampleMeta, open_tree};
use gnn4c_events::Label;
use gnn4c_reference::{builtin_schema, read_file_events};

use crate::{assert_close, shared};

/// Reads `branch` (with `counter`) over the whole tree in chunks of `step`; returns
/// (value count, sum, entry 0's values).
fn column_stats(
    file: &str,
    tree: &str,
    branch: &str,
    counter: Option<&str>,
    step: usize,
) -> (usize, f64, Vec<f64>) {
    let reader = open_tree(&shared(file), tree).expect("open");
    let req = [ColumnRequest {
        branch: branch.into(),
        counter: counter.map(Into::into),
    }];
    let range = EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        step_size: step,
        threads: 0,
    };
    let (mut n, mut sum, mut first, mut entries) = (0, 0.0, None, 0u64);
    reader
        .read(&req, range, &mut |chunk| {
            let col = &chunk.columns[0];
            if first.is_none() {
                first = Some(
                    col.range(0)
                        .map(|j| col.values.f64_at(j))
                        .collect::<Vec<_>>(),
                );
            }
            entries += chunk.n_entries as u64;
            n += col.values.len();
            sum += match &col.values {
                ColumnValues::Float(v) => v.iter().sum::<f64>(),
                ColumnValues::Int(v) => v.iter().map(|x| *x as f64).sum(),
            };
            Ok(())
        })
        .expect("read");
    assert_eq!(
        entries,
        reader.entries(),
        "{file} {branch}: every entry read"
    );
    (n, sum, first.unwrap_or_default())
}

fn check(
    file: &str,
    tree: &str,
    branch: &str,
    counter: Option<&str>,
    n: usize,
    sum: f64,
) -> Vec<f64> {
    // An odd step size puts chunk boundaries inside baskets.
    let (got_n, got_sum, first) = column_stats(file, tree, branch, counter, 97);
    assert_eq!(got_n, n, "{file} {branch}: value count");
    assert_close(got_sum, sum, &format!("{file} {branch} sum"));
    first
}

#[test]
fn hzz_all_non_zstd_codecs_match_uproot() {
    for file in [
        "data/real/uproot-HZZ.root",
        "data/real/uproot-HZZ-zlib.root",
        "data/real/uproot-HZZ-lz4.root",
        "data/real/uproot-HZZ-lzma.root",
        "data/real/uproot-HZZ-uncompressed.root",
    ] {
        check(file, "events", "NJet", None, 2421, 2773.0);
        check(file, "events", "Jet_Px", Some("NJet"), 2773, 3434.917912);
        check(file, "events", "Jet_E", Some("NJet"), 2773, 340153.745642);
        check(file, "events", "Jet_btag", Some("NJet"), 2773, -1464.056464);
        let q = check(file, "events", "Muon_Charge", Some("NMuon"), 3825, -49.0);
        assert_eq!(q, vec![1.0, -1.0], "{file}: entry 0's muon charges");
        check(
            file,
            "events",
            "Electron_Pz",
            Some("NElectron"),
            171,
            869.491861,
        );
        check(
            file,
            "events",
            "Photon_E",
            Some("NPhoton"),
            220,
            18596.391232,
        );
        check(file, "events", "MET_px", None, 2421, 577.729904);
        check(file, "events", "EventWeight", None, 2421, 16.922521);
    }
}

#[test]
fn nanoaod_embedded_baskets_match_uproot() {
    let f = "data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root";
    let first = check(f, "Events", "Jet_pt", Some("nJet"), 537, 16785.617188);
    assert_eq!(
        first,
        vec![17.921875, 15.734375],
        "entry 0's jets, not every value in entry 0"
    );
    check(f, "Events", "Jet_btagDeepB", Some("nJet"), 537, -537.0);
    check(f, "Events", "Muon_charge", Some("nMuon"), 41, 9.0);
    check(
        f,
        "Events",
        "Electron_eta",
        Some("nElectron"),
        69,
        11.654614,
    );
    check(f, "Events", "Photon_pt", Some("nPhoton"), 79, 2278.675632);
    check(f, "Events", "MET_pt", None, 200, 7488.337515);
    check(f, "Events", "genWeight", None, 200, 33432083.0625);
    let ev = check(f, "Events", "event", None, 200, 45458334441.0);
    assert_eq!(ev, vec![227291401.0]);
}

#[test]
fn delphes_flat_one_per_event_arrays_match_uproot() {
    let f = "data/generated/delphes_flat_uproot.root";
    let first = check(
        f,
        "Delphes",
        "Jet.PT",
        Some("Jet_size"),
        10115,
        604821.663475,
    );
    assert_eq!(first.len(), 7);
    assert_close(first[0], 93.958984375, "first jet pt");
    check(f, "Delphes", "Jet.BTag", Some("Jet_size"), 10115, 1977.0);
    check(
        f,
        "Delphes",
        "Electron.Charge",
        Some("Electron_size"),
        1215,
        -17.0,
    );
    check(
        f,
        "Delphes",
        "Muon.PT",
        Some("Muon_size"),
        1416,
        35673.211522,
    );
    let met = check(
        f,
        "Delphes",
        "MissingET.MET",
        Some("MissingET_size"),
        2000,
        59555.399064,
    );
    assert_eq!(met, vec![4.956973075866699], "one MET in entry 0");
    check(
        f,
        "Delphes",
        "MissingET.Phi",
        Some("MissingET_size"),
        2000,
        -18.297572,
    );
    check(
        f,
        "Delphes",
        "Event.Weight",
        Some("Event_size"),
        2000,
        797.0,
    );
}

#[test]
fn offsets_twin_matches_uproot() {
    let f = "data/real/uproot-small-dy-withoffsets.root";
    let first = check(f, "tree", "Jet_pt", Some("nJet"), 2165, 68349.8125);
    assert_eq!(first, vec![34.09375, 33.53125, 20.25, 19.890625]);
    check(f, "tree", "MET_pt", None, 501, 16863.966919);
}

fn meta() -> SampleMeta {
    SampleMeta {
        name: "s".into(),
        label: Label::Class(2),
        weight_branch: None,
        scale: 2.0,
    }
}

#[test]
fn events_through_builtin_schemas() {
    // (file, tree, schema, kept, jets, electrons, muons, photons, Σ met, Σ weight (scale 1))
    let cases = [
        (
            "data/real/uproot-HZZ.root",
            "events",
            "hzz",
            2421,
            2773,
            171,
            3825,
            220,
            16.922521,
        ),
        (
            "data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root",
            "Events",
            "nanoaod",
            200,
            537,
            69,
            41,
            79,
            33432083.0625,
        ),
        (
            "data/generated/delphes_flat_uproot.root",
            "Delphes",
            "delphes_flat",
            2000,
            10115,
            1215,
            1416,
            0,
            797.0,
        ),
    ];
    for (file, tree, schema, kept, nj, ne, nm, np, sw) in cases {
        let spec = builtin_schema(schema).expect("built-in");
        let range = EntryRange {
            entry_start: 0,
            entry_stop: u64::MAX,
            step_size: 128,
            threads: 0,
        };
        let (mut n, mut j, mut e, mut m, mut p, mut w, mut next_entry) = (0, 0, 0, 0, 0, 0.0, 0);
        let report = read_file_events(&shared(file), tree, &spec, &meta(), range, &mut |evs| {
            for ev in evs {
                assert_eq!(ev.id.entry, next_entry, "entries in order");
                assert_eq!(ev.label, Label::Class(2));
                next_entry += 1;
                n += 1;
                j += ev.jets.len();
                e += ev.electrons.len();
                m += ev.muons.len();
                p += ev.photons.len();
                w += f64::from(ev.weight) / 2.0;
            }
            assert!(evs.len() <= 128, "chunks bounded by step_size");
            Ok(())
        })
        .expect("read events");
        assert_eq!(
            (n, j, e, m, p),
            (kept, nj, ne, nm, np),
            "{file}: event and object counts"
        );
        assert_eq!(report.kept, kept as u64);
        // Weights are rounded to f32 per event: 1e-6 relative holds for these sums.
        assert_close(w, sw, &format!("{file} weight sum"));
    }
}

#[test]
fn hzz_cartesian_conversion_and_btag_threshold() {
    // Entry 0 of the HZZ file has no jets and two muons; check the conversion on entry 0's muons
    // against values computed by hand from uproot's Muon_Px/Py/Pz.
    let spec = builtin_schema("hzz").expect("built-in");
    let range = EntryRange {
        entry_start: 0,
        entry_stop: 1,
        step_size: 10,
        threads: 0,
    };
    let mut got = None;
    read_file_events(
        &shared("data/real/uproot-HZZ.root"),
        "events",
        &spec,
        &meta(),
        range,
        &mut |evs| {
            got = Some(evs[0].clone());
            Ok(())
        },
    )
    .expect("read");
    let ev = got.expect("one event");
    let reader = open_tree(&shared("data/real/uproot-HZZ.root"), "events").expect("open");
    let req: Vec<ColumnRequest> = ["Muon_Px", "Muon_Py", "Muon_Pz"]
        .iter()
        .map(|b| ColumnRequest {
            branch: (*b).into(),
            counter: Some("NMuon".into()),
        })
        .collect();
    let mut p = Vec::new();
    reader
        .read(&req, range, &mut |c| {
            p = (0..3).map(|k| c.columns[k].values.f64_at(0)).collect();
            Ok(())
        })
        .expect("read");
    assert_eq!(ev.muons.len(), 2);
    assert_eq!(ev.muons.pt[0], p[0].hypot(p[1]));
    assert_eq!(ev.muons.phi[0], p[1].atan2(p[0]));
    assert_eq!(ev.muons.eta[0], (p[2] / p[0].hypot(p[1])).asinh());
    assert_eq!(ev.muons.charge, vec![1, -1]);
    assert_eq!(ev.id.event_number, 0, "no event-number branch: the entry");
}

#[test]
fn entry_ranges_stream_in_bounded_chunks() {
    let spec = builtin_schema("nanoaod").expect("built-in");
    let range = EntryRange {
        entry_start: 37,
        entry_stop: 150,
        step_size: 25,
        threads: 0,
    };
    let mut sizes = Vec::new();
    let mut entries = Vec::new();
    read_file_events(
        &shared("data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root"),
        "Events",
        &spec,
        &meta(),
        range,
        &mut |evs| {
            sizes.push(evs.len());
            entries.extend(evs.iter().map(|e| e.id.entry));
            Ok(())
        },
    )
    .expect("read");
    assert_eq!(sizes, vec![25, 25, 25, 25, 13]);
    assert_eq!(entries, (37..150).collect::<Vec<u64>>());
}

#[test]
fn chunks_are_the_same_on_any_thread_count_and_the_caller_s_error_ends_the_read() {
    // On several threads the next chunk is read while the caller works on this one.
    let reader = open_tree(
        &shared("data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root"),
        "Events",
    )
    .expect("open");
    let request = |branch: &str, counter: Option<&str>| ColumnRequest {
        branch: branch.into(),
        counter: counter.map(Into::into),
    };
    let req = [
        request("GenJet_pt", Some("nGenJet")),
        request("event", None),
        request("FatJet_pt", None),
    ];
    let range = |threads| EntryRange {
        entry_start: 3,
        entry_stop: 190,
        step_size: 20,
        threads,
    };
    let chunks = |threads| {
        let mut out = Vec::new();
        reader
            .read(&req, range(threads), &mut |c| {
                out.push(c.clone());
                Ok(())
            })
            .expect("read");
        out
    };
    let one = chunks(1);
    assert_eq!(one.len(), 10);
    assert_eq!(one.iter().map(|c| c.n_entries).sum::<usize>(), 187);
    for threads in [2, 3] {
        assert_eq!(chunks(threads), one, "{threads} threads");
    }
    // The caller's error on the third chunk is the read's, and no chunk comes after it.
    for threads in [1, 2] {
        let mut seen = 0;
        let err = reader
            .read(&req, range(threads), &mut |_| {
                seen += 1;
                if seen == 3 {
                    Err(gnn4c_data::DataError::Config("enough".into()))
                } else {
                    Ok(())
                }
            })
            .expect_err("the caller's error");
        assert_eq!(
            (seen, err.to_string().contains("enough")),
            (3, true),
            "{err}"
        );
    }
}

#[test]
fn real_delphes_reads_with_the_delphes_schema() {
    // Real Delphes output (split TClonesArrays, ROOT 6.36): the `delphes` schema counts each
    // collection with its own branch (`Jet`), `delphes_flat` with `Jet_size`; both give the same
    // events. The uproot-flattened file has no `Jet` branch, so only `delphes_flat` reads it.
    let file = shared("data/generated/delphes_gen.root");
    let events = |schema: &str| {
        let spec = builtin_schema(schema).expect("built-in");
        let mut out = Vec::new();
        let range = EntryRange {
            entry_start: 0,
            entry_stop: u64::MAX,
            step_size: 300,
            threads: 0,
        };
        read_file_events(&file, "Delphes", &spec, &meta(), range, &mut |evs| {
            out.extend_from_slice(evs);
            Ok(())
        })
        .expect("read events");
        out
    };
    let (real, flat) = (events("delphes"), events("delphes_flat"));
    assert_eq!(real.len(), 2000);
    assert_eq!(real, flat);
    assert!(
        real.iter().map(|e| e.jets.len()).sum::<usize>() > 2000,
        "jets read"
    );
    let flat_file = shared("data/generated/delphes_flat_uproot.root");
    let spec = builtin_schema("delphes").expect("built-in");
    let err = read_file_events(
        &flat_file,
        "Delphes",
        &spec,
        &meta(),
        ALL_ENTRIES,
        &mut |_| Ok(()),
    )
    .expect_err("no Jet branch");
    assert!(err.to_string().contains("'Jet'"), "{err}");
}

const ALL_ENTRIES: EntryRange = EntryRange {
    entry_start: 0,
    entry_stop: u64::MAX,
    step_size: 1000,
    threads: 0,
};
