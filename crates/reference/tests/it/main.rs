//! Parity with the independent Python implementation of contract §2–§4 on real ROOT files:
//! `../shared/fixtures/features_{hzz,delphes_flat}.npz`, reproduced through our reader,
//! selection, features and graphs.

use gnn4c_data::{EntryRange, SampleMeta};
use gnn4c_events::{Label, SkipCounts};
use gnn4c_features::SelectionConfig;
use gnn4c_graphs::{D_EDGE, GraphSample, TopologyCache};
use gnn4c_reference::{
    D_GLOBAL, D_NODE, EventFeatures, build_features, build_graph, builtin_schema, read_file_events,
};
use gnn4c_testkit::{fixture, shared};
use ndarray::{Array1, Array2};

/// The fixtures' tolerance: features are f64 computations rounded to f32 on both sides.
const TOL: f32 = 1e-6;

struct Expected {
    entry: Array1<i64>,
    skipped_entry: Array1<i64>,
    n_nodes: Array1<i64>,
    node_features: Array2<f32>,
    edge_src: Array1<i64>,
    edge_dst: Array1<i64>,
    edge_features: Array2<f32>,
    global_features: Array2<f32>,
    weight: Array1<f32>,
    event_number: Array1<u64>,
}

fn load(fixture_name: &str) -> Expected {
    let path = shared(&format!("fixtures/{fixture_name}"));
    let mut z = fixture(fixture_name);
    macro_rules! get {
        ($name:literal) => {
            z.by_name($name)
                .unwrap_or_else(|e| panic!("{}: array {}: {e}", path.display(), $name))
        };
    }
    Expected {
        entry: get!("entry"),
        skipped_entry: get!("skipped_entry"),
        n_nodes: get!("n_nodes"),
        node_features: get!("node_features"),
        edge_src: get!("edge_src"),
        edge_dst: get!("edge_dst"),
        edge_features: get!("edge_features"),
        global_features: get!("global_features"),
        weight: get!("weight"),
        event_number: get!("event_number"),
    }
}

/// Reads `entries` entries of `file` with the built-in `schema` and builds every graph.
fn build(
    file: &str,
    tree: &str,
    schema: &str,
    entries: u64,
) -> (Vec<GraphSample>, Vec<u64>, SkipCounts) {
    let spec = builtin_schema(schema).expect("built-in schema");
    let meta = SampleMeta {
        name: "fixture".into(),
        label: Label::Class(0),
        weight_branch: None,
        scale: 1.0,
    };
    let range = EntryRange {
        entry_start: 0,
        entry_stop: entries,
        step_size: 64,
        threads: 0,
    };
    let selection = SelectionConfig::default();
    let mut cache = TopologyCache::new(selection.max_nodes());
    let mut features = EventFeatures::default();
    let (mut graphs, mut skipped_entries, mut skipped) =
        (Vec::new(), Vec::new(), SkipCounts::default());
    let report = read_file_events(&shared(file), tree, &spec, &meta, range, &mut |evs| {
        for ev in evs {
            match build_features(ev, &selection, &mut features) {
                Ok(()) => graphs.push(build_graph(
                    &features,
                    ev.id.clone(),
                    ev.label.clone(),
                    ev.weight,
                    &mut cache,
                )),
                Err(reason) => {
                    skipped.add(reason);
                    skipped_entries.push(ev.id.entry);
                }
            }
        }
        Ok(())
    })
    .expect("read");
    assert_eq!(
        report.skipped.total(),
        0,
        "the reader skips nothing in these files"
    );
    (graphs, skipped_entries, skipped)
}

fn assert_rows_close(what: &str, entry: u64, got: &[f32], want: &ndarray::ArrayView2<'_, f32>) {
    let want: Vec<f32> = want.iter().copied().collect();
    assert_eq!(got.len(), want.len(), "{what} of entry {entry}: length");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= TOL,
            "{what} of entry {entry}, value {k}: got {g}, Python says {w}"
        );
    }
}

fn check(fixture: &str, file: &str, tree: &str, schema: &str, entries: u64) {
    let want = load(fixture);
    let (graphs, skipped_entries, skipped) = build(file, tree, schema, entries);
    let kept: Vec<i64> = graphs.iter().map(|g| g.id.entry as i64).collect();
    assert_eq!(kept, want.entry.to_vec(), "{fixture}: kept entries");
    let skipped_want: Vec<u64> = want.skipped_entry.iter().map(|e| *e as u64).collect();
    assert_eq!(skipped_entries, skipped_want, "{fixture}: skipped entries");
    assert_eq!(
        skipped.get("too_few_nodes"),
        skipped_want.len() as u64,
        "named reason"
    );

    let (mut node_at, mut edge_at) = (0usize, 0usize);
    for (i, g) in graphs.iter().enumerate() {
        let entry = g.id.entry;
        let (n, e) = (g.n_nodes(), g.n_edges());
        assert_eq!(
            n as i64, want.n_nodes[i],
            "{fixture}: n_nodes of entry {entry}"
        );
        assert_rows_close(
            "node features",
            entry,
            &g.node_features,
            &want
                .node_features
                .slice(ndarray::s![node_at..node_at + n, ..]),
        );
        let src: Vec<i64> = g.topology.edge_src.iter().map(|&x| i64::from(x)).collect();
        let dst: Vec<i64> = g.topology.edge_dst.iter().map(|&x| i64::from(x)).collect();
        assert_eq!(
            src,
            want.edge_src
                .slice(ndarray::s![edge_at..edge_at + e])
                .to_vec(),
            "edge_src of entry {entry}"
        );
        assert_eq!(
            dst,
            want.edge_dst
                .slice(ndarray::s![edge_at..edge_at + e])
                .to_vec(),
            "edge_dst of entry {entry}"
        );
        assert_rows_close(
            "edge features",
            entry,
            &g.edge_features,
            &want
                .edge_features
                .slice(ndarray::s![edge_at..edge_at + e, ..]),
        );
        assert_rows_close(
            "globals",
            entry,
            &g.global_features,
            &want.global_features.slice(ndarray::s![i..i + 1, ..]),
        );
        assert_eq!(g.weight, want.weight[i], "weight of entry {entry}");
        assert_eq!(
            g.id.event_number, want.event_number[i],
            "event number of entry {entry}"
        );
        node_at += n;
        edge_at += e;
    }
    assert_eq!(
        (node_at, edge_at),
        (want.node_features.nrows(), want.edge_features.nrows())
    );
    assert_eq!(
        (want.node_features.ncols(), want.edge_features.ncols()),
        (D_NODE, D_EDGE)
    );
    assert_eq!(want.global_features.ncols(), D_GLOBAL);
}

#[test]
fn hzz_features_and_graphs_match_python() {
    check(
        "features_hzz.npz",
        "data/real/uproot-HZZ.root",
        "events",
        "hzz",
        300,
    );
}

#[test]
fn delphes_flat_features_and_graphs_match_python() {
    check(
        "features_delphes_flat.npz",
        "data/generated/delphes_flat_uproot.root",
        "Delphes",
        "delphes_flat",
        500,
    );
}
