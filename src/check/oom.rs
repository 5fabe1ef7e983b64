//! Out of memory: a run whose full batch does not fit the device's budget, which the
//! planner was not told of, runs out of memory at run time; the trainer splits the
//! micro-batch that failed and carries on, and every epoch must end with the loss of the
//! run that fit (relative 1e-5: the split sums the same gradients in another order).

use std::sync::Arc;

use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::Result;
use crate::graph::{self, Csr, Dataset, LoadOptions};
use crate::nn::{Aggregator, ModelConfig, SageConfig};
use crate::train::Resident;
use crate::train::{BatchSize, FeaturePlacement, MicroConfig, OptimizerKind, TrainConfig, Trainer};

/// Relative difference allowed between the split run's loss and the unsplit one's.
pub const LOSS_RTOL: f64 = 1e-5;

/// Sets a device's memory budget until dropped (also when a check panics), then clears it.
struct Budget(Device);

impl Budget {
    fn set(dev: Device, bytes: u64) -> Result<Budget> {
        dev.set_memory_budget(Some(bytes))?;
        Ok(Budget(dev))
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        let _ = self.0.set_memory_budget(None);
    }
}

/// What a run under a budget it does not fit did.
#[derive(Clone, Debug)]
pub struct SplitRun {
    /// The dataset trained on.
    pub dataset: String,
    /// The budget, in bytes.
    pub budget: u64,
    /// Per-epoch losses without a budget.
    pub free: Vec<f64>,
    /// Per-epoch losses under the budget.
    pub tight: Vec<f64>,
    /// Micro-batches split after running out of memory.
    pub splits: usize,
    /// Highest bytes live under the budget.
    pub peak: u64,
}

fn config(dev: Device, hidden: usize) -> TrainConfig {
    TrainConfig {
        model: ModelConfig::new(SageConfig {
            aggr: Aggregator::Mean,
        })
        .hidden(hidden)
        .dropout(0.5),
        fanouts: vec![10, 25],
        batch_size: BatchSize::Full,
        epochs: 2,
        optimizer: OptimizerKind::Adam,
        lr: 0.01,
        weight_decay: 5e-4,
        seed: 1,
        device: dev,
        eval_every: 0,
        eval_batch_size: 4096,
        micro: MicroConfig::default(),
        // In host memory, as the estimator's resident bytes count it.
        feature_placement: FeaturePlacement::Host,
        ..Default::default()
    }
}

/// Trains 2 epochs of SAGE-mean on `dev` without a budget, then under a device budget of
/// the resident bytes plus `frac` of the full batch's estimated activations.
pub fn split_run(
    data: &Dataset,
    graph: &Arc<Csr>,
    dev: Device,
    hidden: usize,
    frac: f64,
) -> Result<SplitRun> {
    let mut free = Trainer::new(data, graph.clone(), config(dev, hidden))?;
    let plan = free.partition_epoch(0, false)?;
    let full = plan.first().and_then(|p| p.batches.first());
    let full = full.map_or(0, |b| b.est_peak_bytes);
    let resident = free.state.estimator.resident_bytes(Resident {
        grads: false,
        optimizer_state: false,
    });
    let steady = free.state.estimator.resident_bytes(Resident::STEADY);
    let budget = steady + (full.saturating_sub(resident) as f64 * frac) as u64;
    let free_losses = (0..2)
        .map(|e| free.train_epoch(e).map(|s| s.loss))
        .collect::<Result<Vec<_>>>()?;
    drop(free);
    dev.trim_pool()?;
    let mut t = Trainer::new(data, graph.clone(), config(dev, hidden))?;
    t.state.take_peak();
    let tight = {
        let _budget = Budget::set(dev, budget)?;
        (0..2)
            .map(|e| t.train_epoch(e))
            .collect::<Result<Vec<_>>>()?
    };
    let peak = t.state.take_peak();
    let splits = t.take_micro_log().iter().map(|m| m.oom_splits).sum();
    Ok(SplitRun {
        dataset: data.name.clone(),
        budget,
        free: free_losses,
        tight: tight.iter().map(|s| s.loss).collect(),
        splits,
        peak,
    })
}

/// The record: pass when something split, the peak stayed within the budget, and every
/// epoch's loss is the unsplit run's.
pub fn outcome(r: &SplitRun) -> Outcome {
    let worst = r
        .free
        .iter()
        .zip(&r.tight)
        .map(|(a, b)| ((a - b) / a).abs())
        .fold(0f64, f64::max);
    let same = r.free.len() == r.tight.len() && worst < LOSS_RTOL;
    let (ok, detail) = if r.splits == 0 {
        (
            false,
            "nothing was split: the budget did not bind".to_string(),
        )
    } else if r.peak > r.budget {
        (
            false,
            format!("peak {} bytes over the budget {}", r.peak, r.budget),
        )
    } else if !same {
        (
            false,
            format!(
                "losses {:?} under the budget, {:?} without (relative difference {worst:.1e})",
                r.tight, r.free
            ),
        )
    } else {
        (
            true,
            format!(
                "{}: {} splits under a {:.1} MiB budget; losses equal the unsplit run's (relative difference {worst:.1e})",
                r.dataset,
                r.splits,
                r.budget as f64 / (1u64 << 20) as f64
            ),
        )
    };
    Outcome::verdict(ok, detail)
        .figure("budget_bytes", r.budget as f64)
        .figure("peak_bytes", r.peak as f64)
        .figure("oom_splits", r.splits as f64)
        .figure("max_rel_loss_diff", worst)
}

/// Runs the out-of-memory record.
pub fn run(ctx: &mut Ctx<'_>) {
    let dev = ctx.dev;
    let (spec, hidden) = if ctx.full() {
        ("synthetic:products-like,scale=0.005", 128)
    } else {
        ("synthetic:products-like,scale=0.002", 64)
    };
    ctx.check("sage-mean under a budget: splits, same losses", || {
        let data = graph::load(spec, &LoadOptions::default())?;
        let g = Arc::new(data.graph.symmetrize());
        Ok(outcome(&split_run(&data, &g, dev, hidden, 0.5)?))
    });
}
