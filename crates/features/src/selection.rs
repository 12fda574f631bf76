//! Object selection settings (part of the preprocessing fingerprint).

use serde::{Deserialize, Serialize};

/// One value per object collection (MET has no entry: it is never selected away).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerCollection<T> {
    /// Jets.
    pub jets: T,
    /// Electrons.
    pub electrons: T,
    /// Muons.
    pub muons: T,
    /// Photons.
    pub photons: T,
}

impl<T: Copy> PerCollection<T> {
    /// The value for collection index `c` (0 jets, 1 electrons, 2 muons, 3 photons).
    pub fn get(&self, c: usize) -> T {
        match c {
            0 => self.jets,
            1 => self.electrons,
            2 => self.muons,
            _ => self.photons,
        }
    }
}

/// Object selection (contract §2). Defaults are the contract's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelectionConfig {
    /// Keep objects with pt ≥ this (GeV).
    pub min_pt: PerCollection<f64>,
    /// Keep objects with |eta| ≤ this.
    pub max_abs_eta: PerCollection<f64>,
    /// After sorting by pt (descending, stable), keep at most this many.
    pub max_objects: PerCollection<usize>,
    /// Events with fewer nodes (MET included) are skipped as `too_few_nodes`.
    pub min_nodes: usize,
}

impl Default for SelectionConfig {
    fn default() -> Self {
        SelectionConfig {
            min_pt: PerCollection {
                jets: 25.0,
                electrons: 10.0,
                muons: 10.0,
                photons: 10.0,
            },
            max_abs_eta: PerCollection {
                jets: 4.5,
                electrons: 2.5,
                muons: 2.5,
                photons: 2.5,
            },
            max_objects: PerCollection {
                jets: 12,
                electrons: 4,
                muons: 4,
                photons: 4,
            },
            min_nodes: 2,
        }
    }
}

impl SelectionConfig {
    /// The most nodes an event can have: every cap plus the MET node.
    pub fn max_nodes(&self) -> usize {
        let m = &self.max_objects;
        m.jets + m.electrons + m.muons + m.photons + 1
    }

    /// Checks thresholds are numbers and `min_nodes` is reachable.
    pub fn validate(&self) -> Result<(), String> {
        for c in 0..4 {
            let (pt, eta) = (self.min_pt.get(c), self.max_abs_eta.get(c));
            if pt.is_nan() || eta.is_nan() || eta < 0.0 {
                return Err(format!(
                    "selection: min_pt and max_abs_eta must be numbers (max_abs_eta ≥ 0), got {pt} and {eta}"
                ));
            }
        }
        if self.min_nodes > self.max_nodes() {
            return Err(format!(
                "selection: min_nodes {} exceeds the most nodes an event can have ({})",
                self.min_nodes,
                self.max_nodes()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_contracts_and_yaml_overrides_parts() {
        let d = SelectionConfig::default();
        assert_eq!(
            (d.min_pt.jets, d.max_abs_eta.jets, d.max_objects.jets),
            (25.0, 4.5, 12)
        );
        assert_eq!(d.max_nodes(), 25);
        let s: SelectionConfig = serde_yaml::from_str("min_nodes: 3").expect("yaml");
        assert_eq!((s.min_nodes, s.min_pt.muons), (3, 10.0));
        assert!(serde_yaml::from_str::<SelectionConfig>("min_node: 3").is_err());
        let bad = SelectionConfig { min_nodes: 30, ..d };
        assert!(bad.validate().is_err());
    }
}
