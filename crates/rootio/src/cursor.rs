//! A reader over one buffer, big-endian (ROOT's object serialisation) and little-endian
//! (RNTuple's envelopes): every read is bounds-checked and fails, never panics.

use crate::error::BufError;

/// `kByteCountMask`: the high bit of a byte count.
const BYTE_COUNT_MASK: u32 = 0x4000_0000;

/// A position in a buffer of ROOT's big-endian serialisation.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The header of a versioned object: where its bytes end (when it has a byte count) and its
/// class version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Versioned {
    /// Offset just past the object, when it was written with a byte count.
    pub end: Option<usize>,
    /// The class version.
    pub version: i16,
}

macro_rules! read_be {
    ($name:ident, $t:ty) => {
        pub(crate) fn $name(&mut self) -> Result<$t, BufError> {
            const N: usize = std::mem::size_of::<$t>();
            let b = self.take(N)?;
            let mut a = [0u8; N];
            a.copy_from_slice(b);
            Ok(<$t>::from_be_bytes(a))
        }
    };
}

macro_rules! read_le {
    ($name:ident, $t:ty) => {
        pub(crate) fn $name(&mut self) -> Result<$t, BufError> {
            const N: usize = std::mem::size_of::<$t>();
            let b = self.take(N)?;
            let mut a = [0u8; N];
            a.copy_from_slice(b);
            Ok(<$t>::from_le_bytes(a))
        }
    };
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// The current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Moves to offset `pos` (at most the buffer's length).
    pub(crate) fn seek(&mut self, pos: usize) -> Result<(), BufError> {
        if pos > self.buf.len() {
            return Err(BufError::Short {
                at: pos,
                want: 0,
                len: self.buf.len(),
            });
        }
        self.pos = pos;
        Ok(())
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], BufError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(BufError::Short {
                at: self.pos,
                want: n,
                len: self.buf.len(),
            });
        };
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    /// Skips `n` bytes.
    pub(crate) fn skip(&mut self, n: usize) -> Result<(), BufError> {
        self.take(n).map(drop)
    }

    read_be!(u8, u8);
    read_be!(i16, i16);
    read_be!(i32, i32);
    read_be!(u32, u32);
    read_be!(i64, i64);
    read_be!(u16, u16);
    read_be!(u64, u64);
    read_le!(le_u16, u16);
    read_le!(le_u32, u32);
    read_le!(le_i32, i32);
    read_le!(le_u64, u64);
    read_le!(le_i64, i64);
    read_le!(le_f64, f64);

    /// The buffer's length.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// A non-negative `i32` as a length or count.
    pub(crate) fn len32(&mut self, what: &str) -> Result<usize, BufError> {
        let v = self.i32()?;
        usize::try_from(v).map_err(|_| BufError::Bad(format!("negative {what}: {v}")))
    }

    /// A `TString`: a one-byte length (255: a four-byte length follows), then the bytes.
    pub(crate) fn tstring(&mut self) -> Result<String, BufError> {
        let n = match self.u8()? {
            255 => self.len32("string length")?,
            n => usize::from(n),
        };
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    /// A NUL-terminated string (class names in object tags).
    pub(crate) fn cstring(&mut self) -> Result<String, BufError> {
        let rest = &self.buf[self.pos..];
        let n = rest.iter().position(|&b| b == 0).ok_or(BufError::Short {
            at: self.pos,
            want: rest.len() + 1,
            len: self.buf.len(),
        })?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }

    /// A byte count (when flagged) and a class version.
    pub(crate) fn versioned(&mut self) -> Result<Versioned, BufError> {
        let start = self.pos;
        let first = self.u32()?;
        if first & BYTE_COUNT_MASK != 0 {
            let count = (first & !BYTE_COUNT_MASK) as usize;
            let end = start + 4 + count;
            if end > self.buf.len() {
                return Err(BufError::Short {
                    at: start,
                    want: count + 4,
                    len: self.buf.len(),
                });
            }
            let version = self.i16()?;
            Ok(Versioned {
                end: Some(end),
                version,
            })
        } else {
            self.pos = start;
            let version = self.i16()?;
            Ok(Versioned { end: None, version })
        }
    }

    /// Moves past an object read with [`Cursor::versioned`] (its remaining members skipped),
    /// or stays put when it had no byte count.
    pub(crate) fn finish(&mut self, v: Versioned) -> Result<(), BufError> {
        match v.end {
            Some(end) if end >= self.pos => self.seek(end),
            Some(end) => Err(BufError::Bad(format!(
                "object read past its byte count (ends at {end}, cursor at {})",
                self.pos
            ))),
            None => Ok(()),
        }
    }

    /// `n` big-endian `i32`s.
    pub(crate) fn i32s(&mut self, n: usize) -> Result<Vec<i32>, BufError> {
        let b = self.take(
            n.checked_mul(4)
                .ok_or(BufError::Bad("array too long".into()))?,
        )?;
        Ok(b.chunks_exact(4)
            .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// `n` big-endian `i64`s.
    pub(crate) fn i64s(&mut self, n: usize) -> Result<Vec<i64>, BufError> {
        let b = self.take(
            n.checked_mul(8)
                .ok_or(BufError::Bad("array too long".into()))?,
        )?;
        Ok(b.chunks_exact(8)
            .map(|c| i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fail_at_the_end_instead_of_panicking() {
        let mut c = Cursor::new(&[0, 1, 2]);
        assert_eq!(c.i16(), Ok(1));
        assert!(matches!(
            c.i32(),
            Err(BufError::Short {
                at: 2,
                want: 4,
                len: 3
            })
        ));
        let mut c = Cursor::new(&[255, 0, 0]);
        assert!(c.tstring().is_err(), "a long-string length cut short");
        let mut c = Cursor::new(&[3, b'a', b'b', b'c', b'x', 0]);
        assert_eq!(c.tstring().as_deref(), Ok("abc"));
        assert_eq!(c.cstring().as_deref(), Ok("x"));
    }

    #[test]
    fn byte_counts_bound_an_object() {
        // byte count 6 (flag set), version 3, then 4 bytes of members we skip.
        let buf = [0x40, 0, 0, 6, 0, 3, 9, 9, 9, 9, 7];
        let mut c = Cursor::new(&buf);
        let v = c.versioned().expect("header");
        assert_eq!(
            v,
            Versioned {
                end: Some(10),
                version: 3
            }
        );
        c.finish(v).expect("skip");
        assert_eq!(c.u8(), Ok(7));
        // A byte count past the buffer is an error.
        let mut c = Cursor::new(&[0x40, 0, 0, 60, 0, 3]);
        assert!(c.versioned().is_err());
    }
}
