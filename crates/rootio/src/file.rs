//! The file layer: header, directories and keys, and reading an object's bytes.

use std::path::{Path, PathBuf};

use crate::compress::decompress;
use crate::cursor::Cursor;
use crate::error::{BufError, RootError};
use crate::source::{Bytes, Source};

/// Versions above this write 64-bit seek fields (files, directories and keys over 2 GB).
const LARGE: i32 = 1_000_000;
/// Key versions above this have 64-bit seeks.
const LARGE_KEY: i16 = 1000;
/// Nested directories deeper than this are refused (a loop in a corrupted file).
const MAX_DEPTH: usize = 64;

/// One key of a directory: an object's class, name and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The object's class (`TTree`, `TDirectoryFile`, `TH1F`, …).
    pub class: String,
    /// Its path from the top directory (`Events`, `dir/tree`).
    pub path: String,
    /// Its title.
    pub title: String,
    /// Its cycle (the highest is the current one).
    pub cycle: i16,
    /// Offset of the key in the file.
    seek: u64,
    /// Bytes of key and (compressed) object.
    nbytes: usize,
    /// Bytes of the object uncompressed.
    objlen: usize,
    /// Bytes of the key header.
    keylen: usize,
}

/// An object's bytes, decompressed, and the length of the key before it (object references
/// inside count positions from the key's start).
#[derive(Debug, Clone)]
pub(crate) struct ObjectBytes {
    pub bytes: Vec<u8>,
    pub keylen: usize,
}

/// The most chunks of a remote file whose baskets or pages are planned ahead of the one being
/// read (fetched while it decodes; a link's latency paid once for several chunks).
pub(crate) const AHEAD_CHUNKS: usize = 64;
/// The most bytes planned ahead of the chunk being read: what a link of 1.6 GB/s holds in
/// flight at 20 ms, or one of 160 MB/s at 200 ms. A read of few columns plans many chunks
/// ahead, one of many columns few.
const AHEAD_BYTES: usize = 32 << 20;

/// The byte ranges to plan of `window` (each a basket's or page's first entry, offset and
/// size: this chunk's and the next chunks'): in entry order, the first `now` (this chunk's)
/// always, the rest while they stay within [`AHEAD_BYTES`].
pub(crate) fn read_ahead_window(
    mut window: Vec<(u64, u64, usize)>,
    now: usize,
) -> Vec<(u64, usize)> {
    window.sort_unstable();
    let mut bytes = 0usize;
    window
        .into_iter()
        .enumerate()
        .take_while(|(i, (_, _, n))| {
            bytes = bytes.saturating_add(*n);
            *i < now || bytes <= AHEAD_BYTES
        })
        .map(|(_, (_, offset, n))| (offset, n))
        .collect()
}

/// An open ROOT file: its header and every key of every directory.
#[derive(Debug)]
pub struct RootFile {
    path: PathBuf,
    source: Source,
    len: u64,
    /// ROOT version that wrote it (`63606` is 6.36/06).
    version: i32,
    keys: Vec<Key>,
    /// Where the streamer-info record (`TList` of `TStreamerInfo`) is: offset and bytes.
    info: Option<(u64, usize)>,
}

impl RootFile {
    /// Opens `path` and reads its header and directories.
    pub fn open(path: &Path) -> Result<RootFile, RootError> {
        let (source, len) = Source::open(path).map_err(|source| RootError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut f = RootFile {
            path: path.to_owned(),
            source,
            len,
            version: 0,
            keys: Vec::new(),
            info: None,
        };
        let head = f.read_at(0, len.min(100) as usize, "file header")?;
        let mut c = Cursor::new(&head);
        let magic = c.take(4).map_err(|e| f.corrupt("file header", e))?;
        if magic != b"root" {
            return Err(f.corrupt(
                "file header",
                BufError::Bad("not a ROOT file (no 'root' magic)".into()),
            ));
        }
        type Header = (i32, u64, u64, Option<(u64, usize)>);
        let header = (|| -> Result<Header, BufError> {
            let version = c.i32()?;
            let begin = u64::try_from(c.i32()?).map_err(|_| BufError::Bad("fBEGIN < 0".into()))?;
            let large = version >= LARGE;
            c.skip(if large { 8 + 8 + 4 + 4 } else { 4 * 4 })?; // fEND, fSeekFree, fNbytesFree, nfree
            let nbytes_name =
                u64::try_from(c.i32()?).map_err(|_| BufError::Bad("fNbytesName < 0".into()))?;
            c.skip(1 + 4)?; // fUnits, fCompress
            let seek_info = if large { c.i64()? } else { i64::from(c.i32()?) };
            let nbytes_info = c.i32()?;
            let info = match (u64::try_from(seek_info), usize::try_from(nbytes_info)) {
                (Ok(s), Ok(n)) if s > 0 && n > 0 => Some((s, n)),
                _ => None,
            };
            Ok((version, begin, begin + nbytes_name, info))
        })()
        .map_err(|e| f.corrupt("file header", e))?;
        f.version = header.0;
        f.info = header.3;
        let mut keys = Vec::new();
        f.read_directory(header.2, "", 0, &mut keys)?;
        f.keys = keys;
        Ok(f)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ROOT version that wrote the file (`major * 10000 + minor * 100 + patch`).
    pub fn root_version(&self) -> i32 {
        self.version % LARGE
    }

    /// Every key of every directory (directories included), in file order.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The current (highest-cycle) key at `path`.
    pub fn key(&self, path: &str) -> Result<&Key, RootError> {
        self.keys
            .iter()
            .filter(|k| k.path == path)
            .max_by_key(|k| k.cycle)
            .ok_or_else(|| RootError::NotFound {
                path: self.path.clone(),
                what: "key",
                name: path.to_owned(),
                hint: {
                    let names: Vec<&str> = self.keys.iter().map(|k| k.path.as_str()).collect();
                    format!(" (keys: {})", names.join(", "))
                },
            })
    }

    /// The streamer-info record's object bytes (a `TList` of `TStreamerInfo`), if the file has one.
    pub(crate) fn streamer_info_bytes(&self) -> Result<Option<ObjectBytes>, RootError> {
        let Some((seek, nbytes)) = self.info else {
            return Ok(None);
        };
        let place = "streamer info record";
        let raw = self.read_at(
            seek,
            nbytes.min((self.len - seek.min(self.len)) as usize),
            place,
        )?;
        let mut c = Cursor::new(&raw);
        let mut key = read_key(&mut c, "").map_err(|e| self.corrupt(place, e))?;
        key.seek = seek;
        self.read_object(&key).map(Some)
    }

    /// Plans the reads of the byte ranges (`offset`, `len`) about to be read (a remote
    /// file's, in a few large requests; see [`Source::prefetch`]).
    pub(crate) fn prefetch(&self, ranges: impl IntoIterator<Item = (u64, usize)>) {
        self.source.prefetch(ranges);
    }

    /// Whether the file is read over a network (its readers then plan a window ahead).
    pub(crate) fn is_remote(&self) -> bool {
        self.source.is_remote()
    }

    /// `len` bytes at `offset`.
    pub(crate) fn read_at(
        &self,
        offset: u64,
        len: usize,
        place: &str,
    ) -> Result<Vec<u8>, RootError> {
        self.read_bytes(offset, len, place).map(Bytes::into_vec)
    }

    /// `len` bytes at `offset`, not copied out of a remote file's read-ahead where one part
    /// of its answer holds them (a basket's or page's bytes, decompressed from there).
    pub(crate) fn read_bytes(
        &self,
        offset: u64,
        len: usize,
        place: &str,
    ) -> Result<Bytes, RootError> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(self.corrupt(
                place,
                BufError::Bad(format!(
                    "truncated file: {len} bytes at offset {offset} but the file has {} bytes",
                    self.len
                )),
            ));
        }
        self.source
            .read_at(offset, len)
            .map_err(|source| RootError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// The object of `key`, decompressed.
    pub(crate) fn read_object(&self, key: &Key) -> Result<ObjectBytes, RootError> {
        let place = format!("key '{}' ({})", key.path, key.class);
        let raw = self.read_at(key.seek, key.nbytes, &place)?;
        let data = raw.get(key.keylen..).ok_or_else(|| {
            self.corrupt(&place, BufError::Bad("key longer than its record".into()))
        })?;
        let bytes = decompress(data, key.objlen).map_err(|e| self.corrupt(&place, e))?;
        Ok(ObjectBytes {
            bytes,
            keylen: key.keylen,
        })
    }

    /// A [`RootError::Corrupt`] at `place`; or, for a message that says `unsupported: …` (a
    /// valid construct this reader does not read), a [`RootError::Unsupported`], never said to
    /// be a damaged file.
    pub(crate) fn corrupt(&self, place: &str, e: impl std::fmt::Display) -> RootError {
        let message = e.to_string();
        match message.strip_prefix("unsupported: ") {
            Some(what) => RootError::Unsupported {
                path: self.path.clone(),
                place: place.to_owned(),
                what: what.to_owned(),
            },
            None => RootError::Corrupt {
                path: self.path.clone(),
                place: place.to_owned(),
                message,
            },
        }
    }

    /// Reads the directory record at `seek` and its keys (recursing into subdirectories).
    fn read_directory(
        &self,
        seek: u64,
        prefix: &str,
        depth: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), RootError> {
        let place = if prefix.is_empty() {
            "top directory".to_owned()
        } else {
            format!("directory '{}'", prefix.trim_end_matches('/'))
        };
        if depth > MAX_DEPTH {
            return Err(self.corrupt(&place, BufError::Bad("directories nest too deep".into())));
        }
        let rec = self.read_at(
            seek,
            (self.len - seek.min(self.len)).min(64) as usize,
            &place,
        )?;
        let (keys_at, keys_len) = (|| -> Result<(u64, usize), BufError> {
            let mut c = Cursor::new(&rec);
            let version = c.i16()?;
            c.skip(8)?; // fDatimeC, fDatimeM
            let nbytes_keys = c.len32("fNbytesKeys")?;
            c.skip(4)?; // fNbytesName
            let seek_keys = if version > LARGE_KEY {
                c.skip(16)?; // fSeekDir, fSeekParent
                c.i64()?
            } else {
                c.skip(8)?;
                i64::from(c.i32()?)
            };
            let seek_keys =
                u64::try_from(seek_keys).map_err(|_| BufError::Bad("fSeekKeys < 0".into()))?;
            Ok((seek_keys, nbytes_keys))
        })()
        .map_err(|e| self.corrupt(&place, e))?;
        if keys_at == 0 {
            return Ok(()); // an empty directory
        }
        let list = self.read_at(keys_at, keys_len, &place)?;
        let mut c = Cursor::new(&list);
        let keys = (|| -> Result<Vec<Key>, BufError> {
            let own = read_key(&mut c, "")?; // the key of the key list itself
            c.seek(own.keylen)?;
            let n = c.len32("number of keys")?;
            (0..n).map(|_| read_key(&mut c, prefix)).collect()
        })()
        .map_err(|e| self.corrupt(&format!("{place}, key list"), e))?;
        for k in keys {
            let is_dir = k.class == "TDirectory" || k.class == "TDirectoryFile";
            let sub = format!("{}/", k.path);
            let at = k.seek + k.keylen as u64;
            out.push(k);
            if is_dir {
                self.read_directory(at, &sub, depth + 1, out)?;
            }
        }
        Ok(())
    }
}

/// One key header at the cursor; `prefix` is its directory's path.
fn read_key(c: &mut Cursor<'_>, prefix: &str) -> Result<Key, BufError> {
    let start = c.pos();
    let nbytes = c.len32("fNbytes")?;
    let version = c.i16()?;
    let objlen = c.len32("fObjlen")?;
    c.skip(4)?; // fDatime
    let keylen = usize::try_from(c.i16()?).map_err(|_| BufError::Bad("fKeylen < 0".into()))?;
    let cycle = c.i16()?;
    let seek = if version > LARGE_KEY {
        let s = c.i64()?;
        c.skip(8)?;
        s
    } else {
        let s = i64::from(c.i32()?);
        c.skip(4)?;
        s
    };
    let class = c.tstring()?;
    let name = c.tstring()?;
    let title = c.tstring()?;
    if keylen == 0 || nbytes < keylen {
        return Err(BufError::Bad(format!(
            "key '{name}' at offset {start}: {nbytes} bytes with a {keylen}-byte header"
        )));
    }
    Ok(Key {
        class,
        path: format!("{prefix}{name}"),
        title,
        cycle,
        seek: u64::try_from(seek).map_err(|_| BufError::Bad("fSeekKey < 0".into()))?,
        nbytes,
        objlen,
        keylen,
    })
}
