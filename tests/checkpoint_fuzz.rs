//! Random corruptions of a checkpoint (truncation, flipped bytes, a forged header length,
//! garbage appended): resuming from it never panics or aborts, and every error names the
//! checkpoint file. A corruption that leaves a well-formed checkpoint (a flipped bit inside
//! a weight) may resume.

use std::path::Path;
use std::sync::Arc;

use espalier::graph::{self, Dataset, LoadOptions};
use espalier::nn::ModelConfig;
use espalier::train::{BatchSize, TrainConfig, Trainer};
use proptest::prelude::*;

fn data() -> Dataset {
    graph::load("synthetic:cora-like,scale=0.05", &LoadOptions::default()).unwrap()
}

fn config() -> TrainConfig {
    TrainConfig::default()
        .model(ModelConfig::default().hidden(4))
        .fanouts(vec![3, 3])
        .batch_size(BatchSize::Full)
        .epochs(2)
}

/// A valid checkpoint after one epoch, as bytes.
fn checkpoint_bytes(data: &Dataset) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let mut t = Trainer::new(data, Arc::new(data.graph.symmetrize()), config()).unwrap();
    t.train_epoch(0).unwrap();
    t.save(&path, 1).unwrap();
    std::fs::read(&path).unwrap()
}

#[derive(Clone, Debug)]
enum Corruption {
    Truncate(f64),
    Flip(usize, u8),
    HeaderLength(u64),
    Append(Vec<u8>),
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        (0.0..1.0f64).prop_map(Corruption::Truncate),
        (any::<usize>(), 1u8..).prop_map(|(at, mask)| Corruption::Flip(at, mask)),
        prop_oneof![
            Just(u64::MAX),
            Just(u64::MAX / 2),
            Just(1u64 << 40),
            0u64..4096
        ]
        .prop_map(Corruption::HeaderLength),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Corruption::Append),
    ]
}

fn corrupt(bytes: &[u8], c: &Corruption) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match c {
        Corruption::Truncate(keep) => b.truncate((b.len() as f64 * keep) as usize),
        Corruption::Flip(at, mask) => {
            let i = at % b.len();
            b[i] ^= mask;
        }
        Corruption::HeaderLength(n) => b[..8].copy_from_slice(&n.to_le_bytes()),
        Corruption::Append(tail) => b.extend_from_slice(tail),
    }
    b
}

fn resume(data: &Dataset, path: &Path) -> espalier::Result<()> {
    let mut t = Trainer::new(data, Arc::new(data.graph.symmetrize()), config())?;
    t.resume(path)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_corrupt_checkpoint_is_an_error_naming_it_never_a_panic(c in corruption()) {
        static GOOD: std::sync::OnceLock<(Dataset, Vec<u8>)> = std::sync::OnceLock::new();
        let (data, good) = GOOD.get_or_init(|| {
            let d = data();
            let b = checkpoint_bytes(&d);
            (d, b)
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corrupt.safetensors");
        std::fs::write(&path, corrupt(good, &c)).unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| resume(data, &path)));
        prop_assert!(outcome.is_ok(), "resume panicked on {:?}", c);
        if let Err(e) = outcome.unwrap() {
            let msg = e.to_string();
            prop_assert!(msg.contains("corrupt.safetensors"), "{:?}: {}", c, msg);
        }
    }
}
