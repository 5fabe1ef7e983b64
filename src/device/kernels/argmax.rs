//! The kernel of `src/ops/argmax.rs` on a GPU backend: the column of each row's largest
//! value.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The row argmax on one GPU backend.
pub trait ArgmaxKernels: GpuDevice {
    /// The first column of each row's largest value (a NaN counts as the largest) of the
    /// `[r, c]` matrix `x`, `c > 0` or `r = 0`, as a new buffer of `r` u32 values; `op`
    /// names the op in errors.
    fn argmax_rows(
        self: &Arc<Self>,
        op: &'static str,
        x: &Self::Buffer,
        r: usize,
        c: usize,
    ) -> Result<Self::Buffer>;
}
