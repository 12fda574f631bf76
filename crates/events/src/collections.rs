//! Object collections as structs of arrays, in GeV and radians.

/// Electron mass in GeV (contract §1: leptons take the PDG mass, not the file's).
pub const ELECTRON_MASS: f64 = 0.000511;
/// Muon mass in GeV.
pub const MUON_MASS: f64 = 0.10566;

/// The object collections of an event, in the contract's node order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collection {
    /// Jets (with b-tag).
    Jets,
    /// Electrons (with charge).
    Electrons,
    /// Muons (with charge).
    Muons,
    /// Photons.
    Photons,
    /// Missing transverse momentum: exactly one per event.
    Met,
}

impl Collection {
    /// Every collection, in node order.
    pub const ALL: [Collection; 5] = [
        Collection::Jets,
        Collection::Electrons,
        Collection::Muons,
        Collection::Photons,
        Collection::Met,
    ];

    /// The coffea-style name: `jets`, `electrons`, `muons`, `photons`, `met`.
    pub fn name(self) -> &'static str {
        match self {
            Collection::Jets => "jets",
            Collection::Electrons => "electrons",
            Collection::Muons => "muons",
            Collection::Photons => "photons",
            Collection::Met => "met",
        }
    }
}

impl std::fmt::Display for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Jets: pt, mass in GeV; eta; phi in rad; btag 0 or 1.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Jets {
    /// Transverse momentum (GeV).
    pub pt: Vec<f64>,
    /// Pseudorapidity.
    pub eta: Vec<f64>,
    /// Azimuth (rad).
    pub phi: Vec<f64>,
    /// Invariant mass (GeV).
    pub mass: Vec<f64>,
    /// B-tag decision: 0 or 1.
    pub btag: Vec<u8>,
}

impl Jets {
    /// Appends one jet.
    pub fn push(&mut self, pt: f64, eta: f64, phi: f64, mass: f64, btag: bool) {
        self.pt.push(pt);
        self.eta.push(eta);
        self.phi.push(phi);
        self.mass.push(mass);
        self.btag.push(u8::from(btag));
    }

    /// Number of jets.
    pub fn len(&self) -> usize {
        self.pt.len()
    }

    /// True when the event has no jets.
    pub fn is_empty(&self) -> bool {
        self.pt.is_empty()
    }
}

/// Electrons or muons: pt in GeV, eta, phi in rad, charge ±1. The mass is the collection's constant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Leptons {
    /// Transverse momentum (GeV).
    pub pt: Vec<f64>,
    /// Pseudorapidity.
    pub eta: Vec<f64>,
    /// Azimuth (rad).
    pub phi: Vec<f64>,
    /// Electric charge: −1 or +1.
    pub charge: Vec<i8>,
}

impl Leptons {
    /// Appends one lepton.
    pub fn push(&mut self, pt: f64, eta: f64, phi: f64, charge: i8) {
        self.pt.push(pt);
        self.eta.push(eta);
        self.phi.push(phi);
        self.charge.push(charge);
    }

    /// Number of leptons.
    pub fn len(&self) -> usize {
        self.pt.len()
    }

    /// True when the collection is empty.
    pub fn is_empty(&self) -> bool {
        self.pt.is_empty()
    }
}

/// Photons: pt in GeV, eta, phi in rad (massless).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Photons {
    /// Transverse momentum (GeV).
    pub pt: Vec<f64>,
    /// Pseudorapidity.
    pub eta: Vec<f64>,
    /// Azimuth (rad).
    pub phi: Vec<f64>,
}

impl Photons {
    /// Appends one photon.
    pub fn push(&mut self, pt: f64, eta: f64, phi: f64) {
        self.pt.push(pt);
        self.eta.push(eta);
        self.phi.push(phi);
    }

    /// Number of photons.
    pub fn len(&self) -> usize {
        self.pt.len()
    }

    /// True when the collection is empty.
    pub fn is_empty(&self) -> bool {
        self.pt.is_empty()
    }
}

/// Missing transverse momentum: magnitude in GeV, phi in rad.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Met {
    /// Magnitude (GeV).
    pub magnitude: f64,
    /// Azimuth (rad).
    pub phi: f64,
}

/// Converts cartesian (px, py, pz, E) to (pt, eta, phi, mass) exactly as contract §1 writes it:
/// pt = hypot(px, py), phi = atan2(py, px), eta = asinh(pz / pt), mass = sqrt(max(E² − p², 0)).
///
/// A zero-pt object has an undefined eta (pz / 0); the returned eta is then ±inf or NaN and the
/// reader skips the event under the `non_finite` reason.
pub fn polar_from_cartesian(px: f64, py: f64, pz: f64, e: f64) -> (f64, f64, f64, f64) {
    let pt = px.hypot(py);
    let phi = py.atan2(px);
    let eta = (pz / pt).asinh();
    let p2 = px * px + py * py + pz * pz;
    let mass = (e * e - p2).max(0.0).sqrt();
    (pt, eta, phi, mass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cartesian_round_trip_recovers_known_kinematics() {
        // pt 30, eta 1.2, phi −2.5, m 5: build the four-vector, convert back.
        let (pt, eta, phi, m): (f64, f64, f64, f64) = (30.0, 1.2, -2.5, 5.0);
        let (px, py, pz) = (pt * phi.cos(), pt * phi.sin(), pt * eta.sinh());
        let e = (px * px + py * py + pz * pz + m * m).sqrt();
        let got = polar_from_cartesian(px, py, pz, e);
        // f64 round trip through sinh/asinh and a square root: 1e-9 is generous.
        assert!((got.0 - pt).abs() < 1e-9);
        assert!((got.1 - eta).abs() < 1e-9);
        assert!((got.2 - phi).abs() < 1e-9);
        assert!((got.3 - m).abs() < 1e-9);
    }

    #[test]
    fn cartesian_mass_is_clamped_at_zero() {
        // E slightly below |p| (rounding in a file): mass 0, never NaN.
        let (_, _, _, m) = polar_from_cartesian(3.0, 4.0, 0.0, 4.999);
        assert_eq!(m, 0.0);
    }

    #[test]
    fn collections_push_keeps_arrays_aligned() {
        let mut jets = Jets::default();
        jets.push(50.0, 0.1, 0.2, 10.0, true);
        jets.push(40.0, -0.1, -0.2, 8.0, false);
        assert_eq!(jets.len(), 2);
        assert_eq!(jets.btag, vec![1, 0]);
        let mut mu = Leptons::default();
        mu.push(20.0, 0.5, 1.0, -1);
        assert_eq!((mu.len(), mu.charge[0]), (1, -1));
        assert_eq!(Collection::ALL.map(Collection::name)[4], "met");
    }
}
