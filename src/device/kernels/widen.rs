//! The kernel of `src/ops/widen.rs` on a GPU backend: f16 or bf16 values widened to f32.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The widening on one GPU backend.
pub trait WidenKernels: GpuDevice {
    /// The `n` half-precision values of `x` (two a word; bf16 when `bf16`, else f16) as a
    /// new buffer of `n` f32 values.
    fn widen(self: &Arc<Self>, x: &Self::Buffer, n: usize, bf16: bool) -> Result<Self::Buffer>;
}
