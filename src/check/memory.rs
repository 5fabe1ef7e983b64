//! The memory estimator against the device's tracker: for every model kind, every
//! micro-batch's estimated peak must equal its measured peak to the byte (the estimator
//! replays the engine's own allocations, GPU arms included, at the tracker's size
//! classes). An estimate below the measure means a budget can be overrun; above it, that
//! K is chosen larger than needed.

use std::sync::Arc;

use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::Result;
use crate::graph::{self, Csr, Dataset, LoadOptions};
use crate::nn::{
    Aggregator, GatConfig, GcnConfig, KindConfig, ModelConfig, ModelShape, SageConfig,
};
use crate::train::{BatchSize, MicroConfig, OptimizerKind, TrainConfig, Trainer};

/// A small graph whose batches have every shape the estimator models.
pub const DATASET: &str = "synthetic:cora-like,scale=0.3,feat_dim=32";

/// One micro-batch's estimated and measured peak bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peak {
    /// Index of the micro-batch in its batch.
    pub index: usize,
    /// Its seeds.
    pub seeds: usize,
    /// Estimated peak bytes.
    pub estimated: u64,
    /// Measured peak bytes.
    pub measured: u64,
}

/// The model kinds the estimator covers, by name.
pub fn models() -> Vec<(&'static str, Arc<dyn KindConfig>)> {
    let sage = |aggr| -> Arc<dyn KindConfig> { Arc::new(SageConfig { aggr }) };
    vec![
        ("sage-mean", sage(Aggregator::Mean)),
        ("sage-sum", sage(Aggregator::Sum)),
        ("sage-max", sage(Aggregator::Max)),
        ("sage-pool", sage(Aggregator::Pool)),
        ("sage-lstm", sage(Aggregator::Lstm)),
        ("gcn", Arc::new(GcnConfig)),
        (
            "gat",
            Arc::new(GatConfig {
                heads: 2,
                attn_dropout: 0.5,
                ..GatConfig::default()
            }),
        ),
    ]
}

/// Trains one epoch of `settings` on `dev` with K micro-batches and returns every
/// micro-batch's estimated and measured peak.
pub fn peaks(
    data: &Dataset,
    graph: &Arc<Csr>,
    dev: Device,
    settings: Arc<dyn KindConfig>,
    k: usize,
) -> Result<Vec<Peak>> {
    let shape = ModelShape {
        in_dim: data.feat_dim,
        hidden: 16,
        out_dim: data.num_classes,
        layers: 2,
        dropout: 0.5,
    };
    let config = TrainConfig {
        model: ModelConfig::with_settings(shape, settings),
        fanouts: vec![5, 10],
        batch_size: BatchSize::Full,
        epochs: 1,
        optimizer: OptimizerKind::Adam,
        lr: 0.01,
        weight_decay: 5e-4,
        seed: 1,
        device: dev,
        eval_every: 0,
        eval_batch_size: 4096,
        micro: MicroConfig {
            micro_batches: k,
            partitioner: "random".into(),
            ..MicroConfig::default()
        },
        ..Default::default()
    };
    let mut t = Trainer::new(data, graph.clone(), config)?;
    let s = t.run(None, &mut |_| {})?;
    let mut out = Vec::new();
    for m in &s.micro_batches {
        for (i, b) in m.batches.iter().enumerate() {
            out.push(Peak {
                index: i,
                seeds: b.seeds,
                estimated: b.est_peak_bytes,
                measured: b.peak_bytes.unwrap_or(0),
            });
        }
    }
    Ok(out)
}

/// The record of one model and K: pass when every estimate equals its measure.
pub fn outcome(peaks: &[Peak]) -> Outcome {
    let worst = peaks
        .iter()
        .max_by_key(|p| p.measured.abs_diff(p.estimated))
        .copied();
    let Some(w) = worst else {
        return Outcome::verdict(false, "no micro-batch was measured");
    };
    let off = peaks.iter().filter(|p| p.measured != p.estimated).count();
    let diff = w.measured as i64 - w.estimated as i64;
    let detail = format!(
        "{} micro-batches, {} off; largest difference {diff:+} bytes (micro-batch {}: estimated {}, measured {})",
        peaks.len(),
        off,
        w.index,
        w.estimated,
        w.measured
    );
    let largest = peaks.iter().map(|p| p.measured).max().unwrap_or(0);
    Outcome::verdict(off == 0, detail)
        .figure("micro_batches", peaks.len() as f64)
        .figure("off", off as f64)
        .figure("largest_diff_bytes", diff as f64)
        .figure("largest_measured_bytes", largest as f64)
        .figure(
            "largest_estimated_bytes",
            peaks.iter().map(|p| p.estimated).max().unwrap_or(0) as f64,
        )
}

/// Runs the memory records: every model kind at K = 3 (and K = 1 with `--full`).
pub fn run(ctx: &mut Ctx<'_>) {
    let dev = ctx.dev;
    let data = match graph::load(DATASET, &LoadOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            ctx.check("memory data", || Err(e));
            return;
        }
    };
    let graph = Arc::new(data.graph.symmetrize());
    let ks: &[usize] = if ctx.full() { &[1, 3] } else { &[3] };
    for (name, settings) in models() {
        for &k in ks {
            ctx.check(format!("{name} K={k} estimate vs measured peak"), || {
                Ok(outcome(&peaks(&data, &graph, dev, settings.clone(), k)?))
            });
        }
    }
}
