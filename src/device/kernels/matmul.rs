//! The kernel of `src/ops/matmul.rs` on a GPU backend: `C = op(A)·op(B)` with transpose
//! flags, each backend's GEMM.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The matrix product on one GPU backend.
pub trait MatmulKernels: GpuDevice {
    /// `op(a)·op(b)` as a new row-major `[m, n]` buffer, `(m, k, n)` all non-zero: `op(X)`
    /// is `X` or, with its flag in `(ta, tb)`, `Xᵀ` (stored `a` is `[m, k]` or `[k, m]`,
    /// `b` `[k, n]` or `[n, k]`). Each output is one dot product in k order.
    fn matmul(
        self: &Arc<Self>,
        a: &Self::Buffer,
        b: &Self::Buffer,
        dims: (usize, usize, usize),
        flags: (bool, bool),
    ) -> Result<Self::Buffer>;
}
