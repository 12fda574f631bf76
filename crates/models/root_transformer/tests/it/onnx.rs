//! The ONNX export run by an independent runtime (tract) against the Burn model: logits within
//! 1e-5 on the fixture's events (one of them a single object), binary and 12-class, with and
//! without the pair bias, and on the same events batched in other orders and sizes.

use burn::backend::Flex;
use gnn4c_family::ModelFamily;
use gnn4c_root_transformer::{RootTransformerFamily, TokenBatch};

use super::{batch, config, loaded};

fn check(variant: &str, n_out: usize, pair_bias: bool) {
    let model = loaded::<Flex>(variant, n_out, pair_bias);
    let cfg = config(n_out, pair_bias);
    let bytes =
        RootTransformerFamily::to_onnx(&cfg, &model, vec![("class_names".into(), "[]".into())]);
    let all = batch();
    // The whole batch, the single-object event alone, and the first three events.
    let single = (0..all.n_events)
        .find(|&e| {
            all.padding[e * all.n_tokens + 1..(e + 1) * all.n_tokens]
                .iter()
                .all(|p| *p)
        })
        .expect("a single-object event in the fixture");
    for events in [
        (0..all.n_events).collect::<Vec<_>>(),
        vec![single],
        vec![0, 1, 2],
    ] {
        let b = subset(&all, &events);
        let want: Vec<f32> = model
            .forward(&b, &Default::default())
            .into_data()
            .to_vec()
            .expect("f32");
        let got = gnn4c_testkit::tract_run(&bytes, &RootTransformerFamily::onnx_inputs(&cfg, &b));
        assert_eq!(got.len(), want.len(), "{variant}: logits of {events:?}");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5,
                "{variant} events {events:?} logit {k}: tract {g}, Burn {w}"
            );
        }
    }
}

/// The events `events` of `b`, re-padded to their own longest.
fn subset(b: &TokenBatch, events: &[usize]) -> TokenBatch {
    let l = b.n_tokens;
    let count = |e: usize| {
        b.padding[e * l..(e + 1) * l]
            .iter()
            .take_while(|p| !**p)
            .count()
    };
    let longest = events.iter().map(|&e| count(e)).max().unwrap_or(1).max(1);
    let (dt, dg, dp) = (b.d_token, b.d_global, b.d_pair);
    let mut s = TokenBatch {
        n_events: events.len(),
        n_tokens: longest,
        d_token: dt,
        d_global: dg,
        d_pair: dp,
        tokens: Vec::new(),
        padding: Vec::new(),
        globals: Vec::new(),
        pair: Vec::new(),
    };
    // Slots past `longest` are padding in every chosen event: the first `longest` are kept.
    for &e in events {
        for i in 0..longest {
            let slot = e * l + i;
            s.tokens
                .extend_from_slice(&b.tokens[slot * dt..(slot + 1) * dt]);
            s.padding.push(b.padding[slot]);
            s.pair
                .extend_from_slice(&b.pair[slot * l * dp..(slot * l + longest) * dp]);
        }
        s.globals
            .extend_from_slice(&b.globals[e * dg..(e + 1) * dg]);
    }
    s
}

#[test]
fn binary_with_pair_bias_runs_the_same_in_tract() {
    check("binary_pair", 1, true);
}

#[test]
fn binary_without_pair_bias_runs_the_same_in_tract() {
    check("binary_nopair", 1, false);
}

#[test]
fn multiclass_with_pair_bias_runs_the_same_in_tract() {
    check("multiclass_pair", 12, true);
}

#[test]
fn multiclass_without_pair_bias_runs_the_same_in_tract() {
    check("multiclass_nopair", 12, false);
}
