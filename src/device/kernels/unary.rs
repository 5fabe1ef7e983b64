//! The kernels of `src/ops/unary.rs` on a GPU backend: an elementwise function and its
//! fused backward `ḡ · f'(saved)`.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The unary kernels on one GPU backend. `code` is the op's number in the kernels and its
/// f32 parameter (a slope, a scalar; 0 when it has none); `op` names the op in errors.
pub trait UnaryKernels: GpuDevice {
    /// Writes `f(x)` for the first `n` values of `x` into `out`.
    fn unary(
        self: &Arc<Self>,
        op: &'static str,
        code: (u32, f32),
        x: &Self::Buffer,
        out: &Self::Buffer,
        n: usize,
    ) -> Result<()>;

    /// Writes `g · f'(s)` for the first `n` values into `out` (`s` the saved input or
    /// output, as the op's rule reads).
    #[allow(clippy::too_many_arguments)]
    fn unary_backward(
        self: &Arc<Self>,
        op: &'static str,
        code: (u32, f32),
        g: &Self::Buffer,
        s: &Self::Buffer,
        out: &Self::Buffer,
        n: usize,
    ) -> Result<()>;
}
