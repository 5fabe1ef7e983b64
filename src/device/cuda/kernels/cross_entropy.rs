//! `kernels/cross_entropy.cu` behind [`CrossEntropyKernels`]: a warp per row (a block per
//! row past [`LONG_ROW_CUDA`] classes), one block for the mean.

use std::sync::Arc;

use crate::device::cuda::args::{
    CeBackwardArgs, CeMeanArgs, CeRowsArgs, CeRowsBlockArgs, CeWeightGradArgs,
};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::kernels::cross_entropy::{inv_n, CrossEntropyKernels, Operands};
use crate::error::Result;

/// Rows of more classes than this get a block each on CUDA; shorter ones a warp.
const LONG_ROW_CUDA: usize = 256;
/// Threads per block of the block-per-row CUDA kernel.
const ROW_THREADS_CUDA: u32 = 256;
/// Threads of the one block that sums the row losses on CUDA.
const MEAN_THREADS_CUDA: u32 = 1024;

/// CUDA: every kernel sees whole buffers; a warp per row, a block per row past
/// [`LONG_ROW_CUDA`] classes, and one block of [`MEAN_THREADS_CUDA`] for the mean.
impl CrossEntropyKernels for Context {
    fn rows(
        self: &Arc<Self>,
        o: &Operands<CudaBuffer>,
        lse: &CudaBuffer,
        rows: &CudaBuffer,
    ) -> Result<()> {
        let (x, labels, lse, row_loss) = (o.x.into(), o.labels.into(), lse.into(), rows.into());
        let (r, c) = (o.n as u32, o.c as u32);
        if o.c > LONG_ROW_CUDA {
            let args = CeRowsBlockArgs {
                x,
                labels,
                lse,
                row_loss,
                r,
                c,
            };
            self.launch_args(&args, self.grid_blocks(o.n as u64, ROW_THREADS_CUDA))
        } else {
            let args = CeRowsArgs {
                x,
                labels,
                lse,
                row_loss,
                r,
                c,
            };
            self.launch_args_rows(&args, o.n as u64)
        }
    }

    fn mean(
        self: &Arc<Self>,
        o: &Operands<CudaBuffer>,
        rows: &CudaBuffer,
        loss: &CudaBuffer,
        status: &CudaBuffer,
    ) -> Result<()> {
        let args = CeMeanArgs {
            labels: o.labels.into(),
            rows: rows.into(),
            w: o.weights.into(),
            loss: loss.into(),
            status: status.into(),
            r: o.n as u32,
            c: o.c as u32,
            inv_n: inv_n(o.n),
        };
        self.launch_args(&args, self.grid_blocks(1, MEAN_THREADS_CUDA))
    }

    fn logits_grad(
        self: &Arc<Self>,
        o: &Operands<CudaBuffer>,
        lse: &CudaBuffer,
        gl: &CudaBuffer,
        gx: &CudaBuffer,
    ) -> Result<()> {
        let args = CeBackwardArgs {
            x: o.x.into(),
            labels: o.labels.into(),
            lse: lse.into(),
            gl: gl.into(),
            w: o.weights.into(),
            gx: gx.into(),
            r: o.n as u32,
            c: o.c as u32,
            inv_n: inv_n(o.n),
        };
        self.launch_args_1d(&args, (o.n * o.c) as u64)
    }

    fn weights_grad(
        self: &Arc<Self>,
        o: &Operands<CudaBuffer>,
        lse: &CudaBuffer,
        gl: &CudaBuffer,
        gw: &CudaBuffer,
    ) -> Result<()> {
        let args = CeWeightGradArgs {
            x: o.x.into(),
            labels: o.labels.into(),
            lse: lse.into(),
            gl: gl.into(),
            gw: gw.into(),
            r: o.n as u32,
            c: o.c as u32,
            inv_n: inv_n(o.n),
        };
        self.launch_args_1d(&args, o.n as u64)
    }
}
