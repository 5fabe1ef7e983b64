//! The wgpu side of the GPU seam ([`GpuDevice`]): buffers from the pool, windows split by
//! the binding limit.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::device::wgpu::{AssignParams, Context, Kernel, WgpuBuffer};
use crate::error::Result;

impl GpuDevice for Context {
    type Buffer = WgpuBuffer;

    const BACKEND: &'static str = "wgpu";

    fn context_of(buf: &WgpuBuffer) -> &Arc<Context> {
        buf.ctx()
    }

    fn bytes(buf: &WgpuBuffer) -> u64 {
        buf.len
    }

    fn alloc(self: &Arc<Self>, bytes: u64) -> Result<WgpuBuffer> {
        WgpuBuffer::new(self, bytes)
    }

    fn zeros(self: &Arc<Self>, bytes: u64) -> Result<WgpuBuffer> {
        WgpuBuffer::zeros(self, bytes)
    }

    fn upload_u32(self: &Arc<Self>, values: &[u32]) -> Result<WgpuBuffer> {
        WgpuBuffer::from_bytes(self, bytemuck::cast_slice(values))
    }

    fn fill(self: &Arc<Self>, n: usize, word: u32) -> Result<WgpuBuffer> {
        WgpuBuffer::filled(self, n, word)
    }

    fn read(buf: &WgpuBuffer) -> Result<Vec<u8>> {
        buf.read()
    }

    fn host_u32(buf: &WgpuBuffer) -> Option<Arc<Vec<u32>>> {
        buf.host_u32()
    }

    fn split(
        &self,
        what: &str,
        n: usize,
        span: impl Fn(usize, usize) -> usize,
    ) -> Result<Vec<(usize, usize)>> {
        Context::split(self, what, n, span)
    }
}

/// The kernel of [`WgpuBuffer::filled`].
const FILL: Kernel = Kernel {
    stem: "assign",
    source: include_str!("../../../shaders/assign.wgsl"),
    entry: "fill_u32",
};

impl WgpuBuffer {
    /// A buffer of `n` 4-byte values, each the 32-bit `word` (an f32's bits or a u32),
    /// written by `fill_u32` of `shaders/assign.wgsl`; zeros are cleared, not filled.
    pub fn filled(ctx: &Arc<Context>, n: usize, word: u32) -> Result<WgpuBuffer> {
        let bytes = (n * 4) as u64;
        if word == 0 {
            return Self::zeros(ctx, bytes);
        }
        let out = Self::new(ctx, bytes)?;
        let params = AssignParams {
            word,
            ..Default::default()
        };
        ctx.launch_chunked(&FILL, params, &[(1, &out)], &[], n as u64)?;
        Ok(out)
    }
}
