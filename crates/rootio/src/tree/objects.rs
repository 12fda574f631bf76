//! ROOT's object streaming for the classes a tree holds: object tags and references, byte
//! counts, and `TTree`, `TNtuple`, `TBranch*`, `TLeaf*`, `TObjArray`/`TList`, `TBasket` and
//! the streamer-info classes read member by member ([`Reader`]); `legacy.rs` adds the layouts
//! of ROOT before 5.20.

use std::collections::HashMap;

use super::legacy::{FIRST_KNOWN_TBRANCH, FIRST_KNOWN_TTREE};
use super::{
    BasketHeader, BranchInfo, ClassInfo, ElementInfo, EmbeddedBasket, LeafInfo, MemberInfo,
    basket_header, entry_offsets,
};
use crate::cursor::{Cursor, Versioned};
use crate::error::BufError;

/// `kClassMask`: a tag naming a class (new or already seen).
const CLASS_MASK: u32 = 0x8000_0000;
/// `kNewClassTag`: a class name follows.
const NEW_CLASS: u32 = 0xFFFF_FFFF;
/// `kByteCountMask`.
const BYTE_COUNT: u32 = 0x4000_0000;
/// `kMapOffset`: tags count from 2.
const MAP_OFFSET: u64 = 2;
/// `TObject::kIsReferenced`: a process id follows the bits.
const IS_REFERENCED: u32 = 1 << 4;
/// Objects nested deeper than this are refused (a loop in a corrupted file).
const MAX_DEPTH: usize = 200;

/// What an object tag refers to.
#[derive(Debug, Clone)]
pub(super) enum Ref {
    Class(String),
    /// An object read before: its class and name (leaves and branches are referred to by name).
    Object(Option<String>),
}

/// One object read by [`Reader::object_any`].
pub(super) enum Any {
    Null,
    Branch(Box<BranchInfo>),
    Leaf(LeafInfo),
    Basket(EmbeddedBasket),
    /// A `TList` or `TObjArray`'s objects.
    List(Vec<Any>),
    Class(ClassInfo),
    Member(MemberInfo),
    /// A reference to an object read before (its name, when it has one), or a skipped object.
    Named(Option<String>),
}

impl Any {
    pub(super) fn into_branch(self) -> Option<BranchInfo> {
        match self {
            Any::Branch(b) => Some(*b),
            _ => None,
        }
    }

    pub(super) fn into_leaf(self) -> Option<LeafInfo> {
        match self {
            Any::Leaf(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn into_basket(self) -> Option<EmbeddedBasket> {
        match self {
            Any::Basket(b) => Some(b),
            _ => None,
        }
    }
}

pub(super) struct Reader<'a> {
    pub(super) c: Cursor<'a>,
    /// Object references count positions from the start of the key.
    pub(super) keylen: u64,
    pub(super) refs: HashMap<u64, Ref>,
    pub(super) depth: usize,
    /// The file's streamer info, for classes older than the layouts known here (else empty).
    pub(super) classes: &'a [ClassInfo],
}

impl Reader<'_> {
    pub(super) fn here(&self) -> u64 {
        self.c.pos() as u64 + self.keylen
    }

    /// `TObject`: version, unique id, bits (and a process id when referenced).
    pub(super) fn tobject(&mut self) -> Result<(), BufError> {
        let v = self.c.versioned()?;
        self.c.skip(4)?;
        let bits = self.c.u32()?;
        if bits & IS_REFERENCED != 0 {
            self.c.skip(2)?;
        }
        self.c.finish(v)
    }

    /// `TNamed`: name and title.
    pub(super) fn tnamed(&mut self) -> Result<(String, String), BufError> {
        let v = self.c.versioned()?;
        self.tobject()?;
        let name = self.c.tstring()?;
        let title = self.c.tstring()?;
        self.c.finish(v)?;
        Ok((name, title))
    }

    /// An object whose members are not needed, skipped by its byte count.
    pub(super) fn skip_versioned(&mut self, what: &str) -> Result<(), BufError> {
        let v = self.c.versioned()?;
        if v.end.is_none() {
            return Err(BufError::Bad(format!(
                "{what} written without a byte count"
            )));
        }
        self.c.finish(v)
    }

    pub(super) fn ttree(&mut self) -> Result<(i16, i64, Vec<BranchInfo>), BufError> {
        let v = self.c.versioned()?;
        if v.version < FIRST_KNOWN_TTREE {
            return self.old_ttree(v);
        }
        self.tnamed()?;
        for base in ["TAttLine", "TAttFill", "TAttMarker"] {
            self.skip_versioned(base)?;
        }
        let entries = self.c.i64()?;
        // The members between fEntries and fBranches, by class version (ROOT's TTree.h).
        match v.version {
            16 => self.c.skip(3 * 8 + 8 + 3 * 4 + 5 * 8)?,
            17 => self.c.skip(3 * 8 + 8 + 4 * 4 + 5 * 8)?,
            18 => self.c.skip(4 * 8 + 8 + 4 * 4 + 6 * 8)?,
            _ => {
                // 19 and later: fNClusterRange and the two cluster arrays; 20 and later: the
                // IO features object.
                self.c.skip(4 * 8 + 8 + 4 * 4)?;
                let n = self.c.len32("fNClusterRange")?;
                self.c.skip(6 * 8)?;
                for _ in 0..2 {
                    self.c.skip(1)?;
                    self.c.skip(
                        n.checked_mul(8)
                            .ok_or(BufError::Bad("cluster ranges".into()))?,
                    )?;
                }
                if v.version >= 20 {
                    self.skip_versioned("TIOFeatures")?;
                }
            }
        }
        let branches = self.branch_array()?;
        // fLeaves, fAliases, indices, friends, user info, branch ref: not needed.
        self.c.finish(v)?;
        Ok((v.version, entries, branches))
    }

    /// A `TNtuple` or `TNtupleD`: its `TTree` base, then `fNvar`.
    pub(super) fn ntuple(&mut self) -> Result<(i16, i64, Vec<BranchInfo>), BufError> {
        let v = self.c.versioned()?;
        let tree = self.ttree()?;
        self.c.finish(v)?;
        Ok(tree)
    }

    /// A `TObjArray` header: its objects follow; returns how many.
    pub(super) fn objarray_header(&mut self) -> Result<(Versioned, usize), BufError> {
        let v = self.c.versioned()?;
        if v.version > 2 {
            self.tobject()?;
        }
        if v.version > 1 {
            self.c.tstring()?;
        }
        let n = self.c.len32("TObjArray size")?;
        self.c.skip(4)?; // fLowerBound
        Ok((v, n))
    }

    /// A `TObjArray`'s objects.
    pub(super) fn objarray(&mut self) -> Result<Vec<Any>, BufError> {
        let (v, n) = self.objarray_header()?;
        let mut items = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            items.push(self.object_any()?);
        }
        self.c.finish(v)?;
        Ok(items)
    }

    /// A `TObjArray`'s branches (objects of other classes left out).
    pub(super) fn branch_array(&mut self) -> Result<Vec<BranchInfo>, BufError> {
        Ok(self
            .objarray()?
            .into_iter()
            .filter_map(Any::into_branch)
            .collect())
    }

    /// A `TObjArray`'s leaves (objects of other classes left out).
    pub(super) fn leaf_array(&mut self) -> Result<Vec<LeafInfo>, BufError> {
        Ok(self
            .objarray()?
            .into_iter()
            .filter_map(Any::into_leaf)
            .collect())
    }

    pub(super) fn basket_array(&mut self) -> Result<Vec<EmbeddedBasket>, BufError> {
        let (v, n) = self.objarray_header()?;
        let mut out = Vec::new();
        for _ in 0..n {
            out.extend(self.object_any()?.into_basket());
        }
        self.c.finish(v)?;
        Ok(out)
    }

    /// A pointer member: null, a reference to an object read before, or a new object with its
    /// class (a tag naming a new class or one seen before).
    pub(super) fn object_any(&mut self) -> Result<Any, BufError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(BufError::Bad("objects nest too deep".into()));
        }
        let result = self.object_any_inner();
        self.depth -= 1;
        result
    }

    pub(super) fn object_any_inner(&mut self) -> Result<Any, BufError> {
        let beg = self.here();
        let first = self.c.u32()?;
        let (counted, end, tag) = if first & BYTE_COUNT == 0 || first == NEW_CLASS {
            (false, None, first)
        } else {
            let count = u64::from(first & !BYTE_COUNT);
            let end = (beg - self.keylen + 4 + count) as usize;
            (true, Some(end), self.c.u32()?)
        };
        let start = self.here() - 4;
        let class = if tag & CLASS_MASK == 0 {
            // A reference to an object read before (0: null).
            if let Some(end) = end {
                self.c.seek(end)?;
            }
            return Ok(match tag {
                0 => Any::Null,
                t => match self.refs.get(&u64::from(t)) {
                    Some(Ref::Object(name)) => Any::Named(name.clone()),
                    _ => Any::Named(None),
                },
            });
        } else if tag == NEW_CLASS {
            let name = self.c.cstring()?;
            let at = if counted {
                start + MAP_OFFSET
            } else {
                self.refs.len() as u64 + 1
            };
            self.refs.insert(at, Ref::Class(name.clone()));
            name
        } else {
            let at = u64::from(tag & !CLASS_MASK);
            match self.refs.get(&at) {
                Some(Ref::Class(name)) => name.clone(),
                _ => {
                    return Err(BufError::Bad(format!(
                        "object refers to an unknown class (tag {at})"
                    )));
                }
            }
        };
        let obj = self.body(&class, end)?;
        let name = match &obj {
            Any::Branch(b) => Some(b.name.clone()),
            Any::Leaf(l) => Some(l.name.clone()),
            Any::Named(n) => n.clone(),
            _ => None,
        };
        let at = if counted {
            beg + MAP_OFFSET
        } else {
            self.refs.len() as u64 + 1
        };
        self.refs.insert(at, Ref::Object(name));
        if let Some(end) = end {
            self.c.seek(end)?;
        }
        Ok(obj)
    }

    /// The members of an object of `class`; others are skipped to `end`.
    pub(super) fn body(&mut self, class: &str, end: Option<usize>) -> Result<Any, BufError> {
        Ok(match class {
            "TBranch" | "TBranchElement" | "TBranchObject" | "TBranchSTL" => {
                Any::Branch(Box::new(self.branch(class)?))
            }
            c if c.starts_with("TLeaf") => Any::Leaf(self.leaf(class)?),
            "TBasket" => {
                let h = basket_header(&mut self.c)?;
                if h.nbytes <= h.keylen {
                    Any::Basket(self.embedded_basket(h)?)
                } else if let Some(end) = end {
                    // The header of a basket written to its own key (some writers keep it in
                    // the branch's basket list too): its data is read through the basket table.
                    self.c.seek(end)?;
                    Any::Named(None)
                } else {
                    return Err(BufError::Bad(
                        "a written basket's header without a byte count".into(),
                    ));
                }
            }
            "TList" => Any::List(self.tlist()?),
            "TObjArray" => Any::List(self.objarray()?),
            "TStreamerInfo" => Any::Class(self.streamer_info()?),
            c if c.starts_with("TStreamer") => Any::Member(self.streamer_element(c)?),
            other => match end {
                Some(end) => {
                    self.c.seek(end)?;
                    Any::Named(None)
                }
                None => {
                    return Err(BufError::Bad(format!(
                        "unsupported: an object of class '{other}' without a byte count"
                    )));
                }
            },
        })
    }

    /// `TList`: its objects (each followed by an option string).
    pub(super) fn tlist(&mut self) -> Result<Vec<Any>, BufError> {
        let v = self.c.versioned()?;
        if v.version > 3 {
            self.tobject()?;
        }
        self.c.tstring()?; // fName
        let n = self.c.len32("TList size")?;
        let mut out = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            out.push(self.object_any()?);
            self.c.tstring()?; // the object's option
        }
        self.c.finish(v)?;
        Ok(out)
    }

    /// `TStreamerInfo`: the class's name and its members.
    pub(super) fn streamer_info(&mut self) -> Result<ClassInfo, BufError> {
        let v = self.c.versioned()?;
        let (name, _) = self.tnamed()?;
        self.c.skip(4)?; // fCheckSum
        let version = self.c.i32()?;
        let members = match self.object_any()? {
            Any::List(items) => items
                .into_iter()
                .filter_map(|a| match a {
                    Any::Member(m) => Some(m),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        self.c.finish(v)?;
        Ok(ClassInfo {
            name,
            version,
            members,
        })
    }

    /// Any `TStreamerElement` subclass of class `class`: the element's name, title and type
    /// name (the subclass's own members are skipped).
    pub(super) fn streamer_element(&mut self, class: &str) -> Result<MemberInfo, BufError> {
        let outer = self.c.versioned()?;
        if class == "TStreamerSTLstring" {
            // Its base `TStreamerSTL` comes between it and `TStreamerElement`.
            self.c.versioned()?;
        }
        let inner = self.c.versioned()?;
        let (name, title) = self.tnamed()?;
        let code = self.c.i32()?;
        self.c.skip(4)?; // fSize
        let array_len = self.c.len32("fArrayLength")?;
        self.c.skip(4)?; // fArrayDim
        if inner.version == 1 {
            let n = self.c.len32("fMaxIndex")?;
            self.c
                .skip(n.checked_mul(4).ok_or(BufError::Bad("fMaxIndex".into()))?)?;
        } else {
            self.c.skip(5 * 4)?;
        }
        let type_name = self.c.tstring()?;
        self.c.finish(inner)?;
        if outer.end.is_none() {
            return Err(BufError::Bad(
                "a streamer element without a byte count".into(),
            ));
        }
        let count = if class == "TStreamerBasicPointer" {
            self.c.skip(4)?; // fCountVersion
            Some(self.c.tstring()?)
        } else {
            None
        };
        self.c.finish(outer)?;
        Ok(MemberInfo {
            name,
            title,
            type_name,
            code,
            array_len,
            is_base: class == "TStreamerBase",
            count,
        })
    }

    pub(super) fn branch(&mut self, class: &str) -> Result<BranchInfo, BufError> {
        let outer = self.c.versioned()?;
        let mut b = if class == "TBranch" {
            self.tbranch_members(outer)?
        } else {
            let inner = self.c.versioned()?;
            let mut b = self.tbranch_members(inner)?;
            self.c.finish(inner)?;
            if class == "TBranchElement" {
                b.element = Some(self.element_members(outer.version)?);
            }
            b
        };
        b.class = class.to_owned();
        self.c.finish(outer)?;
        Ok(b)
    }

    /// `TBranch`'s members (its own byte count and version in `v`).
    pub(super) fn tbranch_members(&mut self, v: Versioned) -> Result<BranchInfo, BufError> {
        if v.version < FIRST_KNOWN_TBRANCH {
            return self.old_tbranch(v);
        }
        let (name, title) = self.tnamed()?;
        self.skip_versioned("TAttFill")?;
        self.c.skip(4 + 4)?; // fCompress, fBasketSize
        let entry_offset_len = self.c.i32()?;
        let write_basket = self.c.len32("fWriteBasket")?;
        self.c.skip(8)?; // fEntryNumber
        if v.version >= 13 {
            self.skip_versioned("TIOFeatures")?;
        }
        self.c.skip(4)?; // fOffset
        let max_baskets = self.c.len32("fMaxBaskets")?;
        self.c.skip(4)?; // fSplitLevel
        let entries = self.c.i64()?;
        if v.version >= 11 {
            self.c.skip(8)?; // fFirstEntry
        }
        self.c.skip(8 + 8)?; // fTotBytes, fZipBytes
        let branches = self.branch_array()?;
        let leaves = self.leaf_array()?;
        let embedded = self.basket_array()?;
        if write_basket > max_baskets {
            return Err(BufError::Bad(format!(
                "branch '{name}': {write_basket} baskets written but room for {max_baskets}"
            )));
        }
        self.c.skip(1)?;
        let basket_bytes = self.c.i32s(max_baskets)?;
        self.c.skip(1)?;
        let basket_entry = self.c.i64s(max_baskets)?;
        self.c.skip(1)?; // 1, or 2 in files with seeks past 2 GB: the array is 64-bit either way
        let basket_seek = self.c.i64s(max_baskets)?;
        self.c.finish(v)?;
        Ok(BranchInfo {
            class: String::new(),
            name,
            title,
            entries,
            entry_offset_len,
            leaves,
            basket_bytes,
            basket_entry,
            basket_seek,
            write_basket,
            embedded,
            element: None,
            branches,
        })
    }

    /// `TBranchElement`'s own members, after its `TBranch` base.
    pub(super) fn element_members(&mut self, version: i16) -> Result<ElementInfo, BufError> {
        let class_name = self.c.tstring()?;
        self.c.tstring()?; // fParentName
        let clones_name = self.c.tstring()?;
        self.c.skip(4)?; // fCheckSum
        let class_version = if version >= 10 {
            i32::from(self.c.i16()?)
        } else {
            self.c.i32()?
        };
        let id = self.c.i32()?;
        let kind = self.c.i32()?;
        let streamer_type = self.c.i32()?;
        self.c.skip(4)?; // fMaximum
        let count_branch = match self.object_any()? {
            Any::Branch(b) => Some(b.name.clone()),
            Any::Named(n) => n,
            _ => None,
        };
        self.object_any()?; // fBranchCount2
        Ok(ElementInfo {
            class_name,
            clones_name,
            class_version,
            id,
            kind,
            streamer_type,
            count_branch,
            member: None,
        })
    }

    pub(super) fn leaf(&mut self, class: &str) -> Result<LeafInfo, BufError> {
        let outer = self.c.versioned()?;
        let inner = self.c.versioned()?; // TLeaf
        let (name, title) = self.tnamed()?;
        let len = self.c.i32()?;
        let len_type = self.c.i32()?;
        self.c.skip(4 + 1)?; // fOffset, fIsRange
        let unsigned = self.c.u8()? != 0;
        let count_leaf = match self.object_any()? {
            Any::Leaf(l) => Some(l.name),
            Any::Named(n) => n,
            _ => None,
        };
        self.c.finish(inner)?;
        let element_type = if class == "TLeafElement" {
            self.c.skip(4)?; // fID
            self.c.i32()?
        } else {
            -1
        };
        self.c.finish(outer)?;
        Ok(LeafInfo {
            class: class.to_owned(),
            name,
            title,
            len,
            len_type,
            unsigned,
            count_leaf,
            element_type,
        })
    }

    /// A `TBasket` written inside the tree header (its key and header `h` read, no bytes on
    /// file beyond the key): the entry offsets and the data.
    pub(super) fn embedded_basket(&mut self, h: BasketHeader) -> Result<EmbeddedBasket, BufError> {
        let entries = h.entries;
        let border = h.border()?;
        let offsets = if h.nev_buf_size > 8 {
            // The offsets come first: a count, then one per entry (from the key's start); the
            // data's end closes the list.
            self.c.skip(4)?;
            let raw = self.c.take(
                entries
                    .checked_mul(4)
                    .ok_or(BufError::Bad("too many entry offsets".into()))?,
            )?;
            Some(entry_offsets(raw, entries, h.keylen, border))
        } else {
            None
        };
        self.c.skip(h.keylen)?; // a second copy of the key
        let data = self.c.take(border)?.to_vec();
        Ok(EmbeddedBasket {
            data,
            offsets,
            entries,
        })
    }
}
