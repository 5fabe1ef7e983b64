//! The kernels of `src/ops/slice.rs` on a GPU backend: a range of rows or columns of a
//! matrix, and its adjoint, the range written into zeros.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The slice kernels on one GPU backend. Values move as 32-bit words (f32 and u32 alike).
pub trait SliceKernels: GpuDevice {
    /// Rows (`dim` 0) or columns (`dim` 1) `start..start + len` of the `[r, c]` matrix
    /// `x`, as a new buffer.
    fn slice(
        self: &Arc<Self>,
        x: &Self::Buffer,
        rc: (usize, usize),
        dim: usize,
        range: (usize, usize),
    ) -> Result<Self::Buffer>;

    /// Zeros shaped `[r, c]` with the `[gr, gc]` matrix `g` written at `start` along `dim`,
    /// as a new buffer.
    fn slice_pad(
        self: &Arc<Self>,
        g: &Self::Buffer,
        grc: (usize, usize),
        dim: usize,
        start: usize,
        rc: (usize, usize),
    ) -> Result<Self::Buffer>;
}
