//! `kernels/reduce.cu` behind [`ReduceKernels`]: the passes of the wgpu backend, with a
//! warp per row of up to 1024 columns and a block per 4096 columns of a longer row.

use std::sync::Arc;

use crate::device::cuda::args::{ExpandArgs, SumColsArgs, SumRowsArgs, SumRowsSmallArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::reduce::{ReduceKernels, COL_BLOCK};
use crate::error::Result;

/// Rows at or below this length are summed by one warp each on CUDA (32 values a lane).
const SMALL_ROW_CUDA: usize = 1024;
/// Columns one block of `sum_rows_f32` sums on CUDA (16 per thread).
const ROW_CHUNK_CUDA: usize = 4096;
/// Threads per block of the CUDA `sum_rows_f32`.
const ROW_THREADS_CUDA: u32 = 256;

impl ReduceKernels for Context {
    fn sum_dim(
        self: &Arc<Self>,
        x: &CudaBuffer,
        (r, c): (usize, usize),
        dim: usize,
    ) -> Result<CudaBuffer> {
        cuda_sum_dim(x, r, c, dim)
    }

    fn expand(
        self: &Arc<Self>,
        op: &'static str,
        v: &CudaBuffer,
        (r, c): (usize, usize),
        dim: usize,
    ) -> Result<CudaBuffer> {
        let total = u32_count(op, "the output", r * c)?;
        let out = CudaBuffer::new(self, total as u64 * 4)?;
        let args = ExpandArgs {
            v: v.into(),
            out: (&out).into(),
            c: c as u32,
            dim: dim as u32,
            n: total,
        };
        self.launch_args_1d(&args, total as u64)?;
        Ok(out)
    }
}

/// Sum over `dim` of the `[r, c]` f32 matrix in `x`, on its CUDA device: the passes of
/// the wgpu backend, with a warp per short row and a block per 4096 columns of a long one.
fn cuda_sum_dim(x: &CudaBuffer, r: usize, c: usize, dim: usize) -> Result<CudaBuffer> {
    const OP: &str = "sum_dim";
    let ctx = x.ctx();
    u32_count(OP, "x", r * c)?;
    let mut cur: Option<CudaBuffer> = None;
    let (mut rr, mut cc) = (r, c);
    loop {
        let src = cur.as_ref().unwrap_or(x);
        if dim == 1 && cc <= SMALL_ROW_CUDA {
            let out = CudaBuffer::new(ctx, (rr * 4) as u64)?;
            let args = SumRowsSmallArgs {
                x: src.into(),
                out: (&out).into(),
                r: rr as u32,
                c: cc as u32,
            };
            ctx.launch_args_rows(&args, rr as u64)?;
            return Ok(out);
        }
        // Each pass leaves one partial sum per block; the partials are summed again in order.
        let (next, blocks) = if dim == 1 {
            let nb = cc.div_ceil(ROW_CHUNK_CUDA);
            let out = CudaBuffer::new(ctx, (rr * nb * 4) as u64)?;
            let args = SumRowsArgs {
                x: src.into(),
                out: (&out).into(),
                r: rr as u32,
                c: cc as u32,
                nb: nb as u32,
                chunk: ROW_CHUNK_CUDA as u32,
            };
            let grid = ctx.grid_blocks((rr * nb) as u64, ROW_THREADS_CUDA);
            ctx.launch_args(&args, grid)?;
            (out, nb)
        } else {
            let nb = rr.div_ceil(COL_BLOCK);
            let out = CudaBuffer::new(ctx, (nb * cc * 4) as u64)?;
            let args = SumColsArgs {
                x: src.into(),
                out: (&out).into(),
                r: rr as u32,
                c: cc as u32,
                rows_per: COL_BLOCK as u32,
            };
            ctx.launch_args_1d(&args, (nb * cc) as u64)?;
            (out, nb)
        };
        if blocks == 1 {
            return Ok(next);
        }
        cur = Some(next);
        if dim == 1 {
            cc = blocks;
        } else {
            rr = blocks;
        }
    }
}
