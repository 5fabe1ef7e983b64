//! `shaders/widen.wgsl` behind [`WidenKernels`]: a thread per word (two values), in chunks
//! aligned for both bindings.

use std::sync::Arc;

use crate::device::gpu::u32_count;
use crate::device::kernels::widen::WidenKernels;
use crate::device::wgpu::{Context, Kernel, WgpuBuffer, WidenParams};
use crate::error::Result;

const OP: &str = "widen";
const SHADER: &str = include_str!("../../../../shaders/widen.wgsl");
const WGPU_F16: Kernel = Kernel {
    stem: "widen",
    source: SHADER,
    entry: "widen_f16_f32",
};
const WGPU_BF16: Kernel = Kernel {
    stem: "widen",
    source: SHADER,
    entry: "widen_bf16_f32",
};

impl WidenKernels for Context {
    fn widen(self: &Arc<Self>, x: &WgpuBuffer, n: usize, bf16: bool) -> Result<WgpuBuffer> {
        let ctx = self;
        let out = WgpuBuffer::new(ctx, (n * 4) as u64)?;
        let kernel = if bf16 { &WGPU_BF16 } else { &WGPU_F16 };
        u32_count(OP, "x", n)?;
        // Chunks of whole words, aligned for both bindings: x's range starts at 4w and
        // out's at 8w, both multiples of the offset alignment when w is.
        let align = (ctx.limits.min_storage_buffer_offset_alignment as usize / 4).max(1);
        let step = ((ctx.chunk_bytes() as usize / 8) / align * align).max(align);
        let words = n.div_ceil(2);
        for w0 in (0..words).step_by(step) {
            let w1 = (w0 + step).min(words);
            let values = (2 * w1).min(n) - 2 * w0;
            let ranges = [
                (1, x, (w0 * 4) as u64, ((w1 - w0) * 4) as u64),
                (2, &out, (w0 * 8) as u64, (values * 4) as u64),
            ];
            let grid = ctx.grid((w1 - w0) as u64)?;
            let params = WidenParams { n: values as u32 };
            ctx.launch_ranges(kernel, &params, &ranges, grid)?;
        }
        Ok(out)
    }
}
