//! `kernels/argmax.cu` behind [`ArgmaxKernels`]: a warp per row.

use std::sync::Arc;

use crate::device::cuda::args::ArgmaxRowsArgs;
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::argmax::ArgmaxKernels;
use crate::error::Result;

impl ArgmaxKernels for Context {
    fn argmax_rows(
        self: &Arc<Self>,
        op: &'static str,
        x: &CudaBuffer,
        r: usize,
        c: usize,
    ) -> Result<CudaBuffer> {
        u32_count(op, "x", r * c)?;
        let out = CudaBuffer::new(self, (r * 4) as u64)?;
        // One warp per row; nothing runs for r = 0.
        let args = ArgmaxRowsArgs {
            x: x.into(),
            out: (&out).into(),
            r: r as u32,
            c: c as u32,
        };
        self.launch_args_rows(&args, r as u64)?;
        Ok(out)
    }
}
