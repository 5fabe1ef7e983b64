//! The kernels of `src/ops/cross_entropy.rs` on a GPU backend: per-row log-sum-exp and
//! loss, their mean with the label check, and the two gradients.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// `1/n` as the f32 the GPU kernels scale by.
pub fn inv_n(n: usize) -> f32 {
    (1.0 / n as f64) as f32
}

/// The operands of the cross-entropy kernels on a GPU backend: logits `x [n, c]`, labels
/// `[n]` and the optional weights `[n]`.
pub struct Operands<'a, B> {
    /// Rows.
    pub n: usize,
    /// Classes.
    pub c: usize,
    /// The logits `[n, c]`.
    pub x: &'a B,
    /// The labels `[n]` (u32).
    pub labels: &'a B,
    /// The per-row weights `[n]`, if any.
    pub weights: Option<&'a B>,
}

/// The cross-entropy kernels on one GPU backend: one method per
/// kernel, each marshalling its typed parameters and launching it the backend's way.
pub trait CrossEntropyKernels: GpuDevice {
    /// Writes each row's log-sum-exp to `lse [n]` and its loss `lse - x[y]` to `rows [n]`
    /// (a label out of range is clamped into the row: `mean` reports it).
    fn rows(
        self: &Arc<Self>,
        o: &Operands<Self::Buffer>,
        lse: &Self::Buffer,
        rows: &Self::Buffer,
    ) -> Result<()>;

    /// Writes `Σ wᵢ·rowsᵢ / n` to `loss` (one value) and the first row whose label is not
    /// below `c` to word 0 of `status` (two words), or `u32::MAX` when every label is.
    fn mean(
        self: &Arc<Self>,
        o: &Operands<Self::Buffer>,
        rows: &Self::Buffer,
        loss: &Self::Buffer,
        status: &Self::Buffer,
    ) -> Result<()>;

    /// Writes the logits' gradient `gx [n, c]` (`gl` holds the loss gradient, one value).
    fn logits_grad(
        self: &Arc<Self>,
        o: &Operands<Self::Buffer>,
        lse: &Self::Buffer,
        gl: &Self::Buffer,
        gx: &Self::Buffer,
    ) -> Result<()>;

    /// Writes the weights' gradient `gw [n]`.
    fn weights_grad(
        self: &Arc<Self>,
        o: &Operands<Self::Buffer>,
        lse: &Self::Buffer,
        gl: &Self::Buffer,
        gw: &Self::Buffer,
    ) -> Result<()>;
}
