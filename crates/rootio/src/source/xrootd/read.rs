//! The reads of a file open on a connection: `kXR_read` and `kXR_readv`, their answers taken
//! as they come (into a read-ahead group's sink, a piece at a time) or whole.

use std::io::{self, Read};

use super::connection::{Body, Connection, Reply};
use super::*;

impl Connection {
    /// `len(buf)` bytes at `offset` (`kXR_read`).
    pub(super) fn read(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let body = self.read_span(offset, buf.len())?;
        buf.copy_from_slice(&body);
        Ok(())
    }

    /// The `len` bytes at `offset`, in one `kXR_read` (which the server may answer straight
    /// from the file, with `sendfile`).
    pub(super) fn read_span(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        match self.request(KXR_READ, self.read_params(offset, len)?, &[])? {
            Reply::Ok(body) if body.len() == len => Ok(body),
            Reply::Ok(body) => Err(self.short_read(body.len(), len)),
            _ => Err(self.out_of_step("kXR_read")),
        }
    }

    /// `kXR_read`'s parameters: the file, `offset` and `len`.
    fn read_params(&self, offset: u64, len: usize) -> io::Result<[u8; 16]> {
        let mut params = [0u8; 16];
        params[..4].copy_from_slice(&self.handle);
        params[4..12].copy_from_slice(&offset.to_be_bytes());
        let asked = u32::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a read over 4 GiB"))?;
        params[12..16].copy_from_slice(&asked.to_be_bytes());
        Ok(params)
    }

    /// A read answered with `got` of the `len` bytes asked for.
    fn short_read(&self, got: usize, len: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{} sent {got} of the {len} bytes asked for", self.server),
        )
    }

    /// The bytes of `ranges` (`offset`, `len`), one after the other, into `sink` as they
    /// come: one vector read (`kXR_readv`; a range over [`READV_SEGMENT`] bytes asked for in
    /// parts), or for one span a plain read, which the server sends faster.
    pub(super) fn read_vector_into(
        &mut self,
        ranges: &[(u64, u64)],
        sink: &mut Sink<'_>,
    ) -> io::Result<()> {
        sink.restart();
        if let [(offset, len)] = *ranges {
            let len = usize::try_from(len).map_err(io::Error::other)?;
            let mut span = Span { sink, got: 0 };
            return match self.exchange(
                KXR_READ,
                self.read_params(offset, len)?,
                &[],
                Some(&mut span),
            )? {
                Reply::Ok(_) if span.got == len => Ok(()),
                Reply::Ok(_) => Err(self.short_read(span.got, len)),
                _ => Err(self.out_of_step("kXR_read")),
            };
        }
        let mut list = Vec::new();
        for &(offset, len) in ranges {
            let mut at = 0;
            while at < len {
                let part = (len - at).min(READV_SEGMENT);
                list.extend_from_slice(&self.handle);
                list.extend_from_slice(&(part as u32).to_be_bytes());
                list.extend_from_slice(&(offset + at).to_be_bytes());
                at += part;
            }
        }
        let mut segments = Segments {
            asked: &list,
            head: [0; 16],
            head_held: 0,
            left: 0,
            sink,
        };
        let Reply::Ok(_) = self.exchange(KXR_READV, [0u8; 16], &list, Some(&mut segments))? else {
            return Err(self.out_of_step("kXR_readv"));
        };
        if !segments.asked.is_empty() || segments.head_held > 0 || segments.left > 0 {
            return Err(self.short_vector());
        }
        Ok(())
    }

    pub(super) fn short_vector(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: a vector read came back short or out of order",
                self.server
            ),
        )
    }
}

/// A plain read's answer: its bytes, a piece at a time, into a sink.
struct Span<'s, 'g> {
    sink: &'s mut Sink<'g>,
    /// Bytes read so far.
    got: usize,
}

impl Body for Span<'_, '_> {
    fn read_from(&mut self, from: &mut dyn Read, len: usize) -> io::Result<()> {
        self.sink.read_from(from, len)?;
        self.got += len;
        Ok(())
    }
}

/// A vector read's answer: each segment's 16-byte header (handle, length, offset) checked
/// against what was asked, its bytes into a sink a piece at a time. A segment may be split
/// between frames.
struct Segments<'a, 's, 'g> {
    /// The segments asked for (16 bytes each) not yet answered in full.
    asked: &'a [u8],
    /// The header being read, and how much of it is.
    head: [u8; 16],
    head_held: usize,
    /// Bytes of the current segment still to come.
    left: usize,
    sink: &'s mut Sink<'g>,
}

impl Body for Segments<'_, '_, '_> {
    fn read_from(&mut self, from: &mut dyn Read, mut len: usize) -> io::Result<()> {
        let out_of_order = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "a vector read came back short or out of order",
            )
        };
        while len > 0 {
            if self.left == 0 {
                let n = (16 - self.head_held).min(len);
                from.read_exact(&mut self.head[self.head_held..self.head_held + n])?;
                (self.head_held, len) = (self.head_held + n, len - n);
                if self.head_held < 16 {
                    continue;
                }
                self.head_held = 0;
                if self.asked.len() < 16 || self.head[..] != self.asked[..16] {
                    return Err(out_of_order());
                }
                self.asked = &self.asked[16..];
                self.left =
                    u32::from_be_bytes(self.head[4..8].try_into().expect("4 bytes")) as usize;
            } else {
                let n = self.left.min(len);
                self.sink.read_from(from, n)?;
                (self.left, len) = (self.left - n, len - n);
            }
        }
        Ok(())
    }
}
