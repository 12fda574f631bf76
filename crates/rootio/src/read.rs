//! A branch's values: its baskets read, decompressed and decoded into typed numbers with a
//! count per entry.

use crate::compress::decompress;
use crate::cursor::Cursor;
use crate::error::{BufError, RootError};
use crate::file::RootFile;
use crate::tree::{BranchInfo, TreeInfo, basket_header, entry_offsets};

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
    fn unpack(self, raw: &[u8], number: Number, out: &mut Vec<u8>) {
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
        if leaf.title.contains("vector<") || matches!(el.streamer_type, 300 | 500) {
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
        let packing = match (el.streamer_type % 20, &el.member) {
            (9 | 19, Some((_, title))) if (0..60).contains(&el.streamer_type) => {
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
        let layout = if matches!(el.kind, 31 | 41) {
            // `TObject::fBits` of referenced objects is followed by a 2-byte process id.
            if el.streamer_type == 15 {
                Layout::JaggedBits
            } else {
                Layout::Jagged
            }
        } else if el.streamer_type > 20 && el.streamer_type < 40 {
            Layout::Fixed(usize::try_from(leaf.len.max(1)).unwrap_or(1))
        } else if el.streamer_type > 40 && leaf.count_leaf.is_some() {
            Layout::Pointer
        } else if leaf.count_leaf.is_some() {
            Layout::Jagged
        } else {
            Layout::Fixed(1)
        };
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
        9 => "a Double32_t member whose range the file's streamer info does not give".to_owned(),
        19 => "a Float16_t member whose range the file's streamer info does not give".to_owned(),
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
    Number::from_cpp(inner.strip_prefix("std::").unwrap_or(inner))
}

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
        let n = self.interpretation.number;
        let b = &self.bytes[i * n.size()..(i + 1) * n.size()];
        match n {
            Number::Bool | Number::U8 => f64::from(b[0]),
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

    /// Value `i` as i64: integers exactly (`uint64_t` bit for bit), floats truncated.
    pub fn i64_at(&self, i: usize) -> i64 {
        let n = self.interpretation.number;
        let b = &self.bytes[i * n.size()..(i + 1) * n.size()];
        match n {
            Number::I64 => i64::from_be_bytes(b.try_into().unwrap_or_default()),
            Number::U64 => u64::from_be_bytes(b.try_into().unwrap_or_default()) as i64,
            Number::Bool => i64::from(b[0] != 0),
            _ => self.f64_at(i) as i64,
        }
    }

    /// Every value as f64 (integers exactly up to 2^53), one pass over the bytes.
    pub fn to_f64(&self) -> Vec<f64> {
        let b = &self.bytes;
        match self.interpretation.number {
            Number::F32 => b
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            Number::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
            _ => (0..self.len()).map(|i| self.f64_at(i)).collect(),
        }
    }

    /// Every value as i64 (integers exactly, `uint64_t` bit for bit), one pass over the bytes.
    pub fn to_i64(&self) -> Vec<i64> {
        let b = &self.bytes;
        match self.interpretation.number {
            Number::Bool => b.iter().map(|&x| i64::from(x != 0)).collect(),
            Number::I8 => b.iter().map(|&x| i64::from(x as i8)).collect(),
            Number::U8 => b.iter().map(|&x| i64::from(x)).collect(),
            Number::I16 => b
                .chunks_exact(2)
                .map(|c| i64::from(i16::from_be_bytes([c[0], c[1]])))
                .collect(),
            Number::U16 => b
                .chunks_exact(2)
                .map(|c| i64::from(u16::from_be_bytes([c[0], c[1]])))
                .collect(),
            Number::I32 => b
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            Number::U32 => b
                .chunks_exact(4)
                .map(|c| i64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            Number::I64 | Number::U64 => b
                .chunks_exact(8)
                .map(|c| i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
            Number::F32 | Number::F64 => (0..self.len()).map(|i| self.i64_at(i)).collect(),
        }
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

/// Reads a branch forward, a basket at a time: memory holds the entries taken and the rest of
/// the last basket decoded.
pub struct BranchCursor<'f> {
    file: &'f RootFile,
    tree: &'f TreeInfo,
    branch: &'f BranchInfo,
    interpretation: Interpretation,
    /// Written baskets first, then the embedded ones.
    next_basket: usize,
    /// Values per entry from the counter branch, read when a basket needs them.
    counts: Option<Vec<u32>>,
    /// Decoded entries not yet taken, from entry `buffer_entry` on.
    buffer: BranchData,
    buffer_entry: u64,
}

impl BranchCursor<'_> {
    /// The next `n` entries' values (fewer at the branch's end).
    pub fn take(&mut self, n: usize) -> Result<BranchData, RootError> {
        while self.buffer.counts.len() < n && self.decode_next()? {}
        let n = n.min(self.buffer.counts.len());
        let size = self.interpretation.number.size();
        let values: usize = self.buffer.counts[..n].iter().map(|&c| c as usize).sum();
        let rest_bytes = self.buffer.bytes.split_off(values * size);
        let rest_counts = self.buffer.counts.split_off(n);
        let taken = std::mem::replace(
            &mut self.buffer,
            BranchData {
                interpretation: self.interpretation,
                bytes: rest_bytes,
                counts: rest_counts,
            },
        );
        self.buffer_entry += n as u64;
        Ok(taken)
    }

    /// Drops entries up to `entry`.
    fn skip_to(&mut self, entry: u64) -> Result<(), RootError> {
        while self.buffer_entry < entry {
            let n = usize::try_from(entry - self.buffer_entry)
                .unwrap_or(usize::MAX)
                .min(1 << 16);
            if self.take(n)?.counts.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// Decodes the next basket onto the buffer; false when there is none.
    fn decode_next(&mut self) -> Result<bool, RootError> {
        let (file, branch, it) = (self.file, self.branch, self.interpretation);
        let k = self.next_basket;
        let (place, basket) = if k < branch.write_basket {
            let place = format!("basket {k} of branch '{}'", branch.name);
            if branch.basket_bytes.get(k) == Some(&0) {
                // A basket of no bytes (written for no entries): nothing to decode, unless
                // the branch says entries are in it.
                let start = branch.basket_entry.get(k).copied().unwrap_or(0);
                let stop = branch.basket_entry.get(k + 1).copied().unwrap_or(start);
                if stop > start {
                    return Err(file.corrupt(
                        &place,
                        format!("a basket of 0 bytes said to hold entries {start} to {stop}"),
                    ));
                }
                self.next_basket += 1;
                return Ok(true);
            }
            let b = file.basket(branch, k, &place)?;
            (place, b)
        } else if let Some(b) = branch.embedded.get(k - branch.write_basket) {
            let place = format!(
                "embedded basket {} of branch '{}'",
                k - branch.write_basket,
                branch.name
            );
            let b = Basket {
                data: b.data.clone(),
                offsets: b.offsets.clone(),
                entries: b.entries,
            };
            (place, b)
        } else {
            return Ok(false);
        };
        self.next_basket += 1;
        // The counter is read only when a basket cannot say where its entries start.
        let needs_counts = it.layout == Layout::JaggedBits
            || (basket.offsets.is_none() && matches!(it.layout, Layout::Jagged | Layout::Pointer));
        if needs_counts && self.counts.is_none() {
            let name = counter_of(branch, it).ok_or_else(|| {
                file.corrupt(&place, "entries of unknown length (no offsets, no counter)")
            })?;
            self.counts = Some(file.counts_of(self.tree, &name, branch)?);
        }
        let first = self.buffer_entry + self.buffer.counts.len() as u64;
        let counts = self.counts.as_deref().map(|c| {
            c.get(usize::try_from(first).unwrap_or(usize::MAX)..)
                .unwrap_or(&[])
        });
        decode(&basket, it, counts, &mut self.buffer).map_err(|e| file.corrupt(&place, e))?;
        Ok(true)
    }
}

/// The branch giving `branch`'s values per entry where its baskets cannot: a leaf-count
/// array's counter, a split collection's count branch (`Jet` of `Jet.fBits`).
fn counter_of(branch: &BranchInfo, it: Interpretation) -> Option<String> {
    match (&branch.element, it.layout) {
        (Some(el), Layout::JaggedBits) => el
            .count_branch
            .clone()
            .or_else(|| branch.name.split_once('.').map(|(c, _)| c.to_owned())),
        (_, Layout::Jagged | Layout::Pointer) => {
            branch.leaves.first().and_then(|l| l.count_leaf.clone())
        }
        _ => None,
    }
}

/// One basket's entries: their bytes and, when written, where each entry starts.
struct Basket {
    data: Vec<u8>,
    offsets: Option<Vec<usize>>,
    entries: usize,
}

impl RootFile {
    /// Every value of `branch` of `tree`.
    pub fn read_branch(
        &self,
        tree: &TreeInfo,
        branch: &BranchInfo,
    ) -> Result<BranchData, RootError> {
        let mut cursor = self.branch_cursor(tree, branch, 0)?;
        let all = usize::try_from(branch.entries).unwrap_or(0);
        let data = cursor.take(all)?;
        if data.counts.len() != all || cursor.decode_next()? {
            return Err(self.corrupt(
                &format!("branch '{}'", branch.name),
                format!("its baskets do not hold the branch's {all} entries"),
            ));
        }
        Ok(data)
    }

    /// A cursor over `branch`'s entries from `first_entry` on, decoding one basket at a time.
    pub fn branch_cursor<'f>(
        &'f self,
        tree: &'f TreeInfo,
        branch: &'f BranchInfo,
        first_entry: u64,
    ) -> Result<BranchCursor<'f>, RootError> {
        let interpretation = interpret(branch).map_err(|what| RootError::Unsupported {
            path: self.path().to_owned(),
            place: format!("branch '{}'", branch.name),
            what,
        })?;
        // Baskets that end before `first_entry` are never read.
        let mut next_basket = 0usize;
        let mut at_entry = 0u64;
        while next_basket < branch.write_basket {
            let end = branch
                .basket_entry
                .get(next_basket + 1)
                .map_or(u64::MAX, |&e| u64::try_from(e).unwrap_or(0));
            if end > first_entry || end <= at_entry {
                break;
            }
            at_entry = end;
            next_basket += 1;
        }
        let mut cursor = BranchCursor {
            file: self,
            tree,
            branch,
            interpretation,
            next_basket,
            counts: None,
            buffer: BranchData {
                interpretation,
                bytes: Vec::new(),
                counts: Vec::new(),
            },
            buffer_entry: at_entry,
        };
        cursor.skip_to(first_entry)?;
        Ok(cursor)
    }

    /// The per-entry values of the counter `name` (a branch, or the branch holding a leaf of
    /// that name) of `branch`.
    fn counts_of(
        &self,
        tree: &TreeInfo,
        name: &str,
        branch: &BranchInfo,
    ) -> Result<Vec<u32>, RootError> {
        // A branch of that name, or holding a leaf of that name, or (for a collection's
        // `Jet_` leaf) the collection's branch `Jet`.
        let counter = tree
            .branch(name)
            .or_else(|| {
                tree.all_branches()
                    .into_iter()
                    .find(|b| b.leaves.iter().any(|l| l.name == name))
            })
            .or_else(|| tree.branch(name.trim_end_matches('_')))
            .filter(|c| c.name != branch.name)
            .ok_or_else(|| {
                self.corrupt(
                    &format!("branch '{}'", branch.name),
                    format!("its counter '{name}' is not in the tree"),
                )
            })?;
        let data = self.read_branch(tree, counter)?;
        if data.counts.iter().any(|&c| c != 1) {
            return Err(self.corrupt(
                &format!("branch '{}'", branch.name),
                format!("its counter '{}' is not one number per entry", counter.name),
            ));
        }
        (0..data.len())
            .map(|i| {
                let v = data.f64_at(i);
                if v >= 0.0 && v <= f64::from(u32::MAX) && v.fract() == 0.0 {
                    Ok(v as u32)
                } else {
                    Err(self.corrupt(
                        &format!("branch '{}'", counter.name),
                        format!("entry {i}: count {v}"),
                    ))
                }
            })
            .collect()
    }

    /// Basket `i` of `branch` from its key: header, decompressed data, entry offsets.
    fn basket(&self, branch: &BranchInfo, i: usize, place: &str) -> Result<Basket, RootError> {
        let seek = u64::try_from(branch.basket_seek[i])
            .map_err(|_| self.corrupt(place, "negative basket offset"))?;
        let len = usize::try_from(branch.basket_bytes[i])
            .map_err(|_| self.corrupt(place, "negative basket size"))?;
        let raw = self.read_at(seek, len, place)?;
        let h = basket_header(&mut Cursor::new(&raw)).map_err(|e| self.corrupt(place, e))?;
        let compressed = raw
            .get(h.keylen..h.nbytes.min(raw.len()))
            .ok_or_else(|| self.corrupt(place, "basket key longer than the basket"))?;
        let data = decompress(compressed, h.objlen).map_err(|e| self.corrupt(place, e))?;
        let border = h.border().map_err(|e| self.corrupt(place, e))?;
        if border > data.len() {
            return Err(self.corrupt(place, "basket fLast past its data"));
        }
        let offsets = if h.nev_buf_size > 8 && data.len() > border {
            // After the entries: a count, then each entry's start (from the key's start).
            let mut c = Cursor::new(&data[border..]);
            let parsed = (|| -> Result<Vec<usize>, BufError> {
                c.skip(4)?;
                let raw = c.i32s(h.entries)?;
                let mut o = entry_offsets(&raw, h.keylen)?;
                o.push(border);
                Ok(o)
            })();
            Some(parsed.map_err(|e| self.corrupt(place, e))?)
        } else {
            None
        };
        let mut data = data;
        data.truncate(border);
        Ok(Basket {
            data,
            offsets,
            entries: h.entries,
        })
    }
}

/// Appends the values and per-entry counts of `basket` to `out`; `counts` are the values per
/// entry from the counter, from the basket's first entry on, where the basket cannot say.
fn decode(
    basket: &Basket,
    it: Interpretation,
    counts: Option<&[u32]>,
    out: &mut BranchData,
) -> Result<(), BufError> {
    let size = it.raw_size();
    let data = &basket.data;
    let count_at = |k: usize| -> Result<usize, BufError> {
        counts
            .and_then(|c| c.get(k))
            .map(|&n| n as usize)
            .ok_or_else(|| BufError::Bad(format!("no count for the basket's entry {k}")))
    };
    let entry = |k: usize, bytes: &[u8], out: &mut BranchData| -> Result<(), BufError> {
        let values: std::borrow::Cow<'_, [u8]> = match it.layout {
            Layout::Vector => {
                let body = bytes.get(10..).ok_or_else(|| {
                    BufError::Bad(format!(
                        "vector entry of {} bytes (header is 10)",
                        bytes.len()
                    ))
                })?;
                let n = u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]) as usize;
                if n.checked_mul(size) != Some(body.len()) {
                    return Err(BufError::Bad(format!(
                        "vector of {n} values in {} bytes",
                        body.len()
                    )));
                }
                body.into()
            }
            Layout::JaggedBits => bits(bytes, count_at(k)?)?.into(),
            Layout::Pointer => bytes
                .get(1..)
                .ok_or_else(|| BufError::Bad("a pointer array's entry without its byte".into()))?
                .into(),
            _ => bytes.into(),
        };
        if !values.len().is_multiple_of(size) {
            return Err(BufError::Bad(format!(
                "entry of {} bytes is not a whole number of {}",
                values.len(),
                it.number.cpp()
            )));
        }
        if let Layout::Fixed(len) = it.layout
            && values.len() != len * size
        {
            return Err(BufError::Bad(format!(
                "entry of {} bytes, expected {len} × {}",
                values.len(),
                it.number.cpp()
            )));
        }
        match it.packing {
            None => out.bytes.extend_from_slice(&values),
            Some(p) => {
                for raw in values.chunks_exact(size) {
                    p.unpack(raw, it.number, &mut out.bytes);
                }
            }
        }
        out.counts.push((values.len() / size) as u32);
        Ok(())
    };
    match (&basket.offsets, it.layout) {
        (Some(o), Layout::Jagged) if it.packing.is_none() => {
            // Plain values with entry offsets: one copy of the basket's values, counts from
            // the offsets (each entry a whole number of values, in order, inside the data).
            if o.len() != basket.entries + 1 {
                return Err(BufError::Bad(
                    "entry offsets do not match the entries".into(),
                ));
            }
            out.counts.reserve(basket.entries);
            for w in o.windows(2) {
                if w[1] < w[0] || w[1] > data.len() || !(w[1] - w[0]).is_multiple_of(size) {
                    return Err(BufError::Bad(format!(
                        "entry offsets {}..{}: not whole {} values inside the basket's {} bytes",
                        w[0],
                        w[1],
                        it.number.cpp(),
                        data.len()
                    )));
                }
                out.counts.push(((w[1] - w[0]) / size) as u32);
            }
            out.bytes.extend_from_slice(&data[o[0]..o[basket.entries]]);
        }
        (None, Layout::Fixed(len)) if it.packing.is_none() => {
            fixed_entries(data, len * size, basket.entries)?;
            out.bytes.extend_from_slice(data);
            out.counts
                .extend(std::iter::repeat_n(len as u32, basket.entries));
        }
        (Some(o), _) => {
            if o.len() != basket.entries + 1 {
                return Err(BufError::Bad(
                    "entry offsets do not match the entries".into(),
                ));
            }
            for (k, w) in o.windows(2).enumerate() {
                let b = data.get(w[0]..w[1]).ok_or_else(|| {
                    BufError::Bad(format!(
                        "entry offsets {}..{} outside the basket",
                        w[0], w[1]
                    ))
                })?;
                entry(k, b, out)?;
            }
        }
        (None, Layout::Fixed(len)) => {
            let per = fixed_entries(data, len * size, basket.entries)?;
            for (k, b) in data.chunks_exact(per).enumerate() {
                entry(k, b, out)?;
            }
        }
        (None, Layout::Vector) => {
            // No offsets (kGenerateOffsetMap): each entry's byte count gives its length.
            let mut c = Cursor::new(data);
            for k in 0..basket.entries {
                let start = c.pos();
                let v = c.versioned()?;
                let end = v
                    .end
                    .ok_or_else(|| BufError::Bad("vector entry without a byte count".into()))?;
                entry(k, &data[start..end], out)?;
                c.seek(end)?;
            }
        }
        (None, Layout::Jagged | Layout::Pointer) => {
            // No offsets: the counter branch gives each entry's length.
            let header = usize::from(it.layout == Layout::Pointer);
            let mut at = 0usize;
            for k in 0..basket.entries {
                let len = count_at(k)?
                    .checked_mul(size)
                    .and_then(|n| n.checked_add(header))
                    .ok_or_else(|| BufError::Bad("count too large".into()))?;
                let b = data.get(at..at + len).ok_or_else(|| {
                    BufError::Bad(format!("entry {k} runs past the basket's data"))
                })?;
                entry(k, b, out)?;
                at += len;
            }
            if at != data.len() {
                return Err(BufError::Bad(format!(
                    "the counts cover {at} of the basket's {} bytes",
                    data.len()
                )));
            }
        }
        (None, Layout::JaggedBits) => {
            return Err(BufError::Bad(
                "unsupported: TObject bits of a collection without entry offsets".into(),
            ));
        }
    }
    Ok(())
}

/// Checks `data` holds `entries` entries of `per` bytes each; returns `per`.
fn fixed_entries(data: &[u8], per: usize, entries: usize) -> Result<usize, BufError> {
    if data.len() != per * entries {
        return Err(BufError::Bad(format!(
            "{} bytes for {entries} entries of {per} bytes",
            data.len()
        )));
    }
    Ok(per)
}

/// The `fBits` of `n` objects: each a `u32`, followed by a 2-byte process id when the object
/// is referenced (`kIsReferenced`); returns the `u32`s.
fn bits(bytes: &[u8], n: usize) -> Result<Vec<u8>, BufError> {
    let mut c = Cursor::new(bytes);
    let mut out = Vec::with_capacity(4 * n);
    for _ in 0..n {
        let b = c.u32()?;
        out.extend_from_slice(&b.to_be_bytes());
        if b & (1 << 4) != 0 {
            c.skip(2)?;
        }
    }
    if c.pos() != bytes.len() {
        return Err(BufError::Bad(format!(
            "{n} objects' bits in {} bytes, {} left over",
            bytes.len(),
            bytes.len() - c.pos()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{ElementInfo, LeafInfo};

    fn member(streamer_type: i32) -> BranchInfo {
        BranchInfo {
            class: "TBranchElement".into(),
            name: "Jet.PT".into(),
            title: String::new(),
            entries: 1,
            entry_offset_len: 40,
            leaves: vec![LeafInfo {
                class: "TLeafElement".into(),
                name: "Jet.PT".into(),
                title: "PT".into(),
                len: 1,
                len_type: 4,
                unsigned: false,
                count_leaf: Some("Jet_".into()),
                element_type: streamer_type,
            }],
            basket_bytes: Vec::new(),
            basket_entry: Vec::new(),
            basket_seek: Vec::new(),
            write_basket: 0,
            embedded: Vec::new(),
            element: Some(ElementInfo {
                class_name: "Jet".into(),
                clones_name: String::new(),
                id: 3,
                kind: 31,
                streamer_type,
                count_branch: Some("Jet".into()),
                member: None,
            }),
            branches: Vec::new(),
        }
    }

    #[test]
    fn members_read_as_numbers_or_named_when_not() {
        let it = interpret(&member(5)).expect("a float member");
        assert_eq!((it.number, it.layout), (Number::F32, Layout::Jagged));
        assert_eq!(
            interpret(&member(15)).map(|i| i.layout),
            Ok(Layout::JaggedBits)
        );
        for (t, name) in [(9, "Double32_t"), (19, "Float16_t"), (61, "object")] {
            let err = interpret(&member(t)).expect_err("not read");
            assert!(err.contains(name), "{t}: {err}");
        }
    }
}
