//! `kernels/segment_weighted_sum.cu` behind [`SegmentWeightedSumKernels`]: a warp owns an
//! output row of `out` and of `x̄`, lanes over columns; for `ā` a warp owns a dst node's
//! edges.

use std::sync::Arc;

use crate::device::cuda::args::{
    SegmentWeightedSumArgs, SegmentWeightedSumBackwardAArgs, SegmentWeightedSumBackwardXArgs,
};
use crate::device::cuda::{BlockBuffers, Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::segment_weighted_sum::{Dims, SegmentWeightedSumKernels};
use crate::error::Result;
use crate::graph::Block;

const OP: &str = "segment_weighted_sum";
const BOP: &str = "segment_weighted_sum_backward";

/// `rows` output rows and then `cols`, `heads` and `per_head`, as the CUDA kernels
/// take them (the gpu_* functions check that the values fit u32 before a launch).
fn words(dims: Dims, op: &'static str, rows: usize) -> Result<[u32; 4]> {
    Ok([
        u32_count(op, "the output rows", rows)?,
        u32_count(op, "the columns", dims.cols)?,
        u32_count(op, "the heads", dims.heads)?,
        u32_count(op, "the columns per head", dims.per_head)?,
    ])
}

/// CUDA: a warp owns an output row of `out` and of `x̄`, lanes over columns; for `ā` a
/// warp owns a dst node's edges.
impl SegmentWeightedSumKernels for Context {
    fn forward(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &CudaBuffer,
        a: &CudaBuffer,
        out: &CudaBuffer,
    ) -> Result<()> {
        let bb = BlockBuffers::of(self, b)?;
        let [rows, cols, heads, per_head] = words(dims, OP, b.num_dst)?;
        let args = SegmentWeightedSumArgs {
            indptr: (&bb.indptr).into(),
            indices: (&bb.indices).into(),
            x: x.into(),
            a: a.into(),
            out: out.into(),
            rows,
            cols,
            heads,
            per_head,
        };
        self.launch_args_rows(&args, rows as u64)
    }

    fn backward_x(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        a: &CudaBuffer,
        g: &CudaBuffer,
        dx: &CudaBuffer,
    ) -> Result<()> {
        let bb = BlockBuffers::of(self, b)?;
        let [rows, cols, heads, per_head] = words(dims, BOP, b.num_src)?;
        let args = SegmentWeightedSumBackwardXArgs {
            t_indptr: (&bb.t_indptr).into(),
            t_dst: (&bb.t_dst).into(),
            t_edges: (&bb.t_edges).into(),
            a: a.into(),
            g: g.into(),
            dx: dx.into(),
            rows,
            cols,
            heads,
            per_head,
        };
        self.launch_args_rows(&args, rows as u64)
    }

    fn backward_a(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &CudaBuffer,
        g: &CudaBuffer,
        da: &CudaBuffer,
    ) -> Result<()> {
        let bb = BlockBuffers::of(self, b)?;
        let [rows, cols, heads, per_head] = words(dims, BOP, b.num_dst)?;
        let args = SegmentWeightedSumBackwardAArgs {
            indptr: (&bb.indptr).into(),
            indices: (&bb.indices).into(),
            x: x.into(),
            g: g.into(),
            da: da.into(),
            rows,
            cols,
            heads,
            per_head,
        };
        // A warp per edge (the kernel finds each edge's dst row by bisection).
        self.launch_args_rows(&args, b.num_edges() as u64)
    }
}
