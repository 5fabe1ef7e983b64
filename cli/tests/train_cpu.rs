//! End-to-end training on the CPU: real Cora reaches the accuracy the PyG peer reaches,
//! checkpoints resume exactly, and the CLI writes its JSON summary.

use std::path::PathBuf;
use std::sync::Arc;

use espalier::graph::{self, Dataset, LoadOptions};
use espalier::nn::{GatConfig, ModelConfig, ModelKind, ModelShape};
use espalier::train::{BatchSize, OptimizerKind, TrainConfig, Trainer};
use espalier::Device;

fn cora() -> Option<Dataset> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/cora"));
    if !dir.exists() {
        println!("skipping: {} is absent", dir.display());
        return None;
    }
    let opts = LoadOptions {
        split: Some("per-class-20".into()),
        ..Default::default()
    };
    Some(graph::load(dir.to_str().unwrap(), &opts).unwrap())
}

fn config(kind: ModelKind, data: &Dataset, epochs: usize, seed: u64) -> TrainConfig {
    TrainConfig {
        // GAT (if asked for) with one head.
        model: ModelConfig::with_settings(
            ModelShape {
                in_dim: data.feat_dim,
                hidden: 256,
                out_dim: data.num_classes,
                layers: 2,
                dropout: 0.5,
            },
            match kind {
                ModelKind::Gat => Arc::new(GatConfig {
                    heads: 1,
                    ..GatConfig::default()
                }),
                other => ModelConfig::of(other).settings().clone(),
            },
        ),
        fanouts: vec![25, 10],
        batch_size: BatchSize::Full,
        epochs,
        optimizer: OptimizerKind::Adam,
        lr: 0.01,
        weight_decay: 5e-4,
        seed,
        device: Device::Cpu,
        eval_every: 0,
        eval_batch_size: 4096,
        micro: Default::default(),
        feature_dtype: Default::default(),
        ..Default::default()
    }
}

/// Median test accuracy over three seeds.
fn median_test_acc(kind: ModelKind, data: &Dataset) -> f64 {
    let graph = Arc::new(data.graph.symmetrize());
    let mut accs: Vec<f64> = (0..3)
        .map(|seed| {
            let mut t = Trainer::new(data, graph.clone(), config(kind, data, 60, seed)).unwrap();
            t.run(None, &mut |_| {}).unwrap().test_acc
        })
        .collect();
    accs.sort_by(f64::total_cmp);
    println!("{kind:?} test accuracies {accs:?}");
    accs[1]
}

#[test]
fn cora_graphsage_mean_reaches_075() {
    let Some(data) = cora() else { return };
    let acc = median_test_acc(ModelKind::Sage, &data);
    assert!(acc >= 0.75, "GraphSAGE-mean median test accuracy {acc}");
}

#[test]
fn cora_gcn_reaches_077() {
    let Some(data) = cora() else { return };
    let acc = median_test_acc(ModelKind::Gcn, &data);
    assert!(acc >= 0.77, "GCN median test accuracy {acc}");
}

#[test]
fn checkpoint_resume_continues_exactly() {
    let data = graph::load("synthetic:cora-like,scale=0.3", &LoadOptions::default()).unwrap();
    let graph = Arc::new(data.graph.symmetrize());
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("model.safetensors");
    // Straight through: 4 epochs.
    let mut straight =
        Trainer::new(&data, graph.clone(), config(ModelKind::Sage, &data, 4, 7)).unwrap();
    let full = straight.run(None, &mut |_| {}).unwrap();
    // 2 epochs with checkpoints, then a fresh trainer resumes for the last 2.
    let mut first =
        Trainer::new(&data, graph.clone(), config(ModelKind::Sage, &data, 2, 7)).unwrap();
    first.run(Some(&ckpt), &mut |_| {}).unwrap();
    let mut resumed =
        Trainer::new(&data, graph.clone(), config(ModelKind::Sage, &data, 4, 7)).unwrap();
    resumed.resume(&ckpt).unwrap();
    assert_eq!(resumed.state.start_epoch, 2);
    let rest = resumed.run(None, &mut |_| {}).unwrap();
    // The resumed run's epochs include the checkpoint's, so they are all four.
    let a: Vec<f64> = full.epochs.iter().map(|e| e.loss).collect();
    let b: Vec<f64> = rest.epochs.iter().map(|e| e.loss).collect();
    assert_eq!(a, b, "losses after resume must match the uninterrupted run");
    // A checkpoint of another shape is refused with an error naming the field.
    let mut other_cfg = config(ModelKind::Sage, &data, 4, 7);
    other_cfg.model.shape.hidden = 32;
    let mut other = Trainer::new(&data, graph, other_cfg).unwrap();
    let err = other.resume(&ckpt).unwrap_err().to_string();
    assert!(err.contains("model.hidden"), "{err}");
}

#[test]
fn cli_writes_a_json_summary() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("summary.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args([
            "train",
            "--dataset",
            "synthetic:cora-like,scale=0.2",
            "--epochs",
            "3",
            "--hidden",
            "32",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in [
        "test_acc",
        "valid_acc",
        "final_loss",
        "epochs",
        "peak_bytes",
    ] {
        assert!(v.get(key).is_some(), "summary lacks `{key}`: {v}");
    }
    let epochs = v["epochs"].as_array().unwrap();
    assert_eq!(epochs.len(), 3);
    for key in ["loss", "train_acc", "seconds", "phases"] {
        assert!(epochs[0].get(key).is_some(), "epoch lacks `{key}`");
    }
    assert!(v["peak_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn cli_reports_bad_flags_without_panicking() {
    for args in [
        vec!["train", "--dataset", "synthetic:no-such-preset"],
        vec!["train", "--dataset", "/no/such/folder"],
        vec!["train", "--fanouts", "10,10", "--layers", "3"],
        vec!["train", "--batch-size", "0"],
        vec!["train", "--model", "transformer"],
        vec!["train", "--dropout", "1.5"],
        vec!["train", "--device", "tpu"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(err.contains("error"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}
