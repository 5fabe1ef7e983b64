//! The memory estimator on every model kind and aggregator, against the CPU tracker (exact
//! bytes): every micro-batch's estimate equals its measured peak to the byte (K = 1 and 4),
//! and under a budget the measured peak stays within it; the parameter bytes it counts
//! are the model's.
//!
//! The CPU tracker is process-wide, so these tests take a lock against each other.

use std::sync::{Arc, Mutex};

mod common;

use espalier::graph::{self, Csr, Dataset, LoadOptions};
use espalier::nn::{Aggregator, GatConfig, ModelKind, ModelShape, MODELS};
use espalier::train::Resident;
use espalier::train::{BatchSize, MicroConfig, OptimizerKind, TrainConfig, Trainer};
use espalier::Device;

static SERIAL: Mutex<()> = Mutex::new(());

fn config(
    data: &Dataset,
    kind: ModelKind,
    aggr: Aggregator,
    k: usize,
    budget: Option<u64>,
) -> TrainConfig {
    TrainConfig {
        model: common::model(
            kind,
            aggr,
            GatConfig {
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
        fanouts: vec![10, 25],
        batch_size: BatchSize::Full,
        epochs: 1,
        optimizer: OptimizerKind::Adam,
        lr: 0.01,
        weight_decay: 5e-4,
        seed: 1,
        device: Device::Cpu,
        eval_every: 0,
        eval_batch_size: 4096,
        micro: MicroConfig {
            micro_batches: k,
            partitioner: "random".into(),
            memory_budget: budget,
            ..MicroConfig::default()
        },
        feature_dtype: Default::default(),
        ..Default::default()
    }
}

/// Trains one epoch (SAGE-LSTM: its explosion bucket split into pieces of at most
/// `lstm_split` nodes) and checks every micro-batch's estimate.
fn check(
    data: &Dataset,
    g: &Arc<Csr>,
    kind: ModelKind,
    aggr: Aggregator,
    k: usize,
    budget: Option<u64>,
    lstm_split: Option<usize>,
) {
    let mut t = Trainer::new(data, g.clone(), config(data, kind, aggr, k, budget)).unwrap();
    t.state.model.set_lstm_split(lstm_split).unwrap();
    t.state.estimator.lstm_split = lstm_split;
    let s = t.run(None, &mut |_| {}).unwrap();
    for m in &s.micro_batches {
        if budget.is_some() {
            assert!(m.k > 1, "{kind:?}/{aggr:?}: the budget should split");
        } else {
            assert_eq!(m.k, k);
        }
        for (i, b) in m.batches.iter().enumerate() {
            let peak = b.peak_bytes.unwrap();
            println!(
                "{kind:?}/{aggr:?} K={k} budget {budget:?} split {lstm_split:?} mb {i}/{}: {} seeds, est {} measured {} ({:+.3}%)",
                m.k,
                b.seeds,
                b.est_peak_bytes,
                peak,
                (b.est_peak_bytes as f64 / peak as f64 - 1.0) * 100.0,
            );
            if let Some(budget) = budget {
                assert!(peak <= budget, "measured peak {peak} over budget {budget}");
            }
            // The CPU tracker counts exact bytes and the estimator replays every
            // allocation: they agree to the byte.
            assert_eq!(
                b.est_peak_bytes, peak,
                "{kind:?}/{aggr:?}: estimate vs measured peak"
            );
        }
    }
}

/// K = 1 and 4, then a budget of the resident bytes plus 40% of the full batch's
/// estimated activations.
fn check_all(data: &Dataset, kind: ModelKind, aggr: Aggregator) {
    let g = Arc::new(data.graph.symmetrize());
    for k in [1, 4] {
        check(data, &g, kind, aggr, k, None, None);
    }
    let mut t = Trainer::new(data, g.clone(), config(data, kind, aggr, 1, None)).unwrap();
    let plan = t.partition_epoch(0, false).unwrap();
    let full = plan[0].batches[0].est_peak_bytes;
    let resident = t.state.estimator.resident_bytes(Resident {
        grads: false,
        optimizer_state: false,
    });
    let steady = t.state.estimator.resident_bytes(Resident::STEADY);
    drop(t);
    let budget = steady + ((full - resident) as f64 * 0.4) as u64;
    check(data, &g, kind, aggr, 1, Some(budget), None);
}

fn arxiv_like() -> Dataset {
    graph::load("synthetic:arxiv-like,scale=0.02", &LoadOptions::default()).unwrap()
}

#[test]
fn sage_lstm_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = arxiv_like();
    check_all(&data, ModelKind::Sage, Aggregator::Lstm);
    let g = Arc::new(data.graph.symmetrize());
    for k in [1, 4] {
        check(
            &data,
            &g,
            ModelKind::Sage,
            Aggregator::Lstm,
            k,
            None,
            Some(7),
        );
    }
}

#[test]
fn gat_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_all(&arxiv_like(), ModelKind::Gat, Aggregator::Mean);
}

#[test]
fn gat_on_cora_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = common::repo_data("cora") else {
        return;
    };
    let opts = LoadOptions {
        cache: false,
        ..LoadOptions::default()
    };
    check_all(
        &Dataset::load(&p, &opts).unwrap(),
        ModelKind::Gat,
        Aggregator::Mean,
    );
}

#[test]
fn sage_mean_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_all(&arxiv_like(), ModelKind::Sage, Aggregator::Mean);
}

#[test]
fn sage_sum_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_all(&arxiv_like(), ModelKind::Sage, Aggregator::Sum);
}

#[test]
fn sage_max_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_all(&arxiv_like(), ModelKind::Sage, Aggregator::Max);
}

#[test]
fn sage_pool_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_all(&arxiv_like(), ModelKind::Sage, Aggregator::Pool);
}

#[test]
fn gcn_estimate_is_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_all(&arxiv_like(), ModelKind::Gcn, Aggregator::Mean);
}

/// The kinds the tests above cover; a kind added to the registry needs its own
/// `*_estimate_is_exact` test here, and then its name in this list.
const COVERED: &[&str] = &["sage", "gcn", "gat"];

#[test]
fn every_registered_model_kind_has_an_exact_estimate_test() {
    let registered: Vec<&str> = MODELS.iter().map(|m| m.name()).collect();
    assert_eq!(registered, COVERED);
}

#[test]
fn parameter_bytes_equal_the_models_parameters() {
    use espalier::nn::{Gnn, Module};
    use espalier::train::MemoryEstimator;
    for (kind, aggr) in [
        (ModelKind::Sage, Aggregator::Mean),
        (ModelKind::Sage, Aggregator::Pool),
        (ModelKind::Sage, Aggregator::Max),
        (ModelKind::Sage, Aggregator::Lstm),
        (ModelKind::Gcn, Aggregator::Mean),
        (ModelKind::Gat, Aggregator::Mean),
    ] {
        let shape = ModelShape {
            in_dim: 7,
            hidden: 5,
            out_dim: 3,
            layers: 3,
            dropout: 0.5,
        };
        let gat = GatConfig {
            heads: 2,
            ..Default::default()
        };
        let config = common::model(kind, aggr, gat, shape);
        let model = Gnn::new(config.clone(), Some(&[1, 2, 3]), 0, Device::Cpu).unwrap();
        let e = MemoryEstimator::new(config, Device::Cpu, 2);
        let n = model.num_parameters() as u64;
        assert_eq!(e.param_bytes(), 4 * n, "{kind:?}/{aggr:?}");
    }
}
