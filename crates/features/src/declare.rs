//! Input declarations as a dataset config writes them (`inputs:`): which objects become nodes,
//! their node features, the event's global features and the pair-feature menu; the error that
//! names where a declaration is wrong, with the closest valid names. `inputs.rs` checks and
//! parses one ([`crate::Inputs::new`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::expr::ExprError;
use crate::standardize::Standardize;

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
    pub(crate) fn plain(place: impl Into<String>, message: impl Into<String>) -> DeclError {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_names_prefers_small_edits() {
        let got = closest_names("Jet_Pt", ["Jet_Px", "Jet_Py", "Muon_Px", "NJet"], 2);
        assert_eq!(got, vec!["Jet_Px", "Jet_Py"]);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
