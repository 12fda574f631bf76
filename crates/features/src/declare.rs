//! Input declarations: which objects become nodes, their node features, the event's global
//! features and the pair features, as a dataset config writes them (`inputs:`), checked and
//! parsed once ([`Inputs::new`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::expr::{Aggregate, Expr, ExprError, NameRef};
use crate::standardize::{Scale, Standardize};

/// The `inputs` section of a dataset config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputsSpec {
    /// Event-number branch (any integer type); the entry index when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_number: Option<String>,
    /// Event weight: a branch or an expression over branches; 1 when absent (a sample's own
    /// `weight:` replaces it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<String>,
    /// The object collections that become nodes, in node order (a node's `type` is its
    /// collection's index here).
    pub objects: Vec<ObjectDecl>,
    /// Events with fewer nodes are skipped as `too_few_nodes`.
    #[serde(default = "default_min_nodes")]
    pub min_nodes: usize,
    /// Per-node features, in column order.
    pub node_features: Vec<FeatureDecl>,
    /// Event-level (global) features, in column order.
    #[serde(default)]
    pub globals: Vec<FeatureDecl>,
    /// Pair (edge) features, computed when the cache is read, in column order.
    #[serde(default)]
    pub pairs: Vec<PairFeature>,
}

/// An expression as YAML writes it: text, or a bare number (`mass: 0.000511`).
#[derive(Deserialize)]
#[serde(untagged)]
enum ExpressionText {
    Text(String),
    Integer(i64),
    Number(f64),
}

impl From<ExpressionText> for String {
    fn from(e: ExpressionText) -> String {
        match e {
            ExpressionText::Text(t) => t,
            ExpressionText::Integer(i) => i.to_string(),
            // Display is the shortest round-trip form: parsing it gives the same f64.
            ExpressionText::Number(x) => x.to_string(),
        }
    }
}

fn expression<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    ExpressionText::deserialize(d).map(String::from)
}

fn expression_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<ExpressionText>::deserialize(d).map(|e| e.map(String::from))
}

fn expression_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    BTreeMap::<String, ExpressionText>::deserialize(d)
        .map(|m| m.into_iter().map(|(k, v)| (k, String::from(v))).collect())
}

fn default_min_nodes() -> usize {
    2
}

/// One object collection: where its kinematics and fields come from, which objects are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectDecl {
    /// The collection's name (`jets`, `taus`); features and aggregates name it.
    pub name: String,
    /// Counter branch of leaf-count arrays; inferred (`X_size`, `nX`, `NX`) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<String>,
    /// Transverse momentum (GeV): a branch or an expression.
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub pt: Option<String>,
    /// Pseudorapidity.
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub eta: Option<String>,
    /// Azimuth (rad).
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub phi: Option<String>,
    /// Mass (GeV); wins over a mass computed from `e`. Without `mass` and `e`: 0.
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub mass: Option<String>,
    /// Energy (GeV): with pt/eta/phi the mass is sqrt(max(E² − (pt·cosh η)², 0)); with
    /// px/py/pz the cartesian four-vector's.
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub e: Option<String>,
    /// Cartesian px (GeV), instead of pt/eta/phi.
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub px: Option<String>,
    /// Cartesian py (GeV).
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub py: Option<String>,
    /// Cartesian pz (GeV); without it η is 0 (a transverse quantity such as MET).
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub pz: Option<String>,
    /// Exactly one object per event (MET): scalar branches or one-element arrays; an event with
    /// another count is skipped as `<name>_count`. Never selected away.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub single: bool,
    /// A tree without the first kinematic branch reads the collection as empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Objects kept: an expression over the object's fields (`pt >= 25 && abs(eta) <= 4.5`).
    #[serde(
        default,
        deserialize_with = "expression_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub select: Option<String>,
    /// After sorting by pt (descending, stable), keep at most this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_objects: Option<usize>,
    /// More per-object fields: name → a branch or an expression over branches (`qgl: Jet_qgl`,
    /// `btag: Jet_btagDeepB > 0.6321`).
    #[serde(
        default,
        deserialize_with = "expression_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub fields: BTreeMap<String, String>,
}

/// A declared feature: its name, its expression, and how it is standardised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureDecl {
    /// Column name (in the cache's manifest and in `inspect`).
    pub name: String,
    /// Node features: an expression over the object's fields; globals: over `n_nodes`,
    /// aggregates (`sum(jets.pt)`, `count(jets)`) and event-level branches.
    #[serde(deserialize_with = "expression")]
    pub expr: String,
    /// Node features only: the value for collections that lack a field the expression uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fill: Option<f64>,
    /// `{center, scale}`: (x − center) / scale, applied as the value is cached; `auto`: the
    /// training folds' mean and standard deviation, applied as the cache is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standardize: Option<Standardize>,
}

/// Defines [`PairFeature`], its [`PairFeature::MENU`] and [`PairFeature::name`] from one list:
/// a variant added here is on the menu and has a name.
macro_rules! pair_features {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)+) => {
        /// The pair-feature menu: computed for every ordered pair of nodes (i → j) when the
        /// cache is read, from the nodes' raw η and φ (contract §4; MET's η is 0) and, for the
        /// momentum-based ones, their pt and mass (MET: massless at η = 0). The logarithms are
        /// ParT's, of the value clamped below at 1e-8.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum PairFeature {
            $($(#[$doc])* #[serde(rename = $name)] $variant,)+
        }

        impl PairFeature {
            /// The whole menu, in its order: for messages, docs and the cache's columns.
            pub const MENU: &[PairFeature] = &[$(PairFeature::$variant),+];

            /// Its name in a declaration.
            pub fn name(self) -> &'static str {
                match self {
                    $(PairFeature::$variant => $name,)+
                }
            }
        }
    };
}

pair_features! {
    /// η_j − η_i.
    Deta = "deta",
    /// φ_j − φ_i wrapped into [−π, π).
    Dphi = "dphi",
    /// ΔR = sqrt(Δη² + Δφ²).
    Dr = "dr",
    /// The pair's invariant mass (GeV), sqrt(max(0, (E_i + E_j)² − |p_i + p_j|²)).
    Mass = "mass",
    /// min(pt_i, pt_j) · ΔR (GeV).
    Kt = "kt",
    /// min(pt_i, pt_j) / (pt_i + pt_j).
    Z = "z",
    /// ln ΔR.
    LogDr = "log_dr",
    /// ln kt.
    LogKt = "log_kt",
    /// ln z.
    LogZ = "log_z",
    /// ln m² (m² of the pair in GeV²).
    LogM2 = "log_m2",
}

impl PairFeature {
    /// The contract's pair features (§4), in its order.
    pub const ALL: [PairFeature; 3] = [PairFeature::Deta, PairFeature::Dphi, PairFeature::Dr];

    /// Its formula for the edge i → j, over the two nodes' kinematics before any
    /// standardisation (computed in f64, stored as f32), as an analysis computes it.
    pub fn formula(self) -> &'static str {
        match self {
            PairFeature::Deta => "eta_j - eta_i",
            PairFeature::Dphi => "phi_j - phi_i, wrapped into [-pi, pi)",
            PairFeature::Dr => "sqrt(deta^2 + dphi^2)",
            PairFeature::Mass => {
                "sqrt(max(0, (E_i + E_j)^2 - |p_i + p_j|^2)) in GeV, the four-vectors from pt, eta, phi and mass (MET: massless at eta = 0)"
            }
            PairFeature::Kt => "min(pt_i, pt_j) * dr in GeV",
            PairFeature::Z => "min(pt_i, pt_j) / (pt_i + pt_j), 0 when both are 0",
            PairFeature::LogDr => "ln(max(dr, 1e-8))",
            PairFeature::LogKt => "ln(max(kt, 1e-8))",
            PairFeature::LogZ => "ln(max(z, 1e-8))",
            PairFeature::LogM2 => "ln(max(m2, 1e-8)), m2 = (E_i + E_j)^2 - |p_i + p_j|^2 in GeV^2",
        }
    }

    /// Whether it needs the nodes' pt and mass besides η and φ.
    pub fn needs_momenta(self) -> bool {
        !matches!(
            self,
            PairFeature::Deta | PairFeature::Dphi | PairFeature::Dr | PairFeature::LogDr
        )
    }
}

/// The fields every object has, before its declared ones: kinematics in GeV and rad, the
/// derived energy and cartesian components, and `type` (the collection's index).
pub const OBJECT_FIELDS: [&str; 9] = ["pt", "eta", "phi", "mass", "e", "px", "py", "pz", "type"];

/// Event-level names a global feature may use besides branches.
pub const EVENT_NAMES: [&str; 1] = ["n_nodes"];

/// A declaration that is not valid, named by where it is (`objects[2].select`,
/// `node_features.qgl`) and with the closest valid names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclError {
    /// Where in the declaration (`node_features.qgl`).
    pub place: String,
    /// The expression's text, when the error is in one.
    pub expression: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The unknown name, when that is the problem.
    pub unknown: Option<String>,
    /// The valid names closest to it.
    pub closest: Vec<String>,
}

impl std::fmt::Display for DeclError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "inputs.{}", self.place)?;
        if let Some(e) = &self.expression {
            write!(f, " \"{e}\"")?;
        }
        write!(f, ": {}", self.message)?;
        if !self.closest.is_empty() {
            write!(f, " (closest: {})", self.closest.join(", "))?;
        }
        Ok(())
    }
}

impl std::error::Error for DeclError {}

impl DeclError {
    fn plain(place: impl Into<String>, message: impl Into<String>) -> DeclError {
        DeclError {
            place: place.into(),
            expression: None,
            message: message.into(),
            unknown: None,
            closest: Vec::new(),
        }
    }

    /// An expression error at `place`, with the closest of `candidates` to an unknown name.
    pub fn in_expression<'a>(
        place: impl Into<String>,
        text: &str,
        e: ExprError,
        candidates: impl Iterator<Item = &'a str>,
    ) -> DeclError {
        let closest = e
            .unknown
            .as_deref()
            .map(|u| closest_names(u, candidates, 3))
            .unwrap_or_default();
        DeclError {
            place: place.into(),
            expression: Some(text.to_owned()),
            message: e.to_string(),
            unknown: e.unknown,
            closest,
        }
    }
}

/// Up to `n` names from `candidates` closest to `name` (edit distance, ignoring case), closest first.
///
/// Used for every "no such X" error so the user sees what they probably meant.
pub fn closest_names<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    n: usize,
) -> Vec<String> {
    let lower = name.to_lowercase();
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| {
            let d = edit_distance(&lower, &c.to_lowercase());
            // A candidate that contains the name (or the reverse) is a good guess whatever its length.
            let bonus = if c.to_lowercase().contains(&lower) || lower.contains(&c.to_lowercase()) {
                0
            } else {
                1
            };
            (d * 2 + bonus, c)
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(n)
        .map(|(_, c)| c.to_owned())
        .collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

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
                        let Some(c) = objects.iter().position(|o| o.decl.name == collection) else {
                            let names = objects.iter().map(|o| o.decl.name.as_str());
                            return Err(DeclError {
                                place,
                                expression: Some(f.expr.clone()),
                                message: format!(
                                    "no collection '{collection}' at position {}",
                                    position + 1
                                ),
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
                                    place,
                                    expression: Some(f.expr.clone()),
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
    let parse = |what: &str, text: &Option<String>| -> Result<Option<Expr>, DeclError> {
        text.as_deref()
            .map(|t| parse_at(&place(what), t))
            .transpose()
    };
    let polar = o.pt.is_some() || o.eta.is_some() || o.phi.is_some();
    let cartesian = o.px.is_some() || o.py.is_some() || o.pz.is_some();
    let kinematics = match (polar, cartesian) {
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
    };
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
    fn closest_names_prefers_small_edits() {
        let got = closest_names("Jet_Pt", ["Jet_Px", "Jet_Py", "Muon_Px", "NJet"], 2);
        assert_eq!(got, vec!["Jet_Px", "Jet_Py"]);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

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
