//! The library's conveniences: `TrainConfig::default()` with setters trains as is (the
//! model's widths taken from the data), and `predict`/`embeddings` run full-neighbour
//! inference.

use std::sync::Arc;

use espalier::graph::{self, LoadOptions};
use espalier::nn::{GatConfig, ModelConfig};
use espalier::ops;
use espalier::train::{BatchSize, TrainConfig, Trainer};

fn data() -> espalier::graph::Dataset {
    graph::load("synthetic:cora-like,scale=0.2", &LoadOptions::default()).unwrap()
}

#[test]
fn default_config_with_setters_trains_and_predict_agrees_with_evaluate() {
    let data = data();
    let graph = Arc::new(data.graph.symmetrize());
    let config = TrainConfig::default()
        .model(ModelConfig::default().hidden(16))
        .fanouts(vec![-1, -1])
        .batch_size(BatchSize::Full)
        .epochs(3)
        .eval_batch_size(37);
    let mut t = Trainer::new(&data, graph, config).unwrap();
    assert_eq!(t.state.config.model.shape.in_dim, data.feat_dim);
    assert_eq!(t.state.config.model.shape.out_dim, data.num_classes);
    let s = t.run(None, &mut |_| {}).unwrap();
    let test = &data.split.test;
    let logits = t.predict(test).unwrap();
    assert_eq!(logits.shape(), &[test.len(), data.num_classes]);
    // With all neighbours in training too, evaluate samples exactly what predict uses.
    let pred = ops::argmax_rows(&logits).unwrap().to_vec_u32().unwrap();
    let correct = pred
        .iter()
        .zip(test)
        .filter(|(&p, &v)| p == data.labels[v as usize])
        .count();
    assert_eq!(correct as f64 / test.len() as f64, s.test_acc);
    // Batching does not change the result.
    let one: Vec<f32> = t.predict(&test[..1]).unwrap().to_vec_f32().unwrap();
    let all = logits.to_vec_f32().unwrap();
    assert_eq!(&all[..data.num_classes], &one[..]);
    let emb = t.embeddings(test).unwrap();
    assert_eq!(emb.shape(), &[test.len(), 16]);
    assert!(emb.to_vec_f32().unwrap().iter().all(|&x| x >= 0.0));
    let err = t.predict(&[u32::MAX]).unwrap_err().to_string();
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn embeddings_need_a_hidden_layer_and_refuse_gat() {
    let data = data();
    let graph = Arc::new(data.graph.symmetrize());
    let one = TrainConfig::default()
        .model(ModelConfig::default().hidden(8))
        .fanouts(vec![5]);
    let t = Trainer::new(&data, graph.clone(), one).unwrap();
    assert!(t.embeddings(&[0]).is_err());
    let gat = TrainConfig::default()
        .model(
            ModelConfig::new(GatConfig {
                heads: 2,
                ..GatConfig::default()
            })
            .hidden(4),
        )
        .fanouts(vec![5, 5]);
    let t = Trainer::new(&data, graph, gat).unwrap();
    assert!(t.embeddings(&[0]).unwrap_err().to_string().contains("GAT"));
    assert_eq!(t.predict(&[0, 1]).unwrap().shape(), &[2, data.num_classes]);
}

#[test]
fn training_from_a_memory_mapped_cache_gives_the_same_losses_as_from_memory() {
    use espalier::graph::io::{write_ogb, CacheStatus};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    write_ogb(&data(), &dir).unwrap();
    let dirs = vec![tmp.path().join("cache")];
    let opts = LoadOptions::default();
    let (owned, status) = graph::Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert!(matches!(status, CacheStatus::Written { .. }), "{status:?}");
    let (mapped, status) = graph::Dataset::load_in_dirs(&dir, &opts, &dirs).unwrap();
    assert!(matches!(status, CacheStatus::Hit(_)), "{status:?}");
    assert!(mapped.graph.indices.is_mapped() && mapped.features.is_mapped());
    assert!(!owned.graph.indices.is_mapped() && !owned.features.is_mapped());
    let losses = |data: &espalier::graph::Dataset, symmetrize: bool| {
        let graph = Arc::new(if symmetrize {
            data.graph.symmetrize()
        } else {
            data.graph.clone()
        });
        let config = TrainConfig::default()
            .model(ModelConfig::default().hidden(16))
            .fanouts(vec![4, 3])
            .batch_size(BatchSize::Seeds(20))
            .epochs(3);
        let mut t = Trainer::new(data, graph, config).unwrap();
        let s = t.run(None, &mut |_| {}).unwrap();
        s.epochs
            .iter()
            .map(|e| e.loss.to_bits())
            .collect::<Vec<_>>()
    };
    for symmetrize in [false, true] {
        let (a, b) = (losses(&owned, symmetrize), losses(&mapped, symmetrize));
        assert_eq!(a.len(), 3);
        assert_eq!(a, b, "symmetrize {symmetrize}");
    }
}

/// A dataset whose validation split holds no labelled node: no epoch gets a validation
/// accuracy (not NaN), none is picked as the best, the trainer says so before the run, and
/// `patience`, which would have nothing to watch, is refused.
#[test]
fn an_empty_validation_split_is_said_and_never_picks_a_best_epoch() {
    let mut data = data();
    data.split.valid.clear();
    let config = TrainConfig::default()
        .model(ModelConfig::default().hidden(8))
        .fanouts(vec![5, 5])
        .batch_size(BatchSize::Full)
        .epochs(2);
    let graph = Arc::new(data.graph.symmetrize());
    let mut t = Trainer::new(&data, graph.clone(), config.clone()).unwrap();
    let warning = t.validation_warning().expect("a warning");
    assert!(
        warning.contains("validation split has no labelled node"),
        "{warning}"
    );
    let s = t.run(None, &mut |_| {}).unwrap();
    assert!(
        s.epochs.iter().all(|e| e.valid_acc.is_none()),
        "{:?}",
        s.epochs
    );
    assert_eq!(
        (
            s.best_valid_acc,
            s.best_valid_epoch,
            s.test_acc_at_best_valid
        ),
        (None, None, None)
    );
    assert!(s.valid_acc.is_nan() && !s.test_acc.is_nan());

    let mut t = Trainer::new(&data, graph, config.patience(Some(3))).unwrap();
    let err = t.run(None, &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            &err,
            espalier::Error::InvalidFlag {
                flag: "--patience",
                ..
            }
        ),
        "{err}"
    );
}
