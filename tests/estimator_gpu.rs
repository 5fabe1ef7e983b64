//! The memory estimator against the GPU trackers (wgpu on lavapipe and CUDA on the emulated
//! device in CI): for every model kind and aggregator, with K = 1 and 3, every
//! micro-batch's estimate equals its measured peak to the byte.
//!
//! The tracker counts each buffer at its pool size class, as the replay rounds it, and the
//! replay counts what the GPU arms of the ops add to the CPU's allocations: the blocks'
//! index arrays the segment ops upload (and how long they live), the transposed index of a
//! gather's backward, the passes of a column sum, the LSTM's bucket-by-bucket buffers, and
//! the readouts of earlier micro-batches (see `src/meta.rs`). Not on lavapipe: the
//! list of long rows that `segment_softmax` uploads on other adapters. The tracker is the
//! device's, shared by the tests of this binary, so they take a lock against each other.

use std::sync::{Arc, Mutex};

mod common;

use espalier::check::memory;
use espalier::graph::{self, Csr, LoadOptions};
use espalier::Device;

static SERIAL: Mutex<()> = Mutex::new(());

/// Trains one epoch of `model` (a name of [`memory::models`]) on `dev` with K = 1 and 3
/// and checks every micro-batch's estimate against its measured peak (all printed first):
/// the runs of `espalier check`'s memory group. Skips (with the reason) without `dev`.
fn check(dev: Device, model: &str) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dev) = common::gpu_device(dev) else {
        return;
    };
    let data = graph::load(memory::DATASET, &LoadOptions::default()).unwrap();
    let g: Arc<Csr> = Arc::new(data.graph.symmetrize());
    let (_, settings) = memory::models()
        .into_iter()
        .find(|(name, _)| *name == model)
        .unwrap();
    let mut seen = Vec::new();
    for k in [1, 3] {
        for p in memory::peaks(&data, &g, dev, settings.clone(), k).unwrap() {
            let (est, peak) = (p.estimated, p.measured);
            let at = format!("{dev} {model} K={k} mb {} ({} seeds)", p.index, p.seeds);
            println!(
                "{at}: est {est} measured {peak} (measured - est {:+})",
                peak as i64 - est as i64
            );
            seen.push((at, est, peak));
        }
    }
    for (at, est, peak) in seen {
        assert_eq!(est, peak, "{at}: estimate vs measured peak");
    }
}

#[test]
fn wgpu_sage_mean_estimate_is_exact() {
    check(Device::Wgpu(0), "sage-mean");
}

#[test]
fn wgpu_sage_sum_estimate_is_exact() {
    check(Device::Wgpu(0), "sage-sum");
}

#[test]
fn wgpu_sage_max_estimate_is_exact() {
    check(Device::Wgpu(0), "sage-max");
}

#[test]
fn wgpu_sage_pool_estimate_is_exact() {
    check(Device::Wgpu(0), "sage-pool");
}

#[test]
fn wgpu_sage_lstm_estimate_is_exact() {
    check(Device::Wgpu(0), "sage-lstm");
}

#[test]
fn wgpu_gcn_estimate_is_exact() {
    check(Device::Wgpu(0), "gcn");
}

#[test]
fn wgpu_gat_estimate_is_exact() {
    check(Device::Wgpu(0), "gat");
}

#[test]
fn cuda_sage_mean_estimate_is_exact() {
    check(Device::Cuda(0), "sage-mean");
}

#[test]
fn cuda_sage_sum_estimate_is_exact() {
    check(Device::Cuda(0), "sage-sum");
}

#[test]
fn cuda_sage_max_estimate_is_exact() {
    check(Device::Cuda(0), "sage-max");
}

#[test]
fn cuda_sage_pool_estimate_is_exact() {
    check(Device::Cuda(0), "sage-pool");
}

#[test]
fn cuda_sage_lstm_estimate_is_exact() {
    check(Device::Cuda(0), "sage-lstm");
}

#[test]
fn cuda_gcn_estimate_is_exact() {
    check(Device::Cuda(0), "gcn");
}

#[test]
fn cuda_gat_estimate_is_exact() {
    check(Device::Cuda(0), "gat");
}
