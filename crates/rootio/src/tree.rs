//! TTree metadata: the tree's entries and its branches (with their leaves and baskets), read
//! from the TTree object as ROOT 5 to 6.40 and uproot write it.
//!
//! The classes a reader needs (`TTree`, `TBranch`, `TBranchElement`, `TBranchObject`,
//! `TLeaf*`, `TObjArray`, `TBasket`) are read member by member for the versions ROOT has
//! written; members past the ones needed are skipped by the object's byte count, so a newer
//! version that appends members still reads. Any other class inside is skipped by its byte
//! count.

mod legacy;
mod objects;
#[cfg(test)]
mod testbytes;

use std::collections::HashMap;

use legacy::{FIRST_KNOWN_TTREE, tree_version};
use objects::{Any, Reader};

use crate::cursor::Cursor;
use crate::error::{BufError, RootError};
use crate::file::{Key, ObjectBytes, RootFile};

/// One leaf of a branch: the C++ type of its values and how many per entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafInfo {
    /// `TLeafF`, `TLeafI`, `TLeafElement`, ….
    pub class: String,
    /// Its name.
    pub name: String,
    /// Its title (`Jet_pt[nJet]/F`, `pt`).
    pub title: String,
    /// Values per entry for a fixed-size leaf (1 for scalars).
    pub len: i32,
    /// Bytes per value (`fLenType`).
    pub len_type: i32,
    /// True for unsigned integers.
    pub unsigned: bool,
    /// The leaf giving the number of values per entry, for leaf-count arrays.
    pub count_leaf: Option<String>,
    /// `TLeafElement`'s `fType` (the streamer type of the member), or -1.
    pub element_type: i32,
}

/// What a `TBranchElement` adds: the class and member it stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementInfo {
    /// The class whose member (or which collection) the branch holds.
    pub class_name: String,
    /// The clones' class for a `TClonesArray` branch.
    pub clones_name: String,
    /// The version of the class that wrote the branch (`fClassVersion`).
    pub class_version: i32,
    /// Index of the member in the class's streamer info (-1 for the whole object).
    pub id: i32,
    /// `fType`: 0 a member of a top-level object, 3/4 a `TClonesArray`/STL collection's count
    /// branch, 31/41 a member of the objects of such a collection, -1 a top-level object.
    pub kind: i32,
    /// The member's streamer type (`TVirtualStreamerInfo::EReadWrite` codes).
    pub streamer_type: i32,
    /// The branch holding this branch's collection count.
    pub count_branch: Option<String>,
    /// The member's C++ type and title from the class's streamer info (`vector<short>`,
    /// `[0, 10, 12]`), looked up for the members whose branch alone does not say what they
    /// hold (STL containers, `Double32_t`, `Float16_t`).
    pub member: Option<(String, String)>,
}

/// One member of a class, as the file's streamer info describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberInfo {
    pub name: String,
    pub title: String,
    pub type_name: String,
    /// `fType`: how the member is streamed (`TVirtualStreamerInfo::EReadWrite`).
    pub code: i32,
    /// `fArrayLength`: values in a fixed-size array member.
    pub array_len: usize,
    /// A base class (`TStreamerBase`; its name is the class's).
    pub is_base: bool,
    /// The member holding the length of a pointer-to-array member (`fCountName`).
    pub count: Option<String>,
}

/// A class's streamer info: its name, version and members in order (base classes included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClassInfo {
    pub name: String,
    pub version: i32,
    pub members: Vec<MemberInfo>,
}

/// Whether a member of streamer type `t` needs its streamer info to be read: STL containers
/// (their element type) and packed reals (their range).
fn needs_member_info(t: i32) -> bool {
    t == 300 || t == 500 || (0..60).contains(&t) && matches!(t % 20, 9 | 19)
}

/// A basket kept inside the tree's header instead of in a key of its own (small, recent
/// baskets of ROOT's and NanoAOD's files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedBasket {
    /// Its entries' bytes.
    pub data: Vec<u8>,
    /// Where each entry starts in `data`, and the end, when the basket has entry offsets; or
    /// why they cannot be used (one lies inside the key): only the layouts that need them fail.
    pub offsets: Option<Result<Vec<usize>, String>>,
    /// Entries in it.
    pub entries: usize,
}

/// One branch: its leaves, its baskets and its sub-branches.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchInfo {
    /// `TBranch`, `TBranchElement`, `TBranchObject`, ….
    pub class: String,
    /// Full name (`Jet_pt`, `Jet.PT`).
    pub name: String,
    /// Title (`Jet_pt[nJet]/F`).
    pub title: String,
    /// Entries in the branch.
    pub entries: i64,
    /// Initial length of the baskets' entry-offset table (0: none, fixed-size entries).
    pub entry_offset_len: i32,
    /// Leaves.
    pub leaves: Vec<LeafInfo>,
    /// Bytes of each basket on file (`fWriteBasket` of them are written).
    pub basket_bytes: Vec<i32>,
    /// First entry of each basket.
    pub basket_entry: Vec<i64>,
    /// Offset of each basket's key in the file.
    pub basket_seek: Vec<i64>,
    /// Baskets written.
    pub write_basket: usize,
    /// Baskets inside the tree header, after the written ones.
    pub embedded: Vec<EmbeddedBasket>,
    /// For `TBranchElement`s.
    pub element: Option<ElementInfo>,
    /// Sub-branches.
    pub branches: Vec<BranchInfo>,
}

impl BranchInfo {
    /// The baskets read from the file through the basket table: the written ones up to the
    /// first that was never written (no offset, yet said to hold entries: a basket kept inside
    /// the tree object by a process that did not close the file, ROOT's recovered baskets).
    /// The embedded baskets follow them, from that basket's first entry on (as uproot reads
    /// them).
    pub fn normal_baskets(&self) -> usize {
        (0..self.write_basket)
            .find(|&k| {
                let start = self.basket_entry.get(k).copied().unwrap_or(0);
                let stop = self.basket_entry.get(k + 1).copied().unwrap_or(start);
                self.basket_seek.get(k).is_none_or(|&s| s == 0) && stop > start
            })
            .unwrap_or(self.write_basket)
    }

    /// This branch and every sub-branch, depth first.
    pub fn walk(&self) -> Vec<&BranchInfo> {
        let mut out = vec![self];
        for b in &self.branches {
            out.extend(b.walk());
        }
        out
    }
}

/// A tree's entries and branches.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeInfo {
    /// Its path in the file.
    pub path: String,
    /// `TTree` class version.
    pub version: i16,
    /// Entries.
    pub entries: i64,
    /// Top-level branches.
    pub branches: Vec<BranchInfo>,
}

impl TreeInfo {
    /// Every branch, depth first.
    pub fn all_branches(&self) -> Vec<&BranchInfo> {
        self.branches.iter().flat_map(BranchInfo::walk).collect()
    }

    /// The branch called `name`, anywhere in the tree.
    pub fn branch(&self, name: &str) -> Option<&BranchInfo> {
        self.all_branches().into_iter().find(|b| b.name == name)
    }
}

/// Classes stored as a tree: `TTree`, and `TNtuple`/`TNtupleD` (a `TTree` and the number of
/// its variables; each variable a branch of one `float` or `double`).
pub(crate) fn is_tree_class(class: &str) -> bool {
    matches!(class, "TTree" | "TNtuple" | "TNtupleD")
}

impl RootFile {
    /// The paths of the trees in the file (`TTree`, `TNtuple`, `TNtupleD`; current cycles, in
    /// file order).
    pub fn tree_paths(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for k in self.keys().iter().filter(|k| is_tree_class(&k.class)) {
            if !out.contains(&k.path) {
                out.push(k.path.clone());
            }
        }
        out
    }

    /// The metadata of the tree at `path`.
    pub fn tree(&self, path: &str) -> Result<TreeInfo, RootError> {
        let key: &Key = self.key(path)?;
        if !is_tree_class(&key.class) {
            return Err(RootError::NotFound {
                path: self.path().to_owned(),
                what: "tree",
                name: path.to_owned(),
                hint: format!(" ('{path}' is a {})", key.class),
            });
        }
        let ObjectBytes { bytes, keylen } = self.read_object(key)?;
        let place = format!("tree '{path}'");
        // Trees of ROOT before 5.20 are read by the layouts of the file's own streamer info.
        let classes = if tree_version(&bytes, &key.class).is_some_and(|v| v < FIRST_KNOWN_TTREE) {
            self.classes()?
        } else {
            Vec::new()
        };
        let mut r = Reader {
            c: Cursor::new(&bytes),
            keylen: keylen as u64,
            refs: HashMap::new(),
            depth: 0,
            classes: &classes,
        };
        let tree = if key.class == "TTree" {
            r.ttree()
        } else {
            r.ntuple()
        };
        let (version, entries, mut branches) = tree.map_err(|e| self.corrupt(&place, e))?;
        self.resolve_members(&mut branches, classes)?;
        Ok(TreeInfo {
            path: path.to_owned(),
            version,
            entries,
            branches,
        })
    }
}

impl RootFile {
    /// The classes the file's streamer info describes (empty when it has none).
    pub(crate) fn classes(&self) -> Result<Vec<ClassInfo>, RootError> {
        let Some(ObjectBytes { bytes, keylen }) = self.streamer_info_bytes()? else {
            return Ok(Vec::new());
        };
        let mut r = Reader {
            c: Cursor::new(&bytes),
            keylen: keylen as u64,
            refs: HashMap::new(),
            depth: 0,
            classes: &[],
        };
        let items = r
            .tlist()
            .map_err(|e| self.corrupt("streamer info record", e))?;
        Ok(items
            .into_iter()
            .filter_map(|a| match a {
                Any::Class(c) => Some(c),
                _ => None,
            })
            .collect())
    }

    /// Looks up, in the streamer info, the members whose branch does not say what they hold.
    /// (`read`: the classes when they were read already, for an old tree; else empty.)
    fn resolve_members(
        &self,
        branches: &mut [BranchInfo],
        read: Vec<ClassInfo>,
    ) -> Result<(), RootError> {
        fn wanted(bs: &[BranchInfo]) -> bool {
            bs.iter().any(|b| {
                b.element
                    .as_ref()
                    .is_some_and(|e| e.id >= 0 && needs_member_info(e.streamer_type))
                    || wanted(&b.branches)
            })
        }
        fn fill(bs: &mut [BranchInfo], classes: &[ClassInfo]) {
            for b in bs {
                if let Some(e) = &mut b.element
                    && e.id >= 0
                    && needs_member_info(e.streamer_type)
                {
                    // A member of a collection's objects: a `TClonesArray` names their class in
                    // `fClonesName`; an STL collection's member branch in `fClassName`.
                    let class = if (e.kind == 31 || e.kind == 41) && !e.clones_name.is_empty() {
                        &e.clones_name
                    } else {
                        &e.class_name
                    };
                    // `fID` counts the members of the version that wrote the branch (a merged
                    // file may describe several).
                    let mut versions = classes.iter().filter(|c| &c.name == class);
                    let info = versions
                        .clone()
                        .find(|c| c.version == e.class_version)
                        .or_else(|| versions.next());
                    e.member = info
                        .and_then(|c| c.members.get(e.id as usize))
                        .map(|m| (m.type_name.clone(), m.title.clone()));
                }
                fill(&mut b.branches, classes);
            }
        }
        if !wanted(branches) {
            return Ok(());
        }
        // A damaged record leaves the members unresolved (they are then refused by name).
        let classes = if read.is_empty() {
            self.classes().unwrap_or_default()
        } else {
            read
        };
        fill(branches, &classes);
        Ok(())
    }
}

/// Where each of a basket's `entries` starts in its data, and `end`: the offsets as written
/// (big-endian `i32`s from the key's start, at the start of `raw`) made relative to the data.
/// Offsets that cannot be (one inside the key) are an error for the layouts that need them
/// only: fixed-size entries are read without them, as uproot reads them.
pub(crate) fn entry_offsets(
    raw: &[u8],
    entries: usize,
    keylen: usize,
    end: usize,
) -> Result<Vec<usize>, String> {
    let raw = entries
        .checked_mul(4)
        .and_then(|n| raw.get(..n))
        .ok_or_else(|| format!("{entries} entry offsets in {} bytes", raw.len()))?;
    let mut out = Vec::with_capacity(entries + 1);
    for c in raw.chunks_exact(4) {
        let x = i32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        match usize::try_from(i64::from(x) - keylen as i64) {
            Ok(o) => out.push(o),
            Err(_) => return Err(format!("entry offset {x} inside the basket's key")),
        }
    }
    out.push(end);
    Ok(out)
}

/// The key and `TBasket` header of a basket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BasketHeader {
    /// Bytes of key and compressed data.
    pub nbytes: usize,
    /// Bytes of the data uncompressed (entries and offsets).
    pub objlen: usize,
    /// Bytes of the key header.
    pub keylen: usize,
    /// `fNevBufSize`: above 8 when entries have offsets.
    pub nev_buf_size: i32,
    /// Entries in the basket.
    pub entries: usize,
    /// `fLast`: the end of the entries' bytes, counted from the key's start.
    pub last: usize,
}

impl BasketHeader {
    /// Where the entries' bytes end in the uncompressed data.
    pub(crate) fn border(&self) -> Result<usize, BufError> {
        self.last
            .checked_sub(self.keylen)
            .ok_or_else(|| BufError::Bad(format!("basket fLast {} before its key ends", self.last)))
    }
}

/// Reads a basket's key and `TBasket` header; the cursor ends after the key.
///
/// The `TBasket` members are the key header's last 19 bytes, found from the key's length (as
/// uproot does), so key layouts with more fields before them read too.
pub(crate) fn basket_header(c: &mut Cursor<'_>) -> Result<BasketHeader, BufError> {
    let start = c.pos();
    let nbytes = c.len32("basket fNbytes")?;
    c.skip(2)?; // the key's version
    let objlen = c.len32("basket fObjlen")?;
    c.skip(4)?; // fDatime
    let keylen = usize::try_from(c.i16()?).map_err(|_| BufError::Bad("fKeylen < 0".into()))?;
    if keylen < 19 + 18 {
        return Err(BufError::Bad(format!("basket key of {keylen} bytes")));
    }
    c.seek(start + keylen - 19)?;
    c.skip(2 + 4)?; // fVersion, fBufferSize
    let nev_buf_size = c.i32()?;
    let entries = c.len32("basket fNevBuf")?;
    let last = c.len32("basket fLast")?;
    c.skip(1)?; // flag
    Ok(BasketHeader {
        nbytes,
        objlen,
        keylen,
        nev_buf_size,
        entries,
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::testbytes::W;
    use super::*;

    /// A `TBasket`'s key and header: `nbytes` on file, a 57-byte key, `entries` of 4 bytes.
    fn basket_key(w: &mut W, nbytes: i32, nev_buf_size: i32, entries: i32) {
        w.i32(nbytes).put(&4i16.to_be_bytes()).i32(0).i32(0);
        w.put(&57i16.to_be_bytes())
            .put(&1i16.to_be_bytes())
            .i32(958)
            .i32(100);
        w.text("TBasket").text("x").text("t");
        w.put(&3i16.to_be_bytes())
            .i32(32000)
            .i32(nev_buf_size)
            .i32(entries);
        w.i32(57 + 4 * entries).put(&[0]);
    }

    #[test]
    fn only_a_basket_without_bytes_on_file_is_embedded_in_the_branch() {
        // A copy of a written basket's header (Go's groot keeps one in the branch's basket
        // list): its data is in its own key, and what follows it is not entry offsets.
        let written = |w: &mut W| {
            basket_key(w, 175, 1000, 5);
            w.i32(1).i32(175).i32(0);
        };
        // A basket kept in the tree object (`fNbytes` no more than its key): a second copy of
        // the key, then the entries.
        let embedded = |w: &mut W| {
            basket_key(w, 57, 0, 2);
            w.put(&[0; 57]).i32(7).i32(-1);
        };
        let mut w = W::default();
        w.objarray(&[("TBasket", &written), ("TBasket", &embedded)]);
        let mut r = Reader {
            c: Cursor::new(&w.0),
            keylen: 0,
            refs: HashMap::new(),
            depth: 0,
            classes: &[],
        };
        let baskets = r.basket_array().expect("the branch's basket list");
        let [b] = baskets.as_slice() else {
            panic!("one embedded basket: {baskets:?}")
        };
        assert_eq!((b.entries, b.offsets.clone()), (2, None));
        assert_eq!(b.data, [0, 0, 0, 7, 255, 255, 255, 255]);
        assert_eq!(r.c.pos(), w.0.len());
    }
}
