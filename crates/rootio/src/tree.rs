//! TTree metadata: the tree's entries and its branches (with their leaves and baskets), read
//! from the TTree object as ROOT 5 to 6.40 and uproot write it.
//!
//! The classes a reader needs (`TTree`, `TBranch`, `TBranchElement`, `TBranchObject`,
//! `TLeaf*`, `TObjArray`, `TBasket`) are read member by member for the versions ROOT has
//! written; members past the ones needed are skipped by the object's byte count, so a newer
//! version that appends members still reads. Any other class inside is skipped by its byte
//! count.

mod legacy;
#[cfg(test)]
mod testbytes;

use std::collections::HashMap;

use legacy::{FIRST_KNOWN_TBRANCH, FIRST_KNOWN_TTREE, tree_version};

use crate::cursor::{Cursor, Versioned};
use crate::error::{BufError, RootError};
use crate::file::{Key, ObjectBytes, RootFile};

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

/// What an object tag refers to.
#[derive(Debug, Clone)]
enum Ref {
    Class(String),
    /// An object read before: its class and name (leaves and branches are referred to by name).
    Object(Option<String>),
}

/// One object read by [`Reader::object_any`].
enum Any {
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
    fn into_branch(self) -> Option<BranchInfo> {
        match self {
            Any::Branch(b) => Some(*b),
            _ => None,
        }
    }

    fn into_leaf(self) -> Option<LeafInfo> {
        match self {
            Any::Leaf(l) => Some(l),
            _ => None,
        }
    }

    fn into_basket(self) -> Option<EmbeddedBasket> {
        match self {
            Any::Basket(b) => Some(b),
            _ => None,
        }
    }
}

struct Reader<'a> {
    c: Cursor<'a>,
    /// Object references count positions from the start of the key.
    keylen: u64,
    refs: HashMap<u64, Ref>,
    depth: usize,
    /// The file's streamer info, for classes older than the layouts known here (else empty).
    classes: &'a [ClassInfo],
}

impl Reader<'_> {
    fn here(&self) -> u64 {
        self.c.pos() as u64 + self.keylen
    }

    /// `TObject`: version, unique id, bits (and a process id when referenced).
    fn tobject(&mut self) -> Result<(), BufError> {
        let v = self.c.versioned()?;
        self.c.skip(4)?;
        let bits = self.c.u32()?;
        if bits & IS_REFERENCED != 0 {
            self.c.skip(2)?;
        }
        self.c.finish(v)
    }

    /// `TNamed`: name and title.
    fn tnamed(&mut self) -> Result<(String, String), BufError> {
        let v = self.c.versioned()?;
        self.tobject()?;
        let name = self.c.tstring()?;
        let title = self.c.tstring()?;
        self.c.finish(v)?;
        Ok((name, title))
    }

    /// An object whose members are not needed, skipped by its byte count.
    fn skip_versioned(&mut self, what: &str) -> Result<(), BufError> {
        let v = self.c.versioned()?;
        if v.end.is_none() {
            return Err(BufError::Bad(format!(
                "{what} written without a byte count"
            )));
        }
        self.c.finish(v)
    }

    fn ttree(&mut self) -> Result<(i16, i64, Vec<BranchInfo>), BufError> {
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
    fn ntuple(&mut self) -> Result<(i16, i64, Vec<BranchInfo>), BufError> {
        let v = self.c.versioned()?;
        let tree = self.ttree()?;
        self.c.finish(v)?;
        Ok(tree)
    }

    /// A `TObjArray` header: its objects follow; returns how many.
    fn objarray_header(&mut self) -> Result<(Versioned, usize), BufError> {
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
    fn objarray(&mut self) -> Result<Vec<Any>, BufError> {
        let (v, n) = self.objarray_header()?;
        let mut items = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            items.push(self.object_any()?);
        }
        self.c.finish(v)?;
        Ok(items)
    }

    fn branch_array(&mut self) -> Result<Vec<BranchInfo>, BufError> {
        let (v, n) = self.objarray_header()?;
        let mut out = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            out.extend(self.object_any()?.into_branch());
        }
        self.c.finish(v)?;
        Ok(out)
    }

    fn leaf_array(&mut self) -> Result<Vec<LeafInfo>, BufError> {
        let (v, n) = self.objarray_header()?;
        let mut out = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            out.extend(self.object_any()?.into_leaf());
        }
        self.c.finish(v)?;
        Ok(out)
    }

    fn basket_array(&mut self) -> Result<Vec<EmbeddedBasket>, BufError> {
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
    fn object_any(&mut self) -> Result<Any, BufError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(BufError::Bad("objects nest too deep".into()));
        }
        let result = self.object_any_inner();
        self.depth -= 1;
        result
    }

    fn object_any_inner(&mut self) -> Result<Any, BufError> {
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
    fn body(&mut self, class: &str, end: Option<usize>) -> Result<Any, BufError> {
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
    fn tlist(&mut self) -> Result<Vec<Any>, BufError> {
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
    fn streamer_info(&mut self) -> Result<ClassInfo, BufError> {
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
    fn streamer_element(&mut self, class: &str) -> Result<MemberInfo, BufError> {
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

    fn branch(&mut self, class: &str) -> Result<BranchInfo, BufError> {
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
    fn tbranch_members(&mut self, v: Versioned) -> Result<BranchInfo, BufError> {
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
    fn element_members(&mut self, version: i16) -> Result<ElementInfo, BufError> {
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

    fn leaf(&mut self, class: &str) -> Result<LeafInfo, BufError> {
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
    fn embedded_basket(&mut self, h: BasketHeader) -> Result<EmbeddedBasket, BufError> {
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
