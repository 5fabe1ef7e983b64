//! The CUDA side of the GPU seam ([`GpuDevice`]): buffers from the stream-ordered pool; a
//! kernel argument is a whole device pointer, so work is never split by binding size.

use std::sync::Arc;

use crate::device::cuda::args::FillArgs;
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::GpuDevice;
use crate::error::{Error, Result};

impl GpuDevice for Context {
    type Buffer = CudaBuffer;

    const BACKEND: &'static str = "cuda";

    fn context_of(buf: &CudaBuffer) -> &Arc<Context> {
        buf.ctx()
    }

    fn bytes(buf: &CudaBuffer) -> u64 {
        buf.len
    }

    fn alloc(self: &Arc<Self>, bytes: u64) -> Result<CudaBuffer> {
        CudaBuffer::new(self, bytes)
    }

    fn zeros(self: &Arc<Self>, bytes: u64) -> Result<CudaBuffer> {
        CudaBuffer::zeros(self, bytes)
    }

    fn upload_u32(self: &Arc<Self>, values: &[u32]) -> Result<CudaBuffer> {
        CudaBuffer::from_bytes(self, bytemuck::cast_slice(values))
    }

    fn fill(self: &Arc<Self>, n: usize, word: u32) -> Result<CudaBuffer> {
        CudaBuffer::filled(self, n, word)
    }

    fn read(buf: &CudaBuffer) -> Result<Vec<u8>> {
        buf.read()
    }

    fn host_u32(buf: &CudaBuffer) -> Option<Arc<Vec<u32>>> {
        buf.host_u32()
    }

    /// One range: a kernel argument is a device pointer to the whole buffer.
    fn split(
        &self,
        _what: &str,
        n: usize,
        _span: impl Fn(usize, usize) -> usize,
    ) -> Result<Vec<(usize, usize)>> {
        Ok(if n == 0 { Vec::new() } else { vec![(0, n)] })
    }
}

impl CudaBuffer {
    /// A buffer of `n` 4-byte values, each the 32-bit `word` (an f32's bits or a u32),
    /// written by `fill_u32` of `kernels/assign.cu`; zeros are cleared by a memset.
    pub fn filled(ctx: &Arc<Context>, n: usize, word: u32) -> Result<CudaBuffer> {
        let bytes = (n * 4) as u64;
        if word == 0 {
            return Self::zeros(ctx, bytes);
        }
        let count = u32::try_from(n).map_err(|_| {
            Error::invalid(format!(
                "fill: {n} values do not fit the kernel's u32 count"
            ))
        })?;
        let out = Self::new(ctx, bytes)?;
        let args = FillArgs {
            out: (&out).into(),
            word,
            n: count,
        };
        ctx.launch_args_1d(&args, n as u64)?;
        Ok(out)
    }
}
