//! `kernels/segment_sum.cu` behind [`SegmentSumKernels`]: a warp owns an output row, lanes
//! over its features, summing in edge order.

use std::sync::Arc;

use crate::device::cuda::args::{SegmentSumArgs, SegmentSumBackwardArgs};
use crate::device::cuda::{BlockBuffers, Context, CudaBuffer};
use crate::device::kernels::segment_sum::{SegmentPass, SegmentSumKernels};
use crate::error::Result;
use crate::graph::Block;

impl SegmentSumKernels for Context {
    fn segment_sum(
        self: &Arc<Self>,
        _op: &'static str,
        block: &Block,
        pass: SegmentPass,
        input: &CudaBuffer,
    ) -> Result<CudaBuffer> {
        launch(self, block, pass, input)
    }
}

/// A warp per output row (see `kernels/segment_sum.cu`).
fn launch(
    ctx: &Arc<Context>,
    block: &Block,
    pass: SegmentPass,
    input: &CudaBuffer,
) -> Result<CudaBuffer> {
    let SegmentPass {
        forward,
        mean,
        f,
        rows_out,
        n,
        ..
    } = pass;
    let out = CudaBuffer::new(ctx, n as u64 * 4)?;
    // Nothing to write without output values; otherwise rows_out <= n fits u32.
    if n == 0 {
        return Ok(out);
    }
    let bb = BlockBuffers::of(ctx, block)?;
    let (rows, f, mean) = (rows_out as u32, f as u32, mean as u32);
    if forward {
        let args = SegmentSumArgs {
            indptr: (&bb.indptr).into(),
            indices: (&bb.indices).into(),
            x: input.into(),
            out: (&out).into(),
            rows,
            f,
            mean,
        };
        ctx.launch_args_rows(&args, rows as u64)?;
    } else {
        let args = SegmentSumBackwardArgs {
            indptr: (&bb.indptr).into(),
            t_indptr: (&bb.t_indptr).into(),
            t_dst: (&bb.t_dst).into(),
            g: input.into(),
            grad_x: (&out).into(),
            rows,
            f,
            mean,
        };
        ctx.launch_args_rows(&args, rows as u64)?;
    }
    Ok(out)
}
