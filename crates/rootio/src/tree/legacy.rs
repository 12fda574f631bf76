//! Trees of ROOT before 5.20 (`TTree` class versions 5 to 15, `TBranch` 6 to 9): read member by
//! member as the file's own streamer info lays them out, the way ROOT itself reads them
//! (`ReadClassBuffer`). Old Geant4 and ROOT 4 outputs hold such trees; the members a reader
//! needs kept their names across the versions, only their types and places changed
//! (`fEntries` a `double`, the basket table `int` arrays).

use std::collections::HashMap;

use super::{Any, BranchInfo, ClassInfo, MemberInfo, Reader};
use crate::cursor::{Cursor, Versioned};
use crate::error::BufError;

/// The first `TTree` class version laid out in [`Reader::ttree`] (ROOT 5.20).
pub(super) const FIRST_KNOWN_TTREE: i16 = 16;
/// The first `TBranch` class version laid out in [`Reader::tbranch_members`] (ROOT 5.20).
pub(super) const FIRST_KNOWN_TBRANCH: i16 = 10;

/// The `TTree` class version of a tree object of class `class` (`TTree`, `TNtuple`, `TNtupleD`),
/// when its first bytes can be read.
pub(super) fn tree_version(bytes: &[u8], class: &str) -> Option<i16> {
    let mut c = Cursor::new(bytes);
    let v = c.versioned().ok()?;
    if class == "TTree" {
        Some(v.version)
    } else {
        c.versioned().ok().map(|t| t.version)
    }
}

/// A member read by the streamer info, as far as the tree's metadata uses it.
enum Value {
    Int(i64),
    Real(f64),
    Ints(Vec<i64>),
    Objects(Vec<Any>),
    Text(String),
}

/// The members of one object, by name.
struct Members {
    class: &'static str,
    values: HashMap<String, Value>,
}

impl Members {
    fn missing(&self, name: &str) -> BufError {
        BufError::Bad(format!(
            "unsupported: a {} whose streamer info has no integer member {name}",
            self.class
        ))
    }

    fn int(&self, name: &str) -> Result<i64, BufError> {
        match self.values.get(name) {
            Some(Value::Int(x)) => Ok(*x),
            // `fEntries` of ROOT 4 and 5 trees and branches: a whole number kept as a double.
            Some(Value::Real(x)) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(*x as i64),
            _ => Err(self.missing(name)),
        }
    }

    fn count(&self, name: &str) -> Result<usize, BufError> {
        let x = self.int(name)?;
        usize::try_from(x).map_err(|_| BufError::Bad(format!("negative {name}: {x}")))
    }

    fn text(&self, name: &str) -> String {
        match self.values.get(name) {
            Some(Value::Text(t)) => t.clone(),
            _ => String::new(),
        }
    }

    fn ints(&mut self, name: &str) -> Vec<i64> {
        match self.values.remove(name) {
            Some(Value::Ints(v)) => v,
            _ => Vec::new(),
        }
    }

    fn objects(&mut self, name: &str) -> Vec<Any> {
        match self.values.remove(name) {
            Some(Value::Objects(v)) => v,
            _ => Vec::new(),
        }
    }
}

/// Bytes of one value of a basic streamer type (`kChar` 1 … `kFloat16` 19), and whether it is
/// an integer.
fn basic_size(code: i32) -> Option<(usize, bool)> {
    Some(match code {
        1 | 11 | 18 => (1, true),
        2 | 12 => (2, true),
        3 | 6 | 13 | 15 => (4, true),
        4 | 14 | 16 | 17 => (8, true),
        5 => (4, false),
        8 => (8, false),
        _ => return None,
    })
}

/// One big-endian integer of `size` bytes, signed unless `code` is an unsigned type.
fn int_value(b: &[u8], code: i32) -> i64 {
    let unsigned = matches!(code, 11..=15 | 17 | 18);
    match (b.len(), unsigned) {
        (1, true) => i64::from(b[0]),
        (1, false) => i64::from(b[0] as i8),
        (2, true) => i64::from(u16::from_be_bytes([b[0], b[1]])),
        (2, false) => i64::from(i16::from_be_bytes([b[0], b[1]])),
        (4, true) => i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        (4, false) => i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        _ => i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
    }
}

impl Reader<'_> {
    /// The members of a `class` object of version `v` (its header read), as the file's
    /// streamer info for that version lays them out; the cursor ends after the object.
    fn by_streamer_info(&mut self, class: &'static str, v: Versioned) -> Result<Members, BufError> {
        let info: &ClassInfo = self
            .classes
            .iter()
            .find(|c| c.name == class && c.version == i32::from(v.version))
            .ok_or_else(|| {
                BufError::Bad(format!(
                    "unsupported: {class} class version {} (ROOT before 5.20) without its \
                     streamer info in the file",
                    v.version
                ))
            })?;
        let mut out = Members {
            class,
            values: HashMap::new(),
        };
        for m in &info.members {
            if m.is_base && m.name == "TNamed" {
                let (name, title) = self.tnamed()?;
                out.values.insert("fName".into(), Value::Text(name));
                out.values.insert("fTitle".into(), Value::Text(title));
            } else if let Some(value) = self.member(class, m, &out)? {
                out.values.insert(m.name.clone(), value);
            }
        }
        self.c.finish(v)?;
        Ok(out)
    }

    /// One member `m` of a `class` object (`read`: its members before this one).
    fn member(
        &mut self,
        class: &str,
        m: &MemberInfo,
        read: &Members,
    ) -> Result<Option<Value>, BufError> {
        let unsupported = || {
            BufError::Bad(format!(
                "unsupported: member {} of an old {class} (streamer type {}, {})",
                m.name, m.code, m.type_name
            ))
        };
        if m.is_base {
            match m.name.as_str() {
                "TObject" => self.tobject()?,
                other => self.skip_versioned(other)?,
            }
            return Ok(None);
        }
        Ok(Some(match m.code {
            c @ 1..=19 => {
                let (size, integer) = basic_size(c).ok_or_else(unsupported)?;
                let b = self.c.take(size)?;
                match (integer, size) {
                    (true, _) => Value::Int(int_value(b, c)),
                    (false, 4) => {
                        Value::Real(f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]])))
                    }
                    (false, _) => Value::Real(f64::from_be_bytes([
                        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                    ])),
                }
            }
            c @ 21..=39 => {
                let (size, _) = basic_size(c - 20).ok_or_else(unsupported)?;
                self.c
                    .skip(size.checked_mul(m.array_len).ok_or_else(unsupported)?)?;
                return Ok(None);
            }
            c @ 41..=59 => {
                // A pointer to an array: a flag, then the array when the flag is set, as long
                // as an integer member read before says.
                let (size, integer) = basic_size(c - 40).ok_or_else(unsupported)?;
                if self.c.u8()? == 0 {
                    return Ok(Some(Value::Ints(Vec::new())));
                }
                let n = read.count(m.count.as_deref().unwrap_or_default())?;
                let b = self.c.take(size.checked_mul(n).ok_or_else(unsupported)?)?;
                if !integer {
                    return Ok(None);
                }
                Value::Ints(b.chunks_exact(size).map(|x| int_value(x, c - 40)).collect())
            }
            61 if m.type_name == "TObjArray" => Value::Objects(self.objarray()?),
            61 => {
                self.skip_versioned(&m.type_name)?;
                return Ok(None);
            }
            62 => {
                // `TArrayD`, `TArrayI`, …: a length and the values, without a header.
                let size = match m.type_name.as_str() {
                    "TArrayC" => 1,
                    "TArrayS" => 2,
                    "TArrayI" | "TArrayF" => 4,
                    "TArrayD" | "TArrayL64" => 8,
                    _ => return Err(unsupported()),
                };
                let n = self.c.len32(&m.name)?;
                self.c.skip(n.checked_mul(size).ok_or_else(unsupported)?)?;
                return Ok(None);
            }
            63 | 64 => Value::Objects(vec![self.object_any()?]),
            65 => Value::Text(self.c.tstring()?),
            66 => {
                self.tobject()?;
                return Ok(None);
            }
            67 => {
                self.tnamed()?;
                return Ok(None);
            }
            _ => return Err(unsupported()),
        }))
    }

    /// A `TTree` of a version before 5.20: its entries and branches.
    pub(super) fn old_ttree(
        &mut self,
        v: Versioned,
    ) -> Result<(i16, i64, Vec<BranchInfo>), BufError> {
        let mut m = self.by_streamer_info("TTree", v)?;
        let entries = m.int("fEntries")?;
        let branches = m
            .objects("fBranches")
            .into_iter()
            .filter_map(Any::into_branch)
            .collect();
        Ok((v.version, entries, branches))
    }

    /// A `TBranch` of a version before 5.20 (its header in `v`).
    pub(super) fn old_tbranch(&mut self, v: Versioned) -> Result<BranchInfo, BufError> {
        let mut m = self.by_streamer_info("TBranch", v)?;
        let (name, title) = (m.text("fName"), m.text("fTitle"));
        let write_basket = m.count("fWriteBasket")?;
        let entries = m.int("fEntries")?;
        let entry_offset_len = i32::try_from(m.int("fEntryOffsetLen")?)
            .map_err(|_| BufError::Bad(format!("branch '{name}': fEntryOffsetLen")))?;
        let basket_bytes: Vec<i32> = m
            .ints("fBasketBytes")
            .into_iter()
            .map(|x| i32::try_from(x).unwrap_or(-1))
            .collect();
        let basket_entry = m.ints("fBasketEntry");
        let basket_seek = m.ints("fBasketSeek");
        let tables = basket_bytes
            .len()
            .min(basket_entry.len())
            .min(basket_seek.len());
        if write_basket > tables {
            return Err(BufError::Bad(format!(
                "branch '{name}': {write_basket} baskets written but room for {tables}"
            )));
        }
        let branches = m
            .objects("fBranches")
            .into_iter()
            .filter_map(Any::into_branch)
            .collect();
        let leaves = m
            .objects("fLeaves")
            .into_iter()
            .filter_map(Any::into_leaf)
            .collect();
        let embedded = m
            .objects("fBaskets")
            .into_iter()
            .filter_map(Any::into_basket)
            .collect();
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
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::testbytes::W;
    use super::super::{ClassInfo, MemberInfo, Reader};
    use crate::cursor::Cursor;

    fn member(name: &str, code: i32, type_name: &str) -> MemberInfo {
        MemberInfo {
            name: name.into(),
            title: String::new(),
            type_name: type_name.into(),
            code,
            array_len: 0,
            is_base: code == 0 || code == 67 && type_name == "BASE",
            count: (code > 40 && code < 60).then(|| "fMaxBaskets".into()),
        }
    }

    /// The streamer info of ROOT 4's `TTree` (version 5) and `TBranch` (version 8), as an old
    /// Geant4 output holds it.
    fn root4_classes() -> Vec<ClassInfo> {
        let base = |n: &str| member(n, if n == "TNamed" { 67 } else { 0 }, "BASE");
        let mut tree = vec![base("TNamed"), base("TAttLine"), base("TAttFill")];
        tree.push(base("TAttMarker"));
        for n in ["fEntries", "fTotBytes", "fZipBytes", "fSavedBytes"] {
            tree.push(member(n, 8, "double"));
        }
        for n in ["fTimerInterval", "fScanField", "fUpdate", "fMaxEntryLoop"] {
            tree.push(member(n, 3, "int"));
        }
        for n in ["fMaxVirtualSize", "fAutoSave", "fEstimate"] {
            tree.push(member(n, 3, "int"));
        }
        tree.push(member("fBranches", 61, "TObjArray"));
        tree.push(member("fLeaves", 61, "TObjArray"));
        tree.push(member("fIndexValues", 62, "TArrayD"));
        tree.push(member("fIndex", 62, "TArrayI"));
        let mut branch = vec![base("TNamed"), base("TAttFill")];
        for n in [
            "fCompress",
            "fBasketSize",
            "fEntryOffsetLen",
            "fWriteBasket",
        ] {
            branch.push(member(n, 3, "int"));
        }
        branch.push(member("fEntryNumber", 3, "int"));
        branch.push(member("fOffset", 3, "int"));
        branch.push(member("fMaxBaskets", 6, "int"));
        branch.push(member("fSplitLevel", 3, "int"));
        for n in ["fEntries", "fTotBytes", "fZipBytes"] {
            branch.push(member(n, 8, "double"));
        }
        for n in ["fBranches", "fLeaves", "fBaskets"] {
            branch.push(member(n, 61, "TObjArray"));
        }
        for n in ["fBasketBytes", "fBasketEntry", "fBasketSeek"] {
            branch.push(member(n, 43, "int*"));
        }
        branch.push(member("fFileName", 65, "TString"));
        vec![
            ClassInfo {
                name: "TTree".into(),
                version: 5,
                members: tree,
            },
            ClassInfo {
                name: "TBranch".into(),
                version: 8,
                members: branch,
            },
        ]
    }

    /// A ROOT 4 tree of 4808 entries with one `int` branch in two baskets.
    fn root4_tree() -> Vec<u8> {
        let leaf = |w: &mut W| {
            w.versioned(1, |w| {
                w.versioned(2, |w| {
                    w.named("Event", "Event/I").i32(1).i32(4).i32(0);
                    w.put(&[0, 0]).i32(0); // fIsRange, fIsUnsigned, no fLeafCount
                });
                w.i32(0).i32(998); // fMinimum, fMaximum
            });
        };
        let branch = |w: &mut W| {
            w.versioned(8, |w| {
                w.named("Event", "Event/I");
                w.versioned(1, |w| {
                    w.put(&[0; 4]);
                });
                // fCompress, fBasketSize, fEntryOffsetLen, fWriteBasket, fEntryNumber,
                // fOffset, fMaxBaskets, fSplitLevel.
                for x in [1, 32000, 0, 2, 4808, 0, 3, 0] {
                    w.i32(x);
                }
                w.f64(4808.0).f64(19432.0).f64(9000.0);
                w.objarray(&[]).objarray(&[("TLeafI", &leaf)]).objarray(&[]);
                w.put(&[1]).i32(16000).i32(3400).i32(0);
                w.put(&[1]).i32(0).i32(4000).i32(0);
                w.put(&[1]).i32(1024).i32(17024).i32(0);
                w.text("");
            });
        };
        let mut w = W::default();
        w.versioned(5, |w| {
            w.named("HitStrips", "hits");
            w.versioned(1, |w| {
                w.put(&[0; 6]);
            });
            w.versioned(1, |w| {
                w.put(&[0; 4]);
            });
            w.versioned(1, |w| {
                w.put(&[0; 8]);
            });
            w.f64(4808.0).f64(19432.0).f64(9000.0).f64(0.0);
            for x in [0, 25, 5, 1_000_000_000, 10_000_000, 100_000_000, 1_000_000] {
                w.i32(x);
            }
            w.objarray(&[("TBranch", &branch)]).objarray(&[]);
            w.i32(0).i32(0); // empty fIndexValues, fIndex
        });
        w.0
    }

    fn reader<'a>(bytes: &'a [u8], classes: &'a [ClassInfo]) -> Reader<'a> {
        Reader {
            c: Cursor::new(bytes),
            keylen: 0,
            refs: HashMap::new(),
            depth: 0,
            classes,
        }
    }

    #[test]
    fn a_root4_tree_reads_by_the_files_streamer_info() {
        let bytes = root4_tree();
        let classes = root4_classes();
        let (version, entries, branches) = reader(&bytes, &classes).ttree().expect("tree");
        assert_eq!((version, entries), (5, 4808));
        let [b] = branches.as_slice() else {
            panic!("one branch: {branches:?}")
        };
        assert_eq!((b.name.as_str(), b.title.as_str()), ("Event", "Event/I"));
        assert_eq!(
            (b.entries, b.write_basket, b.entry_offset_len),
            (4808, 2, 0)
        );
        assert_eq!(b.basket_bytes, [16000, 3400, 0]);
        assert_eq!(b.basket_entry, [0, 4000, 0]);
        assert_eq!(b.basket_seek, [1024, 17024, 0]);
        let [leaf] = b.leaves.as_slice() else {
            panic!("one leaf: {:?}", b.leaves)
        };
        assert_eq!(
            (leaf.class.as_str(), leaf.len, leaf.len_type),
            ("TLeafI", 1, 4)
        );
    }

    #[test]
    fn an_old_tree_without_its_streamer_info_is_unsupported_by_name() {
        let bytes = root4_tree();
        let Err(e) = reader(&bytes, &[]).ttree() else {
            panic!("read without its layout")
        };
        let message = e.to_string();
        assert!(
            message.starts_with("unsupported: TTree class version 5 (ROOT before 5.20)"),
            "{message}"
        );
    }
}
