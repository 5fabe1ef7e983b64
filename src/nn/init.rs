//! Seeded parameter initialisation.
//!
//! Glorot (Xavier) uniform: U(−a, a) with a = √(6 / (fan_in + fan_out)), the default of
//! DGL's and PyG's GNN layers. Kaiming (He) uniform for ReLU: a = √(6 / fan_in).

use crate::device::{cpu, Device};
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// How to initialise a weight matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// Glorot (Xavier) uniform.
    GlorotUniform,
    /// Kaiming (He) uniform, for ReLU.
    KaimingUniform,
    /// All zeros.
    Zeros,
}

/// A `[fan_in, fan_out]` f32 parameter drawn from `init` with `rng`, as a leaf on `device`.
pub fn weight(
    fan_in: usize,
    fan_out: usize,
    init: Init,
    rng: &mut Rng,
    device: Device,
) -> Result<Tensor> {
    let bound = match init {
        Init::GlorotUniform => (6.0 / (fan_in + fan_out).max(1) as f64).sqrt(),
        Init::KaimingUniform => (6.0 / fan_in.max(1) as f64).sqrt(),
        Init::Zeros => 0.0,
    };
    uniform(&[fan_in, fan_out], bound, rng, device)
}

/// An f32 parameter of `shape` drawn from U(−bound, bound) with `rng`, as a leaf on
/// `device`. The host buffer is allocated fallibly: a width from user input that does
/// not fit in memory is an error, not an abort.
pub fn uniform(shape: &[usize], bound: f64, rng: &mut Rng, device: Device) -> Result<Tensor> {
    let n = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(format!(
                "a parameter of shape {shape:?} has more values than this machine can address"
            ))
        })?;
    let mut data = cpu::try_vec(n)?;
    data.extend((0..n).map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32));
    Ok(Tensor::from_f32(data, shape, device)?.requires_grad_leaf())
}

/// A zero f32 parameter of `shape`, as a leaf on `device`.
pub fn zeros(shape: &[usize], device: Device) -> Result<Tensor> {
    Ok(Tensor::zeros(shape, crate::tensor::DType::F32, device)?.requires_grad_leaf())
}
