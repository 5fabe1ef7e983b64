//! `kernels/lstm_cell.cu` behind [`LstmCellKernels`]: a thread per (node, unit)
//! (grid-stride).

use std::sync::Arc;

use crate::device::cuda::args::{LstmCellBackwardArgs, LstmCellForwardArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::lstm_cell::LstmCellKernels;
use crate::error::Result;

const OP: &str = "lstm_cell";
const BOP: &str = "lstm_cell_backward";

impl LstmCellKernels for Context {
    fn lstm_cell(
        self: &Arc<Self>,
        z: &CudaBuffer,
        c: &CudaBuffer,
        n: usize,
        h: usize,
    ) -> Result<(CudaBuffer, CudaBuffer)> {
        let ctx = self;
        u32_count(OP, "the gates", n * 4 * h)?;
        let units = u32_count(OP, "the state", n * h)?;
        let out = CudaBuffer::new(ctx, (n * 2 * h * 4) as u64)?;
        let acts = CudaBuffer::new(ctx, (n * 4 * h * 4) as u64)?;
        // With units > 0, n and h are at most units.
        if units > 0 {
            let args = LstmCellForwardArgs {
                gates: z.into(),
                c_prev: c.into(),
                out: (&out).into(),
                acts: (&acts).into(),
                n: n as u32,
                h: h as u32,
            };
            ctx.launch_args_1d(&args, units as u64)?;
        }
        Ok((out, acts))
    }

    fn lstm_cell_backward(
        self: &Arc<Self>,
        a: &CudaBuffer,
        c: &CudaBuffer,
        g: &CudaBuffer,
        n: usize,
        h: usize,
    ) -> Result<(CudaBuffer, CudaBuffer)> {
        let ctx = self;
        u32_count(BOP, "the gates", n * 4 * h)?;
        let units = u32_count(BOP, "the state", n * h)?;
        let dz = CudaBuffer::new(ctx, (n * 4 * h * 4) as u64)?;
        let dc = CudaBuffer::new(ctx, (n * h * 4) as u64)?;
        // With units > 0, n and h are at most units.
        if units > 0 {
            let args = LstmCellBackwardArgs {
                acts: a.into(),
                c_prev: c.into(),
                grad: g.into(),
                dgates: (&dz).into(),
                dc_prev: (&dc).into(),
                n: n as u32,
                h: h as u32,
            };
            ctx.launch_args_1d(&args, units as u64)?;
        }
        Ok((dz, dc))
    }
}
