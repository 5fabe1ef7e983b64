//! `kernels/log_softmax.cu` behind [`LogSoftmaxKernels`]: a warp per row, a block per row
//! past [`LONG_ROW`] columns.

use std::sync::Arc;

use crate::device::cuda::args::{
    LogSoftmaxArgs, LogSoftmaxBackwardArgs, LogSoftmaxBackwardBlockArgs, LogSoftmaxBlockArgs,
};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::log_softmax::LogSoftmaxKernels;
use crate::error::Result;

/// Rows longer than this get a block each; shorter ones a warp.
const LONG_ROW: usize = 256;
/// Threads per block of the block-per-row kernels.
const ROW_THREADS: u32 = 256;

impl LogSoftmaxKernels for Context {
    fn log_softmax(
        self: &Arc<Self>,
        x: &CudaBuffer,
        out: &CudaBuffer,
        r: usize,
        c: usize,
    ) -> Result<()> {
        u32_count("log_softmax", "x", r * c)?;
        let (x, out, rr, cc) = (x.into(), out.into(), r as u32, c as u32);
        if c > LONG_ROW {
            let args = LogSoftmaxBlockArgs {
                x,
                out,
                r: rr,
                c: cc,
            };
            self.launch_args(&args, self.grid_blocks(r as u64, ROW_THREADS))
        } else {
            let args = LogSoftmaxArgs {
                x,
                out,
                r: rr,
                c: cc,
            };
            self.launch_args_rows(&args, r as u64)
        }
    }

    fn log_softmax_backward(
        self: &Arc<Self>,
        g: &CudaBuffer,
        y: &CudaBuffer,
        gx: &CudaBuffer,
        r: usize,
        c: usize,
    ) -> Result<()> {
        u32_count("log_softmax", "x", r * c)?;
        let (g, y, gx, rr, cc) = (g.into(), y.into(), gx.into(), r as u32, c as u32);
        if c > LONG_ROW {
            let args = LogSoftmaxBackwardBlockArgs {
                g,
                y,
                gx,
                r: rr,
                c: cc,
            };
            self.launch_args(&args, self.grid_blocks(r as u64, ROW_THREADS))
        } else {
            let args = LogSoftmaxBackwardArgs {
                g,
                y,
                gx,
                r: rr,
                c: cc,
            };
            self.launch_args_rows(&args, r as u64)
        }
    }
}
