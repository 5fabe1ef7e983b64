//! `kernels/unary.cu` behind [`UnaryKernels`]: a thread per value (grid-stride).

use std::sync::Arc;

use crate::device::cuda::args::{UnaryArgs, UnaryBackwardArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::unary::UnaryKernels;
use crate::error::Result;

impl UnaryKernels for Context {
    fn unary(
        self: &Arc<Self>,
        op: &'static str,
        (code, a): (u32, f32),
        x: &CudaBuffer,
        out: &CudaBuffer,
        n: usize,
    ) -> Result<()> {
        let n = u32_count(op, "x", n)?;
        let args = UnaryArgs {
            x: x.into(),
            out: out.into(),
            op: code,
            a,
            n,
        };
        self.launch_args_1d(&args, n as u64)
    }

    fn unary_backward(
        self: &Arc<Self>,
        op: &'static str,
        (code, a): (u32, f32),
        g: &CudaBuffer,
        s: &CudaBuffer,
        out: &CudaBuffer,
        n: usize,
    ) -> Result<()> {
        let n = u32_count(op, "the gradient", n)?;
        let args = UnaryBackwardArgs {
            g: g.into(),
            s: s.into(),
            out: out.into(),
            op: code,
            a,
            n,
        };
        self.launch_args_1d(&args, n as u64)
    }
}
