//! Training parity: the bundled Cora with SAGE mean, SAGE LSTM, GCN and GAT, trained with
//! the same seed on the CPU and on the device at K = 1 and K = 4 micro-batches. Every
//! epoch's loss must match the CPU's (relative 1e-4, f32), and K = 4 must match K = 1 (the
//! micro-batch invariant: accumulated gradients equal the full batch's).
//!
//! SAGE LSTM's aggregator is an LSTM as wide as its input: on Cora's 1433 features that is
//! 16 M weights per layer and minutes on a software device, so it trains on Cora's graph
//! and labels with the features projected to a few dozen dimensions by a fixed random
//! matrix (the record's name says so).

use std::sync::Arc;

use super::{find_cora, guarded, Ctx, Outcome};
use crate::device::Device;
use crate::error::Result;
use crate::graph::{self, Csr, Dataset, LoadOptions};
use crate::nn::{Aggregator, GatConfig, GcnConfig, KindConfig, ModelConfig, SageConfig};
use crate::rng::Rng;
use crate::train::{BatchSize, MicroConfig, OptimizerKind, TrainConfig, Trainer};

/// Relative difference allowed between two runs' loss of one epoch.
pub const LOSS_RTOL: f64 = 1e-4;
/// Absolute floor, for late epochs whose loss nears 1e-3 (a relative comparison would
/// measure the last bits of f32 there).
pub const LOSS_ATOL: f64 = 1e-6;

/// The dataset the training checks use: Cora (with its per-class-20 split) where it is
/// found, else the synthetic Cora-like graph; and a note saying which.
pub fn dataset(data: Option<&std::path::Path>) -> Result<(Dataset, String)> {
    match find_cora(data) {
        Some(dir) => {
            let opts = LoadOptions {
                split: Some("per-class-20".into()),
                cache: false,
                ..LoadOptions::default()
            };
            Ok((Dataset::load(&dir, &opts)?, "cora".into()))
        }
        None => Ok((
            graph::load("synthetic:cora-like", &LoadOptions::default())?,
            "cora-like (synthetic: Cora not found; --data DIR names its folder)".into(),
        )),
    }
}

/// `data` with its features projected to `k` dimensions by a seeded random matrix.
pub fn project(data: &Dataset, k: usize) -> Result<Dataset> {
    let (n, f) = (data.num_nodes(), data.feat_dim);
    let mut rng = Rng::new(5);
    let scale = 1.0 / (f as f64).sqrt();
    let p: Vec<f32> = (0..f * k).map(|_| (rng.normal() * scale) as f32).collect();
    let x = crate::Tensor::from_f32(data.features.to_vec(), &[n, f], Device::Cpu)?;
    let p = crate::Tensor::from_f32(p, &[f, k], Device::Cpu)?;
    let mut out = data.clone();
    out.features = crate::ops::matmul(&x, &p, false, false)?
        .to_vec_f32()?
        .into();
    out.feat_dim = k;
    Ok(out)
}

/// One training configuration of the check.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Hidden width.
    pub hidden: usize,
    /// Fanouts, input layer first.
    pub fanouts: Vec<i64>,
    /// Epochs.
    pub epochs: usize,
}

impl Setup {
    /// The check's setup at `full` or quick level.
    pub fn of(full: bool) -> Setup {
        if full {
            Setup {
                hidden: 64,
                fanouts: vec![25, 10],
                epochs: 8,
            }
        } else {
            Setup {
                hidden: 16,
                fanouts: vec![10, 10],
                epochs: 3,
            }
        }
    }

    /// A training configuration of `settings` on `device` with K micro-batches.
    pub fn config(&self, settings: Arc<dyn KindConfig>, device: Device, k: usize) -> TrainConfig {
        let mut model = ModelConfig::with_settings(Default::default(), settings)
            .hidden(self.hidden)
            .layers(self.fanouts.len())
            .dropout(0.5);
        model.shape.in_dim = 0;
        TrainConfig {
            model,
            fanouts: self.fanouts.clone(),
            batch_size: BatchSize::Full,
            epochs: self.epochs,
            optimizer: OptimizerKind::Adam,
            lr: 0.01,
            weight_decay: 5e-4,
            seed: 0,
            device,
            eval_every: 0,
            eval_batch_size: 4096,
            micro: MicroConfig {
                micro_batches: k,
                ..MicroConfig::default()
            },
            ..Default::default()
        }
    }
}

/// Per-epoch losses of one training run.
pub fn losses(data: &Dataset, graph: &Arc<Csr>, config: TrainConfig) -> Result<Vec<f64>> {
    let mut t = Trainer::new(data, graph.clone(), config)?;
    let s = t.run(None, &mut |_| {})?;
    Ok(s.epochs.iter().map(|e| e.loss).collect())
}

/// Compares per-epoch losses `got` with `want` (`what` names the runs' data): pass when every epoch is within
/// [`LOSS_RTOL`] (and the [`LOSS_ATOL`] floor); the figures are the largest relative
/// difference and both last losses.
pub fn compare_losses(want: &[f64], got: &[f64], what: &str) -> Outcome {
    if want.len() != got.len() || want.is_empty() {
        return Outcome::verdict(
            false,
            format!("{} epochs against {}", got.len(), want.len()),
        );
    }
    let mut worst = 0f64;
    let mut first_bad = None;
    for (e, (w, g)) in want.iter().zip(got).enumerate() {
        let d = (w - g).abs();
        let rel = if *w != 0.0 { d / w.abs() } else { d };
        if !rel.is_nan() {
            worst = worst.max(rel);
        }
        let ok = d <= LOSS_ATOL + LOSS_RTOL * w.abs();
        if !ok && first_bad.is_none() {
            first_bad = Some((e, *w, *g));
        }
    }
    let last = (want[want.len() - 1], got[got.len() - 1]);
    let detail = match first_bad {
        None => format!(
            "{what}: largest relative loss difference {worst:.1e}; last loss {:.5}",
            last.1
        ),
        Some((e, w, g)) => format!(
            "{what}: epoch {}: loss {g} against {w} (relative difference {:.1e}, allowed {LOSS_RTOL:.0e})",
            e + 1,
            (w - g).abs() / w.abs()
        ),
    };
    Outcome::verdict(first_bad.is_none(), detail)
        .figure("epochs", want.len() as f64)
        .figure("max_rel_loss_diff", worst)
        .figure("last_loss_reference", last.0)
        .figure("last_loss", last.1)
}

/// The models the check trains: name, settings, and the projected width for those too
/// wide to train on Cora's own features in a check (`None`: Cora's own).
fn models(full: bool) -> Vec<(&'static str, Arc<dyn KindConfig>, Option<usize>)> {
    vec![
        (
            "sage-mean",
            Arc::new(SageConfig {
                aggr: Aggregator::Mean,
            }),
            None,
        ),
        (
            "sage-lstm",
            Arc::new(SageConfig {
                aggr: Aggregator::Lstm,
            }),
            Some(if full { 64 } else { 32 }),
        ),
        ("gcn", Arc::new(GcnConfig), None),
        (
            "gat",
            Arc::new(GatConfig {
                heads: 2,
                ..GatConfig::default()
            }),
            None,
        ),
    ]
}

/// Runs the training records.
pub fn run(ctx: &mut Ctx<'_>) {
    let dev = ctx.dev;
    let setup = Setup::of(ctx.full());
    let loaded = dataset(ctx.opts.data.as_deref());
    let (cora, which) = match loaded {
        Ok(d) => d,
        Err(e) => {
            ctx.check("training data", || Err(e));
            return;
        }
    };
    let graph = Arc::new(cora.graph.symmetrize());
    for (name, settings, width) in models(ctx.full()) {
        let data = match width {
            Some(k) => match project(&cora, k) {
                Ok(d) => d,
                Err(e) => {
                    ctx.check(format!("{name} data"), || Err(e));
                    continue;
                }
            },
            None => cora.clone(),
        };
        let on = match width {
            Some(k) => format!("{which}, features projected to {k}"),
            None => which.clone(),
        };
        // Each run is guarded: a panic in one becomes its error, and the records that
        // need that run fail with it. The device's K = 1 run is kept for K = 4 against it.
        let train = |d: Device, k: usize| {
            let config = setup.config(settings.clone(), d, k);
            guarded(|| losses(&data, &graph, config)).map_err(|e| format!("{d} K={k}: {e}"))
        };
        let what = format!("{on}, {} epochs", setup.epochs);
        let mut device_k1 = Err(String::new());
        let mut device_k4 = None;
        ctx.check(format!("{name} K=1 vs cpu"), || {
            let cpu = train(Device::Cpu, 1);
            device_k1 = train(dev, 1);
            Ok(compare_runs(&cpu, &device_k1, &what))
        });
        ctx.check(format!("{name} K=4 vs cpu"), || {
            let cpu = train(Device::Cpu, 4);
            let k4 = train(dev, 4);
            let vs_cpu = compare_runs(&cpu, &k4, &what);
            let vs_k1 = compare_runs(&device_k1, &k4, &what);
            device_k4 = Some(vs_k1);
            Ok(vs_cpu)
        });
        ctx.check(format!("{name} K=4 vs K=1 on the device"), || {
            device_k4
                .take()
                .ok_or_else(|| crate::error::Error::invalid("the K=4 run did not run"))
        });
    }
}

/// [`compare_losses`] of two runs, or a failure naming the run that failed.
fn compare_runs(
    want: &std::result::Result<Vec<f64>, String>,
    got: &std::result::Result<Vec<f64>, String>,
    what: &str,
) -> Outcome {
    match (want, got) {
        (Ok(w), Ok(g)) => compare_losses(w, g, what),
        (Err(e), _) | (_, Err(e)) => Outcome::verdict(false, format!("the run failed: {e}")),
    }
}
