//! The written files read and run by an independent runtime (tract).

use gnn4c_onnx::{DataType, Dim, Graph, ModelInfo};
use tract_onnx::prelude::*;

#[test]
fn a_small_network_runs_in_tract_as_computed_by_hand() {
    let (d_in, d_out) = (3usize, 4usize);
    let w: Vec<f32> = (0..d_in * d_out).map(|i| (i as f32 - 5.0) * 0.1).collect();
    let b: Vec<f32> = (0..d_out).map(|i| i as f32 * 0.05).collect();
    let gamma = [1.0f32, 0.5, 2.0, 1.5];
    let beta = [0.1f32, -0.1, 0.0, 0.2];
    let mut g = Graph::new();
    let x = g.input(
        "x",
        DataType::Float,
        vec![Dim::Named("rows".into()), Dim::Fixed(d_in)],
        "rows of features",
    );
    let h = g.linear(&x, &w, d_in, Some(&b), "first");
    let h = g.gelu(&h);
    let h = g.layer_norm(&h, &gamma, Some(&beta), 1e-5, "norm");
    let y = g.relu(&h);
    g.output(
        &y,
        "y",
        DataType::Float,
        vec![Dim::Named("rows".into()), Dim::Fixed(d_out)],
        "out",
    );
    let bytes = g.to_model(&ModelInfo {
        name: "small".into(),
        metadata: vec![("class_names".into(), "[\"a\"]".into())],
        ..ModelInfo::default()
    });

    let rows = 5;
    let xs: Vec<f32> = (0..rows * d_in).map(|i| (i as f32 * 0.37).sin()).collect();
    let model = tract_onnx::onnx()
        .model_for_read(&mut bytes.as_slice())
        .expect("tract reads the file")
        .with_input_fact(0, f32::fact([rows, d_in]).into())
        .expect("input fact")
        .into_optimized()
        .expect("optimised")
        .into_runnable()
        .expect("runnable");
    let input = Tensor::from_shape(&[rows, d_in], &xs).expect("tensor");
    let out = model.run(tvec!(input.into())).expect("runs");
    let got = out[0]
        .to_plain_array_view::<f32>()
        .expect("f32")
        .iter()
        .copied()
        .collect::<Vec<_>>();

    let mut want = Vec::new();
    for r in 0..rows {
        let mut h: Vec<f64> = (0..d_out)
            .map(|o| {
                f64::from(b[o])
                    + (0..d_in)
                        .map(|i| f64::from(xs[r * d_in + i]) * f64::from(w[i * d_out + o]))
                        .sum::<f64>()
            })
            .collect();
        for v in &mut h {
            *v = 0.5 * *v * (1.0 + erf(*v / 2f64.sqrt()));
        }
        let mean = h.iter().sum::<f64>() / d_out as f64;
        let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d_out as f64;
        for (o, v) in h.iter().enumerate() {
            let n = (v - mean) / (var + 1e-5).sqrt() * f64::from(gamma[o]) + f64::from(beta[o]);
            want.push(n.max(0.0));
        }
    }
    assert_eq!(got.len(), want.len());
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(*a) - b).abs() < 1e-5,
            "value {k}: tract {a}, by hand {b}"
        );
    }
}

/// erf in f64 by its Taylor series (|x| small here).
fn erf(x: f64) -> f64 {
    let (mut term, mut sum) = (x, x);
    for n in 1..60 {
        term *= -x * x / f64::from(n);
        sum += term / f64::from(2 * n + 1);
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}
