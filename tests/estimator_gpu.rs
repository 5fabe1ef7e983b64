//! The memory estimator against the GPU trackers (wgpu on lavapipe and CUDA on the emulated
//! device in CI): for every model kind and aggregator, with K = 1 and 3, every
//! micro-batch's estimate equals its measured peak to the byte.
//!
//! The tracker counts each buffer at its pool size class, as the replay rounds it, and the
//! replay counts what the GPU arms of the ops add to the CPU's allocations: the blocks'
//! index arrays the segment ops upload (and how long they live), the transposed index of a
//! gather's backward, the passes of a column sum, the LSTM's bucket-by-bucket buffers, and
//! the readouts of earlier micro-batches (see `src/nn/replay.rs`). Not on lavapipe: the
//! list of long rows that `segment_softmax` uploads on other adapters. The tracker is the
//! device's, shared by the tests of this binary, so they take a lock against each other.

use std::sync::{Arc, Mutex};

mod common;

use espalier::graph::{self, Csr, Dataset, LoadOptions};
use espalier::nn::{Aggregator, GatConfig, ModelKind, ModelShape};
use espalier::train::{BatchSize, MicroConfig, OptimizerKind, TrainConfig, Trainer};
use espalier::Device;

static SERIAL: Mutex<()> = Mutex::new(());

fn config(data: &Dataset, dev: Device, kind: ModelKind, aggr: Aggregator, k: usize) -> TrainConfig {
    TrainConfig {
        model: common::model(
            kind,
            aggr,
            GatConfig {
                heads: 2,
                attn_dropout: 0.5,
                ..GatConfig::default()
            },
            ModelShape {
                in_dim: data.feat_dim,
                hidden: 16,
                out_dim: data.num_classes,
                layers: 2,
                dropout: 0.5,
            },
        ),
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
        feature_dtype: Default::default(),
        ..Default::default()
    }
}

/// Trains one epoch on `dev` with K = 1 and 3 and checks every micro-batch's estimate
/// against its measured peak (all printed first); skips (with the reason) without `dev`.
fn check(dev: Device, kind: ModelKind, aggr: Aggregator) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dev) = common::gpu_device(dev) else {
        return;
    };
    let data = graph::load(
        "synthetic:cora-like,scale=0.3,feat_dim=32",
        &LoadOptions::default(),
    )
    .unwrap();
    let g: Arc<Csr> = Arc::new(data.graph.symmetrize());
    let mut seen = Vec::new();
    for k in [1, 3] {
        let mut t = Trainer::new(&data, g.clone(), config(&data, dev, kind, aggr, k)).unwrap();
        let s = t.run(None, &mut |_| {}).unwrap();
        for m in &s.micro_batches {
            assert_eq!(m.k, k);
            for (i, b) in m.batches.iter().enumerate() {
                let (est, peak) = (b.est_peak_bytes, b.peak_bytes.unwrap());
                let at = format!("{dev} {kind:?}/{aggr:?} K={k} mb {i} ({} seeds)", b.seeds);
                println!(
                    "{at}: est {est} measured {peak} (measured - est {:+})",
                    peak as i64 - est as i64
                );
                seen.push((at, est, peak));
            }
        }
    }
    for (at, est, peak) in seen {
        assert_eq!(est, peak, "{at}: estimate vs measured peak");
    }
}

#[test]
fn wgpu_sage_mean_estimate_is_exact() {
    check(Device::Wgpu(0), ModelKind::Sage, Aggregator::Mean);
}

#[test]
fn wgpu_sage_sum_estimate_is_exact() {
    check(Device::Wgpu(0), ModelKind::Sage, Aggregator::Sum);
}

#[test]
fn wgpu_sage_max_estimate_is_exact() {
    check(Device::Wgpu(0), ModelKind::Sage, Aggregator::Max);
}

#[test]
fn wgpu_sage_pool_estimate_is_exact() {
    check(Device::Wgpu(0), ModelKind::Sage, Aggregator::Pool);
}

#[test]
fn wgpu_sage_lstm_estimate_is_exact() {
    check(Device::Wgpu(0), ModelKind::Sage, Aggregator::Lstm);
}

#[test]
fn wgpu_gcn_estimate_is_exact() {
    check(Device::Wgpu(0), ModelKind::Gcn, Aggregator::Mean);
}

#[test]
fn wgpu_gat_estimate_is_exact() {
    check(Device::Wgpu(0), ModelKind::Gat, Aggregator::Mean);
}

#[test]
fn cuda_sage_mean_estimate_is_exact() {
    check(Device::Cuda(0), ModelKind::Sage, Aggregator::Mean);
}

#[test]
fn cuda_sage_sum_estimate_is_exact() {
    check(Device::Cuda(0), ModelKind::Sage, Aggregator::Sum);
}

#[test]
fn cuda_sage_max_estimate_is_exact() {
    check(Device::Cuda(0), ModelKind::Sage, Aggregator::Max);
}

#[test]
fn cuda_sage_pool_estimate_is_exact() {
    check(Device::Cuda(0), ModelKind::Sage, Aggregator::Pool);
}

#[test]
fn cuda_sage_lstm_estimate_is_exact() {
    check(Device::Cuda(0), ModelKind::Sage, Aggregator::Lstm);
}

#[test]
fn cuda_gcn_estimate_is_exact() {
    check(Device::Cuda(0), ModelKind::Gcn, Aggregator::Mean);
}

#[test]
fn cuda_gat_estimate_is_exact() {
    check(Device::Cuda(0), ModelKind::Gat, Aggregator::Mean);
}
