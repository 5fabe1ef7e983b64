//! The kernels of `src/ops/reduce.rs` on a GPU backend: sums over a dimension of a matrix
//! in passes of fixed order, and the repeat of a row or column (`expand_dim`).

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// Rows one invocation of `sum_cols_f32` adds.
pub const COL_BLOCK: usize = 64;

/// Sums and repeats on one GPU backend.
pub trait ReduceKernels: GpuDevice {
    /// The sum over `dim` of the `[r, c]` f32 matrix `x` (`dim` 0: `[c]`, 1: `[r]`), both
    /// dimensions non-empty, as a new buffer: passes of fixed order, each leaving one partial
    /// sum per block, until one is left.
    fn sum_dim(
        self: &Arc<Self>,
        x: &Self::Buffer,
        rc: (usize, usize),
        dim: usize,
    ) -> Result<Self::Buffer>;

    /// `[r, c]` repeating `v` along `dim` (0: a row of `c`, 1: a column of `r`), as a new
    /// buffer; `op` names the op in errors.
    fn expand(
        self: &Arc<Self>,
        op: &'static str,
        v: &Self::Buffer,
        rc: (usize, usize),
        dim: usize,
    ) -> Result<Self::Buffer>;
}
