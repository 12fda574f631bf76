//! The built-in schemas written in Rust (`delphes`, `delphes_flat`, `nanoaod`, `hzz`, `vector`):
//! the same branches as the shipped declarations `configs/inputs/<name>.yaml`, which
//! `schema: <name>` reads; these read the contract's events ([`crate::read_file_events`]).

use gnn4c_data::{MetSpec, ObjectSpec, SchemaSpec};

/// DeepCSV medium working point (CMS 2016), used by the built-in `nanoaod` schema.
const NANOAOD_DEEPCSV_MEDIUM: f64 = 0.6321;

/// `Jet_btag` threshold of the CMS open-data H→ZZ tutorial files (the `hzz` schema).
const HZZ_BTAG_THRESHOLD: f64 = 1.74;

fn s(x: &str) -> Option<String> {
    Some(x.to_owned())
}

fn polar(prefix: &str, sep: &str, names: [&str; 3]) -> ObjectSpec {
    ObjectSpec {
        pt: s(&format!("{prefix}{sep}{}", names[0])),
        eta: s(&format!("{prefix}{sep}{}", names[1])),
        phi: s(&format!("{prefix}{sep}{}", names[2])),
        ..ObjectSpec::default()
    }
}

fn cartesian(prefix: &str) -> ObjectSpec {
    ObjectSpec {
        px: s(&format!("{prefix}_Px")),
        py: s(&format!("{prefix}_Py")),
        pz: s(&format!("{prefix}_Pz")),
        e: s(&format!("{prefix}_E")),
        ..ObjectSpec::default()
    }
}

/// The built-in schema `name` (one of [`gnn4c_data::BUILTIN_DECLARATIONS`]), or `None`.
pub fn builtin_schema(name: &str) -> Option<SchemaSpec> {
    let base = SchemaSpec {
        name: name.to_owned(),
        energy_scale: 1.0,
        event_number: None,
        weight: None,
        jets: None,
        electrons: None,
        muons: None,
        photons: None,
        met: None,
    };
    Some(match name {
        "delphes" => delphes(&base),
        "delphes_flat" => delphes_flat(base),
        "nanoaod" => nanoaod(base),
        "hzz" => hzz(base),
        "vector" => vector(base),
        _ => return None,
    })
}

/// Real Delphes output: each collection a split TClonesArray whose count is the collection's
/// own branch (`Jet`); the members are `Jet.PT`, … as in `delphes_flat`.
fn delphes(base: &SchemaSpec) -> SchemaSpec {
    let flat = delphes_flat(SchemaSpec {
        name: "delphes_flat".to_owned(),
        ..base.clone()
    });
    let counted = |o: Option<ObjectSpec>, collection: &str| {
        o.map(|o| ObjectSpec {
            counter: s(collection),
            ..o
        })
    };
    SchemaSpec {
        name: base.name.clone(),
        jets: counted(flat.jets, "Jet"),
        electrons: counted(flat.electrons, "Electron"),
        muons: counted(flat.muons, "Muon"),
        photons: counted(flat.photons, "Photon"),
        met: flat.met.map(|m| MetSpec {
            counter: s("MissingET"),
            ..m
        }),
        ..flat
    }
}

/// Delphes branch names as flat leaf-count arrays (uproot-flattened Delphes output).
fn delphes_flat(base: SchemaSpec) -> SchemaSpec {
    let delphes = ["PT", "Eta", "Phi"];
    SchemaSpec {
        weight: s("Event.Weight"),
        jets: Some(ObjectSpec {
            mass: s("Jet.Mass"),
            btag: s("Jet.BTag"),
            ..polar("Jet", ".", delphes)
        }),
        electrons: Some(ObjectSpec {
            charge: s("Electron.Charge"),
            ..polar("Electron", ".", delphes)
        }),
        muons: Some(ObjectSpec {
            charge: s("Muon.Charge"),
            ..polar("Muon", ".", delphes)
        }),
        photons: Some(ObjectSpec {
            optional: true,
            ..polar("Photon", ".", delphes)
        }),
        met: Some(MetSpec {
            pt: s("MissingET.MET"),
            phi: s("MissingET.Phi"),
            ..MetSpec::default()
        }),
        ..base
    }
}

/// CMS NanoAOD.
fn nanoaod(base: SchemaSpec) -> SchemaSpec {
    let nano = ["pt", "eta", "phi"];
    SchemaSpec {
        event_number: s("event"),
        weight: s("genWeight"),
        jets: Some(ObjectSpec {
            mass: s("Jet_mass"),
            btag: s("Jet_btagDeepB"),
            btag_threshold: Some(NANOAOD_DEEPCSV_MEDIUM),
            ..polar("Jet", "_", nano)
        }),
        electrons: Some(ObjectSpec {
            charge: s("Electron_charge"),
            ..polar("Electron", "_", nano)
        }),
        muons: Some(ObjectSpec {
            charge: s("Muon_charge"),
            ..polar("Muon", "_", nano)
        }),
        photons: Some(polar("Photon", "_", nano)),
        met: Some(MetSpec {
            pt: s("MET_pt"),
            phi: s("MET_phi"),
            ..MetSpec::default()
        }),
        ..base
    }
}

/// CMS open-data H→ZZ tutorial ntuples: cartesian four-vectors.
fn hzz(base: SchemaSpec) -> SchemaSpec {
    SchemaSpec {
        weight: s("EventWeight"),
        jets: Some(ObjectSpec {
            btag: s("Jet_btag"),
            btag_threshold: Some(HZZ_BTAG_THRESHOLD),
            ..cartesian("Jet")
        }),
        electrons: Some(ObjectSpec {
            charge: s("Electron_Charge"),
            ..cartesian("Electron")
        }),
        muons: Some(ObjectSpec {
            charge: s("Muon_Charge"),
            ..cartesian("Muon")
        }),
        photons: Some(cartesian("Photon")),
        met: Some(MetSpec {
            px: s("MET_px"),
            py: s("MET_py"),
            ..MetSpec::default()
        }),
        ..base
    }
}

/// Legacy-style flat `std::vector` ntuple (tree `output`); the demo dataset's layout.
fn vector(base: SchemaSpec) -> SchemaSpec {
    let v = ["pt", "eta", "phi"];
    SchemaSpec {
        event_number: s("event_number"),
        weight: s("weight"),
        jets: Some(ObjectSpec {
            e: s("jet_e"),
            btag: s("jet_btag"),
            ..polar("jet", "_", v)
        }),
        electrons: Some(ObjectSpec {
            charge: s("el_charge"),
            ..polar("el", "_", v)
        }),
        muons: Some(ObjectSpec {
            charge: s("mu_charge"),
            ..polar("mu", "_", v)
        }),
        photons: Some(polar("ph", "_", v)),
        met: Some(MetSpec {
            pt: s("met"),
            phi: s("met_phi"),
            ..MetSpec::default()
        }),
        ..base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid() {
        for name in gnn4c_data::BUILTIN_DECLARATIONS {
            let spec = builtin_schema(name).expect("built-in exists");
            spec.validate().expect("built-in validates");
        }
        assert!(builtin_schema("nope").is_none());
    }
}
