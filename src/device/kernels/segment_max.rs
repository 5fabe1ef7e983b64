//! The kernels of `src/ops/segment_max.rs` on a GPU backend: the max aggregation over a
//! block's in-edges, with its argmax, and its scatter back through the argmax.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;
use crate::graph::Block;

/// The segment max kernels on one GPU backend: one method per kernel, each marshalling its
/// typed parameters and launching it the backend's way. They run only when there are
/// values to write, each fewer than 2^32.
pub trait SegmentMaxKernels: GpuDevice {
    /// Writes the max `out` and its argmax edge positions `arg` (both `[num_dst, f]`) of
    /// `x [num_src, f]`.
    fn forward(
        self: &Arc<Self>,
        block: &Block,
        f: usize,
        x: &Self::Buffer,
        out: &Self::Buffer,
        arg: &Self::Buffer,
    ) -> Result<()>;

    /// Writes `grad_x [num_src, f]` from the output gradient `g` and the argmax `arg`
    /// (both `[num_dst, f]`), over the transposed CSR.
    fn backward(
        self: &Arc<Self>,
        block: &Block,
        f: usize,
        arg: &Self::Buffer,
        g: &Self::Buffer,
        grad_x: &Self::Buffer,
    ) -> Result<()>;
}
