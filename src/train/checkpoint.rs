//! Checkpoints in safetensors: readable from PyTorch with
//! `safetensors.torch.load_file(path)`.
//!
//! Tensors: `model.<parameter name>` (f32, our layout: Linear weights are `[in, out]`) and
//! `optim.<state name>`; metadata: `format`, `epoch` (epochs completed), `optim_step`, the
//! training `config` as JSON, and what the trainer adds (`dataset`, `history`: the finished
//! epochs' figures, `final`: the run's final figures once it is done). Resuming checks every
//! parameter's name and shape. Checkpoints are written atomically ([`crate::atomic`]): a
//! crash or Ctrl-C while saving leaves the previous checkpoint whole.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;
use crate::train::optim::Optimizer;

const FORMAT: &str = "espalier-checkpoint-1";

/// Writes the model's parameters and the optimizer's state after `epoch` epochs.
pub fn save(
    path: &Path,
    model: &dyn Module,
    optim: &dyn Optimizer,
    epoch: usize,
    config_json: &str,
    extra: &[(&str, String)],
) -> Result<()> {
    let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in model.named_parameters("model") {
        let v = t.to_vec_f32()?;
        if v.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid(format!(
                "parameter `{name}` holds NaN or infinite values (training diverged); \
                 {} is left as it was",
                path.display()
            )));
        }
        named.push((name, t.shape().to_vec(), bytemuck::cast_slice(&v).to_vec()));
    }
    let (state, step) = optim.state_dict();
    for (name, t) in state {
        named.push((
            format!("optim.{name}"),
            t.shape().to_vec(),
            bytemuck::cast_slice(&t.to_vec_f32()?).to_vec(),
        ));
    }
    let views = named
        .iter()
        .map(|(n, s, b)| {
            Ok((
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).map_err(st_err(path))?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut meta = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("epoch".to_string(), epoch.to_string()),
        ("optim_step".to_string(), step.to_string()),
        ("config".to_string(), config_json.to_string()),
    ]);
    for (k, v) in extra {
        meta.insert(k.to_string(), v.clone());
    }
    let bytes = safetensors::serialize(views, Some(meta)).map_err(st_err(path))?;
    crate::atomic::write(path, &bytes)
}

fn st_err(path: &Path) -> impl Fn(safetensors::SafeTensorError) -> Error + '_ {
    move |e| Error::parse(path, 0, format!("safetensors: {e}"))
}

/// A checkpoint read from disk, not yet applied to a model.
pub struct Checkpoint {
    path: PathBuf,
    bytes: Vec<u8>,
    /// Epochs completed when it was written.
    pub epoch: usize,
    step: u64,
    /// Its string metadata (`config`, `dataset`, `history`, `final`, ...).
    pub meta: HashMap<String, String>,
}

/// Reads a checkpoint and its metadata (the tensors are checked by [`Checkpoint::restore`]).
pub fn open(path: &Path) -> Result<Checkpoint> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(st_err(path))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(Error::parse(
            path,
            0,
            format!("not an espalier checkpoint (format {FORMAT} expected)"),
        ));
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
    })
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
            let data: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Tensor::from_f32(data, v.shape(), Device::Cpu)
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
