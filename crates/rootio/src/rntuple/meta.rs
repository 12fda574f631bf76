//! RNTuple metadata (binary format 1.0): the anchor, the header, footer and page-list envelopes,
//! their frames and locators, read into plain descriptions. Little-endian except the anchor.

use crate::cursor::Cursor;
use crate::error::BufError;

/// Where a block lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Locator {
    /// Byte offset from the start of the file.
    pub offset: u64,
    /// Compressed size in bytes.
    pub size: u64,
}

/// `ROOT::RNTuple`, the anchor: version and envelope links of the header and footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// (epoch, major, minor, patch).
    pub version: (u16, u16, u16, u16),
    /// The header envelope: where, and its uncompressed length.
    pub header: (Locator, u64),
    /// The footer envelope.
    pub footer: (Locator, u64),
    /// The largest key (RBlob) a payload was written in.
    pub max_key_size: u64,
}

/// Reads the anchor object (ROOT's streamed `ROOT::RNTuple`: byte count and class version, then
/// big-endian members; after them, their XXH3 checksum).
pub(crate) fn anchor(bytes: &[u8]) -> Result<Anchor, BufError> {
    let mut c = Cursor::new(bytes);
    let v = c.versioned()?;
    let start = c.pos();
    let version = (c.u16()?, c.u16()?, c.u16()?, c.u16()?);
    let link = |c: &mut Cursor<'_>| -> Result<(Locator, u64), BufError> {
        let offset = c.u64()?;
        let size = c.u64()?;
        let len = c.u64()?;
        Ok((Locator { offset, size }, len))
    };
    let header = link(&mut c)?;
    let footer = link(&mut c)?;
    let max_key_size = c.u64()?;
    let end = c.pos();
    // The checksum follows the streamed object, outside its byte count.
    c.finish(v)?;
    let checksum = c.u64()?;
    let computed = twox_hash::XxHash3_64::oneshot(&bytes[start..end]);
    if checksum != computed {
        return Err(BufError::Bad(format!(
            "anchor checksum {checksum:#x} does not match its contents ({computed:#x})"
        )));
    }
    Ok(Anchor {
        version,
        header,
        footer,
        max_key_size,
    })
}

/// A frame's extent: where it ends and, for a list frame, its number of items.
struct Frame {
    end: usize,
    items: Option<u32>,
}

fn frame(c: &mut Cursor<'_>) -> Result<Frame, BufError> {
    let start = c.pos();
    let size = c.le_i64()?;
    let (size, items) = if size < 0 {
        (size.unsigned_abs(), Some(c.le_u32()?))
    } else {
        (size.unsigned_abs(), None)
    };
    let end = usize::try_from(size)
        .ok()
        .and_then(|s| start.checked_add(s))
        .filter(|&e| e <= c.len() && e >= c.pos())
        .ok_or_else(|| {
            BufError::Bad(format!(
                "a frame at offset {start} claims {size} bytes of a {}-byte envelope",
                c.len()
            ))
        })?;
    Ok(Frame { end, items })
}

/// A record frame read by `body`, the cursor left at its end (later versions may append).
fn record<T>(
    c: &mut Cursor<'_>,
    body: impl FnOnce(&mut Cursor<'_>) -> Result<T, BufError>,
) -> Result<T, BufError> {
    let f = frame(c)?;
    if f.items.is_some() {
        return Err(BufError::Bad(
            "a list frame where a record was expected".into(),
        ));
    }
    let v = body(c)?;
    if c.pos() > f.end {
        return Err(BufError::Bad("a record read past its frame".into()));
    }
    c.seek(f.end)?;
    Ok(v)
}

/// A list frame whose items `item` reads, the cursor left at its end.
fn list<T>(
    c: &mut Cursor<'_>,
    mut item: impl FnMut(&mut Cursor<'_>) -> Result<T, BufError>,
) -> Result<Vec<T>, BufError> {
    let f = frame(c)?;
    let n = f
        .items
        .ok_or_else(|| BufError::Bad("a record frame where a list was expected".into()))?;
    let mut out = Vec::with_capacity((n as usize).min(1 << 16));
    for _ in 0..n {
        out.push(item(c)?);
    }
    if c.pos() > f.end {
        return Err(BufError::Bad("a list read past its frame".into()));
    }
    c.seek(f.end)?;
    Ok(out)
}

fn string(c: &mut Cursor<'_>) -> Result<String, BufError> {
    let n = c.le_u32()? as usize;
    Ok(String::from_utf8_lossy(c.take(n)?).into_owned())
}

/// Feature flags: 64-bit words while the previous one is negative. A reader of format 1.0
/// knows none, so any set bit is refused.
fn feature_flags(c: &mut Cursor<'_>) -> Result<(), BufError> {
    loop {
        let word = c.le_i64()?;
        if word & 0x7fff_ffff_ffff_ffff != 0 {
            return Err(BufError::Bad(format!(
                "unsupported: feature flags {word:#x} (a format newer than 1.0)"
            )));
        }
        if word >= 0 {
            return Ok(());
        }
    }
}

fn locator(c: &mut Cursor<'_>) -> Result<Locator, BufError> {
    let head = c.le_i32()?;
    if head >= 0 {
        return Ok(Locator {
            size: u64::from(head.unsigned_abs()),
            offset: c.le_u64()?,
        });
    }
    let word = head as u32;
    let own = (word & 0xffff) as usize;
    let kind = ((word >> 24) as u8 as i8).unsigned_abs() & 0x7f;
    let start = c.pos() - 4;
    let loc = match kind {
        0x01 => Locator {
            size: c.le_u64()?,
            offset: c.le_u64()?,
        },
        other => {
            return Err(BufError::Bad(format!(
                "unsupported: locator type {other:#x} (only in-file locators are read)"
            )));
        }
    };
    if own >= 4 {
        c.seek(start + own)?;
    }
    Ok(loc)
}

/// An envelope link: uncompressed length, then a locator.
fn envelope_link(c: &mut Cursor<'_>) -> Result<(Locator, u64), BufError> {
    let len = c.le_u64()?;
    Ok((locator(c)?, len))
}

/// The payload of an envelope of type `kind` (1 header, 2 footer, 3 page list), checked
/// against its length and XXH3 checksum.
pub(crate) fn envelope(bytes: &[u8], kind: u16) -> Result<&[u8], BufError> {
    if bytes.len() < 16 {
        return Err(BufError::Bad(format!(
            "an envelope of {} bytes is too short",
            bytes.len()
        )));
    }
    let mut c = Cursor::new(bytes);
    let word = c.le_u64()?;
    let (got, len) = ((word & 0xffff) as u16, word >> 16);
    if got != kind {
        return Err(BufError::Bad(format!(
            "envelope type {got} where type {kind} was expected"
        )));
    }
    if len != bytes.len() as u64 {
        return Err(BufError::Bad(format!(
            "the envelope says {len} bytes but {} were read",
            bytes.len()
        )));
    }
    let body = bytes.len() - 8;
    let checksum = u64::from_le_bytes(bytes[body..].try_into().unwrap_or_default());
    let computed = twox_hash::XxHash3_64::oneshot(&bytes[..body]);
    if checksum != computed {
        return Err(BufError::Bad(format!(
            "envelope checksum {checksum:#x} does not match its contents ({computed:#x})"
        )));
    }
    Ok(&bytes[8..body])
}

/// The payload of an envelope [`envelope`] has checked: between its 8-byte preamble and its
/// checksum.
pub(crate) fn payload(bytes: &[u8]) -> &[u8] {
    &bytes[8..bytes.len() - 8]
}

/// The XXH3 checksum an envelope ends with (what footers and page lists name their header by).
pub(crate) fn envelope_checksum(bytes: &[u8]) -> u64 {
    bytes.len().checked_sub(8).map_or(0, |b| {
        u64::from_le_bytes(bytes[b..].try_into().unwrap_or_default())
    })
}

/// A field record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldRecord {
    pub parent: u32,
    pub role: u16,
    pub flags: u16,
    pub name: String,
    pub type_name: String,
    pub type_alias: String,
    /// Fixed-size arrays and bitsets: the repetition.
    pub repetition: u64,
}

/// A column record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ColumnRecord {
    pub kind: u16,
    pub bits: u16,
    pub field: u32,
    pub representation: u16,
    /// Deferred columns: the first element stored (elements before it read as zeros).
    pub first_element: u64,
    /// Deferred and suppressed.
    pub deferred_suppressed: bool,
    /// Quantized reals: the value range.
    pub range: Option<(f64, f64)>,
}

/// A schema description: fields, columns, alias columns `(physical column, field)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Schema {
    pub fields: Vec<FieldRecord>,
    pub columns: Vec<ColumnRecord>,
    pub aliases: Vec<(u32, u32)>,
}

fn schema(c: &mut Cursor<'_>, into: &mut Schema) -> Result<(), BufError> {
    into.fields.extend(list(c, |c| {
        record(c, |c| {
            let _field_version = c.le_u32()?;
            let _type_version = c.le_u32()?;
            let parent = c.le_u32()?;
            let role = c.le_u16()?;
            let flags = c.le_u16()?;
            let name = string(c)?;
            let type_name = string(c)?;
            let type_alias = string(c)?;
            let _description = string(c)?;
            let repetition = if flags & 0x01 != 0 { c.le_u64()? } else { 0 };
            Ok(FieldRecord {
                parent,
                role,
                flags,
                name,
                type_name,
                type_alias,
                repetition,
            })
        })
    })?);
    into.columns.extend(list(c, |c| {
        record(c, |c| {
            let kind = c.le_u16()?;
            let bits = c.le_u16()?;
            let field = c.le_u32()?;
            let flags = c.le_u16()?;
            let representation = c.le_u16()?;
            let (first_element, deferred_suppressed) = if flags & 0x01 != 0 {
                let f = c.le_i64()?;
                (f.unsigned_abs(), f < 0)
            } else {
                (0, false)
            };
            let range = if flags & 0x02 != 0 {
                Some((c.le_f64()?, c.le_f64()?))
            } else {
                None
            };
            Ok(ColumnRecord {
                kind,
                bits,
                field,
                representation,
                first_element,
                deferred_suppressed,
                range,
            })
        })
    })?);
    into.aliases
        .extend(list(c, |c| record(c, |c| Ok((c.le_u32()?, c.le_u32()?))))?);
    list(c, |_| Ok(()))?; // extra type information: not needed to read numbers
    Ok(())
}

/// The header envelope's payload: the ntuple's name and its schema.
pub(crate) fn header(payload: &[u8]) -> Result<(String, Schema), BufError> {
    let mut c = Cursor::new(payload);
    feature_flags(&mut c)?;
    let name = string(&mut c)?;
    let _description = string(&mut c)?;
    let _writer = string(&mut c)?;
    let mut s = Schema::default();
    schema(&mut c, &mut s)?;
    Ok((name, s))
}

/// A cluster group: its clusters' count and the page list that describes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClusterGroup {
    pub n_clusters: u32,
    pub page_list: (Locator, u64),
}

/// The footer envelope's payload: the header checksum it belongs with, the schema extension
/// (appended to `schema`) and the cluster groups.
pub(crate) fn footer(
    payload: &[u8],
    schema_out: &mut Schema,
) -> Result<(u64, Vec<ClusterGroup>), BufError> {
    let mut c = Cursor::new(payload);
    feature_flags(&mut c)?;
    let header_checksum = c.le_u64()?;
    let f = frame(&mut c)?;
    if f.end > c.pos() {
        schema(&mut c, schema_out)?;
    }
    c.seek(f.end)?;
    let groups = list(&mut c, |c| {
        record(c, |c| {
            let _min_entry = c.le_u64()?;
            let _entry_span = c.le_u64()?;
            let n_clusters = c.le_u32()?;
            let page_list = envelope_link(c)?;
            Ok(ClusterGroup {
                n_clusters,
                page_list,
            })
        })
    })?;
    Ok((header_checksum, groups))
}

/// One page of a column in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageDesc {
    pub elements: u32,
    pub locator: Locator,
}

/// A column in a cluster: its pages, or suppressed (another representation holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnPages {
    /// Index of the column's first element in this cluster.
    pub element_offset: u64,
    pub suppressed: bool,
    pub pages: Vec<PageDesc>,
}

/// A cluster: its entries and, per physical column, its pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterDesc {
    pub first_entry: u64,
    pub entries: u64,
    pub columns: Vec<ColumnPages>,
}

/// A page list envelope's payload: the header checksum and its clusters.
pub(crate) fn page_list(payload: &[u8]) -> Result<(u64, Vec<ClusterDesc>), BufError> {
    let mut c = Cursor::new(payload);
    let header_checksum = c.le_u64()?;
    let summaries = list(&mut c, |c| {
        record(c, |c| {
            let first = c.le_u64()?;
            let word = c.le_u64()?;
            if (word >> 56) & 0x01 != 0 {
                return Err(BufError::Bad(
                    "unsupported: a sharded cluster (a format newer than 1.0)".into(),
                ));
            }
            Ok((first, word & 0x00ff_ffff_ffff_ffff))
        })
    })?;
    let columns = list(&mut c, |c| {
        list(c, |c| {
            let f = frame(c)?;
            let n = f.items.ok_or_else(|| {
                BufError::Bad("a record frame where a page list was expected".into())
            })?;
            let mut pages = Vec::with_capacity((n as usize).min(1 << 16));
            for _ in 0..n {
                let elements = c.le_i32()?;
                pages.push(PageDesc {
                    elements: elements.unsigned_abs(),
                    locator: locator(c)?,
                });
            }
            let offset = c.le_i64()?;
            if offset >= 0 {
                let _compression = c.le_u32()?;
            }
            if c.pos() > f.end {
                return Err(BufError::Bad("a page list read past its frame".into()));
            }
            c.seek(f.end)?;
            Ok(ColumnPages {
                element_offset: offset.unsigned_abs(),
                suppressed: offset < 0,
                pages,
            })
        })
    })?;
    if columns.len() != summaries.len() {
        return Err(BufError::Bad(format!(
            "{} cluster summaries but page locations for {} clusters",
            summaries.len(),
            columns.len()
        )));
    }
    let clusters = summaries
        .into_iter()
        .zip(columns)
        .map(|((first_entry, entries), columns)| ClusterDesc {
            first_entry,
            entries,
            columns,
        })
        .collect();
    Ok((header_checksum, clusters))
}
