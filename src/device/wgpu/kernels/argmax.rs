//! `shaders/argmax.wgsl` behind [`ArgmaxKernels`]: a workgroup per row, in ranges of rows
//! that fit one binding.

use std::sync::Arc;

use crate::device::kernels::argmax::ArgmaxKernels;
use crate::device::wgpu::{ArgmaxParams, Context, Kernel, WgpuBuffer, WG};
use crate::error::Result;

const KERNEL: Kernel = Kernel {
    stem: "argmax",
    source: include_str!("../../../../shaders/argmax.wgsl"),
    entry: "argmax_rows_f32",
};

impl ArgmaxKernels for Context {
    fn argmax_rows(
        self: &Arc<Self>,
        op: &'static str,
        x: &WgpuBuffer,
        r: usize,
        c: usize,
    ) -> Result<WgpuBuffer> {
        let ctx = self;
        let out = WgpuBuffer::new(ctx, (r * 4) as u64)?;
        // One workgroup per row, in ranges of rows that fit one binding.
        for (r0, r1) in ctx.split(op, r, |a, b| (b - a) * c)? {
            let (xw, ow) = (ctx.rows_window(x, r0, r1, c), ctx.window(&out, r0, r1));
            let params = ArgmaxParams {
                r: (r1 - r0) as u32,
                c: c as u32,
                r0: r0 as u32,
                x_base: xw.base,
                out_base: ow.base,
            };
            let grid = ctx.grid((r1 - r0) as u64 * WG as u64)?;
            ctx.launch_windows_grid(&KERNEL, &params, &[(1, &xw), (2, &ow)], grid)?;
        }
        Ok(out)
    }
}
