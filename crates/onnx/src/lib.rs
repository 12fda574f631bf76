//! ONNX export: a graph builder over plain f32 and i64 values, written as an ONNX model file
//! (IR version 8, opset 17 of the default domain: ONNX Runtime ≥ 1.13 runs it).
//!
//! A model family describes its forward pass with [`Graph`]: named inputs with dimensions that
//! may be named (sizes known at run time: events, objects, edges), weights as initializers,
//! operators one at a time, and the building blocks its layers share ([`Graph::linear`],
//! [`Graph::layer_norm`], [`Graph::relu`], [`Graph::gelu`]). [`Graph::to_model`] gives the file's
//! bytes with the model's metadata (class names and the like). Burn's layers come in through
//! `layers.rs` (their weights read from the module); the families build the rest.

mod layers;
mod proto;

pub use proto::{Attribute, DataType, Dim};
use proto::{GraphProto, Message, ModelProto, Node, TensorProto, ValueInfo, Writer};

/// The operator set the graphs are written for.
pub const OPSET: i64 = 17;

/// The ONNX IR version of the files (the one of opset 17).
const IR_VERSION: i64 = 8;

/// A tensor of the graph, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value(String);

impl Value {
    /// Its name in the graph.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// An ONNX graph under construction.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    initializers: Vec<TensorProto>,
    inputs: Vec<ValueInfo>,
    outputs: Vec<ValueInfo>,
    /// Names given so far, for unique node and tensor names.
    count: usize,
    /// Each constant's name by its type, shape and bytes: a value used twice (an update block
    /// shared by every message-passing step) is stored once.
    constants: std::collections::HashMap<(DataType, Vec<i64>, Vec<u8>), String>,
}

/// What a model file says about itself besides its graph.
#[derive(Debug, Clone, Default)]
pub struct ModelInfo {
    /// The graph's name.
    pub name: String,
    /// A description of the model (the file's and the graph's doc string).
    pub doc: String,
    /// Metadata entries (`metadata_props`): the class names, the model family, …
    pub metadata: Vec<(String, String)>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    fn fresh(&mut self, hint: &str) -> String {
        self.count += 1;
        format!("{hint}_{}", self.count)
    }

    /// A graph input.
    pub fn input(&mut self, name: &str, data_type: DataType, shape: Vec<Dim>, doc: &str) -> Value {
        self.inputs.push(ValueInfo {
            name: name.to_owned(),
            data_type,
            shape,
            doc: doc.to_owned(),
        });
        Value(name.to_owned())
    }

    /// Makes `value` the graph output `name` (through an `Identity` node).
    pub fn output(
        &mut self,
        value: &Value,
        name: &str,
        data_type: DataType,
        shape: Vec<Dim>,
        doc: &str,
    ) {
        let op = self.fresh("output");
        self.nodes.push(Node {
            op: "Identity",
            name: op,
            inputs: vec![value.0.clone()],
            outputs: vec![name.to_owned()],
            attributes: Vec::new(),
        });
        self.outputs.push(ValueInfo {
            name: name.to_owned(),
            data_type,
            shape,
            doc: doc.to_owned(),
        });
    }

    fn initializer(
        &mut self,
        hint: &str,
        dims: &[usize],
        data_type: DataType,
        raw: Vec<u8>,
    ) -> Value {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let key = (data_type, dims, raw);
        if let Some(name) = self.constants.get(&key) {
            return Value(name.clone());
        }
        let name = self.fresh(hint);
        self.initializers.push(TensorProto {
            name: name.clone(),
            dims: key.1.clone(),
            data_type,
            raw: key.2.clone(),
        });
        self.constants.insert(key, name.clone());
        Value(name)
    }

    /// An f32 constant of shape `dims` (row-major `values`). Panics when they disagree.
    pub fn floats(&mut self, hint: &str, dims: &[usize], values: &[f32]) -> Value {
        assert_eq!(
            dims.iter().product::<usize>(),
            values.len(),
            "ONNX constant {hint}: shape and values"
        );
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializer(hint, dims, DataType::Float, raw)
    }

    /// An i64 constant of shape `dims`. Panics when they disagree.
    pub fn ints(&mut self, hint: &str, dims: &[usize], values: &[i64]) -> Value {
        assert_eq!(
            dims.iter().product::<usize>(),
            values.len(),
            "ONNX constant {hint}: shape and values"
        );
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializer(hint, dims, DataType::Int64, raw)
    }

    /// A scalar f32 constant.
    pub fn scalar(&mut self, hint: &str, v: f32) -> Value {
        self.floats(hint, &[], &[v])
    }

    /// A 1-D i64 constant.
    pub fn int_list(&mut self, hint: &str, values: &[i64]) -> Value {
        self.ints(hint, &[values.len()], values)
    }

    /// Operator `op` of the default domain on `inputs`, with one output.
    pub fn op(
        &mut self,
        op: &'static str,
        inputs: &[&Value],
        attributes: Vec<(&'static str, Attribute)>,
    ) -> Value {
        let name = self.fresh(&op.to_lowercase());
        self.nodes.push(Node {
            op,
            name: name.clone(),
            inputs: inputs.iter().map(|v| v.0.clone()).collect(),
            outputs: vec![name.clone()],
            attributes,
        });
        Value(name)
    }

    /// `a op b` for a two-input operator without attributes (`Add`, `MatMul`, …).
    pub fn binary(&mut self, op: &'static str, a: &Value, b: &Value) -> Value {
        self.op(op, &[a, b], Vec::new())
    }

    /// `x · W + b` over the last dimension: `weight` is `[d_in, d_out]` row-major (Burn's
    /// `Linear` layout), `bias` `[d_out]`.
    pub fn linear(
        &mut self,
        x: &Value,
        weight: &[f32],
        d_in: usize,
        bias: Option<&[f32]>,
        hint: &str,
    ) -> Value {
        assert!(
            d_in > 0 && weight.len().is_multiple_of(d_in),
            "ONNX linear {hint}: weight shape"
        );
        let d_out = weight.len() / d_in;
        let w = self.floats(&format!("{hint}.weight"), &[d_in, d_out], weight);
        let y = self.binary("MatMul", x, &w);
        match bias {
            Some(b) => {
                let b = self.floats(&format!("{hint}.bias"), &[d_out], b);
                self.binary("Add", &y, &b)
            }
            None => y,
        }
    }

    /// `max(x, 0)`.
    pub fn relu(&mut self, x: &Value) -> Value {
        self.op("Relu", &[x], Vec::new())
    }

    /// The exact GELU, `x · (1 + erf(x/√2)) / 2`.
    pub fn gelu(&mut self, x: &Value) -> Value {
        let root2 = self.scalar("sqrt2", std::f32::consts::SQRT_2);
        let half = self.scalar("half", 0.5);
        let one = self.scalar("one", 1.0);
        let scaled = self.binary("Div", x, &root2);
        let erf = self.op("Erf", &[&scaled], Vec::new());
        let cdf = self.binary("Add", &erf, &one);
        let xh = self.binary("Mul", x, &half);
        self.binary("Mul", &xh, &cdf)
    }

    /// LayerNorm over the last dimension with the centred variance:
    /// `(x − mean) / √(mean((x − mean)²) + ε) · γ + β`.
    pub fn layer_norm(
        &mut self,
        x: &Value,
        gamma: &[f32],
        beta: Option<&[f32]>,
        epsilon: f32,
        hint: &str,
    ) -> Value {
        let last = || {
            vec![
                ("axes", Attribute::Ints(vec![-1])),
                ("keepdims", Attribute::Int(1)),
            ]
        };
        let mean = self.op("ReduceMean", &[x], last());
        let centred = self.binary("Sub", x, &mean);
        let square = self.binary("Mul", &centred, &centred);
        let var = self.op("ReduceMean", &[&square], last());
        let eps = self.scalar("epsilon", epsilon);
        let var = self.binary("Add", &var, &eps);
        let sd = self.op("Sqrt", &[&var], Vec::new());
        let x_hat = self.binary("Div", &centred, &sd);
        let g = self.floats(&format!("{hint}.gamma"), &[gamma.len()], gamma);
        let y = self.binary("Mul", &x_hat, &g);
        match beta {
            Some(b) => {
                let b = self.floats(&format!("{hint}.beta"), &[b.len()], b);
                self.binary("Add", &y, &b)
            }
            None => y,
        }
    }

    /// `Σ` of `values`' rows per `group` (a row index per row) into the rows of `like` (a
    /// tensor with the groups' shape, whose values are not read): `ScatterElements` with
    /// `reduction = add` onto zeros.
    pub fn segment_sum(&mut self, values: &Value, group: &Value, like: &Value) -> Value {
        let zero = self.scalar("zero", 0.0);
        let zeros = self.binary("Mul", like, &zero);
        let axes = self.int_list("axes", &[1]);
        let column = self.op("Unsqueeze", &[group, &axes], Vec::new());
        let shape = self.op("Shape", &[values], Vec::new());
        let index = self.binary("Expand", &column, &shape);
        self.op(
            "ScatterElements",
            &[&zeros, &index, values],
            vec![
                ("axis", Attribute::Int(0)),
                ("reduction", Attribute::String("add".into())),
            ],
        )
    }

    /// The model file's bytes.
    pub fn to_model(&self, info: &ModelInfo) -> Vec<u8> {
        let model = ModelProto {
            ir_version: IR_VERSION,
            opset: OPSET,
            producer: "gnn4colliders",
            producer_version: env!("CARGO_PKG_VERSION"),
            doc: &info.doc,
            graph: GraphProto {
                name: &info.name,
                nodes: &self.nodes,
                initializers: &self.initializers,
                inputs: &self.inputs,
                outputs: &self.outputs,
                doc: &info.doc,
            },
            metadata: &info.metadata,
        };
        let mut w = Writer::default();
        model.write(&mut w);
        w.into_bytes()
    }
}
