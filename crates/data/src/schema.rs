//! Schemas: which branches hold which collection fields, in what units, written out in a dataset
//! config (`schema:`) and translated into an input declaration ([`SchemaSpec::to_inputs`]).

use serde::{Deserialize, Serialize};

use crate::DataError;

/// How to read one object collection. Give either `pt`, `eta`, `phi` (plus `mass` or `e` for jets)
/// or cartesian `px`, `py`, `pz`, `e`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectSpec {
    /// Counter branch of leaf-count arrays; inferred when absent (`X_size`, `nX`, `NX` for a
    /// branch `X.y` or `X_y`). Unused for `std::vector` branches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<String>,
    /// Transverse momentum branch (energy units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pt: Option<String>,
    /// Pseudorapidity branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<String>,
    /// Azimuth branch (rad).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phi: Option<String>,
    /// Mass branch (energy units; jets only, leptons use the PDG mass, photons 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<String>,
    /// Energy branch (energy units): jets' mass from (pt, eta, E), or the cartesian E.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
    /// Cartesian px branch (energy units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub px: Option<String>,
    /// Cartesian py branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub py: Option<String>,
    /// Cartesian pz branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pz: Option<String>,
    /// B-tag branch (jets): a flag, or a discriminant compared with `btag_threshold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub btag: Option<String>,
    /// B-tagged when the discriminant is strictly above this; without it, when non-zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub btag_threshold: Option<f64>,
    /// Charge branch (leptons); its sign is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charge: Option<String>,
    /// When true, a tree without this collection's branches reads it as empty instead of failing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// How to read the missing transverse momentum: `pt` + `phi`, or `px` + `py`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetSpec {
    /// Magnitude branch (energy units). Scalars, or one-element arrays (Delphes `MissingET.MET`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pt: Option<String>,
    /// Azimuth branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phi: Option<String>,
    /// Cartesian x component branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub px: Option<String>,
    /// Cartesian y component branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub py: Option<String>,
    /// Counter of one-element arrays; inferred when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<String>,
}

/// A schema: which branches hold the event's fields, and the unit of energies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaSpec {
    /// Name shown in reports (`nanoaod`, `custom`, …).
    #[serde(default = "custom_name")]
    pub name: String,
    /// Multiplies every energy-like value to get GeV (1 for GeV files, 0.001 for MeV).
    #[serde(default = "unit_scale")]
    pub energy_scale: f64,
    /// Event-number branch (any integer type); the entry index when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_number: Option<String>,
    /// Default weight branch when a sample names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<String>,
    /// Jets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jets: Option<ObjectSpec>,
    /// Electrons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub electrons: Option<ObjectSpec>,
    /// Muons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub muons: Option<ObjectSpec>,
    /// Photons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub photons: Option<ObjectSpec>,
    /// Missing transverse momentum; (0, 0) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub met: Option<MetSpec>,
}

/// The contract's features (§3–§4) with no objects: what every built-in declaration ends with
/// (the node features, globals and pairs of `configs/inputs/*.yaml`).
fn contract_features() -> gnn4c_features::InputsSpec {
    let text = include_str!("../../../configs/inputs/vector.yaml");
    let mut spec: gnn4c_features::InputsSpec =
        serde_yaml::from_str(text).unwrap_or_else(|e| panic!("configs/inputs/vector.yaml: {e}"));
    spec.objects.clear();
    spec.event_number = None;
    spec.weight = None;
    spec
}

fn custom_name() -> String {
    "custom".to_owned()
}

fn unit_scale() -> f64 {
    1.0
}

impl SchemaSpec {
    /// Checks the spec is complete and unambiguous (before any file is opened).
    pub fn validate(&self) -> Result<(), DataError> {
        if !(self.energy_scale.is_finite() && self.energy_scale > 0.0) {
            return Err(DataError::Config(format!(
                "schema '{}': energy_scale must be a positive number, got {}",
                self.name, self.energy_scale
            )));
        }
        for (field, spec) in self.collections() {
            let Some(spec) = spec else { continue };
            let polar = spec.pt.is_some() && spec.eta.is_some() && spec.phi.is_some();
            let cart = spec.px.is_some() && spec.py.is_some() && spec.pz.is_some();
            if polar == cart {
                return Err(DataError::Config(format!(
                    "schema '{}', {field}: give either pt, eta and phi or px, py, pz and e",
                    self.name
                )));
            }
            if cart && spec.e.is_none() && field == "jets" {
                return Err(DataError::Config(format!(
                    "schema '{}', jets: cartesian jets need e (energy) for the mass",
                    self.name
                )));
            }
            if field != "jets" && (spec.btag.is_some() || spec.btag_threshold.is_some()) {
                return Err(DataError::Config(format!(
                    "schema '{}', {field}: btag is a jet field",
                    self.name
                )));
            }
            if !matches!(field, "electrons" | "muons") && spec.charge.is_some() {
                return Err(DataError::Config(format!(
                    "schema '{}', {field}: charge is a lepton field",
                    self.name
                )));
            }
        }
        if let Some(met) = &self.met {
            let polar = met.pt.is_some() && met.phi.is_some();
            let cart = met.px.is_some() && met.py.is_some();
            if polar == cart {
                return Err(DataError::Config(format!(
                    "schema '{}', met: give either pt and phi or px and py",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// This schema as an input declaration: its branches for the collections' kinematics
    /// (times `energy_scale`), the contract's selection (§2) and features (§3–§4), as the
    /// built-in declarations write them.
    pub fn to_inputs(&self) -> gnn4c_features::InputsSpec {
        let scaled = |b: &Option<String>| {
            b.as_ref().map(|b| {
                if self.energy_scale == 1.0 {
                    b.clone()
                } else {
                    format!("{b} * {}", self.energy_scale)
                }
            })
        };
        let defaults = gnn4c_features::SelectionConfig::default();
        let mut objects = Vec::new();
        for (c, (field, spec)) in self.collections().into_iter().enumerate() {
            let Some(spec) = spec else { continue };
            let jets = field == "jets";
            // Jets always have a b-tag and leptons a charge: 0 without a branch, as the
            // contract's code reads them.
            let mut fields = std::collections::BTreeMap::new();
            if jets {
                let test = match (&spec.btag, spec.btag_threshold) {
                    (Some(b), Some(t)) => format!("{b} > {t}"),
                    (Some(b), None) => format!("{b} != 0"),
                    (None, _) => "0".to_owned(),
                };
                fields.insert("btag".to_owned(), test);
            }
            if matches!(field, "electrons" | "muons") {
                let q = spec
                    .charge
                    .as_ref()
                    .map_or_else(|| "0".to_owned(), |q| format!("sign({q})"));
                fields.insert("charge".to_owned(), q);
            }
            let mass = match field {
                "electrons" => Some(gnn4c_events::ELECTRON_MASS.to_string()),
                "muons" => Some(gnn4c_events::MUON_MASS.to_string()),
                "jets" => scaled(&spec.mass),
                _ => None,
            };
            objects.push(gnn4c_features::ObjectDecl {
                name: field.to_owned(),
                counter: spec.counter.clone(),
                pt: scaled(&spec.pt),
                eta: spec.eta.clone(),
                phi: spec.phi.clone(),
                mass,
                e: if jets { scaled(&spec.e) } else { None },
                px: scaled(&spec.px),
                py: scaled(&spec.py),
                pz: scaled(&spec.pz),
                single: false,
                optional: spec.optional,
                select: Some(format!(
                    "pt >= {} && abs(eta) <= {}",
                    defaults.min_pt.get(c),
                    defaults.max_abs_eta.get(c)
                )),
                max_objects: Some(defaults.max_objects.get(c)),
                fields,
            });
        }
        if let Some(met) = &self.met {
            let polar = met.pt.is_some();
            objects.push(gnn4c_features::ObjectDecl {
                name: "met".to_owned(),
                counter: met.counter.clone(),
                pt: scaled(&met.pt),
                eta: polar.then(|| "0".to_owned()),
                phi: met.phi.clone(),
                px: scaled(&met.px),
                py: scaled(&met.py),
                single: true,
                ..gnn4c_features::ObjectDecl::default()
            });
        }
        let mut spec = contract_features();
        spec.event_number = self.event_number.clone();
        spec.weight = self.weight.clone();
        spec.objects = objects;
        spec
    }

    /// `(field name, spec)` for the four object collections, in node order.
    pub fn collections(&self) -> [(&'static str, Option<&ObjectSpec>); 4] {
        [
            ("jets", self.jets.as_ref()),
            ("electrons", self.electrons.as_ref()),
            ("muons", self.muons.as_ref()),
            ("photons", self.photons.as_ref()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ambiguous_kinematics_are_rejected() {
        let name = |n: &str| Some(n.to_owned());
        let spec = SchemaSpec {
            name: "ambiguous".into(),
            energy_scale: 1.0,
            event_number: None,
            weight: None,
            jets: Some(ObjectSpec {
                pt: name("Jet_pt"),
                eta: name("Jet_eta"),
                phi: name("Jet_phi"),
                px: name("Jet_px"),
                py: name("Jet_py"),
                pz: name("Jet_pz"),
                ..ObjectSpec::default()
            }),
            electrons: None,
            muons: None,
            photons: None,
            met: None,
        };
        let err = spec.validate().expect_err("both polar and cartesian");
        assert!(err.to_string().contains("jets"), "{err}");
    }
}
