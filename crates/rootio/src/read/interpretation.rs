//! What a branch's type means for its values: their number type ([`Number`]), how they lie in
//! an entry's bytes ([`Layout`]) and how packed reals are stored ([`Packing`]), from the branch's
//! leaves and streamer ([`interpret`]).

use crate::tree::{BranchInfo, LeafInfo};

/// The number type of a branch's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    /// `bool`
    Bool,
    /// `int8_t` / `char`
    I8,
    /// `uint8_t`
    U8,
    /// `int16_t`
    I16,
    /// `uint16_t`
    U16,
    /// `int32_t`
    I32,
    /// `uint32_t`
    U32,
    /// `int64_t`
    I64,
    /// `uint64_t`
    U64,
    /// `float`
    F32,
    /// `double`
    F64,
}

impl Number {
    /// Bytes per value on disk.
    pub fn size(self) -> usize {
        match self {
            Number::Bool | Number::I8 | Number::U8 => 1,
            Number::I16 | Number::U16 => 2,
            Number::I32 | Number::U32 | Number::F32 => 4,
            Number::I64 | Number::U64 | Number::F64 => 8,
        }
    }

    /// The C++ name (`float`, `int32_t`).
    pub fn cpp(self) -> &'static str {
        match self {
            Number::Bool => "bool",
            Number::I8 => "int8_t",
            Number::U8 => "uint8_t",
            Number::I16 => "int16_t",
            Number::U16 => "uint16_t",
            Number::I32 => "int32_t",
            Number::U32 => "uint32_t",
            Number::I64 => "int64_t",
            Number::U64 => "uint64_t",
            Number::F32 => "float",
            Number::F64 => "double",
        }
    }

    /// A C++ type name as ROOT and uproot spell it (`float`, `int32_t`, `unsigned int`,
    /// `Float_t`, …).
    pub fn from_cpp(name: &str) -> Option<Number> {
        Some(match name.trim() {
            "bool" | "Bool_t" => Number::Bool,
            "char" | "int8_t" | "Char_t" => Number::I8,
            "unsigned char" | "uint8_t" | "UChar_t" => Number::U8,
            "short" | "int16_t" | "Short_t" => Number::I16,
            "unsigned short" | "uint16_t" | "UShort_t" => Number::U16,
            "int" | "int32_t" | "Int_t" => Number::I32,
            "unsigned int" | "uint32_t" | "UInt_t" => Number::U32,
            "long" | "long long" | "int64_t" | "Long64_t" => Number::I64,
            "unsigned long" | "unsigned long long" | "uint64_t" | "ULong64_t" => Number::U64,
            "float" | "Float_t" => Number::F32,
            "double" | "Double_t" => Number::F64,
            _ => return None,
        })
    }

    /// A streamer type code (`TVirtualStreamerInfo::EReadWrite`, array offsets removed).
    fn from_streamer_type(t: i32) -> Option<Number> {
        Some(match t % 20 {
            1 => Number::I8,
            2 => Number::I16,
            3 | 6 => Number::I32,
            4 | 16 => Number::I64,
            5 => Number::F32,
            8 => Number::F64,
            11 => Number::U8,
            12 => Number::U16,
            13 | 15 => Number::U32,
            14 | 17 => Number::U64,
            18 => Number::Bool,
            _ => return None,
        })
    }

    /// A leaf class and signedness.
    fn from_leaf(class: &str, unsigned: bool) -> Option<Number> {
        Some(match (class, unsigned) {
            ("TLeafO", _) => Number::Bool,
            ("TLeafB", false) => Number::I8,
            ("TLeafB", true) => Number::U8,
            ("TLeafS", false) => Number::I16,
            ("TLeafS", true) => Number::U16,
            ("TLeafI", false) => Number::I32,
            ("TLeafI", true) => Number::U32,
            ("TLeafL" | "TLeafG", false) => Number::I64,
            ("TLeafL" | "TLeafG", true) => Number::U64,
            ("TLeafF", _) => Number::F32,
            ("TLeafD", _) => Number::F64,
            _ => return None,
        })
    }
}

/// How a branch's values lie in an entry's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `len` values per entry (1: a scalar).
    Fixed(usize),
    /// As many values as the entry's bytes hold (leaf-count arrays, members of split
    /// collections).
    Jagged,
    /// A `std::vector`: a 10-byte header (byte count, version, size), then the values.
    Vector,
    /// `TObject::fBits` of a split collection's objects: whole `u32`s, the 2-byte process ids
    /// of referenced objects after them left out of the count (as uproot reads them).
    JaggedBits,
    /// A member array through a pointer (`Int_t* fX; //[fN]`): one byte before each entry's
    /// values.
    Pointer,
}

/// How ROOT's packed reals (`Double32_t`, `Float16_t`) lie on disk, from the range in their
/// title (`[low, high, bits]`), read as uproot reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Packing {
    /// `Double32_t` without a range: a `float`.
    Float,
    /// A range: a `u32` raw value, `raw · (high − low) / 2^bits + low` computed in the
    /// output's precision.
    Range {
        /// Lower end.
        low: f64,
        /// Upper end.
        high: f64,
        /// Bits kept (2 to 32).
        bits: u32,
    },
    /// `[0, 0, bits]` (and `Float16_t` without a range, 12 bits): an exponent byte and a
    /// 16-bit mantissa of which `bits` bits are kept, the next one the sign.
    Truncated {
        /// Mantissa bits kept.
        bits: u32,
    },
}

impl Packing {
    /// Bytes per value on disk.
    pub fn size(self) -> usize {
        match self {
            Packing::Float | Packing::Range { .. } => 4,
            Packing::Truncated { .. } => 3,
        }
    }

    /// The packing of a `Double32_t` (`float16` false) or `Float16_t` whose title is `title`:
    /// the first `[...]` holds `low, high` or `low, high, bits` (numbers, `pi`, `twopi`,
    /// `+ - * /`); bits outside 2–32 or missing are 32.
    pub fn of_title(title: &str, float16: bool) -> Packing {
        let spec = title
            .find('[')
            .and_then(|l| title[l..].find(']').map(|r| &title[l + 1..l + r]))
            .and_then(range_spec);
        let Some((low, high, bits)) = spec else {
            return if float16 {
                Packing::Truncated { bits: 12 }
            } else {
                Packing::Float
            };
        };
        let bits = bits.filter(|b| (2..=32).contains(b)).unwrap_or(32);
        if low == 0.0 && high == 0.0 {
            Packing::Truncated { bits }
        } else {
            Packing::Range { low, high, bits }
        }
    }

    /// Appends the value packed in `raw` (`size()` big-endian bytes) as a big-endian `number`
    /// (`F64` for `Double32_t`, `F32` for `Float16_t`).
    pub(super) fn unpack(self, raw: &[u8], number: Number, out: &mut Vec<u8>) {
        let wide = number == Number::F64;
        match self {
            Packing::Float => {
                let f = f32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
                push_real(out, wide, f64::from(f), f);
            }
            Packing::Range { low, high, bits } => {
                let r = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
                let scale = (high - low) / (1u64 << bits) as f64;
                if wide {
                    out.extend_from_slice(&(f64::from(r) * scale + low).to_be_bytes());
                } else {
                    let v = (r as f32) * (scale as f32) + (low as f32);
                    out.extend_from_slice(&v.to_be_bytes());
                }
            }
            Packing::Truncated { bits } => {
                let exponent = i32::from(raw[0]);
                let mantissa = i32::from(u16::from_be_bytes([raw[1], raw[2]]));
                let mask = (1i64 << (bits + 1)) - 1;
                let kept = (i64::from(mantissa) & mask) as i32;
                let shifted = if bits <= 23 {
                    kept << (23 - bits)
                } else {
                    kept >> (bits - 23)
                };
                let f = f32::from_bits(((exponent << 23) | shifted) as u32);
                let f = if (i64::from(mantissa) >> (bits + 1)) & 1 != 0 {
                    -f
                } else {
                    f
                };
                push_real(out, wide, f64::from(f), f);
            }
        }
    }
}

fn push_real(out: &mut Vec<u8>, wide: bool, d: f64, f: f32) {
    if wide {
        out.extend_from_slice(&d.to_be_bytes());
    } else {
        out.extend_from_slice(&f.to_be_bytes());
    }
}

/// `low, high` or `low, high, bits` of a range title.
fn range_spec(text: &str) -> Option<(f64, f64, Option<u32>)> {
    let parts: Vec<&str> = text.split(',').collect();
    match parts.as_slice() {
        [l, h] => Some((range_number(l)?, range_number(h)?, None)),
        [l, h, b] => Some((
            range_number(l)?,
            range_number(h)?,
            Some(b.trim().parse().ok()?),
        )),
        _ => None,
    }
}

/// A range end: a number, `pi` or `twopi`, with `+ - * /` and unary minus, left to right
/// within each precedence level.
fn range_number(text: &str) -> Option<f64> {
    fn atom(t: &str) -> Option<f64> {
        let t = t.trim();
        if let Some(rest) = t.strip_prefix('-') {
            return atom(rest).map(|v| -v);
        }
        match t.to_ascii_lowercase().as_str() {
            "pi" => Some(std::f64::consts::PI),
            "twopi" => Some(std::f64::consts::TAU),
            other => other.parse().ok(),
        }
    }
    fn product(t: &str) -> Option<f64> {
        let mut value: Option<f64> = None;
        let mut op = '*';
        let mut start = 0;
        for (i, c) in t.char_indices().chain(std::iter::once((t.len(), '*'))) {
            if (c == '*' || c == '/') && i >= start {
                let v = atom(&t[start..i])?;
                value = Some(match (value, op) {
                    (None, _) => v,
                    (Some(a), '*') => a * v,
                    (Some(a), _) => a / v,
                });
                op = c;
                start = i + 1;
            }
        }
        value
    }
    let t = text.trim();
    // Split on binary + and - (not a leading sign, not an exponent's sign).
    let mut total = 0.0;
    let mut sign = 1.0;
    let mut start = 0;
    let bytes = t.as_bytes();
    for i in 0..=bytes.len() {
        let at_op = i < bytes.len()
            && (bytes[i] == b'+' || bytes[i] == b'-')
            && i > start
            && !matches!(bytes[i - 1], b'e' | b'E' | b'*' | b'/')
            && !t[start..i].trim().is_empty();
        if at_op || i == bytes.len() {
            total += sign * product(&t[start..i])?;
            if i < bytes.len() {
                sign = if bytes[i] == b'-' { -1.0 } else { 1.0 };
            }
            start = i + 1;
        }
    }
    Some(total)
}

/// What a branch holds, when it holds numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interpretation {
    /// The values' type (`F64` for `Double32_t`, `F32` for `Float16_t`).
    pub number: Number,
    /// Their layout per entry.
    pub layout: Layout,
    /// Packed reals: how a value lies on disk (`None`: as `number`).
    pub packing: Option<Packing>,
}

impl Interpretation {
    /// Plain values of `number` in `layout`.
    pub fn plain(number: Number, layout: Layout) -> Interpretation {
        Interpretation {
            number,
            layout,
            packing: None,
        }
    }

    /// Bytes per value on disk.
    pub fn raw_size(&self) -> usize {
        self.packing.map_or(self.number.size(), Packing::size)
    }
}

/// How a branch element's entries lay out: jagged inside a collection's objects (with the
/// process id after a referenced `TObject::fBits`), a fixed array, a pointer to an array, a
/// leaf-counted array, or one value.
fn element_layout(kind: i32, streamer_type: i32, leaf: &LeafInfo) -> Layout {
    if matches!(kind, 31 | 41) {
        // `TObject::fBits` of referenced objects is followed by a 2-byte process id.
        if streamer_type == 15 {
            Layout::JaggedBits
        } else {
            Layout::Jagged
        }
    } else if streamer_type > 20 && streamer_type < 40 {
        Layout::Fixed(usize::try_from(leaf.len.max(1)).unwrap_or(1))
    } else if streamer_type > 40 && leaf.count_leaf.is_some() {
        Layout::Pointer
    } else if leaf.count_leaf.is_some() {
        Layout::Jagged
    } else {
        Layout::Fixed(1)
    }
}

/// How the values of `branch` are read, or why they cannot be.
pub fn interpret(branch: &BranchInfo) -> Result<Interpretation, String> {
    if let Some(el) = &branch.element {
        // A collection's count branch (`Jet` of a TClonesArray): one int per entry.
        if matches!(el.kind, 3 | 4) {
            return Ok(Interpretation::plain(Number::I32, Layout::Fixed(1)));
        }
        // A top-level `std::vector` of numbers.
        if el.id < 0 && vector_inner(&el.class_name).is_some() {
            let inner = vector_inner(&el.class_name)
                .ok_or_else(|| format!("type '{}' is not a vector of numbers", el.class_name))?;
            return Ok(Interpretation::plain(inner, Layout::Vector));
        }
    }
    let [leaf] = branch.leaves.as_slice() else {
        return Err(format!("{} leaves (one is read)", branch.leaves.len()));
    };
    if let Some(el) = &branch.element {
        // An STL container member: its type from the leaf's title or the streamer info.
        // (The title's own part: a collection's count leaf after it, `daq[vector<X>_]`, may
        // name a vector too.)
        let own_title = leaf.title.split('[').next().unwrap_or_default();
        if own_title.contains("vector<") || matches!(el.streamer_type, 300 | 500) {
            if matches!(el.kind, 31 | 41) {
                return Err(
                    "a container member of a collection's objects (a container per object; one level is read)"
                        .to_owned(),
                );
            }
            let inner = [leaf.title.as_str()]
                .into_iter()
                .chain(el.member.as_ref().map(|(t, _)| t.as_str()))
                .find_map(vector_inner);
            return match (inner, &el.member) {
                (Some(inner), _) => Ok(Interpretation::plain(inner, Layout::Vector)),
                (None, Some((t, _))) => Err(format!(
                    "a member of type '{t}' (only containers of numbers are read)"
                )),
                (None, None) => Err(
                    "an STL container member whose type the file's streamer info does not give"
                        .to_owned(),
                ),
            };
        }
        // A packed real's range is in its member's title; where the streamer info does not
        // give the member, it has none (a `Double32_t` is then a `float`, a `Float16_t` 12
        // bits), as uproot reads it.
        let packing = match (el.streamer_type % 20, &el.member) {
            (9 | 19, member) if (0..60).contains(&el.streamer_type) => {
                let title = member.as_ref().map_or("", |(_, t)| t.as_str());
                Some(Packing::of_title(title, el.streamer_type % 20 == 19))
            }
            _ => None,
        };
        let number = match packing {
            Some(_) if el.streamer_type % 20 == 9 => Number::F64,
            Some(_) => Number::F32,
            None => Number::from_streamer_type(el.streamer_type)
                .filter(|_| (0..60).contains(&el.streamer_type))
                .ok_or_else(|| streamer_type_name(el.streamer_type))?,
        };
        let layout = element_layout(el.kind, el.streamer_type, leaf);
        return Ok(Interpretation {
            number,
            layout,
            packing,
        });
    }
    let layout = if leaf.count_leaf.is_some() {
        Layout::Jagged
    } else {
        Layout::Fixed(usize::try_from(leaf.len.max(1)).unwrap_or(1))
    };
    let packed = |number, float16| Interpretation {
        number,
        layout,
        packing: Some(Packing::of_title(&leaf.title, float16)),
    };
    match leaf.class.as_str() {
        "TLeafD32" => return Ok(packed(Number::F64, false)),
        "TLeafF16" => return Ok(packed(Number::F32, true)),
        _ => {}
    }
    let number =
        Number::from_leaf(&leaf.class, leaf.unsigned).ok_or_else(|| match leaf.class.as_str() {
            "TLeafC" => "a string leaf (only numbers are read)".to_owned(),
            other => format!("a leaf of class {other} (only numbers are read)"),
        })?;
    Ok(Interpretation::plain(number, layout))
}

/// What a member of streamer type `t` is, for an error.
fn streamer_type_name(t: i32) -> String {
    match t % 20 {
        7 => "a char* member (only numbers are read)".to_owned(),
        _ if !(0..60).contains(&t) => {
            format!("an object or collection member (streamer type {t}; only numbers are read)")
        }
        _ => format!("a member of streamer type {t}"),
    }
}

fn vector_inner(title: &str) -> Option<Number> {
    // Sequential containers of numbers share `std::vector`'s on-disk form (byte count,
    // version, size, values), RVec, the sets and `std::bitset` included.
    let t = title.trim();
    let t = t.strip_prefix("std::").unwrap_or(t);
    let t = t.strip_prefix("ROOT::VecOps::").unwrap_or(t);
    let t = t.strip_prefix("ROOT::").unwrap_or(t);
    // `std::bitset<N>` is written like a `std::vector<bool>` of its N bits.
    if let Some(n) = t.strip_prefix("bitset<").and_then(|r| r.strip_suffix('>')) {
        return n.trim().parse::<u64>().ok().map(|_| Number::Bool);
    }
    let inner = [
        "vector<",
        "RVec<",
        "set<",
        "unordered_set<",
        "multiset<",
        "list<",
        "deque<",
    ]
    .iter()
    .find_map(|p| t.strip_prefix(p))?
    .strip_suffix('>')?;
    // The element type, without an allocator argument (RDataFrame's older RVec branches:
    // `vector<float,ROOT::Detail::VecOps::RAdoptAllocator<float> >`).
    let inner = inner
        .split_once(',')
        .map_or(inner, |(element, _)| element)
        .trim();
    Number::from_cpp(inner.strip_prefix("std::").unwrap_or(inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_of_numbers_are_named_with_or_without_an_allocator() {
        let cases = [
            ("vector<float>", Some(Number::F32)),
            ("std::vector<int>", Some(Number::I32)),
            ("ROOT::VecOps::RVec<double>", Some(Number::F64)),
            (
                "vector<float,ROOT::Detail::VecOps::RAdoptAllocator<float> >",
                Some(Number::F32),
            ),
            ("vector<Hit>", None),
            ("vector<vector<float> >", None),
        ];
        for (name, want) in cases {
            assert_eq!(vector_inner(name), want, "{name}");
        }
    }
}
