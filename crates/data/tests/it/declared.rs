//! The built-in declarations (`configs/inputs/*.yaml`) against the contract written in code
//! (`SchemaSpec` → `EventSample` → `build_features`): the same events kept and skipped, and the
//! same features bit for bit, on every shared file a built-in reads.

use gnn4c_data::{EntryRange, SampleMeta, builtin_inputs, entry_id, read_file_inputs};
use gnn4c_events::Label;
use gnn4c_features::{ChunkFeatures, Inputs, SelectionConfig};
use gnn4c_reference::{EventFeatures, build_features, builtin_schema, read_file_events};

use crate::shared;

fn meta() -> SampleMeta {
    SampleMeta {
        name: "s".into(),
        label: Label::Class(1),
        weight_branch: None,
        scale: 0.5,
    }
}

/// One kept event: entry, event number, weight bits, node rows, η, φ and globals as bits.
type Kept = (u64, u64, u32, Vec<u32>, Vec<u64>, Vec<u64>, Vec<u32>);

fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn bits64(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn by_code(path: &std::path::Path, tree: &str, schema: &str) -> Result<Vec<Kept>, String> {
    let spec = builtin_schema(schema).expect("built-in");
    let range = EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        step_size: 300,
        threads: 0,
    };
    let (mut out, mut f) = (Vec::new(), EventFeatures::default());
    read_file_events(path, tree, &spec, &meta(), range, &mut |evs| {
        for ev in evs {
            if build_features(ev, &SelectionConfig::default(), &mut f).is_ok() {
                out.push((
                    ev.id.entry,
                    ev.id.event_number,
                    ev.weight.to_bits(),
                    bits32(&f.node_features),
                    bits64(&f.eta),
                    bits64(&f.phi),
                    bits32(&f.global_features),
                ));
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok(out)
}

fn by_declaration(path: &std::path::Path, tree: &str, schema: &str) -> Result<Vec<Kept>, String> {
    let spec = builtin_inputs(schema).expect("built-in").expect("parses");
    let inputs = Inputs::new(&spec).expect("valid");
    let range = EntryRange {
        entry_start: 0,
        entry_stop: u64::MAX,
        // Another chunking than the code path's: the features do not depend on it.
        step_size: 173,
        threads: 0,
    };
    let (mut out, mut f) = (Vec::new(), ChunkFeatures::default());
    let source: std::sync::Arc<std::path::Path> = std::sync::Arc::from(path);
    let tree_name: std::sync::Arc<str> = std::sync::Arc::from(tree);
    let m = meta();
    read_file_inputs(path, tree, &inputs, &m, range, "", &mut |chunk| {
        inputs.build_chunk(&chunk.inputs, &mut f);
        for i in 0..chunk.inputs.n_entries {
            if f.kept[i].is_ok() {
                let id = entry_id(&m, &source, &tree_name, chunk, i);
                let nodes = f.nodes(i);
                out.push((
                    id.entry,
                    id.event_number,
                    chunk.weights[i].to_bits(),
                    bits32(f.node_features_of(i)),
                    bits64(&f.eta[nodes.clone()]),
                    bits64(&f.phi[nodes]),
                    bits32(f.global_features_of(i)),
                ));
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok(out)
}

#[test]
fn builtin_declarations_equal_the_contract_code_bit_for_bit() {
    let cases = [
        ("data/real/uproot-HZZ.root", "events", "hzz"),
        ("data/real/uproot-HZZ-zstd.root", "events", "hzz"),
        (
            "data/real/nanoAOD_2015_CMS_Open_Data_ttbar.root",
            "Events",
            "nanoaod",
        ),
        ("data/real/uproot-issue121.root", "Events", "nanoaod"),
        ("data/generated/nano_zlib1.root", "Events", "nanoaod"),
        ("data/generated/nano_offsetmap.root", "Events", "nanoaod"),
        (
            "data/generated/delphes_flat_uproot.root",
            "Delphes",
            "delphes_flat",
        ),
        ("data/generated/delphes_gen.root", "Delphes", "delphes"),
        ("data/real/uproot-issue513.root", "Delphes", "delphes"),
        ("data/generated/vec_zlib1.root", "tree", "vector"),
    ];
    let mut compared = 0;
    for (file, tree, schema) in cases {
        let path = shared(file);
        let (code, declared) = (
            by_code(&path, tree, schema),
            by_declaration(&path, tree, schema),
        );
        match (code, declared) {
            (Ok(c), Ok(d)) => {
                assert_eq!(c.len(), d.len(), "{file}: events kept");
                assert!(!c.is_empty(), "{file}: no event kept");
                for (a, b) in c.iter().zip(&d) {
                    assert_eq!(a, b, "{file}: entry {}", a.0);
                }
                compared += c.len();
            }
            // A file the built-in cannot read (a collection missing) fails both ways.
            (Err(_), Err(_)) => {}
            (c, d) => panic!("{file} ({schema}): the code path gives {c:?}, the declaration {d:?}"),
        }
    }
    assert!(compared > 5000, "{compared} events compared");
}

#[test]
fn builtin_schemas_translate_to_the_shipped_declarations() {
    // `SchemaSpec::to_inputs` (a written-out schema) and `configs/inputs/<name>.yaml` (the
    // shorthand `schema: <name>`) are the same declaration.
    for name in gnn4c_data::BUILTIN_DECLARATIONS {
        let shipped = builtin_inputs(name).expect("built-in").expect("parses");
        let translated = builtin_schema(name).expect("built-in").to_inputs();
        assert_eq!(translated, shipped, "{name}");
        Inputs::new(&shipped).expect("valid");
    }
}

#[test]
fn rntuple_twins_give_their_ttrees_features_bit_for_bit() {
    // ROOT's RNTupleImporter wrote these RNTuples from the TTrees: the same declaration reads
    // the same events with the same features from both.
    let twins = [
        (
            "data/rntuple/nano_rntuple_zstd.root",
            "data/generated/nano_zlib1.root",
            "Events",
            "nanoaod",
        ),
        (
            "data/rntuple/nano_rntuple_zlib.root",
            "data/generated/nano_zlib1.root",
            "Events",
            "nanoaod",
        ),
    ];
    for (ntuple, tree, name, schema) in twins {
        let from_ntuple = by_declaration(&shared(ntuple), name, schema).expect(ntuple);
        let from_tree = by_declaration(&shared(tree), name, schema).expect(tree);
        assert!(from_tree.len() > 1000, "{tree}: {} events", from_tree.len());
        assert_eq!(from_ntuple, from_tree, "{ntuple} against {tree}");
    }
}
