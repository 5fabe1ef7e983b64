//! The kernel of `src/ops/adam.rs` on a GPU backend: the in-place Adam / AdamW step.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// Hyper-parameters of one Adam step.
#[derive(Clone, Copy, Debug)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first-moment (mean) estimate.
    pub beta1: f64,
    /// Decay of the second-moment (uncentred variance) estimate.
    pub beta2: f64,
    /// Added to the denominator's square root.
    pub eps: f64,
    /// L2 penalty added to the gradient (or decoupled, see `decoupled`).
    pub weight_decay: f64,
    /// AdamW's decoupled weight decay instead of L2.
    pub decoupled: bool,
    /// 1-based step count t.
    pub step: u64,
}

/// The Adam step on one GPU backend.
pub trait AdamKernels: GpuDevice {
    /// Updates the `n` values of `p` and the moments `m`, `v` in place from the gradient
    /// `g`, with the f32 roundings of the CPU's `T::from_f64` (bias corrections included).
    #[allow(clippy::too_many_arguments)]
    fn adam(
        self: &Arc<Self>,
        p: &Self::Buffer,
        g: &Self::Buffer,
        m: &Self::Buffer,
        v: &Self::Buffer,
        n: usize,
        h: AdamStep,
    ) -> Result<()>;
}
