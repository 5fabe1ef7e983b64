//! `shaders/slice.wgsl` behind [`SliceKernels`]: rows by one buffer copy, columns and the
//! padding by a strided kernel over ranges of rows whose windows fit one binding.

use std::sync::Arc;

use crate::device::kernels::slice::SliceKernels;
use crate::device::wgpu::{Context, Kernel, SliceParams, WgpuBuffer};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/slice.wgsl");
const COLS: Kernel = Kernel {
    stem: "slice",
    source: SHADER,
    entry: "slice_cols_u32",
};
const PAD: Kernel = Kernel {
    stem: "slice",
    source: SHADER,
    entry: "slice_pad_f32",
};

impl SliceKernels for Context {
    fn slice(
        self: &Arc<Self>,
        b: &WgpuBuffer,
        (r, c): (usize, usize),
        dim: usize,
        (start, len): (usize, usize),
    ) -> Result<WgpuBuffer> {
        const OP: &str = "slice";
        let out_shape = if dim == 0 { [len, c] } else { [r, len] };
        let ctx = self;
        let n = out_shape[0] * out_shape[1];
        let out = WgpuBuffer::new(ctx, (n * 4) as u64)?;
        if dim == 0 {
            // Rows are contiguous: one copy.
            ctx.copy(b, (start * c * 4) as u64, &out, 0, (n * 4) as u64)?;
        } else if len > 0 {
            // Ranges of output rows whose windows (len values per row out, the
            // strided columns in) fit one binding.
            let src = |r0: usize, r1: usize| (r0 * c + start, (r1 - 1) * c + start + len);
            let span = |r0: usize, r1: usize| {
                let (lo, hi) = src(r0, r1);
                (hi - lo).max((r1 - r0) * len)
            };
            for (r0, r1) in ctx.split(OP, r, span)? {
                let (lo, hi) = src(r0, r1);
                let (sw, dw) = (ctx.window(b, lo, hi), ctx.rows_window(&out, r0, r1, len));
                let params = SliceParams {
                    n: ((r1 - r0) * len) as u32,
                    base: (r0 * len) as u32,
                    c: c as u32,
                    start: start as u32,
                    len: len as u32,
                    dim: 1,
                    src_base: sw.base,
                    dst_base: dw.base,
                };
                let binds = [(1, &sw), (2, &dw)];
                ctx.launch_windows(&COLS, &params, &binds, ((r1 - r0) * len) as u64)?;
            }
        }
        Ok(out)
    }

    fn slice_pad(
        self: &Arc<Self>,
        b: &WgpuBuffer,
        (gr, gc): (usize, usize),
        dim: usize,
        start: usize,
        (r, c): (usize, usize),
    ) -> Result<WgpuBuffer> {
        const OP: &str = "slice_backward";
        let ctx = self;
        let out = WgpuBuffer::new(ctx, (r * c * 4) as u64)?;
        let glen = if dim == 0 { gr } else { gc };
        // Ranges of rows of the output; the window of g those rows read.
        let g_range = |r0: usize, r1: usize| {
            if dim == 1 {
                (r0 * gc, r1 * gc)
            } else {
                let (a, b) = (r0.clamp(start, start + gr), r1.clamp(start, start + gr));
                ((a - start) * gc, (b - start) * gc)
            }
        };
        let span = |r0: usize, r1: usize| {
            let (lo, hi) = g_range(r0, r1);
            (hi - lo).max((r1 - r0) * c)
        };
        for (r0, r1) in ctx.split(OP, r, span)? {
            let (lo, hi) = g_range(r0, r1);
            let (gw, ow) = (ctx.window(b, lo, hi), ctx.rows_window(&out, r0, r1, c));
            let params = SliceParams {
                n: ((r1 - r0) * c) as u32,
                base: (r0 * c) as u32,
                c: c as u32,
                start: start as u32,
                len: glen as u32,
                dim: dim as u32,
                src_base: gw.base,
                dst_base: ow.base,
            };
            ctx.launch_windows(&PAD, &params, &[(3, &gw), (4, &ow)], ((r1 - r0) * c) as u64)?;
        }
        Ok(out)
    }
}
