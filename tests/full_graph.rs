//! Full-graph training in chunks (`--full-graph`): the gradients of a chunked epoch equal
//! those of unchunked full-neighbour training of all training nodes, for any chunk count,
//! node order (ids, GREM, METIS) and every model; training losses follow `--fanouts=-1,-1`
//! with K = 1; on the CPU each chunk's estimated peak equals its measured peak to the byte;
//! a budget picks the chunk count and the chunks fit it; wrong settings are clear errors.

use std::sync::Arc;

mod common;

use common::{assert_close_scaled, grads};

use espalier::graph::{self, full_blocks, ChunkPlan, Dataset, LoadOptions};
use espalier::nn::{Aggregator, Forward, GatConfig, ModelKind, ModelShape, Module};
use espalier::partition::grem::{grem_partition, GremOptions};
use espalier::train::full_graph::{largest_chunk_estimate, ORDER_PARTS};
use espalier::train::Resident;
use espalier::train::{
    gather_rows, BatchSize, Dedup, FullGraphConfig, MicroConfig, NodeOrder, OptimizerKind,
    TrainConfig, Trainer, SAFETY_MARGIN,
};
use espalier::{ops, Device, Tensor};

/// The CPU's memory tracker is one per process: tests that measure peaks, and the tests
/// that allocate beside them, run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const MODELS: &[(ModelKind, Aggregator)] = &[
    (ModelKind::Sage, Aggregator::Mean),
    (ModelKind::Gcn, Aggregator::Mean),
    (ModelKind::Gat, Aggregator::Mean),
    (ModelKind::Sage, Aggregator::Max),
];

/// A small power-law graph with about 120 training nodes.
fn small() -> (Dataset, Arc<graph::Csr>) {
    let data = graph::load(
        "synthetic:products-like,scale=0.0005,seed=3",
        &LoadOptions::default(),
    )
    .unwrap();
    let g = Arc::new(data.graph.symmetrize());
    (data, g)
}

fn config(
    data: &Dataset,
    kind: ModelKind,
    aggr: Aggregator,
    chunks: Option<usize>,
    dropout: f64,
) -> TrainConfig {
    let gat = kind == ModelKind::Gat;
    TrainConfig {
        model: common::model(
            kind,
            aggr,
            GatConfig {
                heads: 2,
                attn_dropout: dropout * 0.6,
                self_loops: true,
            },
            ModelShape {
                in_dim: data.feat_dim,
                hidden: if gat { 12 } else { 24 },
                out_dim: data.num_classes,
                layers: 2,
                dropout,
            },
        ),
        fanouts: vec![-1, -1],
        batch_size: BatchSize::Full,
        epochs: 3,
        optimizer: OptimizerKind::Adam,
        lr: 0.01,
        weight_decay: 5e-4,
        seed: 11,
        device: Device::Cpu,
        eval_every: 0,
        full_graph: chunks.map(|c| FullGraphConfig {
            chunks: Some(c),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The gradients and mean loss of unchunked full-neighbour training of all training
/// nodes, with the model of `t`, as epoch `epoch` draws its dropout masks.
fn reference(
    t: &Trainer<'_>,
    data: &Dataset,
    g: &graph::Csr,
    epoch: usize,
) -> (f64, Vec<Vec<f32>>) {
    let train = &data.split.train;
    let blocks: Vec<_> = full_blocks(g, train, 2)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    let x = gather_rows(
        &data.features,
        data.feat_dim,
        &blocks[0].src_nodes,
        Device::Cpu,
    )
    .unwrap();
    let f = Forward {
        training: true,
        seed: t.state.config.seed,
        epoch: epoch as u64,
    };
    let logits = t.state.model.forward(&blocks, &x, &f).unwrap();
    let y: Vec<u32> = train.iter().map(|&s| data.labels[s as usize]).collect();
    let y = Tensor::from_u32(y, &[train.len()], Device::Cpu).unwrap();
    let ce = ops::cross_entropy(&logits, &y, None).unwrap();
    ce.backward().unwrap();
    let out = (ce.item().unwrap(), grads(&t.state.model));
    for p in t.state.model.parameters() {
        p.set_grad(None);
    }
    out
}

#[test]
fn chunked_gradients_equal_unchunked_full_neighbour_training() {
    let _serial = serial();
    let (data, g) = small();
    for &(kind, aggr) in MODELS {
        let runs = [
            (1, NodeOrder::Id, Dedup::Off),
            (2, NodeOrder::Grem, Dedup::On),
            (3, NodeOrder::Metis, Dedup::Off),
            (3, NodeOrder::Id, Dedup::On),
            (7, NodeOrder::Grem, Dedup::On),
        ];
        for (chunks, order, dedup) in runs {
            let mut c = config(&data, kind, aggr, Some(chunks), 0.5);
            c.full_graph = Some(FullGraphConfig {
                chunks: Some(chunks),
                order,
                dedup,
                hybrid: false,
                ..Default::default()
            });
            let mut t = Trainer::new(&data, g.clone(), c).unwrap();
            let (want_loss, want) = reference(&t, &data, &g, 4);
            let (loss, stats) = t.full_graph_gradients(4).unwrap();
            assert_eq!(stats.chunks, chunks, "{kind:?}");
            let what = format!("{kind:?}/{aggr:?} chunks {chunks} {order:?} {dedup:?}");
            assert!(
                ((loss - want_loss) / want_loss).abs() < 1e-5,
                "{what}: loss {loss} vs {want_loss}"
            );
            for (i, (a, b)) in grads(&t.state.model).iter().zip(&want).enumerate() {
                assert_close_scaled(&format!("{what} parameter {i}"), a, b, 1e-4);
            }
        }
    }
}

#[test]
fn chunked_training_losses_follow_full_neighbour_training() {
    let _serial = serial();
    let (data, g) = small();
    for &(kind, aggr) in &MODELS[..3] {
        let mut plain =
            Trainer::new(&data, g.clone(), config(&data, kind, aggr, None, 0.0)).unwrap();
        let mut chunked =
            Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(3), 0.0)).unwrap();
        for epoch in 0..3 {
            let a = plain.train_epoch(epoch).unwrap();
            let b = chunked.train_epoch(epoch).unwrap();
            assert!(
                ((a.loss - b.loss) / a.loss).abs() < 1e-5,
                "{kind:?} epoch {epoch}: loss {} (full neighbourhood) vs {} (3 chunks)",
                a.loss,
                b.loss
            );
            assert_eq!(b.full_graph.as_ref().unwrap().chunks, 3);
            assert!(a.full_graph.is_none());
        }
        // Chunked evaluation predicts as the sampled full-neighbour evaluation does.
        let valid = &data.split.valid;
        let (pa, pb) = (
            plain.evaluate(valid).unwrap(),
            chunked.evaluate(valid).unwrap(),
        );
        assert!(
            (pa - pb).abs() <= 1.0 / valid.len() as f64,
            "{kind:?}: {pa} vs {pb}"
        );
    }
}

#[test]
fn chunk_estimates_equal_measured_peaks_on_the_cpu() {
    let _serial = serial();
    let (data, g) = small();
    // With the next chunk prepared ahead (`--overlap`) too: the preparation holds host
    // memory only.
    let runs = [(Dedup::Off, false), (Dedup::On, false), (Dedup::On, true)];
    for (&(kind, aggr), (dedup, overlap)) in MODELS.iter().flat_map(|m| runs.map(|r| (m, r))) {
        let mut c = config(&data, kind, aggr, Some(4), 0.5);
        c.full_graph = Some(FullGraphConfig {
            chunks: Some(4),
            order: NodeOrder::Id,
            dedup,
            hybrid: false,
            overlap: Some(overlap),
        });
        let mut t = Trainer::new(&data, g.clone(), c).unwrap();
        for epoch in 0..2 {
            let s = t.train_epoch(epoch).unwrap();
            let f = s.full_graph.unwrap();
            // 4 forward, 4 loss and 4 backward chunks.
            assert_eq!(f.chunk_runs.len(), 12);
            for r in &f.chunk_runs {
                assert_eq!(
                    r.est_peak_bytes, r.peak_bytes,
                    "{kind:?}/{aggr:?} {dedup:?} overlap {overlap} epoch {epoch}: layer {} {} chunk {}",
                    r.layer, r.pass, r.chunk
                );
            }
            assert!(f.rows_to_device_bytes > 0 && f.rows_to_host_bytes > 0);
        }
    }
}

#[test]
fn chunk_estimates_equal_measured_peaks_on_every_gpu() {
    let _serial = serial();
    let (data, g) = small();
    for dev in common::gpu_devices() {
        // A GPU's defaults: rows kept for the next chunk, the next chunk prepared ahead.
        for &(kind, aggr) in MODELS {
            let mut c = config(&data, kind, aggr, Some(4), 0.5);
            c.device = dev;
            c.full_graph = Some(FullGraphConfig {
                chunks: Some(4),
                order: NodeOrder::Id,
                dedup: Dedup::On,
                hybrid: false,
                overlap: Some(true),
            });
            let mut t = Trainer::new(&data, g.clone(), c).unwrap();
            let f = t.train_epoch(0).unwrap().full_graph.unwrap();
            assert_eq!(f.chunk_runs.len(), 12);
            for r in &f.chunk_runs {
                assert_eq!(
                    r.est_peak_bytes, r.peak_bytes,
                    "{dev} {kind:?}/{aggr:?}: layer {} {} chunk {}",
                    r.layer, r.pass, r.chunk
                );
            }
        }
    }
}

#[test]
fn a_budget_chooses_the_fewest_chunks_that_fit() {
    let _serial = serial();
    let (data, g) = small();
    let (kind, aggr) = (ModelKind::Sage, Aggregator::Mean);
    let runs = [
        (NodeOrder::Id, Dedup::Off),
        (NodeOrder::Grem, Dedup::Off),
        (NodeOrder::Grem, Dedup::On),
    ];
    for (order, dedup) in runs {
        let run = |budget: Option<u64>| {
            let mut c = config(&data, kind, aggr, None, 0.5);
            c.full_graph = Some(FullGraphConfig {
                chunks: None,
                order,
                dedup,
                hybrid: false,
                ..Default::default()
            });
            c.micro.memory_budget = budget;
            let mut t = Trainer::new(&data, g.clone(), c).unwrap();
            let s = t.train_epoch(0).unwrap();
            s.full_graph.unwrap()
        };
        let one = run(None);
        assert_eq!(one.chunks, 1);
        // A budget below one chunk's peak forces more chunks, each within the budget.
        let budget = one.peak_bytes * 9 / 10;
        let some = run(Some(budget));
        assert!(some.chunks > 1, "{order:?}: {} chunks", some.chunks);
        assert!(some.peak_bytes <= budget, "{} > {budget}", some.peak_bytes);
        // ... and the least: as planned (with a steady run's resident state, in the same
        // node order), one chunk fewer would not fit.
        let t = Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(1), 0.5)).unwrap();
        let parts = (order == NodeOrder::Grem).then(|| {
            let opts = GremOptions {
                seed: t.state.config.seed,
                ..GremOptions::default()
            };
            grem_partition(&g, ORDER_PARTS, &opts).unwrap().into()
        });
        let largest = |chunks: usize| {
            let train = &data.split.train;
            let plan = ChunkPlan::with_parts(&g, train, 2, chunks, parts.clone()).unwrap();
            let shared = match dedup {
                Dedup::On => plan.shared_with_previous(&g),
                _ => Vec::new(),
            };
            let (est, sizes) = (&t.state.estimator, plan.sizes());
            largest_chunk_estimate(est, sizes, train.len(), Resident::STEADY, &shared, false)
                .unwrap()
        };
        let fits = |est: u64| est as f64 * (1.0 + SAFETY_MARGIN) <= budget as f64;
        assert!(fits(largest(some.chunks)), "{order:?} {dedup:?}");
        assert!(
            !fits(largest(some.chunks - 1)),
            "{order:?} {dedup:?}: {} chunks would fit too",
            some.chunks - 1
        );
    }
}

#[test]
fn a_chunk_that_runs_out_of_memory_is_split_and_the_gradients_stay_exact() {
    let _serial = serial();
    let (data, g) = small();
    let (kind, aggr) = (ModelKind::Sage, Aggregator::Mean);
    let mut one = Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(1), 0.5)).unwrap();
    let peak = one.train_epoch(0).unwrap().full_graph.unwrap().peak_bytes;
    // With the next chunk prepared ahead (`--overlap`), a split drops the chunk prepared
    // after the one that failed (the plan changed under it).
    for (dedup, overlap) in [(Dedup::Off, false), (Dedup::On, false), (Dedup::On, true)] {
        // One chunk forced, under a budget it does not fit: the device refuses it, the
        // chunk is split until the halves fit, and the plan keeps the split.
        let mut c = config(&data, kind, aggr, Some(1), 0.5);
        c.full_graph = Some(FullGraphConfig {
            chunks: Some(1),
            order: NodeOrder::Id,
            dedup,
            hybrid: false,
            overlap: Some(overlap),
        });
        c.micro.memory_budget = Some(peak * 6 / 10);
        // The reference (unchunked) does not fit the budget: computed first, with the same
        // initial weights, before the budget is set.
        let plain = Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(1), 0.5));
        let (want_loss, want) = reference(&plain.unwrap(), &data, &g, 2);
        let mut t = Trainer::new(&data, g.clone(), c).unwrap();
        let (loss, stats) = t.full_graph_gradients(2).unwrap();
        assert!(stats.oom_splits > 0, "{dedup:?}: no split");
        assert!(stats.chunks > 1, "{dedup:?}");
        assert!(stats.peak_bytes <= peak * 6 / 10);
        assert!(
            ((loss - want_loss) / want_loss).abs() < 1e-5,
            "{loss} vs {want_loss}"
        );
        for (i, (a, b)) in grads(&t.state.model).iter().zip(&want).enumerate() {
            assert_close_scaled(&format!("{dedup:?} parameter {i}"), a, b, 1e-4);
        }
        // The next epoch starts from the split plan. (A retried half runs without the
        // previous chunk's rows; with reuse on, the next epoch's assembly may split more.)
        for p in t.state.model.parameters() {
            p.set_grad(None);
        }
        let (_, next) = t.full_graph_gradients(3).unwrap();
        assert!(next.chunks >= stats.chunks, "{dedup:?}");
        if dedup == Dedup::Off {
            assert_eq!(next.oom_splits, 0);
        }
    }
    // A budget no single node fits is an error naming it.
    let mut c = config(&data, kind, aggr, Some(1), 0.5);
    c.micro.memory_budget = Some(1 << 10);
    let err = match Trainer::new(&data, g.clone(), c) {
        Err(e) => e.to_string(),
        Ok(mut t) => t.full_graph_gradients(0).unwrap_err().to_string(),
    };
    assert!(err.contains("too small"), "{err}");
}

#[test]
fn a_chunk_that_runs_out_of_memory_on_a_gpu_is_split_and_the_gradients_follow_the_cpu() {
    let _serial = serial();
    let (data, g) = small();
    let (kind, aggr) = (ModelKind::Sage, Aggregator::Mean);
    for dev in common::gpu_devices() {
        let on = |chunks: usize| {
            let mut c = config(&data, kind, aggr, Some(chunks), 0.5);
            c.device = dev;
            c
        };
        let mut one = Trainer::new(&data, g.clone(), on(1)).unwrap();
        let peak = one.train_epoch(0).unwrap().full_graph.unwrap().peak_bytes;
        drop(one);
        let plain = Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(1), 0.5));
        let (want_loss, want) = reference(&plain.unwrap(), &data, &g, 2);
        // The GPU's defaults: rows kept for the next chunk, the next chunk prepared ahead.
        let mut c = on(1);
        c.full_graph = Some(FullGraphConfig {
            chunks: Some(1),
            order: NodeOrder::Id,
            dedup: Dedup::On,
            hybrid: false,
            overlap: Some(true),
        });
        c.micro.memory_budget = Some(peak * 6 / 10);
        let mut t = Trainer::new(&data, g.clone(), c).unwrap();
        let (loss, stats) = t.full_graph_gradients(2).unwrap();
        assert!(stats.oom_splits > 0 && stats.chunks > 1, "{dev}: no split");
        assert!(stats.peak_bytes <= peak * 6 / 10, "{dev}");
        assert!(
            ((loss - want_loss) / want_loss).abs() < 1e-4,
            "{dev}: {loss} vs {want_loss}"
        );
        for (i, (a, b)) in grads(&t.state.model).iter().zip(&want).enumerate() {
            assert_close_scaled(&format!("{dev} parameter {i}"), a, b, 1e-3);
        }
    }
}

#[test]
fn wrong_settings_are_clear_errors() {
    let _serial = serial();
    let (data, g) = small();
    let base = || config(&data, ModelKind::Sage, Aggregator::Mean, Some(2), 0.5);
    let err = |c: TrainConfig| match Trainer::new(&data, g.clone(), c) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let mut c = base();
    c.fanouts = vec![10, 10];
    assert!(err(c).contains("must all be -1"));
    let mut c = base();
    c.micro = MicroConfig {
        micro_batches: 2,
        ..MicroConfig::default()
    };
    assert!(err(c).contains("--chunks"));
    let mut c = base();
    c.batch_size = BatchSize::Seeds(10);
    assert!(err(c).contains("--batch-size"));
    let mut c = base();
    c.full_graph = Some(FullGraphConfig {
        chunks: Some(0),
        ..Default::default()
    });
    assert!(err(c).contains("at least 1"));
    // Gradients without full-graph configured.
    let mut t = Trainer::new(
        &data,
        g.clone(),
        config(&data, ModelKind::Sage, Aggregator::Mean, None, 0.5),
    )
    .unwrap();
    assert!(t.full_graph_gradients(0).is_err());
}

#[test]
fn gpu_chunked_gradients_match_the_cpu() {
    let _serial = serial();
    for dev in common::gpu_devices() {
        chunked_gradients_match_the_cpu(dev);
    }
}

fn chunked_gradients_match_the_cpu(dev: Device) {
    let (data, g) = small();
    for &(kind, aggr) in &MODELS[..3] {
        let mut cpu =
            Trainer::new(&data, g.clone(), config(&data, kind, aggr, Some(3), 0.5)).unwrap();
        let mut c = config(&data, kind, aggr, Some(3), 0.5);
        c.device = dev;
        let mut gpu = Trainer::new(&data, g.clone(), c).unwrap();
        let (a, _) = cpu.full_graph_gradients(1).unwrap();
        let (b, _) = gpu.full_graph_gradients(1).unwrap();
        assert!(
            ((a - b) / a).abs() < 1e-4,
            "{kind:?}: loss {a} (cpu) vs {b} ({dev})"
        );
        for (i, (x, y)) in grads(&gpu.state.model)
            .iter()
            .zip(&grads(&cpu.state.model))
            .enumerate()
        {
            assert_close_scaled(&format!("{kind:?} parameter {i} on {dev}"), x, y, 1e-3);
        }
    }
    // Hybrid mode: the cached aggregation and its transpose on the device.
    for kind in [ModelKind::Sage, ModelKind::Gcn] {
        hybrid_matches_the_cpu(&data, &g, kind, dev);
    }
}

/// Hybrid mode's gradients on `dev` against the CPU's.
fn hybrid_matches_the_cpu(data: &Dataset, g: &Arc<graph::Csr>, kind: ModelKind, dev: Device) {
    let hybrid = |device: Device| {
        let mut c = config(data, kind, Aggregator::Mean, Some(3), 0.5);
        c.device = device;
        c.full_graph = Some(FullGraphConfig {
            chunks: Some(3),
            hybrid: true,
            ..Default::default()
        });
        let mut t = Trainer::new(data, g.clone(), c).unwrap();
        let (loss, _) = t.full_graph_gradients(1).unwrap();
        (loss, grads(&t.state.model))
    };
    let ((a, want), (b, got)) = (hybrid(Device::Cpu), hybrid(dev));
    let what = format!("{kind:?} hybrid on {dev}");
    assert!(((a - b) / a).abs() < 1e-4, "{what}: loss {a} (cpu) vs {b}");
    for (i, (x, y)) in got.iter().zip(&want).enumerate() {
        assert_close_scaled(&format!("{what}: parameter {i}"), x, y, 1e-3);
    }
}

#[test]
fn row_replication_counts_every_upload_and_each_distinct_row_once() {
    let _serial = serial();
    let (data, g) = small();
    let (kind, aggr) = (ModelKind::Sage, Aggregator::Mean);
    let run = |chunks: usize, dedup: Dedup| {
        let mut c = config(&data, kind, aggr, Some(chunks), 0.5);
        c.full_graph = Some(FullGraphConfig {
            chunks: Some(chunks),
            order: NodeOrder::Id,
            dedup,
            hybrid: false,
            ..Default::default()
        });
        let mut t = Trainer::new(&data, g.clone(), c).unwrap();
        t.train_epoch(0).unwrap().full_graph.unwrap()
    };
    let one = run(1, Dedup::Off).layers;
    assert_eq!(one.len(), 2);
    for r in &one {
        assert_eq!(r.rows_uploaded, r.distinct_rows, "layer {}", r.layer);
        assert_eq!(r.rows_read, r.rows_uploaded);
        assert_eq!(r.shared_with_previous, 0);
        assert_eq!(r.replication(), 1.0);
    }
    let naive = run(5, Dedup::Off);
    for (a, b) in one.iter().zip(&naive.layers) {
        assert_eq!(b.distinct_rows, a.distinct_rows, "layer {}", a.layer);
        assert!(b.rows_uploaded > a.rows_uploaded);
        assert_eq!(b.rows_read, b.rows_uploaded);
        assert!(b.shared_with_previous > 0);
        assert!(b.shared_with_previous <= b.rows_uploaded - b.distinct_rows);
    }
    // Deduplicated: the shared rows are taken on the device, not uploaded, and the chunks
    // run in the reorganised order, whose consecutive chunks share no fewer rows.
    let dedup = run(5, Dedup::On);
    for (a, b) in naive.layers.iter().zip(&dedup.layers) {
        assert_eq!(b.rows_read, a.rows_read, "layer {}", a.layer);
        assert!(b.shared_with_previous >= a.shared_with_previous);
        assert_eq!(b.rows_uploaded, b.rows_read - b.shared_with_previous);
        assert!(b.naive_replication() > b.replication());
    }
    assert!(dedup.rows_to_device_bytes < naive.rows_to_device_bytes);
}

/// Hybrid mode (`--hybrid`): layers whose aggregation has no weights cache it on the host,
/// and the backward recomputes only the update; the gradients are still those of
/// unchunked full-neighbour training, every chunk's estimate is its measured peak, and a
/// backward chunk uploads `2·num_dst` rows instead of `num_src`.
#[test]
fn hybrid_chunks_give_the_unchunked_gradients_exact_estimates_and_dst_row_uploads() {
    let _serial = serial();
    let (data, g) = small();
    let models = [
        (ModelKind::Sage, Aggregator::Mean),
        (ModelKind::Sage, Aggregator::Sum),
        (ModelKind::Gcn, Aggregator::Mean),
    ];
    for (kind, aggr) in models {
        for (chunks, dedup, layers) in [(1, Dedup::Off, 2), (3, Dedup::On, 2), (5, Dedup::Off, 3)] {
            let run = |hybrid: bool| {
                let mut c = config(&data, kind, aggr, Some(chunks), 0.5);
                c.model.shape.layers = layers;
                c.fanouts = vec![-1; layers];
                c.full_graph = Some(FullGraphConfig {
                    chunks: Some(chunks),
                    order: NodeOrder::Grem,
                    dedup,
                    hybrid,
                    ..Default::default()
                });
                let mut t = Trainer::new(&data, g.clone(), c).unwrap();
                let (loss, stats) = t.full_graph_gradients(2).unwrap();
                (loss, grads(&t.state.model), stats)
            };
            let what = format!("{kind:?}/{aggr:?} {layers} layers, {chunks} chunks, {dedup:?}");
            let (want_loss, want, plain) = run(false);
            let (loss, got, stats) = run(true);
            assert!(
                ((loss - want_loss) / want_loss).abs() < 1e-5,
                "{what}: loss {loss} vs {want_loss}"
            );
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_close_scaled(&format!("{what} parameter {i}"), a, b, 1e-4);
            }
            assert_eq!(stats.chunk_runs.len(), plain.chunk_runs.len(), "{what}");
            for r in &stats.chunk_runs {
                assert_eq!(
                    r.est_peak_bytes, r.peak_bytes,
                    "{what}: layer {} {} chunk {}",
                    r.layer, r.pass, r.chunk
                );
            }
            if dedup == Dedup::Off {
                // A backward chunk uploads its dst rows (SAGE's self term; GCN reads none)
                // and their aggregation instead of its src rows: 2·num_dst rows (GCN:
                // num_dst) instead of num_src (same forward passes).
                let width = |l: usize| if l == 0 { data.feat_dim } else { 24 };
                let per_dst = if kind == ModelKind::Gcn { 1 } else { 2 };
                let change: i64 = stats
                    .chunk_runs
                    .iter()
                    .filter(|r| r.pass == "backward")
                    .map(|r| {
                        4 * width(r.layer) as i64 * (per_dst * r.num_dst as i64 - r.num_src as i64)
                    })
                    .sum();
                assert_eq!(
                    stats.rows_to_device_bytes as i64 - plain.rows_to_device_bytes as i64,
                    change,
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn hybrid_mode_refuses_aggregations_with_weights() {
    let _serial = serial();
    let (data, g) = small();
    for (kind, aggr) in [
        (ModelKind::Gat, Aggregator::Mean),
        (ModelKind::Sage, Aggregator::Max),
        (ModelKind::Sage, Aggregator::Lstm),
    ] {
        let mut c = config(&data, kind, aggr, Some(2), 0.0);
        c.full_graph = Some(FullGraphConfig {
            chunks: Some(2),
            hybrid: true,
            ..Default::default()
        });
        let mut t = Trainer::new(&data, g.clone(), c).unwrap();
        let e = t.train_epoch(0).unwrap_err().to_string();
        assert!(e.contains("--hybrid"), "{kind:?}/{aggr:?}: {e}");
    }
}

/// Preparing the next chunk on a worker thread while a chunk computes (`--overlap`)
/// changes no bit: the loss and every gradient of an epoch, and the losses of epochs
/// trained after it, equal those of the serial order exactly, as do the bytes moved,
/// with and without deduplicated transfers, in hybrid mode and with three layers; on the
/// CPU and on every GPU backend.
#[test]
fn overlapped_chunk_preparation_gives_bit_identical_losses_and_gradients() {
    let _serial = serial();
    let (data, g) = small();
    let mut devices = vec![Device::Cpu];
    devices.extend(common::gpu_devices());
    let runs = [
        (ModelKind::Sage, Aggregator::Mean, Dedup::Off, false, 2),
        (ModelKind::Sage, Aggregator::Mean, Dedup::On, false, 3),
        (ModelKind::Gcn, Aggregator::Mean, Dedup::On, true, 3),
        (ModelKind::Gat, Aggregator::Mean, Dedup::On, false, 2),
        (ModelKind::Sage, Aggregator::Sum, Dedup::Off, true, 2),
    ];
    for dev in devices {
        for (kind, aggr, dedup, hybrid, layers) in runs {
            let run = |overlap: bool| {
                let mut c = config(&data, kind, aggr, Some(4), 0.5);
                c.device = dev;
                c.model.shape.layers = layers;
                c.fanouts = vec![-1; layers];
                c.full_graph = Some(FullGraphConfig {
                    chunks: Some(4),
                    order: NodeOrder::Grem,
                    dedup,
                    hybrid,
                    overlap: Some(overlap),
                });
                let mut t = Trainer::new(&data, g.clone(), c).unwrap();
                let (loss, stats) = t.full_graph_gradients(2).unwrap();
                let grads = grads(&t.state.model);
                for p in t.state.model.parameters() {
                    p.set_grad(None);
                }
                let losses: Vec<u64> = (0..2)
                    .map(|e| t.train_epoch(e).unwrap().loss.to_bits())
                    .collect();
                (loss.to_bits(), grads, stats, losses)
            };
            let what =
                format!("{kind:?}/{aggr:?} {layers} layers {dedup:?} hybrid {hybrid} on {dev}");
            let (want_loss, want, serial_stats, want_losses) = run(false);
            let (loss, got, stats, losses) = run(true);
            assert_eq!(loss, want_loss, "{what}: loss");
            assert_eq!(losses, want_losses, "{what}: training losses");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(a), bits(b), "{what}: parameter {i}");
            }
            assert_eq!(
                (stats.rows_to_device_bytes, stats.rows_to_host_bytes),
                (
                    serial_stats.rows_to_device_bytes,
                    serial_stats.rows_to_host_bytes
                ),
                "{what}: bytes moved"
            );
            let uploaded = |s: &espalier::train::FullGraphStats| {
                s.layers.iter().map(|r| r.rows_uploaded).collect::<Vec<_>>()
            };
            assert_eq!(
                uploaded(&stats),
                uploaded(&serial_stats),
                "{what}: rows uploaded"
            );
            assert_eq!(
                serial_stats.prep_wait_s, 0.0,
                "{what}: nothing prepared ahead"
            );
        }
    }
}

/// Deduplicated transfers move bytes, not values: the loss and every gradient of an epoch
/// with `--dedup-transfers on` equal those with `off` to the bit, for every model, with
/// and without dropout, on the CPU and on every GPU backend. (The bundle's parity run on
/// an H200 found the losses of later epochs differing in their last bits, on CUDA, on
/// NVIDIA's Vulkan driver and on the CPU alike.)
#[test]
fn deduplicated_transfers_give_bit_identical_losses_and_gradients() {
    let _serial = serial();
    let (data, g) = small();
    let mut devices = vec![Device::Cpu];
    devices.extend(common::gpu_devices());
    for dev in devices {
        for &(kind, aggr) in MODELS {
            for dropout in [0.0, 0.5] {
                let run = |dedup: Dedup| {
                    let mut c = config(&data, kind, aggr, Some(4), dropout);
                    c.device = dev;
                    c.full_graph = Some(FullGraphConfig {
                        chunks: Some(4),
                        order: NodeOrder::Grem,
                        dedup,
                        hybrid: false,
                        overlap: Some(false),
                    });
                    let mut t = Trainer::new(&data, g.clone(), c).unwrap();
                    let (loss, _) = t.full_graph_gradients(0).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    let grads: Vec<Vec<u32>> =
                        grads(&t.state.model).iter().map(|v| bits(v)).collect();
                    (loss.to_bits(), grads)
                };
                let what = format!("{kind:?}/{aggr:?} dropout {dropout} on {dev}");
                let (want_loss, want) = run(Dedup::Off);
                let (loss, got) = run(Dedup::On);
                assert_eq!(loss, want_loss, "{what}: loss");
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
                    assert_eq!(
                        differ,
                        0,
                        "{what}: parameter {i}: {differ} of {} values differ",
                        a.len()
                    );
                }
            }
        }
    }
}
