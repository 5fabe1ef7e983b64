//! `shaders/concat.wgsl` behind [`ConcatKernels`]: rows by one buffer copy per input,
//! columns by one strided-copy kernel per input over ranges of rows whose windows fit one
//! binding.

use std::sync::Arc;

use crate::device::kernels::concat::ConcatKernels;
use crate::device::wgpu::{ConcatParams, Context, Kernel, WgpuBuffer};
use crate::error::Result;

const COLS: Kernel = Kernel {
    stem: "concat",
    source: include_str!("../../../../shaders/concat.wgsl"),
    entry: "concat_cols_u32",
};
/// Rows: one buffer copy per input; columns: one strided-copy kernel per input, over ranges
/// of rows whose windows fit one binding. Values move as 32-bit words, so f32 and u32 alike.
impl ConcatKernels for Context {
    fn concat(
        self: &Arc<Self>,
        bufs: &[&WgpuBuffer],
        shapes: &[(usize, usize)],
        parts: &[(usize, usize)],
        dim: usize,
        (rows, cols): (usize, usize),
    ) -> Result<WgpuBuffer> {
        let ctx = self;
        let out = WgpuBuffer::new(ctx, (rows * cols * 4) as u64)?;
        for ((b, &(r, c)), &(start, _)) in bufs.iter().zip(shapes).zip(parts) {
            if dim == 0 {
                ctx.copy(b, 0, &out, (start * cols * 4) as u64, (r * c * 4) as u64)?;
            } else if c > 0 {
                // Ranges of rows whose input and output windows fit one binding.
                let dst = |r0: usize, r1: usize| (r0 * cols + start, (r1 - 1) * cols + start + c);
                let span = |r0: usize, r1: usize| {
                    let (lo, hi) = dst(r0, r1);
                    (hi - lo).max((r1 - r0) * c)
                };
                for (r0, r1) in ctx.split("concat", r, span)? {
                    let (lo, hi) = dst(r0, r1);
                    let (sw, dw) = (ctx.rows_window(b, r0, r1, c), ctx.window(&out, lo, hi));
                    let params = ConcatParams {
                        n: ((r1 - r0) * c) as u32,
                        width: c as u32,
                        dst_cols: cols as u32,
                        col0: start as u32,
                        r0: r0 as u32,
                        src_base: sw.base,
                        dst_base: dw.base,
                    };
                    ctx.launch_windows(
                        &COLS,
                        &params,
                        &[(1, &sw), (2, &dw)],
                        ((r1 - r0) * c) as u64,
                    )?;
                }
            }
        }
        Ok(out)
    }
}
