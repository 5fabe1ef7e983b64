//! Random corruptions of a checkpoint (truncation, flipped bits and bytes, runs of 0xFF, a
//! forged header length, garbage appended): resuming from it never panics or aborts, and
//! every corruption, of the structure or of a value, is refused with an error naming the
//! checkpoint file (its checksums); one inside a tensor's values names that tensor. NaN or
//! infinite values are refused even where no checksum covers them (a checkpoint written
//! before checksums, which still resumes, with a warning).

use std::path::Path;
use std::sync::Arc;

use espalier::graph::{self, Dataset, LoadOptions};
use espalier::nn::ModelConfig;
use espalier::train::{checkpoint, BatchSize, TrainConfig, Trainer};
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
    FlipBit(usize, u8),
    OnesRun(usize, usize),
    HeaderLength(u64),
    Append(Vec<u8>),
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        (0.0..1.0f64).prop_map(Corruption::Truncate),
        (any::<usize>(), 1u8..).prop_map(|(at, mask)| Corruption::Flip(at, mask)),
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Corruption::FlipBit(at, bit)),
        (any::<usize>(), 1usize..=64).prop_map(|(at, len)| Corruption::OnesRun(at, len)),
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
        Corruption::FlipBit(at, bit) => {
            let i = at % b.len();
            b[i] ^= 1 << bit;
        }
        Corruption::OnesRun(at, len) => {
            let i = at % b.len();
            let end = (i + len).min(b.len());
            b[i..end].fill(0xFF);
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
        let bad = corrupt(good, &c);
        std::fs::write(&path, &bad).unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| resume(data, &path)));
        prop_assert!(outcome.is_ok(), "resume panicked on {:?}", c);
        match outcome.unwrap() {
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("corrupt.safetensors"), "{:?}: {}", c, msg);
            }
            // Only bytes left as they were may resume (a run of 0xFF over 0xFF bytes, a
            // header length forged to its own value).
            Ok(()) => prop_assert!(bad == *good, "{:?} resumed", c),
        }
    }
}

/// Where tensor `name`'s bytes lie in a serialized checkpoint.
fn tensor_bytes(bytes: &[u8], name: &str) -> std::ops::Range<usize> {
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let v: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header]).unwrap();
    let offsets = &v[name]["data_offsets"];
    let at = |i: usize| offsets[i].as_u64().unwrap() as usize + 8 + header;
    at(0)..at(1)
}

/// The names of a checkpoint's tensors.
fn tensor_names(bytes: &[u8]) -> Vec<String> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    names
}

#[test]
fn one_flipped_bit_in_a_weight_is_refused_naming_the_tensor() {
    let data = data();
    let good = checkpoint_bytes(&data);
    let names = tensor_names(&good);
    let weight = names.iter().find(|n| n.starts_with("model.")).unwrap();
    let r = tensor_bytes(&good, weight);
    let mut bad = good.clone();
    // The lowest mantissa bit of a value in the middle: the weight stays finite.
    bad[r.start + (r.len() / 8) * 4] ^= 1;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flipped.safetensors");
    std::fs::write(&path, &bad).unwrap();
    let err = resume(&data, &path).unwrap_err().to_string();
    assert!(err.contains("flipped.safetensors"), "{err}");
    assert!(err.contains(&format!("tensor `{weight}`")), "{err}");
    assert!(err.contains("checksum"), "{err}");
    // The same file untouched resumes.
    std::fs::write(&path, &good).unwrap();
    resume(&data, &path).unwrap();
}

#[test]
fn a_run_of_0xff_in_an_optimizer_moment_is_refused_naming_it() {
    let data = data();
    let good = checkpoint_bytes(&data);
    let names = tensor_names(&good);
    let moment = names.iter().find(|n| n.starts_with("optim.")).unwrap();
    let r = tensor_bytes(&good, moment);
    let mut bad = good.clone();
    let end = (r.start + 64).min(r.end);
    bad[r.start..end].fill(0xFF);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ones.safetensors");
    std::fs::write(&path, &bad).unwrap();
    let err = resume(&data, &path).unwrap_err().to_string();
    assert!(err.contains("ones.safetensors"), "{err}");
    assert!(err.contains(&format!("tensor `{moment}`")), "{err}");
}

/// `bytes` rewritten as the format written before checksums (`espalier-checkpoint-1`),
/// with `edit` applied to tensor `name`'s values.
fn as_unverified(bytes: &[u8], name: &str, edit: impl Fn(&mut [f32])) -> Vec<u8> {
    use safetensors::tensor::TensorView;
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
    let mut meta = meta.metadata().clone().unwrap();
    meta.remove("checksum");
    meta.remove("tensor_checksums");
    meta.insert("format".into(), "espalier-checkpoint-1".into());
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let mut values: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            if n == name {
                edit(&mut values);
            }
            let raw = values.iter().flat_map(|x| x.to_le_bytes()).collect();
            (n, v.shape().to_vec(), raw)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, b)| {
            let v = TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap();
            (n.clone(), v)
        })
        .collect();
    safetensors::serialize(views, Some(meta)).unwrap()
}

#[test]
fn a_checkpoint_without_checksums_resumes_with_a_warning_but_never_with_nan() {
    let data = data();
    let good = checkpoint_bytes(&data);
    let names = tensor_names(&good);
    let moment = names.iter().find(|n| n.starts_with("optim.")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.safetensors");
    std::fs::write(&path, as_unverified(&good, moment, |_| {})).unwrap();
    let mut t = Trainer::new(&data, Arc::new(data.graph.symmetrize()), config()).unwrap();
    t.resume(&path).unwrap();
    let warning = t.resume_warning.clone().unwrap();
    assert!(
        warning.contains("old.safetensors") && warning.contains("without checksums"),
        "{warning}"
    );
    for value in [f32::NAN, f32::INFINITY] {
        std::fs::write(&path, as_unverified(&good, moment, |v| v[1] = value)).unwrap();
        let err = resume(&data, &path).unwrap_err().to_string();
        assert!(err.contains("old.safetensors"), "{err}");
        assert!(err.contains(&format!("tensor `{moment}` holds")), "{err}");
    }
}

/// safetensors refuses a JSON header past 100 MB: a metadata string that long (a long
/// run's micro-batch statistics) is stored as a tensor, covered by the checksums like the
/// others, and comes back as the same string.
#[test]
fn a_metadata_string_past_the_header_limit_is_kept_as_a_tensor() {
    let data = data();
    let t = Trainer::new(&data, Arc::new(data.graph.symmetrize()), config()).unwrap();
    let long = format!("[{}]", "0,".repeat(50_000_001));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.safetensors");
    checkpoint::save(
        &path,
        &t.state.model,
        t.state.optim.as_ref(),
        0,
        "{}",
        &[("so_far", long.clone())],
    )
    .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert!(header < 1 << 20, "{header}-byte header");
    let ck = checkpoint::open(&path).unwrap();
    assert!(ck.meta["so_far"] == long);
}
