//! The kernels of `src/ops/sgd.rs` on a GPU backend: the in-place SGD step, plain or with
//! momentum.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// Hyper-parameters of one SGD step.
#[derive(Clone, Copy, Debug)]
pub struct SgdStep {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: plain SGD).
    pub momentum: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// True on the first step, when the momentum buffer is set to the gradient.
    pub first: bool,
}

/// The SGD step on one GPU backend.
pub trait SgdKernels: GpuDevice {
    /// Updates the `n` values of `p` in place from the gradient `g` and, with momentum,
    /// the velocity `v`, with the f32 roundings of the CPU's `T::from_f64`.
    fn sgd(
        self: &Arc<Self>,
        p: &Self::Buffer,
        g: &Self::Buffer,
        v: Option<&Self::Buffer>,
        n: usize,
        h: SgdStep,
    ) -> Result<()>;
}
