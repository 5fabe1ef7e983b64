//! `kernels/widen.cu` behind [`WidenKernels`]: a thread per word (two values).

use std::sync::Arc;

use crate::device::cuda::args::{WidenBf16Args, WidenF16Args};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::widen::WidenKernels;
use crate::error::Result;

impl WidenKernels for Context {
    fn widen(self: &Arc<Self>, x: &CudaBuffer, n: usize, bf16: bool) -> Result<CudaBuffer> {
        let out = CudaBuffer::new(self, (n * 4) as u64)?;
        let count = u32_count("widen", "x", n)?;
        let words = n.div_ceil(2) as u64;
        let (x, o) = (x.into(), (&out).into());
        if bf16 {
            let args = WidenBf16Args {
                x,
                out: o,
                n: count,
            };
            self.launch_args_1d(&args, words)?;
        } else {
            let args = WidenF16Args {
                x,
                out: o,
                n: count,
            };
            self.launch_args_1d(&args, words)?;
        }
        Ok(out)
    }
}
