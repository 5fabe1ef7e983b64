//! The kernel of `src/ops/dropout.rs` on a GPU backend: `x ⊙ mask / (1 - p)`, the mask a
//! hash of (key, row id, column).

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// One mask over an `[r, c]` matrix.
#[derive(Clone, Copy, Debug)]
pub struct Mask {
    /// Rows.
    pub r: usize,
    /// Columns.
    pub c: usize,
    /// The layer's and epoch's key.
    pub key: u32,
    /// The drop probability `p` as f32 (the kernels' threshold).
    pub threshold: f32,
    /// `1/(1 - p)` as f32, the scale of the values kept.
    pub scale: f32,
}

/// The dropout mask on one GPU backend.
pub trait DropoutKernels: GpuDevice {
    /// Writes `x ⊙ mask · scale` into `out`; row `i`'s mask is that of row id `ids[i]`
    /// (`u32 [r]`) when given, else of `i`.
    fn dropout(
        self: &Arc<Self>,
        mask: Mask,
        x: &Self::Buffer,
        ids: Option<&Self::Buffer>,
        out: &Self::Buffer,
    ) -> Result<()>;
}
