//! The kernel of `src/ops/concat.rs` on a GPU backend: 2-D tensors joined along rows or
//! columns.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The concatenation on one GPU backend. Values move as 32-bit words (f32 and u32 alike).
pub trait ConcatKernels: GpuDevice {
    /// The buffers `bufs` (shaped `shapes`, each at offset `parts[i].0` along `dim`) joined
    /// into a new buffer shaped `out` (rows, columns).
    fn concat(
        self: &Arc<Self>,
        bufs: &[&Self::Buffer],
        shapes: &[(usize, usize)],
        parts: &[(usize, usize)],
        dim: usize,
        out: (usize, usize),
    ) -> Result<Self::Buffer>;
}
