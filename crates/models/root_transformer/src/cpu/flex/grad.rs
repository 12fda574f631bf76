//! The gradients of the ROOT-Transformer's blocks on the CPU backend: each block's backward
//! through the project's kernels, on the values its forward saved.

use super::*;

impl TransformerGradBackend for Flex {
    type NormSaved = NormSaved;
    type LinearSaved = LinearSaved;
    type AttentionSaved = AttentionSaved;
    type FeedForwardSaved = FeedForwardSaved;
    type PairMlpSaved = PairMlpSaved;

    fn layer_norm_saving(
        x: &FlexTensor,
        gamma: &FlexTensor,
        beta: Option<&FlexTensor>,
        epsilon: f64,
    ) -> Option<(FlexTensor, NormSaved)> {
        let _span = tracing::trace_span!("layer_norm").entered();
        let (x, gamma, beta) = norm_inputs(x, gamma, beta)?;
        let y = layer_norm(
            values(&x),
            values(&gamma),
            beta.as_ref().map(values),
            epsilon as f32,
        );
        let y = tensor(y, &shape(&x));
        Some((y, NormSaved { x, gamma, epsilon }))
    }

    fn layer_norm_backward(saved: &NormSaved, grad: FlexTensor) -> [FlexTensor; 3] {
        let _span = tracing::trace_span!("layer_norm_backward").entered();
        let grad = grad.to_contiguous();
        let (dx, dgamma, dbeta) = layer_norm_backward(
            values(&saved.x),
            values(&grad),
            values(&saved.gamma),
            saved.epsilon as f32,
        );
        let d = dgamma.len();
        [
            tensor(dx, &shape(&saved.x)),
            tensor(dgamma, &[d]),
            tensor(dbeta, &[d]),
        ]
    }

    fn fused_linear_saving(
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        residual: Option<&FlexTensor>,
        gelu: bool,
    ) -> Option<(FlexTensor, LinearSaved)> {
        linear(x, weight, bias, residual, gelu, true)
    }

    fn fused_linear_backward(
        saved: &LinearSaved,
        grad: FlexTensor,
        want_x: bool,
    ) -> (Option<FlexTensor>, FlexTensor, FlexTensor) {
        let [dx, _, _, dw, db] = linear_gradients(saved, &grad, want_x);
        (dx, dw.expect("always"), db.expect("always"))
    }

    fn layer_saving(
        x: &FlexTensor,
        layer: LayerParams<Flex>,
        pair_bias: Option<&FlexTensor>,
        lens: &[usize],
        heads: usize,
    ) -> Option<LayerSaved<Flex>> {
        let _span = tracing::trace_span!("encoder_layer").entered();
        let (x, pair_bias, [rows, d]) = encoder_inputs(x, pair_bias.cloned(), lens, heads)?;
        let l = LayerF32s::of(layer, d)?;
        let f = shape(&l.first.0)[1];
        let kept = encoder_layer_saving(&Encoder {
            x: values(&x),
            pair_bias: pair_bias.as_ref().map(values),
            lens,
            heads,
            layers: &[l.view()],
        });
        let qkv = tensor(kept.qkv, &[rows, 3 * d]);
        let a = tensor(kept.a, &[rows, d]);
        let y = tensor(kept.y, &[rows, d]);
        let LayerF32s {
            norm1,
            qkv: (w_qkv, _),
            out: (w_out, _),
            norm2,
            first,
            second,
        } = l;
        Some(LayerSaved {
            qkv: (
                qkv.clone(),
                LinearSaved {
                    x,
                    weight: w_qkv,
                    pre: None,
                    d_out: 3 * d,
                    norm: Some(norm1),
                },
            ),
            attention: (
                a.clone(),
                AttentionSaved {
                    qkv,
                    pair_bias,
                    lens: lens.to_vec(),
                    heads,
                    first_only: false,
                    probs: kept.probs,
                },
            ),
            projected: (
                y.clone(),
                LinearSaved {
                    x: a,
                    weight: w_out,
                    pre: None,
                    d_out: d,
                    norm: None,
                },
            ),
            out: (
                tensor(kept.out, &[rows, d]),
                FeedForwardSaved {
                    x: y,
                    norm: norm2,
                    first,
                    second,
                    kept: Some(tensor(kept.gelu, &[2, rows, f])),
                },
            ),
        })
    }

    fn norm_linear_saving(
        x: FlexTensor,
        norm: NormParams<Flex>,
        weight: FlexTensor,
        bias: Option<FlexTensor>,
        gelu: bool,
    ) -> Option<(FlexTensor, LinearSaved)> {
        norm_linear(&x, norm, &weight, bias.as_ref(), gelu, true)
    }

    fn norm_linear_backward(saved: &LinearSaved, grad: FlexTensor) -> [FlexTensor; 5] {
        linear_gradients(saved, &grad, true).map(|t| t.expect("a LayerNorm's linear layer"))
    }

    fn attention_saving(
        qkv: &FlexTensor,
        pair_bias: Option<&FlexTensor>,
        lens: &[usize],
        heads: usize,
        first_only: bool,
    ) -> Option<(FlexTensor, AttentionSaved)> {
        attention(qkv, pair_bias, lens, heads, first_only, true)
    }

    fn attention_backward(
        saved: &AttentionSaved,
        grad: FlexTensor,
    ) -> (FlexTensor, Option<FlexTensor>) {
        let _span = tracing::trace_span!("attention_backward").entered();
        let grad = grad.to_contiguous();
        let (dqkv, dbias) = attention_backward(&saved.view(), &saved.probs, values(&grad));
        let dbias = dbias
            .zip(saved.pair_bias.as_ref())
            .map(|(v, b)| tensor(v, &shape(b)));
        (tensor(dqkv, &shape(&saved.qkv)), dbias)
    }

    fn feed_forward_saving(
        x: FlexTensor,
        norm: NormParams<Flex>,
        first: LinearParams<Flex>,
        second: LinearParams<Flex>,
    ) -> Option<(FlexTensor, FeedForwardSaved)> {
        feed_forward_run(&x, norm, first, second, true)
    }

    fn pair_mlp_saving(
        inputs: PairInputs<Flex>,
        first: LinearParams<Flex>,
        second: LinearParams<Flex>,
    ) -> Option<(FlexTensor, PairMlpSaved)> {
        let saved = PairMlpSaved::of(inputs, first, second)?;
        Some((saved.forward(), saved))
    }

    fn pair_mlp_backward(saved: &PairMlpSaved, grad: FlexTensor) -> [FlexTensor; 4] {
        let _span = tracing::trace_span!("pair_mlp_backward").entered();
        let grad = grad.to_contiguous();
        let g = pair_mlp_backward(&saved.view(), values(&grad));
        let [d_in, h] = shape(&saved.first.0)[..] else {
            unreachable!("checked 2-D")
        };
        let d_out = shape(&saved.second.0)[1];
        [
            tensor(g.w1, &[d_in, h]),
            tensor(g.b1, &[h]),
            tensor(g.w2, &[h, d_out]),
            tensor(g.b2, &[d_out]),
        ]
    }

    fn feed_forward_backward(saved: &FeedForwardSaved, grad: FlexTensor) -> [FlexTensor; 7] {
        let _span = tracing::trace_span!("feed_forward_backward").entered();
        let grad = grad.to_contiguous();
        let kept = saved.kept.as_ref().expect("kept by feed_forward_saving");
        let g = feed_forward_backward(&saved.view(), values(kept), values(&grad));
        let [d, f] = shape(&saved.first.0)[..] else {
            unreachable!("checked 2-D")
        };
        [
            tensor(g.x, &shape(&saved.x)),
            tensor(g.gamma, &[d]),
            tensor(g.beta, &[d]),
            tensor(g.w1, &[d, f]),
            tensor(g.b1, &[f]),
            tensor(g.w2, &[f, d]),
            tensor(g.b2, &[d]),
        ]
    }
}
