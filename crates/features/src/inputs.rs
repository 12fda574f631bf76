//! A declaration checked and parsed once ([`Inputs::new`]): each collection's kinematics and
//! fields, its selection and node features bound to its fields, the globals bound to the
//! event-level columns; what the reader binds to a file's branches and `chunk_features.rs`
//! evaluates.

use crate::declare::{
    DeclError, EVENT_NAMES, FeatureDecl, InputsSpec, OBJECT_FIELDS, ObjectDecl, closest_names,
};
use crate::expr::{Aggregate, Expr, ExprError, NameRef};
use crate::standardize::{Scale, Standardize};

/// Where a collection's kinematics come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Kinematics {
    /// pt, η, φ; the mass from `mass`, else from `e`, else 0.
    Polar {
        /// pt.
        pt: Expr,
        /// η.
        eta: Expr,
        /// φ.
        phi: Expr,
        /// Mass.
        mass: Option<Expr>,
        /// Energy.
        e: Option<Expr>,
    },
    /// px, py, pz (η 0 without it), E; the mass from `mass`, else from the four-vector.
    Cartesian {
        /// px.
        px: Expr,
        /// py.
        py: Expr,
        /// pz.
        pz: Option<Expr>,
        /// Energy.
        e: Option<Expr>,
        /// Mass.
        mass: Option<Expr>,
    },
}

impl Kinematics {
    /// Its source expressions, in a fixed order (the reader evaluates them in this order).
    pub fn sources(&self) -> Vec<(&'static str, &Expr)> {
        let mut out: Vec<(&'static str, &Expr)> = Vec::new();
        fn add<'a>(
            out: &mut Vec<(&'static str, &'a Expr)>,
            name: &'static str,
            e: Option<&'a Expr>,
        ) {
            if let Some(e) = e {
                out.push((name, e));
            }
        }
        match self {
            Kinematics::Polar {
                pt,
                eta,
                phi,
                mass,
                e,
            } => {
                add(&mut out, "pt", Some(pt));
                add(&mut out, "eta", Some(eta));
                add(&mut out, "phi", Some(phi));
                add(&mut out, "mass", mass.as_ref());
                add(&mut out, "e", e.as_ref());
            }
            Kinematics::Cartesian {
                px,
                py,
                pz,
                e,
                mass,
            } => {
                add(&mut out, "px", Some(px));
                add(&mut out, "py", Some(py));
                add(&mut out, "pz", pz.as_ref());
                add(&mut out, "e", e.as_ref());
                add(&mut out, "mass", mass.as_ref());
            }
        }
        out
    }
}

/// One collection, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectInputs {
    /// Its declaration.
    pub decl: ObjectDecl,
    /// Its kinematics' sources.
    pub kinematics: Kinematics,
    /// Declared fields, in name order.
    pub fields: Vec<(String, Expr)>,
    /// Its selection, bound to [`ObjectInputs::field_names`].
    pub(crate) select: Option<crate::expr::Bound>,
}

impl ObjectInputs {
    /// Every field name of its objects: [`OBJECT_FIELDS`] then the declared fields.
    pub fn field_names(&self) -> Vec<&str> {
        OBJECT_FIELDS
            .iter()
            .copied()
            .chain(self.fields.iter().map(|(n, _)| n.as_str()))
            .collect()
    }
}

/// A node feature, bound per collection: its expression over that collection's fields, or the
/// fill value where the collection lacks a field it uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FeatureSource {
    Expr(crate::expr::Bound),
    Fill(f64),
}

/// One node feature, parsed and bound to every collection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeFeature {
    pub(crate) by_collection: Vec<FeatureSource>,
    pub(crate) standardize: Option<Scale>,
}

/// A global feature: its expression and the event-level names it uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GlobalFeature {
    /// Bound to the event-level columns: `n_nodes`, then the aggregates, then the branches.
    pub(crate) bound: crate::expr::Bound,
    pub(crate) standardize: Option<Scale>,
}

/// A declaration, checked and parsed: built once per dataset, bound to each file's branches by
/// the reader, and evaluated column-wise per chunk ([`Inputs::build_chunk`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// As written.
    pub spec: InputsSpec,
    /// The collections, in node order.
    pub objects: Vec<ObjectInputs>,
    /// The weight expression.
    pub weight: Option<Expr>,
    pub(crate) node: Vec<NodeFeature>,
    pub(crate) globals: Vec<GlobalFeature>,
    /// The aggregates globals use, in the order of their columns.
    pub(crate) aggregates: Vec<(Aggregate, usize, Option<usize>)>,
    /// Branch names globals use, in the order of their columns (after `n_nodes` and the
    /// aggregates).
    pub event_branches: Vec<String>,
}

/// The scale applied as the value is cached: a fixed one (`auto` is applied when it is read).
fn fixed(s: Option<Standardize>) -> Option<Scale> {
    match s {
        Some(Standardize::Fixed(scale)) => Some(scale),
        Some(Standardize::Auto) | None => None,
    }
}

fn parse_at(place: &str, text: &str) -> Result<Expr, DeclError> {
    Expr::parse(text).map_err(|e| DeclError::in_expression(place, text, e, std::iter::empty()))
}

impl Inputs {
    /// Checks `spec` and parses every expression; an error names the place, the expression,
    /// the position and the closest valid names.
    pub fn new(spec: &InputsSpec) -> Result<Inputs, DeclError> {
        check_names(spec)?;
        let objects = spec
            .objects
            .iter()
            .enumerate()
            .map(|(k, o)| object_inputs(k, o, &spec.objects))
            .collect::<Result<Vec<_>, _>>()?;
        let node = spec
            .node_features
            .iter()
            .map(|f| node_feature(f, &objects))
            .collect::<Result<Vec<_>, _>>()?;
        let mut aggregates = Vec::new();
        let mut event_branches = Vec::new();
        let mut globals = Vec::new();
        for f in &spec.globals {
            let place = format!("globals.{}", f.name);
            if f.fill.is_some() {
                return Err(DeclError::plain(place, "fill is for node features only"));
            }
            let expr = parse_at(&place, &f.expr)?;
            for (name, position) in expr.names() {
                match name {
                    NameRef::Plain(n) => {
                        if !EVENT_NAMES.contains(&n.as_str()) && !event_branches.contains(&n) {
                            event_branches.push(n);
                        }
                    }
                    NameRef::Aggregate {
                        kind,
                        collection,
                        field,
                    } => {
                        let (c, field_index) = aggregate_columns(
                            &place, &f.expr, &objects, kind, collection, field, position,
                        )?;
                        if !aggregates.contains(&(kind, c, field_index)) {
                            aggregates.push((kind, c, field_index));
                        }
                    }
                }
            }
            globals.push((expr, fixed(f.standardize)));
        }
        let globals = globals
            .into_iter()
            .map(|(expr, standardize)| {
                let bound = expr
                    .bind(&mut |r| event_column(r, &objects, &aggregates, &event_branches))
                    .map_err(|e| {
                        DeclError::in_expression("globals", expr.text(), e, std::iter::empty())
                    })?;
                Ok(GlobalFeature { bound, standardize })
            })
            .collect::<Result<Vec<_>, DeclError>>()?;
        let weight = spec
            .weight
            .as_deref()
            .filter(|w| !w.is_empty())
            .map(|w| parse_at("weight", w))
            .transpose()?;
        Ok(Inputs {
            spec: spec.clone(),
            objects,
            weight,
            node,
            globals,
            aggregates,
            event_branches,
        })
    }

    /// Node feature width.
    pub fn d_node(&self) -> usize {
        self.spec.node_features.len()
    }

    /// Global feature width.
    pub fn d_global(&self) -> usize {
        self.spec.globals.len()
    }

    /// Pair feature width.
    pub fn d_pair(&self) -> usize {
        self.spec.pairs.len()
    }

    /// Whether a declared pair feature needs the nodes' pt and mass (then cached with η, φ).
    pub fn needs_momenta(&self) -> bool {
        self.spec.pairs.iter().any(|p| p.needs_momenta())
    }

    /// The most nodes an event can have (`None` when a collection has no cap).
    pub fn max_nodes(&self) -> Option<usize> {
        self.objects
            .iter()
            .map(|o| {
                if o.decl.single {
                    Some(1)
                } else {
                    o.decl.max_objects
                }
            })
            .sum()
    }

    /// The branches every tree must hold for this declaration, each once, in order of first
    /// use: each collection's kinematics, fields and counter (a collection declared `optional`
    /// is left out), the globals' branches, the event number and the weight. `inspect` checks
    /// a file against it.
    pub fn required_branches(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut add = |name: &str| {
            if !out.iter().any(|o| o == name) {
                out.push(name.to_owned());
            }
        };
        let plain = |e: &Expr| -> Vec<String> {
            e.names()
                .into_iter()
                .filter_map(|(r, _)| match r {
                    NameRef::Plain(n) => Some(n),
                    NameRef::Aggregate { .. } => None,
                })
                .collect()
        };
        for o in self.objects.iter().filter(|o| !o.decl.optional) {
            let sources = o.kinematics.sources().into_iter().map(|(_, e)| e);
            for e in sources.chain(o.fields.iter().map(|(_, e)| e)) {
                plain(e).iter().for_each(|n| add(n));
            }
            o.decl.counter.as_deref().into_iter().for_each(&mut add);
        }
        self.event_branches.iter().for_each(|b| add(b));
        self.spec
            .event_number
            .as_deref()
            .into_iter()
            .for_each(&mut add);
        for n in self.weight.iter().flat_map(plain) {
            add(&n);
        }
        out
    }
}

/// A declaration's shape before its expressions: collections and node features declared,
/// feature names unique, fixed scales finite and non-zero, no pair feature twice.
fn check_names(spec: &InputsSpec) -> Result<(), DeclError> {
    if spec.objects.is_empty() {
        return Err(DeclError::plain(
            "objects",
            "declare at least one object collection",
        ));
    }
    if spec.node_features.is_empty() {
        return Err(DeclError::plain(
            "node_features",
            "declare at least one node feature",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in spec.node_features.iter().chain(&spec.globals) {
        if !seen.insert(f.name.as_str()) {
            return Err(DeclError::plain(
                f.name.clone(),
                "two features have this name",
            ));
        }
        if let Some(Standardize::Fixed(s)) = f.standardize
            && !(s.scale.is_finite() && s.scale != 0.0 && s.center.is_finite())
        {
            return Err(DeclError::plain(
                f.name.clone(),
                "standardize needs a finite center and a finite, non-zero scale",
            ));
        }
    }
    let mut pairs = std::collections::BTreeSet::new();
    if let Some(p) = spec.pairs.iter().find(|p| !pairs.insert(p.name())) {
        return Err(DeclError::plain(
            "pairs",
            format!("'{}' is listed twice", p.name()),
        ));
    }
    Ok(())
}

/// The collection and field column (none for `count`) an aggregate of global `place`
/// (expression `expr`) reads, at `position` in it; an unknown collection or field is an error
/// naming the closest.
fn aggregate_columns(
    place: &str,
    expr: &str,
    objects: &[ObjectInputs],
    kind: Aggregate,
    collection: String,
    field: String,
    position: usize,
) -> Result<(usize, Option<usize>), DeclError> {
    let Some(c) = objects.iter().position(|o| o.decl.name == collection) else {
        let names = objects.iter().map(|o| o.decl.name.as_str());
        return Err(DeclError {
            place: place.to_owned(),
            expression: Some(expr.to_owned()),
            message: format!("no collection '{collection}' at position {}", position + 1),
            closest: closest_names(&collection, names, 3),
            unknown: Some(collection),
        });
    };
    let field_index = if kind == Aggregate::Count {
        None
    } else {
        let names = objects[c].field_names();
        let Some(i) = names.iter().position(|n| *n == field) else {
            return Err(DeclError {
                place: place.to_owned(),
                expression: Some(expr.to_owned()),
                message: format!(
                    "collection '{collection}' has no field '{field}' at position {}",
                    position + 1
                ),
                closest: closest_names(&field, names.iter().copied(), 3),
                unknown: Some(field),
            });
        };
        Some(i)
    };
    Ok((c, field_index))
}

/// The event-level column of a name in a global feature: `n_nodes` (0), an aggregate (1 + its
/// index), a branch (after the aggregates).
fn event_column(
    r: &NameRef,
    objects: &[ObjectInputs],
    aggregates: &[(Aggregate, usize, Option<usize>)],
    branches: &[String],
) -> Option<usize> {
    match r {
        NameRef::Plain(name) if name == "n_nodes" => Some(0),
        NameRef::Plain(name) => branches
            .iter()
            .position(|b| b == name)
            .map(|k| 1 + aggregates.len() + k),
        NameRef::Aggregate {
            kind,
            collection,
            field,
        } => {
            let c = objects.iter().position(|o| &o.decl.name == collection)?;
            let f = objects[c].field_names().iter().position(|x| x == field);
            aggregates
                .iter()
                .position(|a| *a == (*kind, c, f))
                .map(|k| 1 + k)
        }
    }
}

fn object_inputs(k: usize, o: &ObjectDecl, all: &[ObjectDecl]) -> Result<ObjectInputs, DeclError> {
    let place = |what: &str| format!("objects.{}.{what}", o.name);
    if o.name.is_empty() || !o.name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return Err(DeclError::plain(
            format!("objects[{k}].name"),
            format!("'{}' is not a collection name (letters, digits, _)", o.name),
        ));
    }
    if all[..k].iter().any(|p| p.name == o.name) {
        return Err(DeclError::plain(
            format!("objects.{}", o.name),
            "two collections have this name",
        ));
    }
    let kinematics = kinematics(o)?;
    if o.single && (o.select.is_some() || o.max_objects.is_some()) {
        return Err(DeclError::plain(
            format!("objects.{}", o.name),
            "a single object per event (single: true) is never selected: leave out select and max_objects",
        ));
    }
    let mut fields = Vec::new();
    for (name, text) in &o.fields {
        if OBJECT_FIELDS.contains(&name.as_str()) {
            return Err(DeclError::plain(
                place(&format!("fields.{name}")),
                format!(
                    "'{name}' is a field every object has ({})",
                    OBJECT_FIELDS.join(", ")
                ),
            ));
        }
        fields.push((
            name.clone(),
            parse_at(&place(&format!("fields.{name}")), text)?,
        ));
    }
    let mut inputs = ObjectInputs {
        decl: o.clone(),
        kinematics,
        fields,
        select: None,
    };
    if let Some(text) = &o.select {
        let p = place("select");
        let expr = parse_at(&p, text)?;
        let names = inputs.field_names();
        let bound = bind_fields(&expr, &names)
            .map_err(|e| DeclError::in_expression(p, text, e, names.iter().copied()))?;
        inputs.select = Some(bound);
    }
    Ok(inputs)
}

/// A collection's kinematics: polar (pt, eta, phi; mass or e) or cartesian (px, py; pz, e,
/// mass), never both.
fn kinematics(o: &ObjectDecl) -> Result<Kinematics, DeclError> {
    let place = |what: &str| format!("objects.{}.{what}", o.name);
    let parse = |what: &str, text: &Option<String>| -> Result<Option<Expr>, DeclError> {
        text.as_deref()
            .map(|t| parse_at(&place(what), t))
            .transpose()
    };
    let polar = o.pt.is_some() || o.eta.is_some() || o.phi.is_some();
    let cartesian = o.px.is_some() || o.py.is_some() || o.pz.is_some();
    Ok(match (polar, cartesian) {
        (true, false) => {
            let need = |what: &str, text: &Option<String>| {
                parse(what, text)?.ok_or_else(|| {
                    DeclError::plain(
                        format!("objects.{}", o.name),
                        format!("polar kinematics need pt, eta and phi: {what} is missing"),
                    )
                })
            };
            Kinematics::Polar {
                pt: need("pt", &o.pt)?,
                eta: need("eta", &o.eta)?,
                phi: need("phi", &o.phi)?,
                mass: parse("mass", &o.mass)?,
                e: parse("e", &o.e)?,
            }
        }
        (false, true) => {
            let need = |what: &str, text: &Option<String>| {
                parse(what, text)?.ok_or_else(|| {
                    DeclError::plain(
                        format!("objects.{}", o.name),
                        format!("cartesian kinematics need px and py: {what} is missing"),
                    )
                })
            };
            Kinematics::Cartesian {
                px: need("px", &o.px)?,
                py: need("py", &o.py)?,
                pz: parse("pz", &o.pz)?,
                e: parse("e", &o.e)?,
                mass: parse("mass", &o.mass)?,
            }
        }
        _ => {
            return Err(DeclError::plain(
                format!("objects.{}", o.name),
                "give either pt, eta and phi or px, py (and pz) for the kinematics",
            ));
        }
    })
}

/// Binds `expr` to a collection's fields (their index in `names`).
fn bind_fields(expr: &Expr, names: &[&str]) -> Result<crate::expr::Bound, ExprError> {
    expr.bind(&mut |r| match r {
        NameRef::Plain(n) => names.iter().position(|m| m == n),
        NameRef::Aggregate { .. } => None,
    })
}

fn node_feature(f: &FeatureDecl, objects: &[ObjectInputs]) -> Result<NodeFeature, DeclError> {
    let place = format!("node_features.{}", f.name);
    let expr = parse_at(&place, &f.expr)?;
    if let Some((r, pos)) = expr
        .names()
        .into_iter()
        .find(|(r, _)| matches!(r, NameRef::Aggregate { .. }))
    {
        return Err(DeclError {
            place,
            expression: Some(f.expr.clone()),
            message: format!(
                "aggregate '{r}' at position {} belongs in a global feature",
                pos + 1
            ),
            unknown: None,
            closest: Vec::new(),
        });
    }
    let mut by_collection = Vec::new();
    let mut missing = Vec::new();
    for o in objects {
        let names = o.field_names();
        match bind_fields(&expr, &names) {
            Ok(b) => by_collection.push(FeatureSource::Expr(b)),
            Err(e) => {
                let name = e.unknown.clone().unwrap_or_default();
                missing.push((o.decl.name.clone(), name, e));
                by_collection.push(FeatureSource::Fill(f.fill.unwrap_or(f64::NAN)));
            }
        }
    }
    if missing.len() == objects.len() && f.fill.is_none() {
        // No collection has the name and no fill is given: a misspelling.
        let (_, _, e) = missing.swap_remove(0);
        let all: Vec<&str> = objects.iter().flat_map(|o| o.field_names()).collect();
        return Err(DeclError::in_expression(place, &f.expr, e, all.into_iter()));
    }
    if f.fill.is_none()
        && let Some((collection, name, _)) = missing.first()
    {
        return Err(DeclError {
            place,
            expression: Some(f.expr.clone()),
            message: format!(
                "collection '{collection}' has no field '{name}': give `fill:` (the value for collections without it) or declare the field in objects.{collection}.fields"
            ),
            unknown: Some(name.clone()),
            closest: Vec::new(),
        });
    }
    Ok(NodeFeature {
        by_collection,
        standardize: fixed(f.standardize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> InputsSpec {
        serde_yaml::from_str(yaml).expect("yaml")
    }

    const BASE: &str = "
objects:
  - {name: jets, pt: Jet_pt, eta: Jet_eta, phi: Jet_phi, mass: Jet_mass, select: 'pt >= 25', max_objects: 4, fields: {qgl: Jet_qgl}}
  - {name: met, single: true, pt: MET_pt, eta: '0', phi: MET_phi}
node_features:
  - {name: pt, expr: pt, standardize: {scale: 100}}
  - {name: qgl, expr: qgl, fill: -1}
globals:
  - {name: ht, expr: sum(jets.pt) / 1000}
  - {name: npv, expr: PV_npvs}
pairs: [deta, dphi, dr]
";

    #[test]
    fn a_declaration_parses_with_widths_and_event_branches() {
        let inputs = Inputs::new(&spec(BASE)).expect("valid");
        assert_eq!(
            (inputs.d_node(), inputs.d_global(), inputs.d_pair()),
            (2, 2, 3)
        );
        assert_eq!(inputs.event_branches, vec!["PV_npvs".to_owned()]);
        assert_eq!(inputs.max_nodes(), Some(5));
        assert!(matches!(inputs.node[1].by_collection[1], FeatureSource::Fill(x) if x == -1.0));
    }

    #[test]
    fn errors_name_the_place_and_the_closest_name() {
        let e = Inputs::new(&spec(&BASE.replace("expr: qgl, fill: -1", "expr: qgll"))).unwrap_err();
        assert_eq!(e.place, "node_features.qgl");
        assert_eq!(e.closest.first().map(String::as_str), Some("qgl"), "{e}");
        let e = Inputs::new(&spec(&BASE.replace(", fill: -1", ""))).unwrap_err();
        assert!(
            e.to_string()
                .contains("collection 'met' has no field 'qgl'"),
            "{e}"
        );
        let e = Inputs::new(&spec(&BASE.replace("sum(jets.pt)", "sum(jet.pt)"))).unwrap_err();
        assert_eq!(e.closest.first().map(String::as_str), Some("jets"), "{e}");
        let e = Inputs::new(&spec(&BASE.replace("'pt >= 25'", "'ptt >= 25'"))).unwrap_err();
        assert_eq!(
            (e.place.as_str(), e.unknown.as_deref()),
            ("objects.jets.select", Some("ptt"))
        );
        assert!(e.to_string().contains("at position 1"), "{e}");
        let e = Inputs::new(&spec(
            &BASE.replace("pairs: [deta, dphi, dr]", "pairs: [deta, deta]"),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(serde_yaml::from_str::<InputsSpec>(&BASE.replace("dr]", "dR]")).is_err());
    }
}
