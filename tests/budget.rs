//! Training under a memory budget on the CPU, whose tracker counts exact bytes: every
//! micro-batch's measured peak stays within the budget and equals the estimate to the byte,
//! a micro-batch that runs out of memory is split without losing or double counting
//! gradient, and a budget that one seed does not fit says what it needs.
//!
//! The CPU tracker is process-wide, so these tests take a lock against each other.

use std::sync::{Arc, Mutex};

mod common;

use espalier::bytes::format_bytes;
use espalier::graph::{self, Csr, Dataset, LoadOptions};
use espalier::nn::{Aggregator, GatConfig, ModelKind, ModelShape, Module};
use espalier::train::Resident;
use espalier::train::{BatchSize, MicroConfig, OptimizerKind, Summary, TrainConfig, Trainer};
use espalier::{Device, Error};

static SERIAL: Mutex<()> = Mutex::new(());

fn config(data: &Dataset, kind: ModelKind, aggr: Aggregator, budget: Option<u64>) -> TrainConfig {
    TrainConfig {
        model: common::model(
            kind,
            aggr,
            GatConfig {
                heads: 1,
                ..GatConfig::default()
            },
            ModelShape {
                in_dim: data.feat_dim,
                hidden: 64,
                out_dim: data.num_classes,
                layers: 2,
                dropout: 0.5,
            },
        ),
        fanouts: vec![10, 25],
        batch_size: BatchSize::Full,
        epochs: 2,
        optimizer: OptimizerKind::Adam,
        lr: 0.01,
        weight_decay: 5e-4,
        seed: 1,
        device: Device::Cpu,
        eval_every: 0,
        eval_batch_size: 4096,
        micro: MicroConfig {
            micro_batches: 1,
            partitioner: "random".into(),
            memory_budget: budget,
            ..MicroConfig::default()
        },
        feature_dtype: Default::default(),
        ..Default::default()
    }
}

/// A budget that forces several micro-batches: the resident bytes plus `frac` of the
/// full batch's estimated activations, both as the planner counts them.
fn squeezed_budget(
    data: &Dataset,
    g: &Arc<Csr>,
    kind: ModelKind,
    aggr: Aggregator,
    frac: f64,
) -> u64 {
    let mut t = Trainer::new(data, g.clone(), config(data, kind, aggr, None)).unwrap();
    let plan = t.partition_epoch(0, false).unwrap();
    let full = plan[0].batches[0].est_peak_bytes;
    let resident = t.state.estimator.resident_bytes(Resident {
        grads: false,
        optimizer_state: false,
    });
    let steady = t.state.estimator.resident_bytes(Resident::STEADY);
    steady + ((full - resident) as f64 * frac) as u64
}

/// Trains under `budget` and checks every micro-batch of every epoch.
fn check_run(
    data: &Dataset,
    g: &Arc<Csr>,
    kind: ModelKind,
    aggr: Aggregator,
    budget: u64,
) -> Summary {
    let mut t = Trainer::new(data, g.clone(), config(data, kind, aggr, Some(budget))).unwrap();
    let s = t.run(None, &mut |_| {}).unwrap();
    assert!(s.peak_bytes <= budget);
    for m in &s.micro_batches {
        assert!(
            m.k > 1,
            "{kind:?}/{aggr:?}: the budget should need several micro-batches"
        );
        for (i, b) in m.batches.iter().enumerate() {
            let peak = b.peak_bytes.unwrap();
            let err = (b.est_peak_bytes as f64 - peak as f64).abs() / peak as f64;
            println!(
                "{kind:?}/{aggr:?} epoch {} mb {i}/{}: {} seeds, est {} measured {} ({:+.2}%), budget {}",
                m.epoch,
                m.k,
                b.seeds,
                b.est_peak_bytes,
                peak,
                err * 100.0,
                budget
            );
            assert!(peak <= budget, "measured peak {peak} over budget {budget}");
            // The CPU tracker counts exact bytes and the estimator replays every
            // allocation: they agree to the byte.
            assert_eq!(
                b.est_peak_bytes, peak,
                "{kind:?}/{aggr:?}: estimate vs measured peak"
            );
        }
    }
    s
}

const MODELS: &[(ModelKind, Aggregator)] = &[
    (ModelKind::Sage, Aggregator::Mean),
    (ModelKind::Gcn, Aggregator::Mean),
    (ModelKind::Sage, Aggregator::Pool),
    (ModelKind::Sage, Aggregator::Max),
];

#[test]
fn products_like_stays_within_budget() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load(
        "synthetic:products-like,scale=0.002",
        &LoadOptions::default(),
    )
    .unwrap();
    let g = Arc::new(data.graph.symmetrize());
    for &(kind, aggr) in MODELS {
        let budget = squeezed_budget(&data, &g, kind, aggr, 0.4);
        check_run(&data, &g, kind, aggr, budget);
    }
}

#[test]
fn email_enron_stays_within_budget() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = common::repo_data("email-enron") else {
        return;
    };
    let opts = LoadOptions {
        cache: false,
        ..LoadOptions::default()
    };
    let data = Dataset::load(&p, &opts).unwrap();
    let g = Arc::new(data.graph.symmetrize());
    for &(kind, aggr) in &MODELS[..2] {
        let budget = squeezed_budget(&data, &g, kind, aggr, 0.5);
        check_run(&data, &g, kind, aggr, budget);
    }
}

#[test]
fn out_of_memory_splits_without_losing_gradient() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load(
        "synthetic:products-like,scale=0.002",
        &LoadOptions::default(),
    )
    .unwrap();
    let g = Arc::new(data.graph.symmetrize());
    let (kind, aggr) = (ModelKind::Sage, Aggregator::Mean);
    let budget = squeezed_budget(&data, &g, kind, aggr, 0.6);

    let mut free = Trainer::new(&data, g.clone(), config(&data, kind, aggr, None)).unwrap();
    let losses: Vec<f64> = (0..2).map(|e| free.train_epoch(e).unwrap().loss).collect();

    // The planner does not know about this budget: the full batch runs out of memory at
    // run time, is split, and the halves (or their halves) carry on.
    let mut t = Trainer::new(&data, g.clone(), config(&data, kind, aggr, None)).unwrap();
    Device::Cpu.set_memory_budget(Some(budget)).unwrap();
    let run: Vec<_> = (0..2).map(|e| t.train_epoch(e)).collect();
    Device::Cpu.set_memory_budget(None).unwrap();
    for (e, (r, l)) in run.into_iter().zip(losses).enumerate() {
        let r = r.unwrap();
        assert!(r.micro_batches > 1, "epoch {e} did not split");
        assert!(
            ((r.loss - l) / l).abs() < 1e-5,
            "epoch {e}: {} vs {l}",
            r.loss
        );
    }
    for (a, b) in t
        .state
        .model
        .parameters()
        .iter()
        .zip(free.state.model.parameters())
    {
        let (a, b) = (a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-4 * scale, "{x} vs {y}");
        }
    }
}

#[test]
fn a_budget_one_seed_does_not_fit_says_what_it_needs() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load(
        "synthetic:products-like,scale=0.002",
        &LoadOptions::default(),
    )
    .unwrap();
    let g = Arc::new(data.graph.symmetrize());
    let (kind, aggr) = (ModelKind::Sage, Aggregator::Mean);
    let probe = Trainer::new(&data, g.clone(), config(&data, kind, aggr, None)).unwrap();
    // Room for the resident bytes and the margin, not for a seed's activations.
    let budget = (probe.state.estimator.resident_bytes(Resident::STEADY) as f64 * 1.1) as u64 + 64;
    drop(probe);
    let mut t = Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(budget))).unwrap();
    match t.train_epoch(0) {
        Err(Error::InvalidArgument(msg)) => {
            println!("{msg}");
            assert!(
                msg.contains("a micro-batch of one seed needs up to"),
                "{msg}"
            );
            assert!(msg.contains(&format_bytes(budget)), "{msg}");
        }
        other => panic!(
            "expected a too-small budget error, got {:?}",
            other.map(|s| s.loss)
        ),
    }
    drop(t);
    assert_eq!(
        Device::Cpu.memory_stats().unwrap().budget,
        None,
        "budget restored"
    );
}

/// Gives the first micro-batch twice the seeds of each other one, so it needs a larger K
/// than an even split under the same budget.
struct Lopsided;

impl espalier::partition::Partitioner for Lopsided {
    fn name(&self) -> &str {
        "lopsided"
    }

    fn partition(
        &mut self,
        batch: &espalier::partition::Batch<'_>,
        k: usize,
    ) -> espalier::Result<Vec<Vec<u32>>> {
        let s = batch.seeds;
        let unit = s.len() / (k + 1);
        let mut parts = vec![s[..2 * unit].to_vec()];
        parts.extend(espalier::partition::split_even(&s[2 * unit..], k - 1));
        Ok(parts)
    }
}

#[test]
fn a_new_partitioner_searches_its_own_k_under_the_budget() {
    // A trainer with a budget sets the process-wide CPU budget.
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load(
        "synthetic:products-like,scale=0.002",
        &LoadOptions::default(),
    )
    .unwrap();
    let g = Arc::new(data.graph.clone());
    let (kind, aggr) = (ModelKind::Sage, Aggregator::Mean);
    let budget = squeezed_budget(&data, &g, kind, aggr, 0.3);
    let k_of = |t: &mut Trainer<'_>| t.partition_epoch(0, false).unwrap()[0].k;
    let mut fresh =
        Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(budget))).unwrap();
    let k_random = k_of(&mut fresh);
    let mut t = Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(budget))).unwrap();
    t.set_partitioner(Box::new(Lopsided));
    let k_lopsided = k_of(&mut t);
    assert!(k_lopsided > k_random, "{k_lopsided} vs {k_random}");
    t.set_partitioner(espalier::partition::by_name("random").unwrap());
    assert_eq!(k_of(&mut t), k_random);
}

/// Evaluation does not depend on how its batches are cut: under a budget that halves the
/// evaluation batches, and with a small `eval_batch_size`, the validation accuracy is the
/// one without, to the bit, so the best epoch and `--patience` do not change with
/// `--memory-budget`.
#[test]
fn validation_accuracy_is_the_same_with_and_without_a_budget() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let data = graph::load("synthetic:cora-like", &LoadOptions::default()).unwrap();
    let g = Arc::new(data.graph.symmetrize());
    let mut cfg = config(&data, ModelKind::Sage, Aggregator::Mean, None);
    // Small fanouts: most nodes have more neighbours than are sampled.
    cfg.fanouts = vec![3, 3];
    let mut t = Trainer::new(&data, g, cfg).unwrap();
    t.train_epoch(0).unwrap();
    let valid = data.split.valid.clone();
    let mem = Device::Cpu.memory().unwrap();
    let live = mem.live();
    mem.reset_peak();
    let unbudgeted = t.evaluate(&valid).unwrap();
    let activations = mem.peak() - live;
    // Room for a quarter of one evaluation batch's activations: it is halved until it fits.
    Device::Cpu
        .set_memory_budget(Some(live + activations / 4))
        .unwrap();
    let budgeted = t.evaluate(&valid);
    Device::Cpu.set_memory_budget(None).unwrap();
    assert_eq!(budgeted.unwrap().to_bits(), unbudgeted.to_bits());
    for size in [1000, 7] {
        t.state.config.eval_batch_size = size;
        let split = t.evaluate(&valid).unwrap();
        assert_eq!(
            split.to_bits(),
            unbudgeted.to_bits(),
            "eval batch size {size}"
        );
    }
}
