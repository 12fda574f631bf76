//! From an RNTuple's field tree to the fields it holds as numbers: one per leaf, named by its
//! path as uproot names it (`Jet_pt`, `_collection1.Jet_pt`, `lorentz_vector.pt`,
//! `tuple.0`), with the steps from an entry to its values (fixed repetitions and at most one
//! collection) and its value columns.

use super::decode::{ColumnType, Encoding};
use super::meta::Schema;
use crate::read::{Interpretation, Layout, Number};

/// A step from an entry's items to its values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    /// Each item holds this many (a fixed-size array, a bitset).
    Repeat(u64),
    /// Each item is a collection: its offset columns, one per representation.
    Collection(Vec<u32>),
}

/// How a readable leaf's values are found.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Plan {
    /// From the entry down.
    pub steps: Vec<Step>,
    /// The value columns, one per representation.
    pub values: Vec<u32>,
    /// An `RNTupleCardinality` field: its values are the sizes its offset column gives.
    pub cardinality: bool,
}

/// A leaf of the field tree.
#[derive(Debug, Clone, PartialEq)]
pub struct NtupleField {
    /// Its path (`Jet_pt`, `_collection1.Jet_pt`, `lorentz_vector.pt`).
    pub name: String,
    /// The C++ type of its values as stored (`float`, `std::int32_t`,
    /// `ROOT::RNTupleCardinality<std::uint64_t>`).
    pub type_name: String,
    /// How its values read, or why they do not.
    pub read: Result<Interpretation, String>,
    /// The column types of its values (primary representation first), for messages.
    pub column_types: Vec<&'static str>,
    pub(crate) plan: Plan,
}

impl NtupleField {
    /// True when `other` reads the same columns the same way (a projected field and the field
    /// it projects): their values are the same.
    pub(crate) fn reads_like(&self, other: &NtupleField) -> bool {
        self.read.is_ok() && self.read == other.read && self.plan == other.plan
    }
}

/// The physical columns attached to each field (directly or as alias columns), in
/// serialisation order, grouped by representation index.
fn columns_by_field(schema: &Schema) -> Vec<Vec<Vec<u32>>> {
    let mut out: Vec<Vec<Vec<u32>>> = vec![Vec::new(); schema.fields.len()];
    let mut attach = |field: u32, column: u32| {
        let Some(slot) = out.get_mut(field as usize) else {
            return;
        };
        let repr = schema
            .columns
            .get(column as usize)
            .map_or(0, |c| usize::from(c.representation));
        if slot.len() <= repr {
            slot.resize(repr + 1, Vec::new());
        }
        slot[repr].push(column);
    };
    for (i, c) in schema.columns.iter().enumerate() {
        attach(c.field, i as u32);
    }
    for &(physical, field) in &schema.aliases {
        attach(field, physical);
    }
    out
}

/// The number a leaf type holds (`std::` and the `_t` spellings accepted).
fn number_of(type_name: &str) -> Option<Number> {
    let t = type_name.trim();
    if let Some(inner) = t
        .strip_prefix("ROOT::RNTupleCardinality<")
        .and_then(|r| r.strip_suffix('>'))
    {
        return number_of(inner);
    }
    if t == "std::byte" {
        return Some(Number::U8);
    }
    if t.starts_with("std::bitset<") {
        return Some(Number::Bool);
    }
    Number::from_cpp(t.strip_prefix("std::").unwrap_or(t))
}

struct Walk<'a> {
    schema: &'a Schema,
    columns: Vec<Vec<Vec<u32>>>,
    children: Vec<Vec<usize>>,
    out: Vec<NtupleField>,
}

impl Walk<'_> {
    /// A leaf that is not read, and why.
    fn refuse(&mut self, name: String, type_name: &str, why: impl Into<String>) {
        self.out.push(NtupleField {
            name,
            type_name: type_name.to_owned(),
            read: Err(why.into()),
            column_types: Vec::new(),
            plan: Plan {
                steps: Vec::new(),
                values: Vec::new(),
                cardinality: false,
            },
        });
    }

    /// The first column of each representation of `field`.
    fn principal(&self, field: usize) -> Vec<u32> {
        self.columns[field]
            .iter()
            .filter_map(|r| r.first().copied())
            .collect()
    }

    /// A record member's name in a path: tuple and pair members (`_0`, `_1`) by position.
    fn member_name(&self, parent: usize, child: usize) -> String {
        let n = &self.schema.fields[child].name;
        // Members of tuples and pairs (`_0`, `_1`) are named by their position, as uproot does.
        let shown = match n.strip_prefix('_') {
            Some(rest)
                if self.schema.fields[parent].role == 2
                    && !rest.is_empty()
                    && rest.bytes().all(|b| b.is_ascii_digit()) =>
            {
                rest
            }
            _ => n.as_str(),
        };
        shown.to_owned()
    }

    /// A record's members, its base classes' (anonymous fields `:_0`, `:_1`, … of the base's
    /// type) in their place, each with the names of the base classes it comes through,
    /// outermost last: `[member, innermost base, …, outermost base]`.
    fn flattened(&self, id: usize) -> Vec<(usize, Vec<String>)> {
        let mut out = Vec::new();
        for &c in &self.children[id] {
            let f = &self.schema.fields[c];
            let is_base = f.role == 2
                && f.name
                    .strip_prefix(":_")
                    .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
            if is_base {
                for (m, mut via) in self.flattened(c) {
                    via.push(f.type_name.clone());
                    out.push((m, via));
                }
            } else {
                out.push((c, vec![self.member_name(id, c)]));
            }
        }
        out
    }

    /// A record's members and their names, as uproot names them: a member by its name, and
    /// where two share one, each of those prefixed by the classes it comes through, outermost
    /// first, one more at a time until the names differ (`Child::base_a1`).
    fn record_members(&self, id: usize) -> Vec<(usize, String)> {
        let members = self.flattened(id);
        let named = |via: &[String], prefixes: usize| -> String {
            let prefixes = prefixes.min(via.len() - 1);
            let mut parts: Vec<&str> = via
                .iter()
                .rev()
                .take(prefixes)
                .map(String::as_str)
                .collect();
            parts.push(&via[0]);
            parts.join("::")
        };
        let most = members.iter().map(|(_, v)| v.len()).max().unwrap_or(1);
        let mut prefixes = vec![0usize; members.len()];
        loop {
            let names: Vec<String> = members
                .iter()
                .zip(&prefixes)
                .map(|((_, via), &p)| named(via, p))
                .collect();
            let shared: Vec<bool> = names
                .iter()
                .map(|n| names.iter().filter(|m| *m == n).count() > 1)
                .collect();
            if !shared.contains(&true) || prefixes.iter().all(|&p| p >= most) {
                return members.iter().map(|(c, _)| *c).zip(names).collect();
            }
            for (p, s) in prefixes.iter_mut().zip(shared) {
                if s {
                    *p += 1;
                }
            }
        }
    }

    fn visit(&mut self, id: usize, name: String, steps: Vec<Step>) {
        let f = &self.schema.fields[id];
        let type_name = f.type_name.clone();
        let children = self.children[id].clone();
        let collections = steps
            .iter()
            .filter(|s| matches!(s, Step::Collection(_)))
            .count();
        match f.role {
            // A collection: its items are the one child `_0`, or an untyped collection's members.
            1 => {
                if collections >= 1 {
                    return self.refuse(
                        name,
                        &type_name,
                        "a collection inside a collection (one level of collection is read)",
                    );
                }
                let offsets = self.principal(id);
                if offsets.is_empty() {
                    return self.refuse(name, &type_name, "a collection without an offset column");
                }
                let mut inner = steps;
                inner.push(Step::Collection(offsets));
                if let [only] = children.as_slice()
                    && self.schema.fields[*only].name == "_0"
                {
                    return self.visit(*only, name, inner);
                }
                for c in children {
                    let n = format!("{name}.{}", self.schema.fields[c].name);
                    self.visit(c, n, inner.clone());
                }
            }
            // A record: members by name (tuples and pairs by position), its base classes'
            // among them.
            2 => {
                for (c, shown) in self.record_members(id) {
                    let n = format!("{name}.{shown}");
                    self.visit(c, n, steps.clone());
                }
            }
            3 => self.refuse(name, &type_name, "a std::variant (variants are not read)"),
            4 => self.refuse(
                name,
                &type_name,
                "an object stored by ROOT's streamer (only numbers are read)",
            ),
            0 if f.repetition > 0 && !children.is_empty() => {
                // std::array<T, N> / T[N]: the child `_0`, N per item.
                let mut inner = steps;
                inner.push(Step::Repeat(f.repetition));
                let child = children[0];
                self.visit(child, name, inner);
            }
            0 if !children.is_empty() => {
                // std::atomic<T>, enums: the child `_0` holds the value.
                self.visit(children[0], name, steps);
            }
            0 => {
                let mut steps = steps;
                if f.repetition > 0 {
                    // std::bitset<N>: N bits per item.
                    steps.push(Step::Repeat(f.repetition));
                }
                self.leaf(id, name, steps);
            }
            other => self.refuse(
                name,
                &type_name,
                format!("a field of structural role {other}"),
            ),
        }
    }

    fn leaf(&mut self, id: usize, name: String, steps: Vec<Step>) {
        let f = &self.schema.fields[id];
        let type_name = f.type_name.clone();
        let reprs = self.columns[id].clone();
        if reprs.is_empty() || reprs.iter().all(Vec::is_empty) {
            return self.refuse(name, &type_name, "a field without columns");
        }
        if reprs.iter().any(|r| r.len() != 1) {
            let what = if type_name == "std::string" {
                "a string (only numbers are read)".to_owned()
            } else {
                format!("type '{type_name}' (only numbers are read)")
            };
            return self.refuse(name, &type_name, what);
        }
        let values: Vec<u32> = reprs.iter().map(|r| r[0]).collect();
        let mut column_types = Vec::new();
        for &c in &values {
            let rec = &self.schema.columns[c as usize];
            let Some(kind) = ColumnType::from_code(rec.kind) else {
                return self.refuse(
                    name,
                    &type_name,
                    format!(
                        "column type {:#x}, which format 1.0 does not define",
                        rec.kind
                    ),
                );
            };
            if let Err(e) = Encoding::new(kind, rec.bits, rec.range) {
                return self.refuse(name, &type_name, e);
            }
            column_types.push(kind.name());
        }
        let first = ColumnType::from_code(self.schema.columns[values[0] as usize].kind);
        let cardinality = type_name.starts_with("ROOT::RNTupleCardinality<");
        let number = number_of(&type_name).or_else(|| match first {
            Some(k) if k.is_real() => Some(Number::F64),
            _ => None,
        });
        let Some(number) = number else {
            return self.refuse(
                name,
                &type_name,
                format!("type '{type_name}' (only numbers are read)"),
            );
        };
        if first.is_some_and(ColumnType::is_index) && !cardinality {
            return self.refuse(name, &type_name, "an offset column read as values");
        }
        let collection = steps.iter().any(|s| matches!(s, Step::Collection(_)));
        let repeat: u64 = steps
            .iter()
            .map(|s| match s {
                Step::Repeat(n) => *n,
                Step::Collection(_) => 1,
            })
            .product();
        let layout = if collection {
            Layout::Jagged
        } else {
            Layout::Fixed(usize::try_from(repeat).unwrap_or(usize::MAX))
        };
        self.out.push(NtupleField {
            name,
            type_name,
            read: Ok(Interpretation::plain(number, layout)),
            column_types,
            plan: Plan {
                steps,
                values,
                cardinality,
            },
        });
    }
}

/// Every leaf of `schema`'s field tree, top-level fields in order.
pub(crate) fn leaves(schema: &Schema) -> Vec<NtupleField> {
    let n = schema.fields.len();
    let mut children = vec![Vec::new(); n];
    let mut tops = Vec::new();
    for (i, f) in schema.fields.iter().enumerate() {
        let p = f.parent as usize;
        if p == i {
            tops.push(i);
        } else if p < n {
            children[p].push(i);
        }
    }
    let mut walk = Walk {
        schema,
        columns: columns_by_field(schema),
        children,
        out: Vec::new(),
    };
    for t in tops {
        let name = schema.fields[t].name.clone();
        walk.visit(t, name, Vec::new());
    }
    walk.out
}
