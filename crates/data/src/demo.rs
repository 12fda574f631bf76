//! The built-in demo dataset: a seeded toy of the 12 pretraining processes and a ttH CP pair.
//!
//! A toy, not physics: object multiplicities and kinematics are drawn from simple distributions
//! chosen so the processes differ the way the real ones do (b-jet and lepton counts, photons,
//! jet activity, MET), enough for a classifier to learn and for every pipeline stage to run on
//! realistic shapes. Files use the `vector` schema (tree `output`).

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Normal, Poisson};

use crate::DataError;
use crate::root::{WriteColumn, write_tree};

/// Tree name of the demo files (the legacy flat ntuples' name).
pub const DEMO_TREE: &str = "output";

/// How one toy process draws its objects.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToyProcess {
    /// Sample name, also the file stem.
    pub name: &'static str,
    /// Jets: always at least `min`, plus Poisson(`extra`).
    pub jets: (u32, f64),
    /// Expected true b-jets among the jets (capped by the jet count); tagged with 70 % efficiency.
    pub b_jets: f64,
    /// Charged leptons: at least `min`, plus Poisson(`extra`).
    pub leptons: (u32, f64),
    /// Photons: at least `min`, plus Poisson(`extra`).
    pub photons: (u32, f64),
    /// Mean of the exponential part of jet pt (GeV).
    pub jet_pt: f64,
    /// Width of the jets' eta distribution.
    pub jet_eta: f64,
    /// Mean of the exponential part of lepton and photon pt (GeV).
    pub lep_pt: f64,
    /// Mean of the MET magnitude (GeV).
    pub met: f64,
    /// Per-event weight scale (a toy cross-section).
    pub weight: f64,
    /// Fraction of events with a negative weight (NLO-like).
    pub negative_fraction: f64,
}

#[allow(clippy::too_many_arguments)] // a table row: one argument per column keeps the table readable
const fn p(
    name: &'static str,
    jets: (u32, f64),
    b_jets: f64,
    leptons: (u32, f64),
    photons: (u32, f64),
    jet_pt: f64,
    jet_eta: f64,
    lep_pt: f64,
    met: f64,
    weight: f64,
) -> ToyProcess {
    ToyProcess {
        name,
        jets,
        b_jets,
        leptons,
        photons,
        jet_pt,
        jet_eta,
        lep_pt,
        met,
        weight,
        negative_fraction: 0.08,
    }
}

/// Version of the toy process table: bump it when a process changes, so `generate` knows an
/// existing demo dataset is stale. 2: the CP-odd toy's differences enlarged. 3: the tt̄ family
/// (ttbar, ttW, ttt, tHq) at ttH-like object counts, differing in jet pt, jet eta and MET.
pub const DEMO_VERSION: u32 = 3;

/// ttH: the pretraining process and the fine-tuning task's CP-even sample.
const TTH: ToyProcess = p(
    "ttH",
    (4, 2.0),
    3.5,
    (0, 0.9),
    (0, 0.3),
    55.0,
    1.4,
    35.0,
    45.0,
    0.51,
);

/// The 12 pretraining processes, in label order (label = index). Columns: name, jets (min,
/// extra), b-jets, leptons (min, extra), photons (min, extra), jet pt, jet eta width, lepton pt,
/// MET, weight scale.
#[rustfmt::skip]
pub const PRETRAIN_PROCESSES: [ToyProcess; 12] = [
    p("ggF",          (0, 0.8), 0.05, (0, 0.2), (2, 0.2), 35.0, 1.8, 45.0, 15.0, 48.6),
    p("VBF",          (2, 0.6), 0.05, (0, 0.2), (2, 0.2), 55.0, 3.0, 45.0, 15.0, 3.8),
    p("WH",           (1, 0.8), 1.6,  (1, 0.1), (0, 0.2), 45.0, 1.5, 40.0, 55.0, 1.4),
    p("ZH",           (1, 0.8), 1.6,  (2, 0.1), (0, 0.2), 45.0, 1.5, 40.0, 20.0, 0.9),
    TTH,
    p("tHq",          (3, 1.5), 3.0,  (0, 0.9), (0, 0.2), 55.0, 2.4, 35.0, 45.0, 0.07),
    p("single_top",   (1, 1.0), 1.0,  (1, 0.1), (0, 0.1), 45.0, 2.0, 35.0, 45.0, 217.0),
    // The tt̄ family shares ttH's object counts (nearly): telling it apart takes jet hardness,
    // jet forwardness and MET, the quantities the downstream CP task also turns on.
    p("ttbar",        (4, 1.8), 3.0,  (0, 0.9), (0, 0.3), 40.0, 1.2, 35.0, 35.0, 831.0),
    p("ttgammagamma", (2, 2.0), 2.0,  (0, 1.0), (2, 0.2), 50.0, 1.4, 35.0, 45.0, 0.02),
    p("ttW",          (4, 1.8), 3.0,  (1, 0.9), (0, 0.3), 55.0, 1.4, 35.0, 80.0, 0.6),
    p("ttt",          (4, 2.2), 3.5,  (0, 1.0), (0, 0.3), 75.0, 2.0, 35.0, 55.0, 0.002),
    p("tttt",         (5, 2.5), 4.0,  (0, 1.6), (0, 0.1), 70.0, 1.6, 35.0, 60.0, 0.012),
];

/// The downstream fine-tuning pair: ttH CP-even (label 0) vs a CP-odd-like toy (label 1).
///
/// The CP-odd toy has harder, more forward jets and more MET: the kind of difference a real CP
/// analysis sees in angular and energy observables, large enough to learn from a few thousand
/// events and small enough that the task is not trivial.
pub const FINETUNE_PROCESSES: [ToyProcess; 2] = [
    ToyProcess {
        name: "ttH_CPeven",
        ..TTH
    },
    ToyProcess {
        name: "ttH_CPodd",
        jet_pt: 75.0,
        jet_eta: 2.0,
        met: 60.0,
        ..TTH
    },
];

/// One toy file's columns (the `vector` schema's branches), in memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToyColumns {
    /// `event_number` (u64).
    pub event_number: Vec<u64>,
    /// `weight` (float).
    pub weight: Vec<f32>,
    /// `jet_pt`, `jet_eta`, `jet_phi`, `jet_e` (vector<float>).
    pub jet: [Vec<Vec<f32>>; 4],
    /// `jet_btag` (vector<int>).
    pub jet_btag: Vec<Vec<i32>>,
    /// `el_pt`, `el_eta`, `el_phi` (vector<float>).
    pub el: [Vec<Vec<f32>>; 3],
    /// `el_charge` (vector<int>).
    pub el_charge: Vec<Vec<i32>>,
    /// `mu_pt`, `mu_eta`, `mu_phi` (vector<float>).
    pub mu: [Vec<Vec<f32>>; 3],
    /// `mu_charge` (vector<int>).
    pub mu_charge: Vec<Vec<i32>>,
    /// `ph_pt`, `ph_eta`, `ph_phi` (vector<float>).
    pub ph: [Vec<Vec<f32>>; 3],
    /// `met`, `met_phi` (float).
    pub met: [Vec<f32>; 2],
}

fn count(rng: &mut StdRng, (min, extra): (u32, f64)) -> usize {
    let extra = if extra > 0.0 {
        Poisson::new(extra).map_or(0.0, |d| d.sample(rng))
    } else {
        0.0
    };
    min as usize + extra as usize
}

fn object(rng: &mut StdRng, min_pt: f64, mean: f64, eta_sigma: f64) -> (f64, f64, f64) {
    let pt = min_pt + Exp::new(1.0 / mean).map_or(mean, |d| d.sample(rng));
    let eta: f64 = Normal::new(0.0, eta_sigma).map_or(0.0, |d| d.sample(rng));
    let phi = rng.random_range(-PI..PI);
    (pt, eta.clamp(-4.9, 4.9), phi)
}

fn sorted_by_pt(mut objs: Vec<(f64, f64, f64)>) -> Vec<(f64, f64, f64)> {
    objs.sort_by(|a, b| b.0.total_cmp(&a.0));
    objs
}

/// Draws `n_events` toy events of `process` with `seed`; `id` makes event numbers unique across
/// files (`id << 32 | i`).
pub fn toy_events(process: &ToyProcess, id: u32, n_events: usize, seed: u64) -> ToyColumns {
    let mut rng =
        StdRng::seed_from_u64(seed ^ (u64::from(id) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut c = ToyColumns::default();
    let f = |v: &[(f64, f64, f64)], k: usize| {
        v.iter()
            .map(|o| [o.0, o.1, o.2][k] as f32)
            .collect::<Vec<_>>()
    };
    for i in 0..n_events {
        c.event_number.push((u64::from(id) << 32) | i as u64);
        let sign = if rng.random_bool(process.negative_fraction) {
            -1.0
        } else {
            1.0
        };
        let w = process.weight * (1.0 + 0.1 * rng.random_range(-1.0..1.0));
        c.weight.push((sign * w) as f32);

        // Jets: some soft ones (below the 25 GeV selection) on purpose.
        let n_jets = count(&mut rng, process.jets);
        let jets = sorted_by_pt(
            (0..n_jets)
                .map(|_| object(&mut rng, 15.0, process.jet_pt, process.jet_eta))
                .collect(),
        );
        let n_b = (Poisson::new(process.b_jets.max(1e-3)).map_or(0.0, |d| d.sample(&mut rng))
            as usize)
            .min(n_jets);
        let mut btag = vec![0i32; n_jets];
        for (k, tag) in btag.iter_mut().enumerate() {
            // The hardest jets are the b candidates; 70 % tagging efficiency, 1 % mistag.
            let p_tag = if k < n_b { 0.7 } else { 0.01 };
            *tag = i32::from(rng.random_bool(p_tag));
        }
        let energy: Vec<f32> = jets
            .iter()
            .map(|&(pt, eta, _)| {
                let mass = pt * rng.random_range(0.05..0.2);
                ((pt * eta.cosh()).powi(2) + mass * mass).sqrt() as f32
            })
            .collect();
        for k in 0..3 {
            c.jet[k].push(f(&jets, k));
        }
        c.jet[3].push(energy);
        c.jet_btag.push(btag);

        // Leptons: split between electrons and muons at random.
        let n_lep = count(&mut rng, process.leptons);
        let (mut els, mut mus) = (Vec::new(), Vec::new());
        for _ in 0..n_lep {
            let o = object(&mut rng, 7.0, process.lep_pt, 1.2);
            if rng.random_bool(0.5) {
                els.push(o)
            } else {
                mus.push(o)
            }
        }
        let (els, mus) = (sorted_by_pt(els), sorted_by_pt(mus));
        for k in 0..3 {
            c.el[k].push(f(&els, k));
            c.mu[k].push(f(&mus, k));
        }
        c.el_charge.push(
            els.iter()
                .map(|_| if rng.random_bool(0.5) { 1 } else { -1 })
                .collect(),
        );
        c.mu_charge.push(
            mus.iter()
                .map(|_| if rng.random_bool(0.5) { 1 } else { -1 })
                .collect(),
        );

        let n_ph = count(&mut rng, process.photons);
        let phs = sorted_by_pt(
            (0..n_ph)
                .map(|_| object(&mut rng, 8.0, process.lep_pt, 1.2))
                .collect(),
        );
        for k in 0..3 {
            c.ph[k].push(f(&phs, k));
        }
        let met = Exp::new(1.0 / process.met).map_or(process.met, |d| d.sample(&mut rng));
        c.met[0].push(met as f32);
        c.met[1].push(rng.random_range(-PI..PI) as f32);
    }
    c
}

impl ToyColumns {
    /// The branches as written (the `vector` schema, plus object-count scalars).
    pub fn into_write_columns(self) -> Vec<WriteColumn> {
        let counts = |v: &[Vec<f32>]| v.iter().map(|x| x.len() as i32).collect::<Vec<_>>();
        let [jet_pt, jet_eta, jet_phi, jet_e] = self.jet;
        let [el_pt, el_eta, el_phi] = self.el;
        let [mu_pt, mu_eta, mu_phi] = self.mu;
        let [ph_pt, ph_eta, ph_phi] = self.ph;
        let [met, met_phi] = self.met;
        vec![
            WriteColumn::U64("event_number".into(), self.event_number),
            WriteColumn::F32("weight".into(), self.weight),
            WriteColumn::I32("njet".into(), counts(&jet_pt)),
            WriteColumn::I32("nel".into(), counts(&el_pt)),
            WriteColumn::I32("nmu".into(), counts(&mu_pt)),
            WriteColumn::I32("nph".into(), counts(&ph_pt)),
            WriteColumn::VecF32("jet_pt".into(), jet_pt),
            WriteColumn::VecF32("jet_eta".into(), jet_eta),
            WriteColumn::VecF32("jet_phi".into(), jet_phi),
            WriteColumn::VecF32("jet_e".into(), jet_e),
            WriteColumn::VecI32("jet_btag".into(), self.jet_btag),
            WriteColumn::VecF32("el_pt".into(), el_pt),
            WriteColumn::VecF32("el_eta".into(), el_eta),
            WriteColumn::VecF32("el_phi".into(), el_phi),
            WriteColumn::VecI32("el_charge".into(), self.el_charge),
            WriteColumn::VecF32("mu_pt".into(), mu_pt),
            WriteColumn::VecF32("mu_eta".into(), mu_eta),
            WriteColumn::VecF32("mu_phi".into(), mu_phi),
            WriteColumn::VecI32("mu_charge".into(), self.mu_charge),
            WriteColumn::VecF32("ph_pt".into(), ph_pt),
            WriteColumn::VecF32("ph_eta".into(), ph_eta),
            WriteColumn::VecF32("ph_phi".into(), ph_phi),
            WriteColumn::F32("met".into(), met),
            WriteColumn::F32("met_phi".into(), met_phi),
        ]
    }
}

/// One written demo file.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoFile {
    /// Sample name.
    pub sample: &'static str,
    /// Label in its task (pretraining class index, or 0/1 for the CP pair).
    pub label: u32,
    /// The file written.
    pub path: PathBuf,
    /// Events in it.
    pub events: usize,
}

/// Writes the demo dataset into `out_dir`: `pretrain/<process>.root` for the 12 pretraining
/// processes and `finetune/<process>.root` for the CP pair, `n_events` each, from `seed`.
///
/// Files are generated on up to `threads` threads; every file is written atomically and depends
/// only on (`seed`, its process), so the output is identical for any thread count.
pub fn write_demo(
    out_dir: &Path,
    n_events: usize,
    seed: u64,
    threads: usize,
) -> Result<Vec<DemoFile>, DataError> {
    let jobs: Vec<(&'static str, u32, u32, ToyProcess)> = PRETRAIN_PROCESSES
        .iter()
        .enumerate()
        .map(|(i, p)| ("pretrain", i as u32, i as u32, *p))
        .chain(
            FINETUNE_PROCESSES
                .iter()
                .enumerate()
                .map(|(i, p)| ("finetune", 100 + i as u32, i as u32, *p)),
        )
        .collect();
    gnn4c_rootio::map_on_threads(jobs, threads, |(group, id, label, process)| {
        let path = out_dir.join(group).join(format!("{}.root", process.name));
        let columns = toy_events(&process, id, n_events, seed).into_write_columns();
        write_tree(&path, DEMO_TREE, columns).map(|()| DemoFile {
            sample: process.name,
            label,
            path,
            events: n_events,
        })
    })
    .into_iter()
    .collect()
}
