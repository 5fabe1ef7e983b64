//! The kernels of `src/ops/segment_sum.rs` on a GPU backend: the sum (or mean) over a
//! block's in-edges and its transpose, one output row per task.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;
use crate::graph::Block;

/// One pass of the segment sum: forward (`[num_src, f]` in, `[num_dst, f]` out, over the
/// CSR) or backward (the reverse, over the transposed CSR), summing or averaging.
#[derive(Clone, Copy, Debug)]
pub struct SegmentPass {
    /// Forward (dst rows out) or backward (src rows out).
    pub forward: bool,
    /// Divide by the dst node's in-degree.
    pub mean: bool,
    /// Features per row.
    pub f: usize,
    /// Rows of the input.
    pub rows_in: usize,
    /// Rows of the output.
    pub rows_out: usize,
    /// Values of the output (`rows_out · f`, checked to fit u32; the input's were too).
    pub n: u32,
}

/// The segment sum on one GPU backend.
pub trait SegmentSumKernels: GpuDevice {
    /// The output of `pass` over `block` from `input`, as a new buffer; `op` names the op
    /// in errors.
    fn segment_sum(
        self: &Arc<Self>,
        op: &'static str,
        block: &Block,
        pass: SegmentPass,
        input: &Self::Buffer,
    ) -> Result<Self::Buffer>;
}
