//! The `auto` standardisation of a declaration's features: which columns are `auto`
//! ([`AutoColumns`], and their moments over the training folds as the cache is built) and the
//! scales a model reads its inputs with ([`Standardization`], applied as the cache is read).

use std::collections::BTreeMap;

use crate::declare::{FeatureDecl, InputsSpec};
use crate::standardize::{Moments, Scale, Standardize};

/// The columns of a declaration's `auto` features: `(column, name)` for node and global
/// features.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoColumns {
    /// Node feature columns.
    pub node: Vec<(usize, String)>,
    /// Global feature columns.
    pub global: Vec<(usize, String)>,
}

impl AutoColumns {
    /// The `auto` features of `spec`.
    pub fn of(spec: &InputsSpec) -> AutoColumns {
        let auto = |features: &[FeatureDecl]| {
            features
                .iter()
                .enumerate()
                .filter(|(_, f)| f.standardize == Some(Standardize::Auto))
                .map(|(j, f)| (j, f.name.clone()))
                .collect()
        };
        AutoColumns {
            node: auto(&spec.node_features),
            global: auto(&spec.globals),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.node.is_empty() && self.global.is_empty()
    }

    /// The moments of each `auto` feature over `events`: per event, its node features
    /// (`[n_nodes, d_node]` row-major) and its global features.
    pub fn moments(&self, events: &[(&[f32], &[f32])], d_node: usize) -> BTreeMap<String, Moments> {
        let mut out = BTreeMap::new();
        for (j, name) in &self.node {
            let values = events.iter().flat_map(|(nodes, _)| {
                nodes
                    .chunks_exact(d_node.max(1))
                    .map(|row| f64::from(row[*j]))
            });
            out.insert(name.clone(), Moments::of(values));
        }
        for (j, name) in &self.global {
            let values = events.iter().map(|(_, g)| f64::from(g[*j]));
            out.insert(name.clone(), Moments::of(values));
        }
        out
    }
}

/// The `auto` standardisation a model reads its inputs with: per column, its scale.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Standardization {
    node: Vec<(usize, Scale)>,
    global: Vec<(usize, Scale)>,
}

impl Standardization {
    /// The standardisation of `spec`'s `auto` features with `scales` (by feature name); an
    /// `auto` feature without one is an error naming it.
    pub fn new(
        spec: &InputsSpec,
        scales: &BTreeMap<String, Scale>,
    ) -> Result<Standardization, String> {
        let columns = AutoColumns::of(spec);
        let find = |cols: &[(usize, String)]| {
            cols.iter()
                .map(|(j, name)| {
                    scales.get(name).map(|s| (*j, *s)).ok_or_else(|| {
                        format!("feature '{name}' is standardised `auto` but no training-fold statistics were recorded for it")
                    })
                })
                .collect::<Result<Vec<_>, String>>()
        };
        Ok(Standardization {
            node: find(&columns.node)?,
            global: find(&columns.global)?,
        })
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.node.is_empty() && self.global.is_empty()
    }

    /// Standardises one event's node features (`[n_nodes, d_node]` row-major) and globals in
    /// place: `((x as f64 − center) / scale) as f32`.
    pub fn apply(&self, node_features: &mut [f32], d_node: usize, global_features: &mut [f32]) {
        if !self.node.is_empty() && d_node > 0 {
            for row in node_features.chunks_exact_mut(d_node) {
                for &(j, s) in &self.node {
                    row[j] = s.apply(f64::from(row[j])) as f32;
                }
            }
        }
        for &(j, s) in &self.global {
            global_features[j] = s.apply(f64::from(global_features[j])) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standardization_scales_its_columns_of_every_node_and_the_globals() {
        let spec: InputsSpec = serde_yaml::from_str(
            "objects: [{name: jets, pt: Jet_pt, eta: Jet_eta, phi: Jet_phi, mass: Jet_mass}]
node_features: [{name: pt, expr: pt, standardize: auto}, {name: eta, expr: eta}]
globals: [{name: n, expr: n_nodes, standardize: auto}]",
        )
        .expect("spec");
        let scales: BTreeMap<String, Scale> = [
            (
                "pt".to_owned(),
                Scale {
                    center: 10.0,
                    scale: 4.0,
                },
            ),
            (
                "n".to_owned(),
                Scale {
                    center: 1.0,
                    scale: 2.0,
                },
            ),
        ]
        .into();
        let s = Standardization::new(&spec, &scales).expect("scales");
        let (mut nodes, mut globals) = (vec![30.0, 0.5, 50.0, -0.5], vec![2.0]);
        s.apply(&mut nodes, 2, &mut globals);
        assert_eq!((nodes, globals), (vec![5.0, 0.5, 10.0, -0.5], vec![0.5]));
        let e = Standardization::new(&spec, &BTreeMap::new()).unwrap_err();
        assert!(e.contains("'pt'"), "{e}");
    }
}
