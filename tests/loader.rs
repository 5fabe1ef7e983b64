//! `--loader per-micro-batch` (Cherry's loaders): each micro-batch samples its own
//! neighbours from its seeds instead of being cut out of the full batch's sample.

use std::sync::Arc;

use espalier::graph::{self, LoadOptions};
use espalier::nn::ModelConfig;
use espalier::train::{BatchSize, Loader, MicroConfig, Summary, TrainConfig, Trainer};

fn run(k: usize, loader: Loader) -> Summary {
    run_with("metis", k, loader, None)
}

fn run_with(partitioner: &str, k: usize, loader: Loader, memory_budget: Option<u64>) -> Summary {
    let data = graph::load("synthetic:cora-like,scale=0.2", &LoadOptions::default()).unwrap();
    let graph = Arc::new(data.graph.symmetrize());
    let config = TrainConfig::default()
        .model(ModelConfig::default().hidden(16).dropout(0.0))
        .fanouts(vec![5, 5])
        .batch_size(BatchSize::Full)
        .epochs(3)
        .eval_every(0)
        .micro(MicroConfig {
            micro_batches: k,
            partitioner: partitioner.into(),
            loader,
            memory_budget,
        });
    let mut t = Trainer::new(&data, graph, config).unwrap();
    t.run(None, &mut |_| {}).unwrap()
}

fn losses(s: &Summary) -> Vec<f64> {
    s.epochs.iter().map(|e| e.loss).collect()
}

#[test]
fn one_micro_batch_uses_the_full_batch_sample_under_either_loader() {
    assert_eq!(
        losses(&run(1, Loader::Slice)),
        losses(&run(1, Loader::PerMicroBatch))
    );
}

#[test]
fn per_micro_batch_samples_differ_from_slices_and_are_reproducible() {
    let sliced = run(4, Loader::Slice);
    let own = run(4, Loader::PerMicroBatch);
    assert_eq!(own.micro_batches[0].k, 4);
    assert_eq!(
        own.micro_batches[0]
            .batches
            .iter()
            .map(|b| b.seeds)
            .sum::<usize>(),
        sliced.micro_batches[0]
            .batches
            .iter()
            .map(|b| b.seeds)
            .sum::<usize>()
    );
    // Other neighbours, other gradients: the losses after the first step move apart.
    assert_ne!(losses(&sliced)[1..], losses(&own)[1..]);
    assert!(losses(&own).iter().all(|l| l.is_finite()));
    // Seeded: the same run gives the same losses.
    assert_eq!(losses(&own), losses(&run(4, Loader::PerMicroBatch)));
    // The same seeds per micro-batch (the partitioner sees the same full batch).
    let seeds = |s: &Summary| -> Vec<usize> {
        s.micro_batches[0].batches.iter().map(|b| b.seeds).collect()
    };
    assert_eq!(seeds(&sliced), seeds(&own));
}

#[test]
fn cached_cuts_skip_the_full_batch_sample_and_change_no_loss() {
    for partitioner in ["cherry", "metis"] {
        let skipping = run_with(partitioner, 4, Loader::PerMicroBatch, None);
        // A budget far above any micro-batch keeps K = 4 and the same parts, but the
        // planner estimates from the full sample, so every epoch samples it.
        let sampling = run_with(partitioner, 4, Loader::PerMicroBatch, Some(1 << 40));
        assert_eq!(losses(&skipping), losses(&sampling), "{partitioner}");
        let sample_s =
            |s: &Summary| -> Vec<f64> { s.epochs.iter().map(|e| e.phases.sample).collect() };
        // The first epoch samples for the cut; later ones reuse it and sample nothing.
        let skipped = sample_s(&skipping);
        assert!(skipped[0] > 0.0, "{partitioner}: {skipped:?}");
        assert!(
            skipped[1..].iter().all(|&s| s == 0.0),
            "{partitioner}: {skipped:?}"
        );
        assert!(
            sample_s(&sampling).iter().all(|&s| s > 0.0),
            "{partitioner}"
        );
        // Redundancy over the union of the micro-batches' inputs: at least 1.
        for m in &skipping.micro_batches {
            assert_eq!(m.k, 4);
            assert!(m.redundancy >= 1.0, "{partitioner}: {}", m.redundancy);
        }
    }
}
