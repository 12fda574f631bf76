//! ROOT's compressed blocks: a 9-byte header (algorithm, method, compressed and uncompressed
//! sizes as 24-bit little-endian numbers) and the payload; zlib, LZMA (xz), LZ4 (with its
//! XXH64 checksum verified) and zstd.

use std::io::Read;

use crate::error::BufError;

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
    bytes: Vec<u8>,
    /// Where in `bytes` the compressed payload lies.
    payload: std::ops::Range<usize>,
    unpacked: usize,
}

impl RawBlock {
    /// The payload `payload` of `bytes`, read at `offset`, of `unpacked` bytes decompressed;
    /// a payload outside `bytes` is cut to it (and then fails to decompress).
    pub(crate) fn new(
        offset: u64,
        bytes: Vec<u8>,
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

    /// Decompressed by the codec its header names.
    pub(crate) fn unpack(&self) -> Result<Vec<u8>, BufError> {
        decompress(self.stored(), self.unpacked)
    }

    /// Decompressed by the codec its header names.
    pub fn decompress(&self) -> Result<Vec<u8>, String> {
        self.unpack().map_err(|e| e.to_string())
    }
}

/// Decompresses `data` (one or more blocks) into exactly `expected` bytes, each block straight
/// into its place in the result. Data as long as `expected` is stored uncompressed and
/// returned as it is.
pub(crate) fn decompress(data: &[u8], expected: usize) -> Result<Vec<u8>, BufError> {
    if data.len() == expected {
        return Ok(data.to_vec());
    }
    // Zeroed by the allocator (fresh pages come zeroed, not written twice); sized from the
    // header, which a damaged file may make claim gigabytes: grown as blocks arrive past 64 MiB.
    let mut out = vec![0u8; expected.min(1 << 26)];
    let (mut at, mut filled) = (0usize, 0usize);
    while filled < expected {
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
        if out.len() < filled + unpacked {
            out.resize(filled + unpacked, 0);
        }
        let dst = &mut out[filled..filled + unpacked];
        match &h[..2] {
            b"ZL" => inflate(payload, dst)?,
            b"XZ" => unxz(payload, dst)?,
            b"L4" => unlz4(payload, dst)?,
            b"ZS" => unzstd(payload, dst)?,
            b"CS" => {
                return Err(BufError::Bad(
                    "unsupported: ROOT's old 'CS' compression (ROOT 5 before 5.x's zlib default)"
                        .into(),
                ));
            }
            tag => {
                return Err(BufError::Bad(format!(
                    "unknown compression algorithm {:?} in a block header",
                    String::from_utf8_lossy(tag)
                )));
            }
        }
        at = start + packed;
        filled += unpacked;
    }
    if filled != expected {
        return Err(BufError::Bad(format!(
            "decompressed to {filled} bytes, expected {expected}"
        )));
    }
    Ok(out)
}

/// Fills `dst` from `r`, failing on any error, when `r` ends early, or when more would follow
/// (the block is then longer than its header says).
fn read_exactly(mut r: impl Read, dst: &mut [u8], codec: &str) -> Result<(), BufError> {
    let unpacked = dst.len();
    r.read_exact(dst).map_err(|e| {
        BufError::Bad(format!(
            "corrupted {codec} block: {e} (its header says {unpacked} bytes)"
        ))
    })?;
    let mut extra = [0u8; 1];
    if matches!(r.read(&mut extra), Ok(n) if n > 0) {
        return Err(BufError::Bad(format!(
            "corrupted {codec} block: longer than its header's {unpacked} bytes"
        )));
    }
    Ok(())
}

fn inflate(payload: &[u8], dst: &mut [u8]) -> Result<(), BufError> {
    read_exactly(flate2::bufread::ZlibDecoder::new(payload), dst, "zlib")
}

fn unxz(payload: &[u8], dst: &mut [u8]) -> Result<(), BufError> {
    read_exactly(liblzma::bufread::XzDecoder::new(payload), dst, "LZMA")
}

/// A block's decompressed size against its header's.
fn whole(got: usize, dst: &[u8], codec: &str) -> Result<(), BufError> {
    if got != dst.len() {
        return Err(BufError::Bad(format!(
            "a compressed {codec} block gave {got} bytes, its header says {}",
            dst.len()
        )));
    }
    Ok(())
}

fn unzstd(payload: &[u8], dst: &mut [u8]) -> Result<(), BufError> {
    thread_local! {
        // A decompression context per thread, kept between blocks.
        static ZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let bad = |e: std::io::Error| BufError::Bad(format!("corrupted zstd block: {e}"));
    let got = ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(bad)?),
        };
        d.decompress_to_buffer(payload, &mut *dst).map_err(bad)
    })?;
    whole(got, dst, "zstd")
}

fn unlz4(payload: &[u8], dst: &mut [u8]) -> Result<(), BufError> {
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
    let size = i32::try_from(dst.len())
        .map_err(|_| BufError::Bad(format!("LZ4 block of {} bytes", dst.len())))?;
    let n = lz4::block::decompress_to_buffer(block, Some(size), dst)
        .map_err(|e| BufError::Bad(format!("corrupted LZ4 block: {e}")))?;
    whole(n, dst, "LZ4")
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
        let lz = lz4::block::compress(&text, None, false).expect("lz4");
        let mut l4 = twox_hash::XxHash64::oneshot(0, &lz).to_be_bytes().to_vec();
        l4.extend_from_slice(&lz);
        let l4 = block(b"L4", &l4, text.len());
        for (name, data) in [("zlib", &zl), ("zstd", &zs), ("lz4", &l4)] {
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
            // zlib (Adler-32) and LZ4 (XXH64) carry checksums: a flipped byte is caught.
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
