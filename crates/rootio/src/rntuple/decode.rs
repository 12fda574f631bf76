//! RNTuple column types and the decoding of a page's bytes into values: plain little-endian,
//! split (byte-shuffled), delta and zigzag integers, bits, half floats, truncated and quantized
//! floats.

use crate::error::BufError;
use crate::read::Number;

/// A column type of the specification (§ Column Description).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColumnType {
    Bit,
    Byte,
    Char,
    Int8,
    UInt8,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Real16,
    Real32,
    Real64,
    Index32,
    Index64,
    Switch,
    SplitInt16,
    SplitUInt16,
    SplitInt32,
    SplitUInt32,
    SplitInt64,
    SplitUInt64,
    SplitReal16,
    SplitReal32,
    SplitReal64,
    SplitIndex32,
    SplitIndex64,
    Real32Trunc,
    Real32Quant,
}

impl ColumnType {
    /// The type of code `code`, if the specification has it.
    pub(crate) fn from_code(code: u16) -> Option<ColumnType> {
        use ColumnType::*;
        Some(match code {
            0x00 => Bit,
            0x01 => Byte,
            0x02 => Char,
            0x03 => Int8,
            0x04 => UInt8,
            0x05 => Int16,
            0x06 => UInt16,
            0x07 => Int32,
            0x08 => UInt32,
            0x09 => Int64,
            0x0A => UInt64,
            0x0B => Real16,
            0x0C => Real32,
            0x0D => Real64,
            0x0E => Index32,
            0x0F => Index64,
            0x10 => Switch,
            0x11 => SplitInt16,
            0x12 => SplitUInt16,
            0x13 => SplitInt32,
            0x14 => SplitUInt32,
            0x15 => SplitInt64,
            0x16 => SplitUInt64,
            0x17 => SplitReal16,
            0x18 => SplitReal32,
            0x19 => SplitReal64,
            0x1A => SplitIndex32,
            0x1B => SplitIndex64,
            0x1C => Real32Trunc,
            0x1D => Real32Quant,
            _ => return None,
        })
    }

    /// Its name in the specification.
    pub(crate) fn name(self) -> &'static str {
        use ColumnType::*;
        match self {
            Bit => "Bit",
            Byte => "Byte",
            Char => "Char",
            Int8 => "Int8",
            UInt8 => "UInt8",
            Int16 => "Int16",
            UInt16 => "UInt16",
            Int32 => "Int32",
            UInt32 => "UInt32",
            Int64 => "Int64",
            UInt64 => "UInt64",
            Real16 => "Real16",
            Real32 => "Real32",
            Real64 => "Real64",
            Index32 => "Index32",
            Index64 => "Index64",
            Switch => "Switch",
            SplitInt16 => "SplitInt16",
            SplitUInt16 => "SplitUInt16",
            SplitInt32 => "SplitInt32",
            SplitUInt32 => "SplitUInt32",
            SplitInt64 => "SplitInt64",
            SplitUInt64 => "SplitUInt64",
            SplitReal16 => "SplitReal16",
            SplitReal32 => "SplitReal32",
            SplitReal64 => "SplitReal64",
            SplitIndex32 => "SplitIndex32",
            SplitIndex64 => "SplitIndex64",
            Real32Trunc => "Real32Trunc",
            Real32Quant => "Real32Quant",
        }
    }

    /// Whether it is a collection's offset column.
    pub(crate) fn is_index(self) -> bool {
        use ColumnType::*;
        matches!(self, Index32 | Index64 | SplitIndex32 | SplitIndex64)
    }

    /// Whether its values are floating point.
    pub(crate) fn is_real(self) -> bool {
        use ColumnType::*;
        matches!(
            self,
            Real16
                | Real32
                | Real64
                | SplitReal16
                | SplitReal32
                | SplitReal64
                | Real32Trunc
                | Real32Quant
        )
    }

    /// Bits per element for the fixed-width types; `None` for the variable ones (the column
    /// record says) and for `Switch`, which numbers never use.
    fn fixed_bits(self) -> Option<u32> {
        use ColumnType::*;
        Some(match self {
            Bit => 1,
            Byte | Char | Int8 | UInt8 => 8,
            Int16 | UInt16 | Real16 | SplitInt16 | SplitUInt16 | SplitReal16 => 16,
            Int32 | UInt32 | Real32 | Index32 | SplitInt32 | SplitUInt32 | SplitReal32
            | SplitIndex32 => 32,
            Int64 | UInt64 | Real64 | Index64 | SplitInt64 | SplitUInt64 | SplitReal64
            | SplitIndex64 => 64,
            Switch | Real32Trunc | Real32Quant => return None,
        })
    }
}

/// How one column's pages decode: its type, bits on storage and, for quantized reals, range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Encoding {
    pub kind: ColumnType,
    pub bits: u32,
    pub range: Option<(f64, f64)>,
}

impl Encoding {
    /// Checks the bits on storage against the type (`Real32Trunc`: 10–31, `Real32Quant`:
    /// 1–32 with a range).
    pub(crate) fn new(
        kind: ColumnType,
        bits: u16,
        range: Option<(f64, f64)>,
    ) -> Result<Encoding, String> {
        let bits = u32::from(bits);
        match kind {
            ColumnType::Switch => Err("a Switch column (variants are not read)".into()),
            ColumnType::Real32Trunc if !(10..=31).contains(&bits) => {
                Err(format!("Real32Trunc with {bits} bits (10 to 31 are valid)"))
            }
            ColumnType::Real32Quant if !(1..=32).contains(&bits) || range.is_none() => {
                Err(format!("Real32Quant with {bits} bits and no value range"))
            }
            k => match k.fixed_bits() {
                Some(b) if b != bits => Err(format!(
                    "a {} column stored with {bits} bits (it has {b})",
                    k.name()
                )),
                _ => Ok(Encoding { kind, bits, range }),
            },
        }
    }

    /// Bytes of a page of `n` elements, uncompressed.
    pub(crate) fn page_bytes(&self, n: usize) -> usize {
        (n * self.bits as usize).div_ceil(8)
    }

    /// Checks `bytes` hold a page of `n` elements.
    pub(crate) fn check_page(&self, bytes: &[u8], n: usize) -> Result<(), BufError> {
        let want = self.page_bytes(n);
        if bytes.len() < want {
            return Err(BufError::Short {
                at: 0,
                want,
                len: bytes.len(),
            });
        }
        Ok(())
    }
}

/// A decoded value: integers exactly, reals as f64 (every f32 and f16 exactly).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    Int(i64),
    UInt(u64),
    Real(f64),
}

/// The `width` bytes of element `i` of `n` split (byte-shuffled) elements, in order.
fn unsplit<const W: usize>(bytes: &[u8], n: usize, i: usize) -> [u8; W] {
    let mut a = [0u8; W];
    for (b, x) in a.iter_mut().enumerate() {
        *x = bytes[b * n + i];
    }
    a
}

fn zigzag(u: u64) -> i64 {
    (u >> 1) as i64 ^ -((u & 1) as i64)
}

/// IEEE-754 half precision to f32, exactly.
fn half(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m · 2^-24.
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Item `i` of a little-endian stream of `bits`-bit items.
fn packed(bytes: &[u8], bits: u32, i: usize) -> u64 {
    let start = i * bits as usize;
    let (byte, shift) = (start / 8, start % 8);
    let mut w = [0u8; 8];
    let avail = bytes.len().saturating_sub(byte).min(8);
    w[..avail].copy_from_slice(&bytes[byte..byte + avail]);
    let word = u64::from_le_bytes(w) >> shift;
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    word & mask
}

/// Decodes a page of `n` elements (its bytes uncompressed), appending to `out`.
pub(crate) fn decode_page(
    enc: &Encoding,
    bytes: &[u8],
    n: usize,
    out: &mut Vec<Value>,
) -> Result<(), BufError> {
    use ColumnType::*;
    enc.check_page(bytes, n)?;
    out.reserve(n);
    macro_rules! plain {
        ($t:ty, $wrap:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            out.extend(bytes[..n * W].chunks_exact(W).map(|c| {
                let mut a = [0u8; W];
                a.copy_from_slice(c);
                $wrap(<$t>::from_le_bytes(a))
            }));
        }};
    }
    macro_rules! split {
        ($t:ty, $wrap:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            out.extend((0..n).map(|i| $wrap(<$t>::from_le_bytes(unsplit::<W>(bytes, n, i)))));
        }};
    }
    match enc.kind {
        Bit => out.extend((0..n).map(|i| Value::UInt(u64::from((bytes[i / 8] >> (i % 8)) & 1)))),
        Byte | UInt8 => out.extend(bytes[..n].iter().map(|&b| Value::UInt(u64::from(b)))),
        Char | Int8 => out.extend(bytes[..n].iter().map(|&b| Value::Int(i64::from(b as i8)))),
        Int16 => plain!(i16, |v| Value::Int(i64::from(v))),
        UInt16 => plain!(u16, |v| Value::UInt(u64::from(v))),
        Int32 => plain!(i32, |v| Value::Int(i64::from(v))),
        UInt32 | Index32 => plain!(u32, |v| Value::UInt(u64::from(v))),
        Int64 => plain!(i64, Value::Int),
        UInt64 | Index64 => plain!(u64, Value::UInt),
        Real16 => plain!(u16, |v| Value::Real(f64::from(half(v)))),
        Real32 => plain!(f32, |v| Value::Real(f64::from(v))),
        Real64 => plain!(f64, Value::Real),
        SplitInt16 => split!(u16, |v| Value::Int(zigzag(u64::from(v)))),
        SplitUInt16 => split!(u16, |v| Value::UInt(u64::from(v))),
        SplitInt32 => split!(u32, |v| Value::Int(zigzag(u64::from(v)))),
        SplitUInt32 => split!(u32, |v| Value::UInt(u64::from(v))),
        SplitInt64 => split!(u64, |v| Value::Int(zigzag(v))),
        SplitUInt64 => split!(u64, Value::UInt),
        SplitReal16 => split!(u16, |v| Value::Real(f64::from(half(v)))),
        SplitReal32 => split!(f32, |v| Value::Real(f64::from(v))),
        SplitReal64 => split!(f64, Value::Real),
        SplitIndex32 | SplitIndex64 => {
            let mut offsets = Vec::with_capacity(n);
            decode_offsets(enc, bytes, n, &mut offsets)?;
            out.extend(offsets.into_iter().map(Value::UInt));
        }
        Real32Trunc => {
            let shift = 32 - enc.bits;
            out.extend((0..n).map(|i| {
                let v = packed(bytes, enc.bits, i) as u32;
                Value::Real(f64::from(f32::from_bits(v << shift)))
            }));
        }
        Real32Quant => {
            let (min, max) = enc.range.unwrap_or((0.0, 0.0));
            let quant_max = ((1u64 << enc.bits) - 1) as f64;
            let scale = (max - min) / quant_max;
            out.extend((0..n).map(|i| {
                let q = packed(bytes, enc.bits, i) as f64;
                Value::Real(q * scale + min)
            }));
        }
        Switch => {
            return Err(BufError::Bad(
                "a Switch column (variants are not read)".into(),
            ));
        }
    }
    Ok(())
}

/// `v` as a big-endian `number` into the first `number.size()` bytes of `dst`.
pub(crate) fn put_be(dst: &mut [u8], number: Number, v: Value) {
    let (i, u, r) = match v {
        Value::Int(i) => (i, i as u64, i as f64),
        Value::UInt(u) => (u as i64, u, u as f64),
        Value::Real(r) => (r as i64, r as u64, r),
    };
    match number {
        // Every value's f64 is zero exactly when the value is.
        Number::Bool => dst[0] = u8::from(r != 0.0),
        Number::I8 => dst[0] = i as i8 as u8,
        Number::U8 => dst[0] = u as u8,
        Number::I16 => dst[..2].copy_from_slice(&(i as i16).to_be_bytes()),
        Number::U16 => dst[..2].copy_from_slice(&(u as u16).to_be_bytes()),
        Number::I32 => dst[..4].copy_from_slice(&(i as i32).to_be_bytes()),
        Number::U32 => dst[..4].copy_from_slice(&(u as u32).to_be_bytes()),
        Number::I64 => dst[..8].copy_from_slice(&i.to_be_bytes()),
        Number::U64 => dst[..8].copy_from_slice(&u.to_be_bytes()),
        Number::F32 => dst[..4].copy_from_slice(&(r as f32).to_be_bytes()),
        Number::F64 => dst[..8].copy_from_slice(&r.to_be_bytes()),
    }
}

/// How a column's elements become big-endian `number`s without an intermediate value, where
/// the pairing is a common one: elements can then be decoded from any range of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direct {
    /// Bytes as they are (one-byte numbers).
    Copy,
    /// Little-endian values reversed.
    Reverse(usize),
    /// Split values gathered.
    Unsplit(usize),
    /// Split zigzag integers gathered and unzigzagged.
    UnsplitZigzag(usize),
}

impl Direct {
    /// The direct decoding of `enc` into `number`s, if there is one.
    pub(crate) fn of(enc: &Encoding, number: Number) -> Option<Direct> {
        use ColumnType::*;
        let w = number.size();
        if enc.bits as usize != 8 * w || number == Number::Bool {
            return None;
        }
        let real_number = matches!(number, Number::F32 | Number::F64);
        let signed_number = matches!(number, Number::I16 | Number::I32 | Number::I64);
        match enc.kind {
            Real32 | Real64 if real_number => Some(Direct::Reverse(w)),
            Byte | Char | Int8 | UInt8 if !real_number => Some(Direct::Copy),
            Int16 | UInt16 | Int32 | UInt32 | Int64 | UInt64 if !real_number => {
                Some(Direct::Reverse(w))
            }
            SplitReal32 | SplitReal64 if real_number => Some(Direct::Unsplit(w)),
            SplitUInt16 | SplitUInt32 | SplitUInt64 if !real_number => Some(Direct::Unsplit(w)),
            SplitInt16 | SplitInt32 | SplitInt64 if signed_number => Some(Direct::UnsplitZigzag(w)),
            _ => None,
        }
    }

    /// Elements `from..to` of a page of `n` elements (its bytes uncompressed, checked to hold
    /// them) as big-endian numbers into the start of `dst` (at least `(to - from)` numbers).
    pub(crate) fn decode(self, bytes: &[u8], n: usize, from: usize, to: usize, dst: &mut [u8]) {
        crate::simd::wide(DirectDecode {
            direct: self,
            bytes,
            n,
            range: from..to,
            dst,
        })
    }

    /// [`Direct::decode`]'s loops, inlined into each instruction set's copy.
    #[inline(always)]
    fn decode_inline(self, bytes: &[u8], n: usize, from: usize, to: usize, dst: &mut [u8]) {
        match self {
            Direct::Copy => dst[..to - from].copy_from_slice(&bytes[from..to]),
            Direct::Reverse(2) => reverse_be::<2>(&bytes[2 * from..2 * to], dst),
            Direct::Reverse(4) => reverse_be::<4>(&bytes[4 * from..4 * to], dst),
            Direct::Reverse(_) => reverse_be::<8>(&bytes[8 * from..8 * to], dst),
            Direct::Unsplit(2) => unsplit_be::<2, false>(bytes, n, from..to, dst),
            Direct::Unsplit(4) => unsplit_be::<4, false>(bytes, n, from..to, dst),
            Direct::Unsplit(_) => unsplit_be::<8, false>(bytes, n, from..to, dst),
            Direct::UnsplitZigzag(2) => unsplit_be::<2, true>(bytes, n, from..to, dst),
            Direct::UnsplitZigzag(4) => unsplit_be::<4, true>(bytes, n, from..to, dst),
            Direct::UnsplitZigzag(_) => unsplit_be::<8, true>(bytes, n, from..to, dst),
        }
    }
}

/// One [`Direct::decode`], to run compiled for the widest vectors this CPU has.
struct DirectDecode<'a> {
    direct: Direct,
    bytes: &'a [u8],
    n: usize,
    range: std::ops::Range<usize>,
    dst: &'a mut [u8],
}

impl pulp::WithSimd for DirectDecode<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let DirectDecode {
            direct,
            bytes,
            n,
            range,
            dst,
        } = self;
        direct.decode_inline(bytes, n, range.start, range.end, dst);
    }
}

/// Decodes a page of `n` elements straight into big-endian `number`s (what [`BranchData`]
/// holds) at the start of `dst`: the common pairings directly ([`Direct`]), the rest through
/// [`Value`].
///
/// [`BranchData`]: crate::read::BranchData
pub(crate) fn decode_page_be(
    enc: &Encoding,
    bytes: &[u8],
    n: usize,
    number: Number,
    dst: &mut [u8],
) -> Result<(), BufError> {
    enc.check_page(bytes, n)?;
    let w = number.size();
    let Some(dst) = n.checked_mul(w).and_then(|len| dst.get_mut(..len)) else {
        return Err(BufError::Bad(format!(
            "a page of {n} elements where {} bytes are left for them",
            dst.len()
        )));
    };
    if let Some(direct) = Direct::of(enc, number) {
        direct.decode(bytes, n, 0, n, dst);
        return Ok(());
    }
    let mut values = Vec::with_capacity(n);
    decode_page(enc, bytes, n, &mut values)?;
    for (v, d) in values.into_iter().zip(dst.chunks_exact_mut(w)) {
        put_be(d, number, v);
    }
    Ok(())
}

/// Decodes a page of `n` offsets (an index column: plain, or split and delta-encoded),
/// appending them to `out`.
pub(crate) fn decode_offsets(
    enc: &Encoding,
    bytes: &[u8],
    n: usize,
    out: &mut Vec<u64>,
) -> Result<(), BufError> {
    crate::simd::wide(OffsetsDecode { enc, bytes, n, out })
}

/// One [`decode_offsets`], to run compiled for the widest vectors this CPU has.
struct OffsetsDecode<'a> {
    enc: &'a Encoding,
    bytes: &'a [u8],
    n: usize,
    out: &'a mut Vec<u64>,
}

impl pulp::WithSimd for OffsetsDecode<'_> {
    type Output = Result<(), BufError>;
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        decode_offsets_inline(self.enc, self.bytes, self.n, self.out)
    }
}

/// [`decode_offsets`]' loops, inlined into each instruction set's copy.
#[inline(always)]
fn decode_offsets_inline(
    enc: &Encoding,
    bytes: &[u8],
    n: usize,
    out: &mut Vec<u64>,
) -> Result<(), BufError> {
    use ColumnType::*;
    enc.check_page(bytes, n)?;
    out.reserve(n);
    match enc.kind {
        SplitIndex32 | SplitIndex64 => {
            // Split, then delta: the first element as it is, each next one the step to it.
            // Gathered a byte plane at a time (each pass vectorises), then summed.
            let start = out.len();
            out.extend(bytes[..n].iter().map(|&x| u64::from(x)));
            let width = if enc.kind == SplitIndex32 { 4 } else { 8 };
            for (b, plane) in bytes[..width * n]
                .chunks_exact(n.max(1))
                .enumerate()
                .skip(1)
            {
                for (v, &x) in out[start..].iter_mut().zip(plane) {
                    *v |= u64::from(x) << (8 * b);
                }
            }
            let mut acc = 0u64;
            for v in &mut out[start..] {
                acc = acc.wrapping_add(*v);
                *v = acc;
            }
        }
        Index32 => out.extend(
            bytes[..4 * n]
                .chunks_exact(4)
                .map(|c| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        ),
        Index64 => out.extend(bytes[..8 * n].chunks_exact(8).map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a)
        })),
        _ => {
            let mut values = Vec::with_capacity(n);
            decode_page(enc, bytes, n, &mut values)?;
            for v in values {
                let Value::UInt(u) = v else {
                    return Err(BufError::Bad(format!(
                        "not an offset column: a {} column",
                        enc.kind.name()
                    )));
                };
                out.push(u);
            }
        }
    }
    Ok(())
}

/// Elements `range` of `n` split values of `W` bytes (byte `b` of element `i` at `b·n + i`)
/// into big-endian ones (zigzag integers decoded when `ZIGZAG`), one pass over the output.
#[inline(always)]
fn unsplit_be<const W: usize, const ZIGZAG: bool>(
    bytes: &[u8],
    n: usize,
    range: std::ops::Range<usize>,
    dst: &mut [u8],
) {
    let planes: [&[u8]; W] =
        std::array::from_fn(|b| &bytes[b * n + range.start..b * n + range.end]);
    let dst = &mut dst[..W * range.len()];
    // Two- and four-byte values as zipped planes, which the compiler vectorises (2.2× the
    // indexed loop below for four bytes; no gain for eight).
    match (W, planes.as_slice()) {
        (2, &[p0, p1]) => {
            for ((d, &a), &b) in dst.chunks_exact_mut(2).zip(p0).zip(p1) {
                if ZIGZAG {
                    let v = zigzag(u64::from(u16::from_le_bytes([a, b])));
                    d.copy_from_slice(&(v as u16).to_be_bytes());
                } else {
                    d.copy_from_slice(&[b, a]);
                }
            }
        }
        (4, &[p0, p1, p2, p3]) => {
            for ((((d, &a), &b), &c), &e) in dst.chunks_exact_mut(4).zip(p0).zip(p1).zip(p2).zip(p3)
            {
                if ZIGZAG {
                    let v = zigzag(u64::from(u32::from_le_bytes([a, b, c, e])));
                    d.copy_from_slice(&(v as u32).to_be_bytes());
                } else {
                    d.copy_from_slice(&[e, c, b, a]);
                }
            }
        }
        _ => {
            for (i, d) in dst.chunks_exact_mut(W).enumerate() {
                let mut u = [0u8; 8];
                for (b, plane) in planes.iter().enumerate() {
                    u[b] = plane[i];
                }
                let v = u64::from_le_bytes(u);
                let v = if ZIGZAG { zigzag(v) as u64 } else { v };
                d.copy_from_slice(&v.to_be_bytes()[8 - W..]);
            }
        }
    }
}

/// Little-endian values of `W` bytes into big-endian ones.
#[inline(always)]
fn reverse_be<const W: usize>(bytes: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(W).zip(bytes.chunks_exact(W)) {
        let mut v = [0u8; W];
        v.copy_from_slice(s);
        v.reverse();
        d.copy_from_slice(&v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_floats_convert_exactly() {
        assert_eq!(half(0x3c00), 1.0);
        assert_eq!(half(0xc000), -2.0);
        assert_eq!(half(0x7bff), 65504.0);
        assert_eq!(half(0x0001), 2f32.powi(-24));
        assert!(half(0x7e00).is_nan());
        assert_eq!(half(0xfc00), f32::NEG_INFINITY);
    }

    #[test]
    fn split_delta_and_zigzag_integers() {
        // Elements 1, -1, 2 as SplitInt32: zigzag 2, 1, 4, bytes shuffled.
        let bytes = [2, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut out = Vec::new();
        let enc = Encoding::new(ColumnType::SplitInt32, 32, None).expect("valid");
        decode_page(&enc, &bytes, 3, &mut out).expect("decode");
        assert_eq!(out, vec![Value::Int(1), Value::Int(-1), Value::Int(2)]);
        // Offsets 3, 3, 7 as SplitIndex32: deltas 3, 0, 4.
        let enc = Encoding::new(ColumnType::SplitIndex32, 32, None).expect("valid");
        out.clear();
        decode_page(
            &enc,
            &bytes.map(|b| {
                if b == 2 {
                    3
                } else if b == 1 {
                    0
                } else {
                    b
                }
            }),
            3,
            &mut out,
        )
        .expect("decode");
        assert_eq!(out, vec![Value::UInt(3), Value::UInt(3), Value::UInt(7)]);
    }

    #[test]
    fn split_values_gather_into_big_endian_ones() {
        fn check<const W: usize>(n: usize) {
            // Byte b of element i is (7·i + b) mod 251, stored at b·n + i.
            let byte = |i: usize, b: usize| ((7 * i + b) % 251) as u8;
            let mut split = vec![0u8; W * n];
            for i in 0..n {
                for b in 0..W {
                    split[b * n + i] = byte(i, b);
                }
            }
            // The whole page, and a range inside it.
            for range in [0..n, n / 3..n - n / 4] {
                let mut got = vec![0u8; W * range.len()];
                unsplit_be::<W, false>(&split, n, range.clone(), &mut got);
                let want: Vec<u8> = range
                    .clone()
                    .flat_map(|i| (0..W).rev().map(move |b| byte(i, b)))
                    .collect();
                assert_eq!(got, want, "W = {W}, n = {n}, {range:?}");
            }
        }
        for n in [0, 1, 15, 16, 17, 33, 100] {
            check::<2>(n);
            check::<4>(n);
            check::<8>(n);
        }
    }

    #[test]
    fn direct_decoding_matches_decoding_through_values() {
        // Every direct pairing, on a page whose bytes are all different, whole and by range:
        // the same bytes as each value put as a big-endian number.
        let n = 37;
        let bytes: Vec<u8> = (0..8 * n).map(|i| (i * 131 % 256) as u8).collect();
        for (kind, number) in [
            (ColumnType::SplitInt16, Number::I16),
            (ColumnType::SplitInt32, Number::I32),
            (ColumnType::SplitInt64, Number::I64),
            (ColumnType::SplitUInt32, Number::U32),
            (ColumnType::SplitReal32, Number::F32),
            (ColumnType::SplitReal64, Number::F64),
            (ColumnType::Int32, Number::I32),
            (ColumnType::Real64, Number::F64),
            (ColumnType::UInt8, Number::U8),
        ] {
            let w = number.size();
            let enc = Encoding::new(kind, 8 * w as u16, None).expect("valid");
            let direct = Direct::of(&enc, number).expect("a direct pairing");
            let mut values = Vec::new();
            decode_page(&enc, &bytes, n, &mut values).expect("decode");
            let mut want = vec![0u8; n * w];
            for (v, d) in values.into_iter().zip(want.chunks_exact_mut(w)) {
                put_be(d, number, v);
            }
            let mut got = vec![0u8; n * w];
            direct.decode(&bytes, n, 0, n, &mut got);
            assert_eq!(got, want, "{kind:?}");
            let mut part = vec![0u8; 10 * w];
            direct.decode(&bytes, n, 20, 30, &mut part);
            assert_eq!(part, want[20 * w..30 * w], "{kind:?}, elements 20 to 30");
        }
        let enc = Encoding::new(ColumnType::SplitInt32, 32, None).expect("valid");
        assert_eq!(Direct::of(&enc, Number::U32), None);
        assert_eq!(Direct::of(&enc, Number::I64), None);
    }

    #[test]
    fn offsets_decode_from_split_deltas_and_plain_indices() {
        // Offsets 3, 3, 7 as SplitIndex32 (deltas 3, 0, 4) and as Index64.
        let split = [3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut out = Vec::new();
        let enc = Encoding::new(ColumnType::SplitIndex32, 32, None).expect("valid");
        decode_offsets(&enc, &split, 3, &mut out).expect("decode");
        assert_eq!(out, vec![3, 3, 7]);
        let plain: Vec<u8> = [3u64, 3, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let enc = Encoding::new(ColumnType::Index64, 64, None).expect("valid");
        out.clear();
        decode_offsets(&enc, &plain, 3, &mut out).expect("decode");
        assert_eq!(out, vec![3, 3, 7]);
        let enc = Encoding::new(ColumnType::Real32, 32, None).expect("valid");
        let err = decode_offsets(&enc, &split, 3, &mut out).expect_err("not offsets");
        assert!(err.to_string().contains("not an offset column"), "{err}");
    }

    #[test]
    fn packed_items_cross_byte_boundaries() {
        // Three 5-bit items 0b10101, 0b00011, 0b11111, little-endian bit stream.
        let stream: u32 = 0b10101 | (0b00011 << 5) | (0b11111 << 10);
        let bytes = stream.to_le_bytes();
        assert_eq!(
            (0..3).map(|i| packed(&bytes, 5, i)).collect::<Vec<_>>(),
            vec![0b10101, 0b00011, 0b11111]
        );
    }
}
