//! The ROOT-Transformer as an ONNX graph: the padded batch `TokenBatch` holds (`tokens`,
//! `padding`, `globals` and, with the pair bias, `pair`) in, `logits` out, for any number of
//! events and objects.
//!
//! The graph computes what [`RootTransformer::forward`] computes, on the padded tokens: padded
//! keys get −∞ before the softmax (the class token is always a key, so no row is empty), padded
//! queries compute values nobody reads, and the pair bias is zero on the diagonal and in the
//! class token's row and column.

use burn::nn::LayerNorm;
use burn::prelude::*;
use gnn4c_onnx::{Attribute, DataType, Dim, Graph, Value};

use crate::model::{EmbedBlock, EncoderLayer, LAYER_NORM_EPSILON, PairEmbed, RootTransformer};

fn layer_norm<B: Backend>(g: &mut Graph, x: &Value, ln: &LayerNorm<B>, hint: &str) -> Value {
    g.burn_layer_norm(x, ln, LAYER_NORM_EPSILON, hint)
}

fn embed<B: Backend>(g: &mut Graph, x: &Value, block: &EmbedBlock<B>, hint: &str) -> Value {
    g.relu_block(x, &block.layers, &block.norm, LAYER_NORM_EPSILON, hint)
}

/// `x[.., from..to]` along the last axis.
fn last_slice(g: &mut Graph, x: &Value, from: usize, to: usize) -> Value {
    let (starts, ends, axes) = (
        g.int_list("starts", &[from as i64]),
        g.int_list("ends", &[to as i64]),
        g.int_list("axes", &[-1]),
    );
    g.op("Slice", &[x, &starts, &ends, &axes], Vec::new())
}

fn transpose(g: &mut Graph, x: &Value, perm: &[i64]) -> Value {
    g.op(
        "Transpose",
        &[x],
        vec![("perm", Attribute::Ints(perm.to_vec()))],
    )
}

fn unsqueeze(g: &mut Graph, x: &Value, axes: &[i64]) -> Value {
    let axes = g.int_list("axes", axes);
    g.op("Unsqueeze", &[x, &axes], Vec::new())
}

/// The pair bias per head, `[events, heads, 1 + objects, 1 + objects]`: the MLP on each object
/// pair, zero on the diagonal, padded with zeros for the class token's row and column.
fn pair_bias<B: Backend>(g: &mut Graph, pair: &Value, padding: &Value, p: &PairEmbed<B>) -> Value {
    let h = g.burn_linear(pair, &p.hidden, "pair_embed.0");
    let h = g.relu(&h);
    let bias = g.burn_linear(&h, &p.out, "pair_embed.2"); // [n, l, l, heads]
    // An [l, l] tensor (its values unused) for EyeLike: padding row 0 as a column times itself.
    let as_float = g.op(
        "Cast",
        &[padding],
        vec![("to", Attribute::Int(DataType::Float as i64))],
    );
    let row = {
        let (s, e, a) = (
            g.int_list("starts", &[0]),
            g.int_list("ends", &[1]),
            g.int_list("axes", &[0]),
        );
        g.op("Slice", &[&as_float, &s, &e, &a], Vec::new()) // [1, l]
    };
    let column = transpose(g, &row, &[1, 0]);
    let square = g.binary("MatMul", &column, &row); // [l, l]
    let eye = g.op("EyeLike", &[&square], Vec::new());
    let one = g.scalar("one", 1.0);
    let off = g.binary("Sub", &one, &eye);
    let off = unsqueeze(g, &off, &[0, 3]); // [1, l, l, 1]
    let bias = g.binary("Mul", &bias, &off);
    let pads = g.int_list("pads", &[0, 1, 1, 0, 0, 0, 0, 0]);
    let bias = g.op("Pad", &[&bias, &pads], Vec::new()); // [n, s, s, heads]
    transpose(g, &bias, &[0, 3, 1, 2])
}

/// What every layer's attention reads besides its input.
#[derive(Clone, Copy)]
struct Attending<'v> {
    n_heads: usize,
    /// `true` where a key is padding (its logit gets −∞).
    key_masked: &'v Value,
    /// The pair bias `[n, h, s, s]`, if the model has one.
    bias: Option<&'v Value>,
}

/// One encoder layer on `x [n, s, d]` → `[n, s, d]`; with `class_token` (the index of the class
/// token's slot), only that slot past the attention → `[n, d]` (the model's last layer: the head
/// reads nothing else).
fn encoder_layer<B: Backend>(
    g: &mut Graph,
    x: &Value,
    layer: &EncoderLayer<B>,
    k: usize,
    attending: &Attending<'_>,
    class_token: Option<&Value>,
) -> Value {
    let Attending {
        n_heads,
        key_masked,
        bias,
    } = *attending;
    let name = |s: &str| format!("layers.{k}.{s}");
    let [d, _] = layer.self_attn.out_proj.weight.dims();
    let dh = d / n_heads;
    let u = layer_norm(g, x, &layer.norm1, &name("norm1"));
    let qkv = g.burn_linear(&u, &layer.self_attn.in_proj, &name("self_attn.in_proj"));
    let split = g.int_list("heads", &[0, 0, n_heads as i64, dh as i64]);
    let heads = |g: &mut Graph, part: usize, perm: &[i64]| {
        let t = last_slice(g, &qkv, part * d, (part + 1) * d);
        let t = g.binary("Reshape", &t, &split); // [n, s, h, dh]
        transpose(g, &t, perm)
    };
    let q = heads(g, 0, &[0, 2, 1, 3]); // [n, h, s, dh]
    let kt = heads(g, 1, &[0, 2, 3, 1]); // [n, h, dh, s]
    let v = heads(g, 2, &[0, 2, 1, 3]); // [n, h, s, dh]
    let logits = g.binary("MatMul", &q, &kt);
    let scale = g.scalar("sqrt_dh", (dh as f64).sqrt() as f32);
    let mut logits = g.binary("Div", &logits, &scale);
    if let Some(b) = bias {
        logits = g.binary("Add", &logits, b);
    }
    let minus_inf = g.scalar("minus_inf", f32::NEG_INFINITY);
    let logits = g.op("Where", &[key_masked, &minus_inf, &logits], Vec::new());
    let p = g.op("Softmax", &[&logits], vec![("axis", Attribute::Int(-1))]);
    let a = g.binary("MatMul", &p, &v); // [n, h, s, dh]
    let a = transpose(g, &a, &[0, 2, 1, 3]);
    let merged = g.int_list("merged", &[0, 0, d as i64]);
    let a = g.binary("Reshape", &a, &merged); // [n, s, d]
    let (x, a) = match class_token {
        Some(index) => {
            let slot = |g: &mut Graph, t: &Value| {
                g.op("Gather", &[t, index], vec![("axis", Attribute::Int(1))])
            };
            (slot(g, x), slot(g, &a)) // [n, d]
        }
        None => (x.clone(), a),
    };
    let a = g.burn_linear(&a, &layer.self_attn.out_proj, &name("self_attn.out_proj"));
    let x = g.binary("Add", &x, &a);
    let u = layer_norm(g, &x, &layer.norm2, &name("norm2"));
    let h = g.burn_linear(&u, &layer.linear1, &name("linear1"));
    let h = g.gelu(&h);
    let f = g.burn_linear(&h, &layer.linear2, &name("linear2"));
    g.binary("Add", &x, &f)
}

impl<B: Backend, K> RootTransformer<B, K> {
    /// The model as an ONNX graph with inputs `tokens [events, objects, d_node]` (f32),
    /// `padding [events, objects]` (bool, true where there is no object; each event's objects
    /// first), `globals [events, d_global]` (f32), with the pair bias `pair [events, objects,
    /// objects, d_pair]` (f32), and output `logits [events, n_out]`.
    pub fn onnx_graph(&self, d_node: usize, d_global: usize, d_pair: usize) -> Graph {
        let mut g = Graph::new();
        let (events, objects) = (Dim::Named("events".into()), Dim::Named("objects".into()));
        let tokens = g.input(
            "tokens",
            DataType::Float,
            vec![events.clone(), objects.clone(), Dim::Fixed(d_node)],
            "each event's objects (the declared node features, in order), zero-padded to the \
             longest event",
        );
        let padding = g.input(
            "padding",
            DataType::Bool,
            vec![events.clone(), objects.clone()],
            "true where an event has no object (its objects come first)",
        );
        let globals = g.input(
            "globals",
            DataType::Float,
            vec![events.clone(), Dim::Fixed(d_global)],
            "the declared global features",
        );
        let pair = self.pair_embed.as_ref().map(|_| {
            g.input(
                "pair",
                DataType::Float,
                vec![events.clone(), objects.clone(), objects, Dim::Fixed(d_pair)],
                "the object pairs' features (Δη, Δφ, ΔR), zero on the diagonal and on padding",
            )
        });
        let tok = embed(&mut g, &tokens, &self.token_embed, "token_embed");
        let cls = embed(&mut g, &globals, &self.global_embed, "global_embed");
        let cls = unsqueeze(&mut g, &cls, &[1]);
        let mut x = g.op("Concat", &[&cls, &tok], vec![("axis", Attribute::Int(1))]); // [n, s, d]

        // Keys masked: the padding with the class token's column (never masked) first.
        let pad = g.op(
            "Cast",
            &[&padding],
            vec![("to", Attribute::Int(DataType::Float as i64))],
        );
        let first = last_slice(&mut g, &pad, 0, 1);
        let zero = g.scalar("zero", 0.0);
        let cls_column = g.binary("Mul", &first, &zero);
        let keys = g.op(
            "Concat",
            &[&cls_column, &pad],
            vec![("axis", Attribute::Int(1))],
        );
        let keys = g.op(
            "Cast",
            &[&keys],
            vec![("to", Attribute::Int(DataType::Bool as i64))],
        );
        let key_masked = unsqueeze(&mut g, &keys, &[1, 2]); // [n, 1, 1, s]

        let bias = match (&self.pair_embed, &pair) {
            (Some(p), Some(pair)) => Some(pair_bias(&mut g, pair, &padding, p)),
            _ => None,
        };
        // The last layer computes the class token alone past its attention, as the model does.
        let index = g.ints("class_token", &[], &[0]);
        let last = self.layers.len().checked_sub(1);
        let attending = Attending {
            n_heads: self.n_heads,
            key_masked: &key_masked,
            bias: bias.as_ref(),
        };
        for (k, layer) in self.layers.iter().enumerate() {
            let class_token = (Some(k) == last).then_some(&index);
            x = encoder_layer(&mut g, &x, layer, k, &attending, class_token);
        }
        let cls = match last {
            Some(_) => x, // [n, d]
            None => g.op("Gather", &[&x, &index], vec![("axis", Attribute::Int(1))]),
        };
        let cls = layer_norm(&mut g, &cls, &self.norm, "norm");
        let logits = g.burn_linear(&cls, &self.classify, "classify");
        g.output(
            &logits,
            "logits",
            DataType::Float,
            vec![events, Dim::Fixed(self.n_out())],
            "one logit per class (binary: one, the signal's)",
        );
        g
    }
}
