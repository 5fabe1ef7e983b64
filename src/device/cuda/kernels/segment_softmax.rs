//! `kernels/segment_softmax.cu` behind [`SegmentSoftmaxKernels`]: a warp per dst node.

use std::sync::Arc;

use crate::device::cuda::args::{SegmentSoftmaxArgs, SegmentSoftmaxBackwardArgs};
use crate::device::cuda::{BlockBuffers, Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::segment_softmax::SegmentSoftmaxKernels;
use crate::error::Result;
use crate::graph::Block;

const OP: &str = "segment_softmax";

/// `(num_dst, heads)` as the CUDA kernels take them (a warp per dst node), or `None` when
/// there are no values to write.
fn cuda_dims(op: &'static str, block: &Block, heads: usize) -> Result<Option<(u32, u32)>> {
    if u32_count(op, "the scores", block.num_edges() * heads)? == 0 {
        return Ok(None);
    }
    let num_dst = u32_count(op, "the dst nodes", block.num_dst)?;
    Ok(Some((num_dst, heads as u32)))
}

impl SegmentSoftmaxKernels for Context {
    fn forward(
        self: &Arc<Self>,
        block: &Block,
        heads: usize,
        x: &CudaBuffer,
        y: &CudaBuffer,
    ) -> Result<()> {
        let Some((num_dst, heads)) = cuda_dims(OP, block, heads)? else {
            return Ok(());
        };
        let bb = BlockBuffers::of(self, block)?;
        let args = SegmentSoftmaxArgs {
            indptr: (&bb.indptr).into(),
            x: x.into(),
            y: y.into(),
            num_dst,
            heads,
        };
        self.launch_args_rows(&args, num_dst as u64)
    }

    fn backward(
        self: &Arc<Self>,
        block: &Block,
        heads: usize,
        y: &CudaBuffer,
        g: &CudaBuffer,
        dx: &CudaBuffer,
    ) -> Result<()> {
        let Some((num_dst, heads)) = cuda_dims("segment_softmax_backward", block, heads)? else {
            return Ok(());
        };
        let bb = BlockBuffers::of(self, block)?;
        let args = SegmentSoftmaxBackwardArgs {
            indptr: (&bb.indptr).into(),
            y: y.into(),
            g: g.into(),
            dx: dx.into(),
            num_dst,
            heads,
        };
        self.launch_args_rows(&args, num_dst as u64)
    }
}
