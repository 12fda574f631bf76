//! The PFN as an ONNX graph: every event's objects (no padding) with the event of each, and the
//! events' globals in; `logits` out, for any number of events and objects. The sum over an
//! event's objects is `ScatterElements` with `reduction = add` onto zeros.

use burn::prelude::*;
use gnn4c_onnx::{Attribute, DataType, Dim, Graph};

use crate::model::Pfn;

impl<B: Backend> Pfn<B> {
    /// The network as an ONNX graph; inputs and shapes in `docs/onnx.md`.
    pub fn onnx_graph(&self, d_node: usize, d_global: usize) -> Graph {
        let mut g = Graph::new();
        let named = |s: &str| Dim::Named(s.into());
        let objects = g.input(
            "objects",
            DataType::Float,
            vec![named("objects"), Dim::Fixed(d_node)],
            "every event's objects, event after event (the declared node features, in order)",
        );
        let object_event = g.input(
            "object_event",
            DataType::Int64,
            vec![named("objects")],
            "each object's event (a row of globals)",
        );
        let globals = g.input(
            "globals",
            DataType::Float,
            vec![named("events"), Dim::Fixed(d_global)],
            "the declared global features, one row per event",
        );
        let mut x = objects;
        for (k, layer) in self.phi.iter().enumerate() {
            let y = g.burn_linear(&x, layer, &format!("phi.{k}"));
            x = g.relu(&y);
        }
        // Zeros [events, d_latent] to sum the objects' rows into.
        let d_latent = self.phi.last().map_or(d_node, |l| l.weight.dims()[1]);
        let shape = g.op("Shape", &[&globals], Vec::new());
        let (s, e, a) = (
            g.int_list("starts", &[0]),
            g.int_list("ends", &[1]),
            g.int_list("axes", &[0]),
        );
        let events = g.op("Slice", &[&shape, &s, &e, &a], Vec::new());
        let width = g.int_list("latent_width", &[d_latent as i64]);
        let zeros_shape = g.op(
            "Concat",
            &[&events, &width],
            vec![("axis", Attribute::Int(0))],
        );
        let zero = g.floats("zero_row", &[1, d_latent], &vec![0.0; d_latent]);
        let zeros = g.binary("Expand", &zero, &zeros_shape);
        let latent = g.segment_sum(&x, &object_event, &zeros);
        let mut x = g.op(
            "Concat",
            &[&latent, &globals],
            vec![("axis", Attribute::Int(1))],
        );
        for (k, layer) in self.f.iter().enumerate() {
            let y = g.burn_linear(&x, layer, &format!("f.{k}"));
            x = g.relu(&y);
        }
        let logits = g.burn_linear(&x, &self.classify, "classify");
        let n_out = self.classify.weight.dims()[1];
        g.output(
            &logits,
            "logits",
            DataType::Float,
            vec![named("events"), Dim::Fixed(n_out)],
            "one row per event: the head's outputs before the task's score transform",
        );
        g
    }
}
