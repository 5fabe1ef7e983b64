//! The CUDA side of the GPU seam ([`GpuDevice`]): buffers from the stream-ordered pool; a
//! kernel argument is a whole device pointer, so work is never split by binding size.

use std::sync::Arc;

use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::GpuDevice;
use crate::error::Result;

impl GpuDevice for Context {
    type Buffer = CudaBuffer;

    const BACKEND: &'static str = "cuda";

    fn context_of(buf: &CudaBuffer) -> &Arc<Context> {
        buf.ctx()
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
