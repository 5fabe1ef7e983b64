//! `shaders/segment_sum.wgsl` behind [`SegmentSumKernels`]: a group of threads owns an
//! output row and walks its edges, lanes over features (four with `vec4` loads), over
//! ranges of output rows whose windows fit one binding, each once per tile of the input.

use std::sync::Arc;

use crate::device::kernels::segment_sum::{SegmentPass, SegmentSumKernels};
use crate::device::wgpu::{BlockBuffers, Context, Kernel, SegmentSumParams, WgpuBuffer};
use crate::error::Result;
use crate::graph::Block;

const SHADER: &str = include_str!("../../../../shaders/segment_sum.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "segment_sum",
    source: SHADER,
    entry: "segment_sum_f32",
};
const FORWARD4: Kernel = Kernel {
    stem: "segment_sum",
    source: SHADER,
    entry: "segment_sum_vec4_f32",
};
const BACKWARD: Kernel = Kernel {
    stem: "segment_sum",
    source: SHADER,
    entry: "segment_sum_backward_f32",
};
const BACKWARD4: Kernel = Kernel {
    stem: "segment_sum",
    source: SHADER,
    entry: "segment_sum_backward_vec4_f32",
};
/// Runs the forward (`[num_src, f]` in, `[num_dst, f]` out) or backward (the reverse)
/// kernel on `input`, over ranges of output rows whose windows (offsets, edge range, output
/// rows) fit one binding, each once per tile of the input's rows (see the shader).
impl SegmentSumKernels for Context {
    fn segment_sum(
        self: &Arc<Self>,
        op: &'static str,
        block: &Block,
        pass: SegmentPass,
        input: &WgpuBuffer,
    ) -> Result<WgpuBuffer> {
        launch(self, op, block, pass, input)
    }
}

fn launch(
    ctx: &Arc<Context>,
    op: &'static str,
    block: &Block,
    pass: SegmentPass,
    input: &WgpuBuffer,
) -> Result<WgpuBuffer> {
    let SegmentPass {
        forward,
        mean,
        f,
        rows_in,
        rows_out,
        n,
    } = pass;
    let bb = BlockBuffers::of(ctx, block)?;
    let out = WgpuBuffer::new(ctx, n as u64 * 4)?;
    if n == 0 {
        return Ok(out);
    }
    let (ptr, edges) = if forward {
        (&block.indptr, &bb.indices)
    } else {
        (&block.t_indptr, &bb.t_dst)
    };
    let at = |r: usize| ptr[r] as usize;
    let span = |a: usize, b: usize| (b - a + 1).max(at(b) - at(a)).max((b - a) * f);
    // Backward, a tile of g's rows also binds the offsets its in-degrees come from.
    let tiles = ctx.tiles(op, rows_in, |a, b| ((b - a) * f).max(b - a + 1))?;
    for (r0, r1) in ctx.split(op, rows_out, span)? {
        let ow = ctx.rows_window(&out, r0, r1, f);
        let ew = ctx.window(edges, at(r0), at(r1));
        let (pw, tw) = if forward {
            (
                ctx.window(&bb.indptr, r0, r1 + 1),
                ctx.window(&bb.t_indptr, 0, 0),
            )
        } else {
            (
                ctx.window(&bb.indptr, 0, 0),
                ctx.window(&bb.t_indptr, r0, r1 + 1),
            )
        };
        for (i, &(t0, t1)) in tiles.iter().enumerate() {
            let xw = ctx.rows_window(input, t0, t1, f);
            // Backward, the in-degrees of the tile's dst rows.
            let dw = ctx.window(&bb.indptr, t0, t1 + 1);
            let pw = if forward { &pw } else { &dw };
            // Four features per load when rows and windows start on a multiple of 4 (an
            // empty tile binds one word, too short for a vec4).
            let vec4 = f % 4 == 0 && xw.base % 4 == 0 && ow.base % 4 == 0 && t1 > t0;
            let (lanes, grid) = ctx.row_groups(r1 - r0, if vec4 { f / 4 } else { f })?;
            let words = SegmentSumParams {
                rows: (r1 - r0) as u32,
                f: f as u32,
                mean: mean as u32,
                row0: r0 as u32,
                ptr_base: pw.base,
                tptr_base: tw.base,
                edge_base: ew.base,
                out_base: ow.base,
                t0: t0 as u32,
                t1: t1 as u32,
                in_base: xw.base,
                first: (i == 0) as u32,
                last: (i + 1 == tiles.len()) as u32,
                lanes,
            };
            let (k, x_slot, out_slot) = match (forward, vec4) {
                (true, false) => (&FORWARD, 3, 4),
                (true, true) => (&FORWARD4, 9, 10),
                (false, false) => (&BACKWARD, 7, 8),
                (false, true) => (&BACKWARD4, 11, 12),
            };
            if forward {
                let binds = [(1, pw), (2, &ew), (x_slot, &xw), (out_slot, &ow)];
                ctx.launch_windows_grid(k, &words, &binds, grid)?;
            } else {
                let binds = [(1, pw), (5, &tw), (6, &ew), (x_slot, &xw), (out_slot, &ow)];
                ctx.launch_windows_grid(k, &words, &binds, grid)?;
            }
        }
    }
    Ok(out)
}
