//! The CUDA path against what the emulated CUDA device (`cuda-emu/`, `scripts/cuda-emu`)
//! sees of it: every time the host waits for the device is a wait espalier counts, no copy
//! from pageable memory and nothing on the legacy default stream; and a real out-of-memory
//! from the driver (the emulated device's capacity, `ESPALIER_CUDA_EMU_MEM`) reaches the
//! split paths, micro-batch and full-graph chunk, and the run ends with the loss it ends
//! with when everything fits. Skipped, with the reason printed, on a real driver or
//! without CUDA.

// The helpers the library's tests share (tests/common/ at the repository root).
#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use espalier::graph::{self, LoadOptions};
use espalier::nn::{Aggregator, ModelConfig, SageConfig};
use espalier::train::{BatchSize, MicroConfig, TrainConfig, Trainer};
use espalier::Device;

/// The emulator's counters are per process: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn emulator() -> Option<common::emu::Emulator> {
    let emu = common::emu::emulator();
    if emu.is_none() {
        println!("skipping: cuda:0 is not the emulated CUDA device (run through scripts/cuda-emu)");
    }
    emu
}

#[test]
fn every_host_wait_of_a_training_run_is_counted_and_none_hides_in_a_copy() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(emu) = emulator() else { return };
    let dev = Device::Cuda(0);
    let data = graph::load(
        "synthetic:cora-like,scale=0.3,feat_dim=32",
        &LoadOptions::default(),
    )
    .unwrap();
    let graph = Arc::new(data.graph.symmetrize());
    let config = TrainConfig::default()
        .model(
            ModelConfig::new(SageConfig {
                aggr: Aggregator::Mean,
            })
            .hidden(16),
        )
        .fanouts(vec![5, 10])
        .batch_size(BatchSize::Full)
        .epochs(2)
        .eval_every(1)
        .device(dev)
        .micro(MicroConfig {
            micro_batches: 3,
            ..MicroConfig::default()
        });
    let waits = dev.host_waits().unwrap();
    let before = emu.stats();
    let mut t = Trainer::new(&data, graph, config).unwrap();
    t.run(None, &mut |_| {}).unwrap();
    drop(t);
    let seen = emu.stats().since(&before);
    let counted = dev.host_waits().unwrap() - waits;
    println!("emulator: {seen:?}; espalier counted {counted} host waits");
    assert!(seen.launches > 0 && seen.pinned_uploads > 0, "{seen:?}");
    assert_eq!(
        seen.host_waits, counted,
        "host waits the driver saw against those espalier counted"
    );
    assert_eq!(
        seen.implicit_waits, 0,
        "calls that looked asynchronous but waited"
    );
    assert_eq!(seen.pageable_uploads, 0, "uploads from pageable memory");
    assert_eq!(
        seen.legacy_stream_ops, 0,
        "work on the legacy default stream"
    );
    // No event per allocation (cudarc's tracking is off): only the staging chunks' own.
    assert!(
        seen.events_created <= 8,
        "{} events created",
        seen.events_created
    );
}

/// Runs the CLI on the emulated device with `capacity` (None: the default 80 GiB) and
/// returns its JSON summary.
fn cli(args: &[&str], capacity: Option<&str>, dir: &Path, name: &str) -> serde_json::Value {
    let json = dir.join(format!("{name}.json"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_espalier"));
    cmd.args(["train", "--device", "cuda", "--quiet", "--json"])
        .arg(&json)
        .args(args);
    match capacity {
        Some(c) => cmd.env("ESPALIER_CUDA_EMU_MEM", c),
        None => cmd.env_remove("ESPALIER_CUDA_EMU_MEM"),
    };
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "espalier {args:?} (capacity {capacity:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

fn losses(j: &serde_json::Value) -> Vec<f64> {
    j["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["loss"].as_f64().unwrap())
        .collect()
}

fn assert_same_losses(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            ((g - w) / w).abs() < 1e-5,
            "{what}: epoch {} loss {g}, {w} with room",
            e + 1
        );
    }
}

#[test]
fn a_driver_out_of_memory_splits_the_micro_batch_and_the_loss_stays() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if emulator().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // SAGE-LSTM on Cora's size with narrow features: about 28 MiB at its peak, 20 MiB of
    // device memory for everything (cuBLAS's workspace and the kernels' code included).
    let args = [
        "--dataset",
        "synthetic:cora-like",
        "--feat-dim",
        "16",
        "--hidden",
        "256",
        "--fanouts",
        "25,25",
        "--aggr",
        "lstm",
        "--epochs",
        "2",
    ];
    let roomy = cli(&args, None, dir.path(), "roomy");
    let tight = cli(&args, Some("20MiB"), dir.path(), "tight");
    let splits: u64 = tight["micro_batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["oom_splits"].as_u64().unwrap())
        .sum();
    assert!(
        splits > 0,
        "no micro-batch was split: {}",
        tight["micro_batches"]
    );
    assert_same_losses(
        "micro-batches split by the driver",
        &losses(&tight),
        &losses(&roomy),
    );
}

#[test]
fn a_driver_out_of_memory_splits_the_full_graph_chunk_and_the_loss_stays() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if emulator().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // One chunk forced: about 7 MiB at its peak; 7 MiB of device memory in all.
    let args = [
        "--dataset",
        "synthetic:cora-like",
        "--feat-dim",
        "64",
        "--hidden",
        "256",
        "--full-graph",
        "--chunks",
        "1",
        "--epochs",
        "2",
    ];
    let roomy = cli(&args, None, dir.path(), "roomy");
    let tight = cli(&args, Some("7MiB"), dir.path(), "tight");
    let splits: u64 = tight["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["full_graph"]["oom_splits"].as_u64().unwrap())
        .sum();
    assert!(splits > 0, "no chunk was split");
    assert_same_losses(
        "chunks split by the driver",
        &losses(&tight),
        &losses(&roomy),
    );
    // Evaluation, which reads more rows per chunk, splits too rather than fail.
    assert_eq!(tight["best_valid_acc"], roomy["best_valid_acc"]);
}

/// Runs the CLI and returns its exit status, stdout and stderr.
fn cli_output(args: &[&str], capacity: &str) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["train", "--device", "cuda"])
        .args(args)
        .env("ESPALIER_CUDA_EMU_MEM", capacity)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn without_a_budget_the_feature_matrix_goes_on_the_device_only_where_its_free_memory_holds_it() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if emulator().is_none() {
        return;
    }
    // Cora-like: a 15.5 MB feature matrix, 11.7 MB of parameters, gradients and Adam state.
    let args = ["--dataset", "synthetic:cora-like", "--epochs", "1"];
    let on = |out: &str| out.contains("features on it");
    let (ok, out, err) = cli_output(&args, "80GiB");
    assert!(ok && on(&(out.clone() + &err)), "80 GiB: {out}{err}");
    // 40 MiB leave 28 MB after the model's state: more than the matrix, less than twice.
    let (ok, out, err) = cli_output(&args, "40MiB");
    assert!(ok && !on(&(out.clone() + &err)), "40 MiB, auto: {out}{err}");
    let mut device = args.to_vec();
    device.extend(["--features", "device"]);
    let (ok, out, err) = cli_output(&device, "40MiB");
    assert!(
        ok && on(&(out.clone() + &err)),
        "40 MiB, --features device: {out}{err}"
    );
    // 25 MiB leave 13 MB: the matrix does not fit, and `device` says why.
    let (ok, _, err) = cli_output(&device, "25MiB");
    assert!(!ok && err.contains("the device's free memory"), "{err}");
}
