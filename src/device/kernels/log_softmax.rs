//! The kernels of `src/ops/log_softmax.rs` on a GPU backend: log-softmax along each row
//! and its backward.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The log-softmax kernels on one GPU backend, over `[r, c]` row-major matrices with
/// `r, c > 0`.
pub trait LogSoftmaxKernels: GpuDevice {
    /// Writes `x - max - ln Σ exp(x - max)` of each row of `x` into `out`.
    fn log_softmax(
        self: &Arc<Self>,
        x: &Self::Buffer,
        out: &Self::Buffer,
        r: usize,
        c: usize,
    ) -> Result<()>;

    /// Writes `g - exp(y) · Σ g` of each row into `gx` (`y` the forward's output).
    fn log_softmax_backward(
        self: &Arc<Self>,
        g: &Self::Buffer,
        y: &Self::Buffer,
        gx: &Self::Buffer,
        r: usize,
        c: usize,
    ) -> Result<()>;
}
