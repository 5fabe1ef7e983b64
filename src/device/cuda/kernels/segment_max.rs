//! `kernels/segment_max.cu` behind [`SegmentMaxKernels`]: a warp per output row, lanes
//! over its features.

use std::sync::Arc;

use crate::device::cuda::args::{SegmentMaxArgs, SegmentMaxBackwardArgs};
use crate::device::cuda::{BlockBuffers, Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::segment_max::SegmentMaxKernels;
use crate::error::Result;
use crate::graph::Block;

const OP: &str = "segment_max";

/// CUDA: a warp per output row, lanes over its features; the row counts fit u32 because
/// the values they own do.
impl SegmentMaxKernels for Context {
    fn forward(
        self: &Arc<Self>,
        b: &Block,
        f: usize,
        x: &CudaBuffer,
        out: &CudaBuffer,
        arg: &CudaBuffer,
    ) -> Result<()> {
        let bb = BlockBuffers::of(self, b)?;
        let args = SegmentMaxArgs {
            indptr: (&bb.indptr).into(),
            indices: (&bb.indices).into(),
            x: x.into(),
            out: out.into(),
            arg: arg.into(),
            rows: u32_count(OP, "the dst rows", b.num_dst)?,
            f: u32_count(OP, "the features", f)?,
        };
        self.launch_args_rows(&args, b.num_dst as u64)
    }

    fn backward(
        self: &Arc<Self>,
        b: &Block,
        f: usize,
        arg: &CudaBuffer,
        g: &CudaBuffer,
        grad_x: &CudaBuffer,
    ) -> Result<()> {
        let bb = BlockBuffers::of(self, b)?;
        let args = SegmentMaxBackwardArgs {
            t_indptr: (&bb.t_indptr).into(),
            t_dst: (&bb.t_dst).into(),
            t_edges: (&bb.t_edges).into(),
            arg: arg.into(),
            g: g.into(),
            grad_x: grad_x.into(),
            rows: u32_count(OP, "the src rows", b.num_src)?,
            f: u32_count(OP, "the features", f)?,
        };
        self.launch_args_rows(&args, b.num_src as u64)
    }
}
