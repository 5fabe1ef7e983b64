//! Checkpoints in safetensors: readable from PyTorch with
//! `safetensors.torch.load_file(path)`.
//!
//! Tensors: `model.<parameter name>` (f32, our layout: Linear weights are `[in, out]`) and
//! `optim.<state name>`; metadata: `format`, `epoch` (epochs completed), `optim_step`, the
//! training `config` as JSON, and what the trainer adds (`dataset`, `history`: the finished
//! epochs' figures, `final`: the run's final figures once it is done, `so_far`: its seconds,
//! peak and micro-batch statistics over every process; a string longer than 1 MiB is stored
//! as a U8 tensor `meta.KEY` instead, as safetensors caps its header). Resuming checks every
//! parameter's name and shape. Checkpoints are written atomically ([`crate::atomic`]): a
//! crash or Ctrl-C while saving leaves the previous checkpoint whole.
//!
//! **Verified.** Since format `espalier-checkpoint-2` the metadata also holds
//! `tensor_checksums` (a JSON object: each tensor's name and the [`crate::checksum`] of its
//! bytes, 16 hex digits) and `checksum`, the checksum of the whole file with that field's
//! own 16 digits read as zeros, which covers the header (names, shapes, offsets, every
//! metadata string) and every byte between. Reading checks both before anything is used: a
//! tensor whose bytes do not match is an error naming it, any other change (a flipped bit
//! in the header, padding or a metadata string) one naming the header. NaN or infinite
//! values in a parameter or in the optimizer's state are refused when reading, as when
//! writing, naming the tensor.
//!
//! **Older checkpoints** (`espalier-checkpoint-1`, written before checksums) still resume,
//! with a warning that their values cannot be verified (they are still checked for NaN and
//! infinite values); the next checkpoint the run writes has checksums.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::checksum::{hash_bytes, StreamHash};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;
use crate::train::optim::Optimizer;

const FORMAT: &str = "espalier-checkpoint-2";
/// The format written before checksums: still read, unverified.
const FORMAT_UNVERIFIED: &str = "espalier-checkpoint-1";
/// The metadata key of the whole file's checksum.
const CHECKSUM_KEY: &str = "checksum";
/// The metadata key of the per-tensor checksums.
const TENSOR_CHECKSUMS_KEY: &str = "tensor_checksums";
/// What the checksum field holds while the file's checksum is computed.
const ZEROS: &[u8; 16] = b"0000000000000000";
/// Metadata strings longer than this are stored as a U8 tensor named [`META_TENSOR`] and
/// the key: safetensors refuses a JSON header past 100 MB, and a long run's micro-batch
/// statistics (`so_far`) can grow past that.
const LONG_META: usize = 1 << 20;
/// The name prefix of a metadata string stored as a tensor.
const META_TENSOR: &str = "meta.";

/// The first NaN or infinite value of `v`, with its index.
fn non_finite(v: &[f32]) -> Option<(usize, f32)> {
    v.iter().position(|x| !x.is_finite()).map(|i| (i, v[i]))
}

/// Where the 16 hex digits of the `checksum` metadata field lie in a serialized
/// checkpoint: the one place in its JSON header where `"checksum":"` is followed by 16
/// characters and a quote (a JSON string value escapes its quotes, so no metadata string
/// can hold that text). `None` when there is not exactly one.
fn checksum_field(bytes: &[u8]) -> Option<Range<usize>> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let end = usize::try_from(len).ok()?.checked_add(8)?;
    let header = bytes.get(8..end)?;
    let key = format!("\"{CHECKSUM_KEY}\":\"");
    let key = key.as_bytes();
    let mut found = header
        .windows(key.len() + 17)
        .enumerate()
        .filter(|(_, w)| w.starts_with(key) && w[key.len() + 16] == b'"')
        .map(|(i, _)| 8 + i + key.len());
    let at = found.next()?;
    found.next().is_none().then_some(at..at + 16)
}

/// The checksum of a serialized checkpoint whose checksum field lies at `field`, read as
/// zeros.
fn file_checksum(bytes: &[u8], field: &Range<usize>) -> u64 {
    let mut h = StreamHash::default();
    h.update(&bytes[..field.start]);
    h.update(ZEROS);
    h.update(&bytes[field.end..]);
    h.finish()
}

/// Writes the model's parameters and the optimizer's state after `epoch` epochs, with
/// their checksums. Refuses (leaving `path` as it was) when a parameter or the optimizer's
/// state holds NaN or infinite values.
pub fn save(
    path: &Path,
    model: &dyn Module,
    optim: &dyn Optimizer,
    epoch: usize,
    config_json: &str,
    extra: &[(&str, String)],
) -> Result<()> {
    let mut named: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in model.named_parameters("model") {
        let v = t.to_vec_f32()?;
        if v.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid(format!(
                "parameter `{name}` holds NaN or infinite values (training diverged); \
                 {} is left as it was",
                path.display()
            )));
        }
        let bytes = bytemuck::cast_slice(&v).to_vec();
        named.push((name, Dtype::F32, t.shape().to_vec(), bytes));
    }
    let (state, step) = optim.state_dict();
    for (name, t) in state {
        let name = format!("optim.{name}");
        let v = t.to_vec_f32()?;
        if non_finite(&v).is_some() {
            return Err(Error::invalid(format!(
                "optimizer state `{name}` holds NaN or infinite values (training diverged); \
                 {} is left as it was",
                path.display()
            )));
        }
        let bytes = bytemuck::cast_slice(&v).to_vec();
        named.push((name, Dtype::F32, t.shape().to_vec(), bytes));
    }
    let mut meta = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("epoch".to_string(), epoch.to_string()),
        ("optim_step".to_string(), step.to_string()),
        ("config".to_string(), config_json.to_string()),
    ]);
    for (k, v) in extra {
        if v.len() > LONG_META {
            let bytes = v.as_bytes().to_vec();
            named.push((
                format!("{META_TENSOR}{k}"),
                Dtype::U8,
                vec![bytes.len()],
                bytes,
            ));
        } else {
            meta.insert(k.to_string(), v.clone());
        }
    }
    let sums: BTreeMap<&str, String> = named
        .iter()
        .map(|(n, _, _, b)| (n.as_str(), format!("{:016x}", hash_bytes(b))))
        .collect();
    let sums = serde_json::to_string(&sums).map_err(|e| Error::invalid(e.to_string()))?;
    let views = named
        .iter()
        .map(|(n, d, s, b)| {
            Ok((
                n.clone(),
                TensorView::new(*d, s.clone(), b).map_err(st_err(path))?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    meta.insert(TENSOR_CHECKSUMS_KEY.to_string(), sums);
    let zeros = String::from_utf8_lossy(ZEROS).into_owned();
    meta.insert(CHECKSUM_KEY.to_string(), zeros);
    let mut bytes = safetensors::serialize(views, Some(meta)).map_err(st_err(path))?;
    let field = checksum_field(&bytes).ok_or_else(|| {
        Error::invalid(format!(
            "{}: internal: the checksum field is not unique in the header",
            path.display()
        ))
    })?;
    let sum = format!("{:016x}", file_checksum(&bytes, &field));
    bytes[field].copy_from_slice(sum.as_bytes());
    crate::atomic::write(path, &bytes)
}

fn st_err(path: &Path) -> impl Fn(safetensors::SafeTensorError) -> Error + '_ {
    move |e| Error::parse(path, 0, format!("safetensors: {e}"))
}

/// A checkpoint read from disk and verified, not yet applied to a model.
pub struct Checkpoint {
    path: PathBuf,
    bytes: Vec<u8>,
    /// Epochs completed when it was written.
    pub epoch: usize,
    step: u64,
    /// Its string metadata (`config`, `dataset`, `history`, `final`, ...).
    pub meta: HashMap<String, String>,
    /// Why its values could not be verified (a checkpoint written before checksums), if so.
    pub unverified: Option<String>,
}

/// Reads a checkpoint and its metadata, and checks it: its checksums (a tensor that does
/// not match is named), and that no tensor holds NaN or infinite values. The tensors'
/// names and shapes are checked against a model by [`Checkpoint::restore`].
pub fn open(path: &Path) -> Result<Checkpoint> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(st_err(path))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    let unverified = match meta.get("format").map(String::as_str) {
        Some(FORMAT) => None,
        Some(FORMAT_UNVERIFIED) => Some(format!(
            "{} was written by an earlier espalier, without checksums \
             ({FORMAT_UNVERIFIED}): a corruption of its values cannot be detected (only NaN \
             and infinite values are); the checkpoints this run writes have checksums",
            path.display()
        )),
        _ => {
            return Err(Error::parse(
                path,
                0,
                format!("not an espalier checkpoint (format {FORMAT} expected)"),
            ))
        }
    };
    let st = SafeTensors::deserialize(&bytes).map_err(st_err(path))?;
    if unverified.is_none() {
        verify(path, &bytes, &st, &meta)?;
    }
    let mut meta = meta;
    for (name, v) in st.tensors() {
        if let (Some(key), Dtype::U8) = (name.strip_prefix(META_TENSOR), v.dtype()) {
            let text = String::from_utf8(v.data().to_vec())
                .map_err(|_| Error::parse(path, 0, format!("tensor `{name}` is not UTF-8 text")))?;
            meta.insert(key.to_string(), text);
        }
        if v.dtype() != Dtype::F32 {
            continue;
        }
        if let Some((i, x)) = non_finite(&f32_values(v.data())) {
            return Err(Error::parse(
                path,
                0,
                format!(
                    "tensor `{name}` holds {x} at index {i}: a checkpoint never stores NaN or \
                     infinite values (corrupt, or written by a diverged run)"
                ),
            ));
        }
    }
    let num = |k: &str| -> Result<u64> {
        meta.get(k)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::parse(path, 0, format!("checkpoint metadata lacks `{k}`")))
    };
    let epoch = num("epoch")? as usize;
    let step = num("optim_step")?;
    Ok(Checkpoint {
        path: path.to_path_buf(),
        bytes,
        epoch,
        step,
        meta,
        unverified,
    })
}

/// Little-endian f32 values of a tensor's bytes.
fn f32_values(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Checks the per-tensor checksums (naming the first tensor that does not match), then the
/// whole file's (naming the header: what is left uncovered by the tensors' own).
fn verify(
    path: &Path,
    bytes: &[u8],
    st: &SafeTensors<'_>,
    meta: &HashMap<String, String>,
) -> Result<()> {
    let corrupt = |what: String| Error::parse(path, 0, format!("{what}: the file is corrupt"));
    let sums: BTreeMap<String, String> = meta
        .get(TENSOR_CHECKSUMS_KEY)
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| {
            corrupt(format!(
                "checkpoint metadata `{TENSOR_CHECKSUMS_KEY}` is missing or malformed"
            ))
        })?;
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    for name in &names {
        let v = st.tensor(name).map_err(st_err(path))?;
        let stored = sums
            .get(name)
            .ok_or_else(|| corrupt(format!("tensor `{name}` has no checksum")))?;
        if *stored != format!("{:016x}", hash_bytes(v.data())) {
            return Err(corrupt(format!(
                "tensor `{name}` does not match its checksum"
            )));
        }
    }
    if let Some(missing) = sums.keys().find(|n| !names.contains(n)) {
        return Err(corrupt(format!("tensor `{missing}` is missing")));
    }
    let header = "the checkpoint's header does not match its checksum";
    let field = checksum_field(bytes).ok_or_else(|| corrupt(header.to_string()))?;
    let stored = std::str::from_utf8(&bytes[field.clone()])
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok());
    if stored != Some(file_checksum(bytes, &field)) {
        return Err(corrupt(header.to_string()));
    }
    Ok(())
}

impl Checkpoint {
    /// Copies the stored parameters into `model` and the optimizer state into `optim`.
    pub fn restore(&self, model: &dyn Module, optim: &mut dyn Optimizer) -> Result<()> {
        let path = self.path.as_path();
        let st = SafeTensors::deserialize(&self.bytes).map_err(st_err(path))?;
        let read = |name: &str| -> Result<Tensor> {
            let v = st.tensor(name).map_err(st_err(path))?;
            if v.dtype() != Dtype::F32 {
                return Err(Error::parse(
                    path,
                    0,
                    format!("tensor `{name}` is {:?}, expected F32", v.dtype()),
                ));
            }
            Tensor::from_f32(f32_values(v.data()), v.shape(), Device::Cpu)
        };
        for (name, p) in model.named_parameters("model") {
            let t = read(&name)?;
            if t.shape() != p.shape() {
                return Err(Error::parse(
                    path,
                    0,
                    format!(
                        "parameter `{name}` has shape {:?} in the checkpoint but {:?} in the model",
                        t.shape(),
                        p.shape()
                    ),
                ));
            }
            let t = t.to_device(p.device())?;
            // Copy into the parameter's own storage: optimizers and layers hold that tensor.
            crate::ops::assign(&p, &t)?;
        }
        let mut state = HashMap::new();
        for (name, _) in st.tensors() {
            if let Some(key) = name.strip_prefix("optim.") {
                state.insert(key.to_string(), read(&name)?);
            }
        }
        optim.load_state_dict(&state, self.step)
    }
}

/// Loads a checkpoint into `model` and `optim`; returns the epochs it had completed.
pub fn load(path: &Path, model: &dyn Module, optim: &mut dyn Optimizer) -> Result<usize> {
    let c = open(path)?;
    c.restore(model, optim)?;
    Ok(c.epoch)
}
