//! The kernels of `src/ops/segment_softmax.rs` on a GPU backend: the softmax of edge
//! scores over each dst node's in-edges, and its backward.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;
use crate::graph::Block;

/// The segment softmax kernels on one GPU backend : one method
/// per kernel, each marshalling its typed parameters and launching it the backend's way.
/// Every operand is `[E, H]` over `block`'s edges.
pub trait SegmentSoftmaxKernels: GpuDevice {
    /// Writes `y`, the softmax of the scores `x` over each dst node's in-edges.
    fn forward(
        self: &Arc<Self>,
        block: &Block,
        heads: usize,
        x: &Self::Buffer,
        y: &Self::Buffer,
    ) -> Result<()>;

    /// Writes `dx = y · (g - Σ_seg g · y)`.
    fn backward(
        self: &Arc<Self>,
        block: &Block,
        heads: usize,
        y: &Self::Buffer,
        g: &Self::Buffer,
        dx: &Self::Buffer,
    ) -> Result<()>;
}
