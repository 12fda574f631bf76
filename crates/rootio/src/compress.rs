//! ROOT's compressed blocks: a 9-byte header (algorithm, method, compressed and uncompressed
//! sizes as 24-bit little-endian numbers) and the payload; zlib, LZMA (xz), LZ4 (with its
//! XXH64 checksum verified) and zstd.

use crate::error::BufError;
use crate::source::Bytes;

/// The block header's length.
const HEADER: usize = 9;

fn u24(b: &[u8]) -> usize {
    usize::from(b[0]) | usize::from(b[1]) << 8 | usize::from(b[2]) << 16
}

/// A compressed block as it lies in the file (a basket's data, an RNTuple page), apart from
/// any reading: what the codec alone does with it is the limit a reader can reach.
#[derive(Debug, Clone)]
pub struct RawBlock {
    /// Where it lies in the file (blocks at one offset are one block).
    pub offset: u64,
    /// The record read from the file (a basket's key included).
    bytes: Bytes,
    /// Where in `bytes` the compressed payload lies.
    payload: std::ops::Range<usize>,
    unpacked: usize,
}

impl RawBlock {
    /// The payload `payload` of `bytes`, read at `offset`, of `unpacked` bytes decompressed;
    /// a payload outside `bytes` is cut to it (and then fails to decompress).
    pub(crate) fn new(
        offset: u64,
        bytes: Bytes,
        payload: std::ops::Range<usize>,
        unpacked: usize,
    ) -> RawBlock {
        let end = payload.end.min(bytes.len());
        RawBlock {
            offset,
            payload: payload.start.min(end)..end,
            bytes,
            unpacked,
        }
    }

    /// Its compressed bytes as stored.
    fn stored(&self) -> &[u8] {
        &self.bytes[self.payload.clone()]
    }

    /// Its bytes as stored.
    pub fn stored_len(&self) -> usize {
        self.payload.len()
    }

    /// Its bytes decompressed.
    pub fn unpacked_len(&self) -> usize {
        self.unpacked
    }

    /// Decompressed by the codec its header names.
    pub(crate) fn unpack(&self) -> Result<Vec<u8>, BufError> {
        decompress(self.stored(), self.unpacked)
    }

    /// Decompressed, and where in the vector its bytes start: a block stored uncompressed is
    /// handed over in the record read from the file, after its key, not copied out of it.
    pub(crate) fn into_unpacked(self) -> Result<(Vec<u8>, usize), BufError> {
        match self.bytes {
            Bytes::Owned(mut record) if self.payload.len() == self.unpacked => {
                record.truncate(self.payload.end);
                Ok((record, self.payload.start))
            }
            _ => decompress(self.stored(), self.unpacked).map(|data| (data, 0)),
        }
    }

    /// Decompressed by the codec its header names.
    pub fn decompress(&self) -> Result<Vec<u8>, String> {
        self.unpack().map_err(|e| e.to_string())
    }
}

/// Decompresses `data` (one or more blocks) into exactly `expected` bytes, each block
/// appended straight onto the result. Data as long as `expected` is stored uncompressed and
/// returned as it is.
pub(crate) fn decompress(data: &[u8], expected: usize) -> Result<Vec<u8>, BufError> {
    if data.len() == expected {
        return Ok(data.to_vec());
    }
    // Sized from the header (a damaged one may claim gigabytes): grown as blocks arrive.
    let mut out = Vec::with_capacity(expected.min(1 << 26));
    let mut at = 0usize;
    while out.len() < expected {
        let Some(h) = data.get(at..at + HEADER) else {
            return Err(BufError::Short {
                at,
                want: HEADER,
                len: data.len(),
            });
        };
        let (packed, unpacked) = (u24(&h[3..6]), u24(&h[6..9]));
        let start = at + HEADER;
        let Some(payload) = data.get(start..start + packed) else {
            return Err(BufError::Short {
                at: start,
                want: packed,
                len: data.len(),
            });
        };
        let before = out.len();
        out.reserve_exact(unpacked);
        let codec = match &h[..2] {
            b"ZL" => inflate(payload, &mut out).map(|()| "zlib"),
            b"XZ" => unxz(payload, &mut out).map(|()| "LZMA"),
            b"L4" => unlz4(payload, unpacked, &mut out).map(|()| "LZ4"),
            b"ZS" => unzstd(payload, unpacked, &mut out).map(|()| "zstd"),
            b"CS" => Err(BufError::Bad(
                "unsupported: ROOT's old 'CS' compression (ROOT 5 before 5.x's zlib default)"
                    .into(),
            )),
            tag => Err(BufError::Bad(format!(
                "unknown compression algorithm {:?} in a block header",
                String::from_utf8_lossy(tag)
            ))),
        }?;
        if out.len() - before != unpacked {
            return Err(BufError::Bad(format!(
                "a compressed {codec} block gave {} bytes, its header says {unpacked}",
                out.len() - before
            )));
        }
        at = start + packed;
    }
    if out.len() != expected {
        return Err(BufError::Bad(format!(
            "decompressed to {} bytes, expected {expected}",
            out.len()
        )));
    }
    Ok(out)
}

/// The codecs below append a block onto `out`, whose spare capacity holds at least the
/// block's size: a block that gives more or fewer bytes than its header says fails (here when
/// the room runs out first, else in [`decompress`]). zlib, LZMA and zstd write into that room
/// as it is; LZ4's library needs it zeroed first.
fn inflate(payload: &[u8], out: &mut Vec<u8>) -> Result<(), BufError> {
    let mut z = flate2::Decompress::new(true);
    match z.decompress_vec(payload, out, flate2::FlushDecompress::Finish) {
        Ok(flate2::Status::StreamEnd) => Ok(()),
        Ok(_) => Err(BufError::Bad(
            "corrupted zlib block: it does not end where its header says".into(),
        )),
        Err(e) => Err(BufError::Bad(format!("corrupted zlib block: {e}"))),
    }
}

fn unxz(payload: &[u8], out: &mut Vec<u8>) -> Result<(), BufError> {
    let bad = |e: liblzma::stream::Error| BufError::Bad(format!("corrupted LZMA block: {e}"));
    let mut xz = liblzma::stream::Stream::new_stream_decoder(u64::MAX, 0).map_err(bad)?;
    loop {
        let (read, wrote) = (xz.total_in(), out.len());
        let rest = payload
            .get(usize::try_from(read).unwrap_or(usize::MAX)..)
            .unwrap_or_default();
        match xz.process_vec(rest, out, liblzma::stream::Action::Finish) {
            Ok(liblzma::stream::Status::StreamEnd) => return Ok(()),
            Ok(_) if xz.total_in() > read || out.len() > wrote => {}
            Ok(_) => {
                return Err(BufError::Bad(
                    "corrupted LZMA block: it does not end where its header says".into(),
                ));
            }
            Err(e) => return Err(bad(e)),
        }
    }
}

fn unzstd(payload: &[u8], unpacked: usize, out: &mut Vec<u8>) -> Result<(), BufError> {
    thread_local! {
        // A decompression context per thread, kept between blocks.
        static ZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let bad = |e: std::io::Error| BufError::Bad(format!("corrupted zstd block: {e}"));
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(bad)?),
        };
        if out.is_empty() {
            // The library fills a vector from its start: the first block goes straight in.
            d.decompress_to_buffer(payload, out).map_err(bad)?;
        } else {
            let mut block = Vec::with_capacity(unpacked);
            d.decompress_to_buffer(payload, &mut block).map_err(bad)?;
            out.extend_from_slice(&block);
        }
        Ok(())
    })
}

fn unlz4(payload: &[u8], unpacked: usize, out: &mut Vec<u8>) -> Result<(), BufError> {
    let Some((sum, block)) = payload.split_first_chunk::<8>() else {
        return Err(BufError::Bad("LZ4 block shorter than its checksum".into()));
    };
    let want = u64::from_be_bytes(*sum);
    let got = twox_hash::XxHash64::oneshot(0, block);
    if got != want {
        return Err(BufError::Bad(format!(
            "corrupted LZ4 block: XXH64 checksum {got:016x}, the block says {want:016x}"
        )));
    }
    let size = i32::try_from(unpacked)
        .map_err(|_| BufError::Bad(format!("LZ4 block of {unpacked} bytes")))?;
    let before = out.len();
    out.resize(before + unpacked, 0);
    let n = lz4::block::decompress_to_buffer(block, Some(size), &mut out[before..])
        .map_err(|e| BufError::Bad(format!("corrupted LZ4 block: {e}")))?;
    out.truncate(before + n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(tag: &[u8; 2], payload: &[u8], unpacked: usize) -> Vec<u8> {
        let mut b = tag.to_vec();
        b.push(1);
        for n in [payload.len(), unpacked] {
            b.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn every_codec_round_trips_and_damage_is_an_error() {
        let text: Vec<u8> = (0..5000u32).flat_map(|i| (i % 97).to_be_bytes()).collect();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut z, &text).expect("zlib");
        let zl = block(b"ZL", &z.finish().expect("zlib"), text.len());
        let zs = block(
            b"ZS",
            &zstd::bulk::compress(&text, 3).expect("zstd"),
            text.len(),
        );
        let mut x = liblzma::write::XzEncoder::new(Vec::new(), 6);
        std::io::Write::write_all(&mut x, &text).expect("xz");
        let xz = block(b"XZ", &x.finish().expect("xz"), text.len());
        let lz = lz4::block::compress(&text, None, false).expect("lz4");
        let mut l4 = twox_hash::XxHash64::oneshot(0, &lz).to_be_bytes().to_vec();
        l4.extend_from_slice(&lz);
        let l4 = block(b"L4", &l4, text.len());
        for (name, data) in [("zlib", &zl), ("zstd", &zs), ("xz", &xz), ("lz4", &l4)] {
            assert_eq!(
                decompress(data, text.len()).as_deref(),
                Ok(&text[..]),
                "{name}"
            );
            // Two blocks in a row decompress to their concatenation.
            let two = [data.clone(), data.clone()].concat();
            assert_eq!(
                decompress(&two, 2 * text.len()).map(|v| v.len()),
                Ok(2 * text.len())
            );
            // A cut block is an error, never a panic.
            assert!(
                decompress(&data[..data.len() - 3], text.len()).is_err(),
                "{name}"
            );
            // A block whose header claims fewer bytes than it holds is an error.
            let mut short = data.clone();
            short[6..9].copy_from_slice(&((text.len() - 1) as u32).to_le_bytes()[..3]);
            assert!(decompress(&short, text.len() - 1).is_err(), "{name}");
            // zlib (Adler-32), xz (CRC) and LZ4 (XXH64) carry checksums: a flipped byte is
            // caught.
            if name != "zstd" {
                let mut bad = data.clone();
                let mid = HEADER + (bad.len() - HEADER) / 2;
                bad[mid] ^= 0x5A;
                assert!(decompress(&bad, text.len()).is_err(), "{name}");
            }
        }
        let lz4_bad = {
            let mut b = l4;
            b[HEADER + 8 + 2] ^= 1;
            b
        };
        let err = decompress(&lz4_bad, text.len()).expect_err("checksum");
        assert!(err.to_string().contains("XXH64"), "{err}");
        assert!(decompress(b"QQ\x01\x01\x00\x00\x01\x00\x00x", 9).is_err());
    }
}
