//! Seeded parameter initialisation.
//!
//! Glorot (Xavier) uniform: U(−a, a) with a = √(6 / (fan_in + fan_out)), what DGL's GNN
//! layers and PyG's `GCNConv` and `GATConv` draw. Kaiming (He) uniform for ReLU:
//! a = √(6 / fan_in). PyTorch's `nn.Linear` default (kaiming-uniform with a negative slope
//! of √5): a = 1/√fan_in, which PyG's `Linear` and so its `SAGEConv` use, for the bias too.

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
    /// PyTorch's `nn.Linear` default, bound 1/√fan_in (PyG's `SAGEConv`).
    TorchLinear,
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
        Init::TorchLinear => torch_linear_bound(fan_in),
        Init::Zeros => 0.0,
    };
    uniform(&[fan_in, fan_out], bound, rng, device)
}

/// The bound of PyTorch's `nn.Linear` weights and biases, 1/√fan_in
/// (`kaiming_uniform_(a = √5)`: √(6 / ((1 + 5)·fan_in))).
pub fn torch_linear_bound(fan_in: usize) -> f64 {
    1.0 / (fan_in.max(1) as f64).sqrt()
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
