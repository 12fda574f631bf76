//! Criterion micro-benchmarks of the hot kernels: features, graph building (topology + edge
//! features), collation, and the Edge_Network forward with one message-passing step.
//!
//! `cargo bench -p gnn4c-benchmarks --bench kernels` (release; fixed seeded demo inputs, built
//! untimed). The end-to-end programs are the `benchmark_*` binaries; these isolate one kernel each.
#![allow(missing_docs)] // criterion_group! generates an undocumented `pub fn benches`

use std::hint::black_box;

use burn::backend::Flex;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gnn4c_benchmarks::{demo_graphs, read_events};
use gnn4c_features::SelectionConfig;
use gnn4c_graphs::{GraphSample, Padding, TopologyCache, collate};
use gnn4c_reference::{CONTRACT_WIDTHS, EventFeatures, build_features, build_graph};
use gnn4c_root_gnn::EdgeNetworkConfig;

fn kernels(c: &mut Criterion) {
    // Inputs: 200 demo ttH events (seed 42) and 512 mixed demo pretraining graphs.
    let tmp = tempfile::tempdir().expect("tempdir");
    let files = gnn4c_data::write_demo(tmp.path(), 200, 42, 1).expect("demo data");
    let tth = files.iter().find(|f| f.sample == "ttH").expect("ttH file");
    let events = read_events(&tth.path, "output", "vector", "ttH", 0).expect("events");
    let selection = SelectionConfig::default();
    let graphs = demo_graphs(50, 1).expect("graphs");
    let batch: Vec<&GraphSample> = graphs.iter().take(512).collect();

    let mut g = c.benchmark_group("kernels");
    g.sample_size(20);

    g.throughput(Throughput::Elements(events.len() as u64));
    let mut feats = EventFeatures::default();
    g.bench_function("features (ttH events)", |b| {
        b.iter(|| {
            events
                .iter()
                .filter(|ev| build_features(ev, &selection, &mut feats).is_ok())
                .count()
        });
    });

    let all_feats: Vec<(usize, EventFeatures)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, ev)| {
            let mut f = EventFeatures::default();
            build_features(ev, &selection, &mut f).ok().map(|_| (i, f))
        })
        .collect();
    let mut topo = TopologyCache::new(selection.max_nodes());
    g.throughput(Throughput::Elements(all_feats.len() as u64));
    g.bench_function("graphs: topology + edge features (ttH events)", |b| {
        b.iter(|| {
            for (i, f) in &all_feats {
                let ev = &events[*i];
                black_box(build_graph(
                    f,
                    ev.id.clone(),
                    ev.label.clone(),
                    ev.weight,
                    &mut topo,
                ));
            }
        });
    });

    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function("collate 512 graphs", |b| {
        b.iter(|| collate(black_box(&batch), Padding::None, CONTRACT_WIDTHS).expect("collate"));
    });

    let device = Default::default();
    let host = collate(&batch, Padding::None, CONTRACT_WIDTHS).expect("collate");
    let on_device = host.to_device::<Flex>(&device);
    let one_step = EdgeNetworkConfig::new(12)
        .with_n_steps(1)
        .init::<Flex>(&device);
    g.sample_size(10);
    g.bench_function("forward, 1 message-passing step, 512 graphs", |b| {
        b.iter(|| {
            one_step
                .forward(black_box(&on_device))
                .into_data()
                .to_vec::<f32>()
                .expect("f32")
        });
    });
    g.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
