//! The ONNX messages an exported model needs, written in protobuf's wire format (the field
//! numbers of `onnx.proto`, IR version 8). Writing only: the tests read the files back with an
//! independent runtime.

/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED32: u64 = 5;
const LENGTH: u64 = 2;

/// A message's bytes, field by field.
#[derive(Default)]
pub(crate) struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.bytes.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
    }

    fn key(&mut self, field: u64, wire: u64) {
        self.varint((field << 3) | wire);
    }

    /// An int64 (or int32, or enum) field: negative values as ten-byte two's complement, as
    /// protobuf encodes them.
    pub(crate) fn int(&mut self, field: u64, v: i64) {
        self.key(field, VARINT);
        self.varint(v as u64);
    }

    /// A float field.
    pub(crate) fn float(&mut self, field: u64, v: f32) {
        self.key(field, FIXED32);
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// A bytes (or string) field.
    pub(crate) fn bytes(&mut self, field: u64, v: &[u8]) {
        self.key(field, LENGTH);
        self.varint(v.len() as u64);
        self.bytes.extend_from_slice(v);
    }

    /// A string field.
    pub(crate) fn string(&mut self, field: u64, v: &str) {
        self.bytes(field, v.as_bytes());
    }

    /// A packed repeated int64 field.
    pub(crate) fn packed_ints(&mut self, field: u64, v: &[i64]) {
        let mut inner = Writer::default();
        for &x in v {
            inner.varint(x as u64);
        }
        self.bytes(field, &inner.bytes);
    }

    /// A packed repeated float field.
    pub(crate) fn packed_floats(&mut self, field: u64, v: &[f32]) {
        let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.bytes(field, &raw);
    }

    /// An embedded message field.
    pub(crate) fn message(&mut self, field: u64, m: &impl Message) {
        let mut inner = Writer::default();
        m.write(&mut inner);
        self.bytes(field, &inner.bytes);
    }

    /// The bytes written.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// A protobuf message.
pub(crate) trait Message {
    /// Writes the message's fields.
    fn write(&self, w: &mut Writer);
}

/// `TensorProto.DataType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// 32-bit float.
    Float = 1,
    /// 64-bit signed integer.
    Int64 = 7,
    /// Boolean.
    Bool = 9,
}

/// `TensorProto`: a named constant (an initializer or an attribute's value), row-major.
#[derive(Debug, Clone)]
pub(crate) struct TensorProto {
    pub(crate) name: String,
    pub(crate) dims: Vec<i64>,
    pub(crate) data_type: DataType,
    /// Little-endian values.
    pub(crate) raw: Vec<u8>,
}

impl Message for TensorProto {
    fn write(&self, w: &mut Writer) {
        w.packed_ints(1, &self.dims);
        w.int(2, self.data_type as i64);
        w.string(8, &self.name);
        w.bytes(9, &self.raw);
    }
}

/// One dimension of a declared shape: a size, or a name for a size known at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A size given at run time (`"events"`, `"objects"`, …).
    Named(String),
}

/// `ValueInfoProto` of a tensor: a graph input or output with its type and shape.
#[derive(Debug, Clone)]
pub(crate) struct ValueInfo {
    pub(crate) name: String,
    pub(crate) data_type: DataType,
    pub(crate) shape: Vec<Dim>,
    pub(crate) doc: String,
}

impl Message for ValueInfo {
    fn write(&self, w: &mut Writer) {
        w.string(1, &self.name);
        w.message(2, &TypeProto(self));
        w.string(3, &self.doc);
    }
}

/// `TypeProto` with its `tensor_type` (`TypeProto.Tensor`: element type and shape).
struct TypeProto<'a>(&'a ValueInfo);

impl Message for TypeProto<'_> {
    fn write(&self, w: &mut Writer) {
        w.message(1, &TensorType(self.0));
    }
}

struct TensorType<'a>(&'a ValueInfo);

impl Message for TensorType<'_> {
    fn write(&self, w: &mut Writer) {
        w.int(1, self.0.data_type as i64);
        w.message(2, &Shape(&self.0.shape));
    }
}

/// `TensorShapeProto`.
struct Shape<'a>(&'a [Dim]);

impl Message for Shape<'_> {
    fn write(&self, w: &mut Writer) {
        for d in self.0 {
            w.message(1, d);
        }
    }
}

impl Message for Dim {
    fn write(&self, w: &mut Writer) {
        match self {
            Dim::Fixed(n) => w.int(1, *n as i64),
            Dim::Named(s) => w.string(2, s),
        }
    }
}

/// `AttributeProto`: the values an operator takes.
#[derive(Debug, Clone)]
pub enum Attribute {
    /// `INT`.
    Int(i64),
    /// `FLOAT`.
    Float(f32),
    /// `INTS`.
    Ints(Vec<i64>),
    /// `FLOATS`.
    Floats(Vec<f32>),
    /// `STRING`.
    String(String),
}

/// A named attribute of a node.
pub(crate) struct NamedAttribute<'a>(pub(crate) &'a str, pub(crate) &'a Attribute);

impl Message for NamedAttribute<'_> {
    fn write(&self, w: &mut Writer) {
        w.string(1, self.0);
        // AttributeProto.AttributeType: FLOAT 1, INT 2, STRING 3, FLOATS 6, INTS 7.
        match self.1 {
            Attribute::Float(f) => {
                w.float(2, *f);
                w.int(20, 1);
            }
            Attribute::Int(i) => {
                w.int(3, *i);
                w.int(20, 2);
            }
            Attribute::String(s) => {
                w.string(4, s);
                w.int(20, 3);
            }
            Attribute::Floats(v) => {
                w.packed_floats(7, v);
                w.int(20, 6);
            }
            Attribute::Ints(v) => {
                w.packed_ints(8, v);
                w.int(20, 7);
            }
        }
    }
}

/// `NodeProto`: one operator application.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) op: &'static str,
    pub(crate) name: String,
    pub(crate) inputs: Vec<String>,
    pub(crate) outputs: Vec<String>,
    pub(crate) attributes: Vec<(&'static str, Attribute)>,
}

impl Message for Node {
    fn write(&self, w: &mut Writer) {
        for i in &self.inputs {
            w.string(1, i);
        }
        for o in &self.outputs {
            w.string(2, o);
        }
        w.string(3, &self.name);
        w.string(4, self.op);
        for (name, a) in &self.attributes {
            w.message(5, &NamedAttribute(name, a));
        }
    }
}

/// `GraphProto`.
pub(crate) struct GraphProto<'a> {
    pub(crate) name: &'a str,
    pub(crate) nodes: &'a [Node],
    pub(crate) initializers: &'a [TensorProto],
    pub(crate) inputs: &'a [ValueInfo],
    pub(crate) outputs: &'a [ValueInfo],
    pub(crate) doc: &'a str,
}

impl Message for GraphProto<'_> {
    fn write(&self, w: &mut Writer) {
        for n in self.nodes {
            w.message(1, n);
        }
        w.string(2, self.name);
        for t in self.initializers {
            w.message(5, t);
        }
        w.string(10, self.doc);
        for i in self.inputs {
            w.message(11, i);
        }
        for o in self.outputs {
            w.message(12, o);
        }
    }
}

/// `OperatorSetIdProto` of the default domain.
struct Opset(i64);

impl Message for Opset {
    fn write(&self, w: &mut Writer) {
        w.string(1, "");
        w.int(2, self.0);
    }
}

/// `StringStringEntryProto`: one metadata entry.
struct Entry<'a>(&'a str, &'a str);

impl Message for Entry<'_> {
    fn write(&self, w: &mut Writer) {
        w.string(1, self.0);
        w.string(2, self.1);
    }
}

/// `ModelProto`.
pub(crate) struct ModelProto<'a> {
    pub(crate) ir_version: i64,
    pub(crate) opset: i64,
    pub(crate) producer: &'a str,
    pub(crate) producer_version: &'a str,
    pub(crate) doc: &'a str,
    pub(crate) graph: GraphProto<'a>,
    pub(crate) metadata: &'a [(String, String)],
}

impl Message for ModelProto<'_> {
    fn write(&self, w: &mut Writer) {
        w.int(1, self.ir_version);
        w.string(2, self.producer);
        w.string(3, self.producer_version);
        w.string(6, self.doc);
        w.message(7, &self.graph);
        w.message(8, &Opset(self.opset));
        for (k, v) in self.metadata {
            w.message(14, &Entry(k, v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_keys_are_protobufs() {
        let mut w = Writer::default();
        w.int(1, 300);
        w.int(2, -1);
        w.string(3, "ab");
        w.float(4, 1.0);
        let b = w.into_bytes();
        // 300 = 0b1_0010_1100 → AC 02; −1 is ten bytes; "ab" length-delimited; 1.0f32 LE.
        let mut want = vec![0x08, 0xAC, 0x02, 0x10];
        want.extend([0xFF; 9]);
        want.push(0x01);
        want.extend([0x1A, 0x02, b'a', b'b', 0x25, 0x00, 0x00, 0x80, 0x3F]);
        assert_eq!(b, want);
    }
}
