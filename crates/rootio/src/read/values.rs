//! What a read hands out: a branch's values in memory of their own ([`BranchData`]), or a
//! chunk's where they lie ([`Values`]), as big-endian bytes with a count per entry, and their
//! widening to `f64` and `i64`.

use std::sync::Arc;

use super::Number;
use super::interpretation::Interpretation;

/// A branch's values: the raw big-endian bytes of every value, in entry order, and the count
/// of values in each entry.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchData {
    /// How to read the bytes.
    pub interpretation: Interpretation,
    /// Every value's bytes, big-endian, entries concatenated.
    pub bytes: Vec<u8>,
    /// Values in each entry.
    pub counts: Vec<u32>,
}

impl BranchData {
    /// Value `i` as f64 (integers exactly up to 2^53).
    pub fn f64_at(&self, i: usize) -> f64 {
        let size = self.interpretation.number.size();
        f64_of(
            self.interpretation.number,
            &self.bytes[i * size..(i + 1) * size],
        )
    }

    /// Value `i` as i64: integers exactly (`uint64_t` bit for bit), floats truncated.
    pub fn i64_at(&self, i: usize) -> i64 {
        let size = self.interpretation.number.size();
        i64_of(
            self.interpretation.number,
            &self.bytes[i * size..(i + 1) * size],
        )
    }

    /// Every value as f64 (integers exactly up to 2^53), one pass over the bytes.
    pub fn to_f64(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.len());
        extend_f64(self.interpretation.number, &self.bytes, &mut out);
        out
    }

    /// Every value as i64 (integers exactly, `uint64_t` bit for bit), one pass over the bytes.
    pub fn to_i64(&self) -> Vec<i64> {
        let mut out = Vec::with_capacity(self.len());
        extend_i64(self.interpretation.number, &self.bytes, &mut out);
        out
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.interpretation.number.size()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// A chunk's values of one column as [`crate::ColumnReader`] hands them out: the big-endian
/// bytes of every value, in entry order, in one or more parts, each lying where its basket or
/// page was decoded (memory the reader shares until both let go: no copy), and the count of
/// values in each entry.
#[derive(Debug, Clone)]
pub struct Values {
    /// How to read the bytes.
    pub interpretation: Interpretation,
    pub(crate) parts: Vec<Part>,
    /// Values in each entry.
    pub counts: Vec<u32>,
}

/// Some of the values' bytes: `range` of a basket's decoded bytes.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) bytes: Arc<Vec<u8>>,
    pub(crate) range: std::ops::Range<usize>,
}

impl Values {
    /// The values' bytes, part by part, in entry order.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        self.parts.iter().map(|p| &p.bytes[p.range.clone()])
    }

    /// Every value as f64 (integers exactly up to 2^53), one pass over the bytes.
    pub fn to_f64(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.len());
        for part in self.parts() {
            extend_f64(self.interpretation.number, part, &mut out);
        }
        out
    }

    /// Every value as i64 (integers exactly, `uint64_t` bit for bit), one pass over the bytes.
    pub fn to_i64(&self) -> Vec<i64> {
        let mut out = Vec::with_capacity(self.len());
        for part in self.parts() {
            extend_i64(self.interpretation.number, part, &mut out);
        }
        out
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        let bytes: usize = self.parts.iter().map(|p| p.range.len()).sum();
        bytes / self.interpretation.number.size()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(|p| p.range.is_empty())
    }

    /// The first `k` entries' values (all where there are fewer), these keeping the rest.
    pub fn split_to(&mut self, k: usize) -> Values {
        let k = k.min(self.counts.len());
        let rest = self.counts.split_off(k);
        let counts = std::mem::replace(&mut self.counts, rest);
        let size = self.interpretation.number.size();
        let mut bytes = counts.iter().map(|&c| c as usize).sum::<usize>() * size;
        let whole = self
            .parts
            .iter()
            .take_while(|p| {
                let fits = p.range.len() <= bytes;
                if fits {
                    bytes -= p.range.len();
                }
                fits
            })
            .count();
        let mut parts: Vec<Part> = self.parts.drain(..whole).collect();
        if bytes > 0
            && let Some(p) = self.parts.first_mut()
        {
            parts.push(Part {
                bytes: Arc::clone(&p.bytes),
                range: p.range.start..p.range.start + bytes,
            });
            p.range.start += bytes;
        }
        Values {
            interpretation: self.interpretation,
            parts,
            counts,
        }
    }

    /// `other`'s entries after these.
    pub fn append(&mut self, other: Values) {
        self.counts.extend_from_slice(&other.counts);
        self.parts.extend(other.parts);
    }

    /// The values in memory of their own: moved where one part holds them and no one else
    /// shares its memory, else copied once.
    pub fn into_data(self) -> BranchData {
        let Values {
            interpretation,
            mut parts,
            counts,
        } = self;
        let bytes = if parts.len() == 1 {
            let Part { bytes, range } = parts.remove(0);
            match Arc::try_unwrap(bytes) {
                Ok(mut bytes) => {
                    bytes.truncate(range.end);
                    bytes.drain(..range.start);
                    bytes
                }
                Err(shared) => shared[range].to_vec(),
            }
        } else {
            let all = parts.iter().map(|p| p.range.len()).sum();
            let mut bytes = Vec::with_capacity(all);
            for p in &parts {
                bytes.extend_from_slice(&p.bytes[p.range.clone()]);
            }
            bytes
        };
        BranchData {
            interpretation,
            bytes,
            counts,
        }
    }
}

impl From<BranchData> for Values {
    fn from(data: BranchData) -> Values {
        let BranchData {
            interpretation,
            bytes,
            counts,
        } = data;
        let range = 0..bytes.len();
        Values {
            interpretation,
            parts: vec![Part {
                bytes: Arc::new(bytes),
                range,
            }],
            counts,
        }
    }
}

/// One value's big-endian `bytes` as f64 (integers exactly up to 2^53).
fn f64_of(n: Number, b: &[u8]) -> f64 {
    match n {
        Number::Bool => f64::from(u8::from(b[0] != 0)),
        Number::U8 => f64::from(b[0]),
        Number::I8 => f64::from(b[0] as i8),
        Number::I16 => f64::from(i16::from_be_bytes([b[0], b[1]])),
        Number::U16 => f64::from(u16::from_be_bytes([b[0], b[1]])),
        Number::I32 => f64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        Number::U32 => f64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        Number::F32 => f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        Number::I64 => i64::from_be_bytes(b.try_into().unwrap_or_default()) as f64,
        Number::U64 => u64::from_be_bytes(b.try_into().unwrap_or_default()) as f64,
        Number::F64 => f64::from_be_bytes(b.try_into().unwrap_or_default()),
    }
}

/// One value's big-endian `bytes` as i64: integers exactly (`uint64_t` bit for bit), floats
/// truncated.
fn i64_of(n: Number, b: &[u8]) -> i64 {
    match n {
        Number::I64 => i64::from_be_bytes(b.try_into().unwrap_or_default()),
        Number::U64 => u64::from_be_bytes(b.try_into().unwrap_or_default()) as i64,
        Number::Bool => i64::from(b[0] != 0),
        _ => f64_of(n, b) as i64,
    }
}

/// Appends the values of big-endian `bytes` as f64 (see [`f64_of`]).
fn extend_f64(n: Number, bytes: &[u8], out: &mut Vec<f64>) {
    match n {
        Number::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_be_bytes([c[0], c[1], c[2], c[3]]))),
        ),
        Number::F64 => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
        ),
        _ => out.extend(bytes.chunks_exact(n.size()).map(|c| f64_of(n, c))),
    }
}

/// Appends the values of big-endian `bytes` as i64 (see [`i64_of`]).
fn extend_i64(n: Number, bytes: &[u8], out: &mut Vec<i64>) {
    match n {
        Number::Bool => out.extend(bytes.iter().map(|&x| i64::from(x != 0))),
        Number::I8 => out.extend(bytes.iter().map(|&x| i64::from(x as i8))),
        Number::U8 => out.extend(bytes.iter().map(|&x| i64::from(x))),
        Number::I16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| i64::from(i16::from_be_bytes([c[0], c[1]]))),
        ),
        Number::U16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| i64::from(u16::from_be_bytes([c[0], c[1]]))),
        ),
        Number::I32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_be_bytes([c[0], c[1], c[2], c[3]]))),
        ),
        Number::U32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| i64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))),
        ),
        Number::I64 | Number::U64 => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
        ),
        Number::F32 | Number::F64 => out.extend(bytes.chunks_exact(n.size()).map(|c| i64_of(n, c))),
    }
}
