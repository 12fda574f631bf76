//! `EventSample`: identity, label, weight and collections of one event.

use std::path::Path;
use std::sync::Arc;

use crate::{Jets, Leptons, Met, Photons};

/// Where an event came from. Stays on the host: never sent to a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventId {
    /// Sample (dataset) name from the config.
    pub sample: Arc<str>,
    /// The ROOT file the event was read from.
    pub source_file: Arc<Path>,
    /// The tree inside that file.
    pub tree: Arc<str>,
    /// 0-based entry index in the tree.
    pub entry: u64,
    /// Event number from the schema's branch; equal to `entry` when the schema has none.
    pub event_number: u64,
}

/// Training target of an event, from its sample's config entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Label {
    /// A class index (binary: 0 or 1; multiclass: 0..K).
    Class(u32),
    /// A 0/1 vector for multilabel tasks.
    Multi(Vec<u8>),
}

/// One collision event read from one entry of one ROOT tree (contract §1).
#[derive(Debug, Clone, PartialEq)]
pub struct EventSample {
    /// Identity: sample, source file, tree, entry, event number.
    pub id: EventId,
    /// Training target.
    pub label: Label,
    /// Weight branch value times the sample's scale; 1.0 without a weight branch.
    pub weight: f32,
    /// Jets.
    pub jets: Jets,
    /// Electrons.
    pub electrons: Leptons,
    /// Muons.
    pub muons: Leptons,
    /// Photons.
    pub photons: Photons,
    /// Missing transverse momentum (exactly one per event).
    pub met: Met,
}

impl EventSample {
    /// An event with the given identity and no objects (MET zero), label class 0, weight 1.
    pub fn empty(id: EventId) -> Self {
        EventSample {
            id,
            label: Label::Class(0),
            weight: 1.0,
            jets: Jets::default(),
            electrons: Leptons::default(),
            muons: Leptons::default(),
            photons: Photons::default(),
            met: Met::default(),
        }
    }

    /// Names the first collection field holding a NaN or infinite value, if any.
    ///
    /// Readers skip such events under the `non_finite` reason rather than failing.
    pub fn first_non_finite(&self) -> Option<&'static str> {
        let all_finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        let fields: [(&'static str, &[f64]); 14] = [
            ("jets.pt", &self.jets.pt),
            ("jets.eta", &self.jets.eta),
            ("jets.phi", &self.jets.phi),
            ("jets.mass", &self.jets.mass),
            ("electrons.pt", &self.electrons.pt),
            ("electrons.eta", &self.electrons.eta),
            ("electrons.phi", &self.electrons.phi),
            ("muons.pt", &self.muons.pt),
            ("muons.eta", &self.muons.eta),
            ("muons.phi", &self.muons.phi),
            ("photons.pt", &self.photons.pt),
            ("photons.eta", &self.photons.eta),
            ("photons.phi", &self.photons.phi),
            ("met", &[self.met.magnitude, self.met.phi]),
        ];
        if !self.weight.is_finite() {
            return Some("weight");
        }
        fields
            .into_iter()
            .find(|(_, v)| !all_finite(v))
            .map(|(name, _)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> EventId {
        EventId {
            sample: "ttH".into(),
            source_file: Arc::from(Path::new("a.root")),
            tree: "output".into(),
            entry: 3,
            event_number: 1003,
        }
    }

    #[test]
    fn non_finite_names_the_field() {
        let mut ev = EventSample::empty(id());
        assert_eq!(ev.first_non_finite(), None);
        ev.muons.push(20.0, f64::NAN, 0.0, 1);
        assert_eq!(ev.first_non_finite(), Some("muons.eta"));
        ev.weight = f32::INFINITY;
        assert_eq!(ev.first_non_finite(), Some("weight"));
    }
}
