//! The contract's node and global features of one event (§3: the fixed 7 and 2), into reusable
//! buffers.

use std::f64::consts::PI;

use gnn4c_events::{ELECTRON_MASS, EventSample, MUON_MASS};
use gnn4c_features::{SKIP_NON_FINITE, SKIP_TOO_FEW_NODES, SelectionConfig};

/// Node feature width.
pub const D_NODE: usize = 7;
/// Global feature width.
pub const D_GLOBAL: usize = 2;
/// Node feature names, in column order.
pub const NODE_FEATURE_NAMES: [&str; D_NODE] =
    ["pt", "eta", "phi", "energy", "btag", "charge", "type"];

/// The features of one event, with the raw eta and phi of every node for edge features.
///
/// Reused across events: [`build_features`] clears and refills it without reallocating once the
/// buffers have grown to the largest event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventFeatures {
    /// Number of nodes (selected objects + the MET node).
    pub n_nodes: usize,
    /// `[n_nodes, D_NODE]` row-major, f32.
    pub node_features: Vec<f32>,
    /// `[n_global = 1, D_GLOBAL]`: n_nodes / 10, HT / 1000.
    pub global_features: [f32; D_GLOBAL],
    /// Raw eta per node (MET: 0), f64, for edge features.
    pub eta: Vec<f64>,
    /// Raw phi per node (rad), f64, for edge features.
    pub phi: Vec<f64>,
    /// Scratch: candidate indices while sorting one collection.
    order: Vec<usize>,
}

/// One candidate object before selection.
#[derive(Clone, Copy)]
struct Obj {
    pt: f64,
    eta: f64,
    phi: f64,
    mass: f64,
    btag: f64,
    charge: f64,
}

/// Selects the objects of `event`, computes its node and global features into `out`.
///
/// Returns the skip reason ([`SKIP_TOO_FEW_NODES`], [`SKIP_NON_FINITE`]) instead of features for
/// an event that is not kept; `out` is then unspecified. Computation in f64, stored as f32.
pub fn build_features(
    event: &EventSample,
    selection: &SelectionConfig,
    out: &mut EventFeatures,
) -> Result<(), &'static str> {
    if event.first_non_finite().is_some() {
        return Err(SKIP_NON_FINITE);
    }
    out.n_nodes = 0;
    out.node_features.clear();
    out.eta.clear();
    out.phi.clear();
    let mut ht = 0.0;
    let get = |c: usize, i: usize| candidate(event, c, i);
    let (j, el, mu, ph) = (&event.jets, &event.electrons, &event.muons, &event.photons);
    let lens = [j.len(), el.len(), mu.len(), ph.len()];
    for (c, &len) in lens.iter().enumerate() {
        let (min_pt, max_eta) = (selection.min_pt.get(c), selection.max_abs_eta.get(c));
        let mut order = std::mem::take(&mut out.order);
        order.clear();
        order.extend((0..len).filter(|&i| {
            let o = get(c, i);
            o.pt >= min_pt && o.eta.abs() <= max_eta
        }));
        // Stable: equal pt keeps file order.
        order.sort_by(|&a, &b| get(c, b).pt.total_cmp(&get(c, a).pt));
        order.truncate(selection.max_objects.get(c));
        for &i in &order {
            let o = get(c, i);
            if c == 0 {
                ht += o.pt;
            }
            let p = o.pt * o.eta.cosh();
            let energy = (p * p + o.mass * o.mass).sqrt();
            push_node(
                out,
                [
                    o.pt / 100.0,
                    o.eta / 3.0,
                    o.phi / PI,
                    energy / 100.0,
                    o.btag,
                    o.charge,
                    c as f64,
                ],
                o.eta,
                o.phi,
            );
        }
        out.order = order;
    }
    let met = event.met;
    push_node(
        out,
        [
            met.magnitude / 100.0,
            0.0,
            met.phi / PI,
            met.magnitude / 100.0,
            0.0,
            0.0,
            4.0,
        ],
        0.0,
        met.phi,
    );
    if out.n_nodes < selection.min_nodes {
        return Err(SKIP_TOO_FEW_NODES);
    }
    out.global_features = [(out.n_nodes as f64 / 10.0) as f32, (ht / 1000.0) as f32];
    Ok(())
}

/// Object `i` of collection `c` (0 jets, 1 electrons, 2 muons, 3 photons) as a candidate; its
/// type index is `c`.
fn candidate(event: &EventSample, c: usize, i: usize) -> Obj {
    let j = &event.jets;
    let (el, mu, ph) = (&event.electrons, &event.muons, &event.photons);
    match c {
        0 => Obj {
            pt: j.pt[i],
            eta: j.eta[i],
            phi: j.phi[i],
            mass: j.mass[i],
            btag: f64::from(j.btag[i]),
            charge: 0.0,
        },
        1 => Obj {
            pt: el.pt[i],
            eta: el.eta[i],
            phi: el.phi[i],
            mass: ELECTRON_MASS,
            btag: 0.0,
            charge: f64::from(el.charge[i]),
        },
        2 => Obj {
            pt: mu.pt[i],
            eta: mu.eta[i],
            phi: mu.phi[i],
            mass: MUON_MASS,
            btag: 0.0,
            charge: f64::from(mu.charge[i]),
        },
        _ => Obj {
            pt: ph.pt[i],
            eta: ph.eta[i],
            phi: ph.phi[i],
            mass: 0.0,
            btag: 0.0,
            charge: 0.0,
        },
    }
}

fn push_node(out: &mut EventFeatures, row: [f64; D_NODE], eta: f64, phi: f64) {
    out.node_features.extend(row.map(|x| x as f32));
    out.eta.push(eta);
    out.phi.push(phi);
    out.n_nodes += 1;
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use gnn4c_events::{EventId, Met};

    use super::*;

    fn event() -> EventSample {
        EventSample::empty(EventId {
            sample: "t".into(),
            source_file: Arc::from(Path::new("t.root")),
            tree: "t".into(),
            entry: 0,
            event_number: 0,
        })
    }

    fn row(f: &EventFeatures, n: usize) -> &[f32] {
        &f.node_features[n * D_NODE..(n + 1) * D_NODE]
    }

    #[test]
    fn selection_order_caps_and_features() {
        let mut ev = event();
        ev.jets.push(30.0, 0.5, 1.0, 5.0, true);
        ev.jets.push(20.0, 0.0, 0.0, 1.0, false); // below 25 GeV: dropped
        ev.jets.push(80.0, -4.6, 0.0, 1.0, false); // |eta| > 4.5: dropped
        ev.jets.push(60.0, 4.5, -1.0, 0.0, false); // |eta| = 4.5: kept (≤)
        ev.muons.push(15.0, 1.0, 2.0, -1);
        ev.electrons.push(11.0, 2.6, 0.0, 1); // |eta| > 2.5: dropped
        ev.photons.push(12.0, 0.1, -3.0);
        ev.met = Met {
            magnitude: 45.0,
            phi: 0.3,
        };
        let mut f = EventFeatures::default();
        build_features(&ev, &SelectionConfig::default(), &mut f).expect("kept");
        assert_eq!(f.n_nodes, 5, "2 jets, 1 muon, 1 photon, MET");
        // Jets sorted by pt: the 60 GeV jet first.
        assert_eq!(row(&f, 0)[0], 0.6);
        assert_eq!(row(&f, 1)[4], 1.0, "btag follows its jet");
        let e = ((30.0f64 * 0.5f64.cosh()).powi(2) + 25.0).sqrt() / 100.0;
        assert_eq!(row(&f, 1)[3], e as f32);
        assert_eq!(row(&f, 2)[5..7], [-1.0, 2.0], "muon charge and type");
        let mu_e = ((15.0f64 * 1.0f64.cosh()).powi(2) + MUON_MASS * MUON_MASS).sqrt() / 100.0;
        assert_eq!(row(&f, 2)[3], mu_e as f32);
        assert_eq!(row(&f, 3)[6], 3.0, "photon type");
        assert_eq!(
            row(&f, 4),
            &[0.45, 0.0, (0.3 / PI) as f32, 0.45, 0.0, 0.0, 4.0],
            "MET node"
        );
        assert_eq!((f.eta[4], f.phi[4]), (0.0, 0.3));
        assert_eq!(f.global_features, [0.5, 0.09]);
    }

    #[test]
    fn ties_in_pt_keep_file_order_and_caps_apply() {
        let mut ev = event();
        for k in 0..14 {
            ev.jets.push(50.0, 0.01 * f64::from(k), 0.0, 0.0, false);
        }
        let mut f = EventFeatures::default();
        build_features(&ev, &SelectionConfig::default(), &mut f).expect("kept");
        assert_eq!(f.n_nodes, 13, "12 jets (cap) + MET");
        let etas: Vec<f64> = f.eta[..12].to_vec();
        let want: Vec<f64> = (0..12).map(|k| 0.01 * f64::from(k)).collect();
        assert_eq!(
            etas, want,
            "equal pt: file order kept, the last two dropped"
        );
    }

    #[test]
    fn met_only_event_is_skipped_by_default_and_kept_with_min_nodes_1() {
        let mut ev = event();
        ev.jets.push(10.0, 0.0, 0.0, 0.0, false);
        let mut f = EventFeatures::default();
        let sel = SelectionConfig::default();
        assert_eq!(build_features(&ev, &sel, &mut f), Err(SKIP_TOO_FEW_NODES));
        let one = SelectionConfig {
            min_nodes: 1,
            ..sel
        };
        build_features(&ev, &one, &mut f).expect("kept");
        assert_eq!((f.n_nodes, f.global_features), (1, [0.1, 0.0]));
    }

    #[test]
    fn nan_inputs_skip_the_event() {
        let mut ev = event();
        ev.jets.push(f64::NAN, 0.0, 0.0, 0.0, false);
        ev.muons.push(30.0, 0.0, 0.0, 1);
        let mut f = EventFeatures::default();
        assert_eq!(
            build_features(&ev, &SelectionConfig::default(), &mut f),
            Err(SKIP_NON_FINITE)
        );
        let mut ev = event();
        ev.met.phi = f64::INFINITY;
        assert_eq!(
            build_features(&ev, &SelectionConfig::default(), &mut f),
            Err(SKIP_NON_FINITE)
        );
    }
}
