//! `shaders/segment_weighted_sum.wgsl` behind [`SegmentWeightedSumKernels`]: the row
//! kernels give a group of threads each output row, over ranges of output rows whose
//! windows fit one binding, each once per tile of the tensors read at arbitrary rows.

use std::sync::Arc;

use crate::device::kernels::segment_weighted_sum::{Dims, SegmentWeightedSumKernels};
use crate::device::wgpu::{
    BlockBuffers, Context, Kernel, SegmentWeightedSumParams, WgpuBuffer, Window,
};
use crate::error::Result;
use crate::graph::Block;

const OP: &str = "segment_weighted_sum";
const SHADER: &str = include_str!("../../../../shaders/segment_weighted_sum.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_f32",
};
const BACKWARD_X: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_backward_x_f32",
};
const FORWARD4: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_vec4_f32",
};
const BACKWARD_X4: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_backward_x_vec4_f32",
};
const BACKWARD_A: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_backward_a_f32",
};
/// The kernels' parameters: `rest` with the output rows `r0..r1` and the dimensions
/// filled in (see the shader).
fn params(
    dims: Dims,
    (r0, r1): (usize, usize),
    rest: SegmentWeightedSumParams,
) -> SegmentWeightedSumParams {
    let [rows, cols, heads, per_head, row0] =
        [r1 - r0, dims.cols, dims.heads, dims.per_head, r0].map(|v| v as u32);
    SegmentWeightedSumParams {
        rows,
        cols,
        heads,
        per_head,
        row0,
        ..rest
    }
}

/// Whether the wgpu row kernels read four columns at once: each head's columns split
/// into vec4s, and every row window starts on a multiple of 4 (`nonempty`: an empty
/// tile binds one word, too short for a vec4).
fn use_vec4(dims: Dims, windows: &[&Window], nonempty: bool) -> bool {
    dims.per_head % 4 == 0 && windows.iter().all(|w| w.base % 4 == 0) && nonempty
}

/// The largest window rows `s..e` of a CSR (offsets `at`) bind: offsets, edges of `width`
/// values, rows of `cols` values.
fn span(at: impl Fn(usize) -> usize, s: usize, e: usize, width: usize, cols: usize) -> usize {
    (e - s + 1)
        .max((at(e) - at(s)) * width.max(1))
        .max((e - s) * cols)
}

/// wgpu: the row kernels give a group of threads each output row. Every kernel runs over
/// ranges of output rows whose windows fit one binding, each once per tile of the tensors
/// it reads at arbitrary rows.
impl SegmentWeightedSumKernels for Context {
    /// The forward kernel over ranges of dst rows whose windows (offsets, edges and their
    /// weights, output rows) fit one binding, each once per tile of `x`'s rows.
    fn forward(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &WgpuBuffer,
        a: &WgpuBuffer,
        out: &WgpuBuffer,
    ) -> Result<()> {
        let ctx = self;
        let bb = BlockBuffers::of(ctx, b)?;
        let Dims { cols, heads, .. } = dims;
        let at = |d: usize| b.indptr[d] as usize;
        let tiles = ctx.tiles(OP, b.num_src, |s, e| (e - s) * cols)?;
        for range @ (d0, d1) in ctx.split(OP, b.num_dst, |s, e| span(at, s, e, heads, cols))? {
            let pw = ctx.window(&bb.indptr, d0, d1 + 1);
            let ew = ctx.window(&bb.indices, at(d0), at(d1));
            let aw = ctx.rows_window(a, at(d0), at(d1), heads);
            let ow = ctx.rows_window(out, d0, d1, cols);
            for (i, &(t0, t1)) in tiles.iter().enumerate() {
                let xw = ctx.rows_window(x, t0, t1, cols);
                let vec4 = use_vec4(dims, &[&xw, &ow], t1 > t0);
                let (lanes, grid) = ctx.row_groups(d1 - d0, if vec4 { cols / 4 } else { cols })?;
                let (t0, t1) = (t0 as u32, t1 as u32);
                let rest = SegmentWeightedSumParams {
                    ptr_base: pw.base,
                    edge_base: ew.base,
                    w_base: aw.base,
                    out_base: ow.base,
                    t0,
                    t1,
                    in_base: xw.base,
                    first: first(i),
                    lanes,
                    ..Default::default()
                };
                let (k, [xs, os]) = if vec4 {
                    (&FORWARD4, [12, 13])
                } else {
                    (&FORWARD, [3, 5])
                };
                let binds = [(1, &pw), (2, &ew), (xs, &xw), (4, &aw), (os, &ow)];
                ctx.launch_windows_grid(k, &params(dims, range, rest), &binds, grid)?;
            }
        }
        Ok(())
    }

    /// `x̄` over ranges of src rows whose windows (transposed offsets and edges, output rows)
    /// fit one binding, each once per pair of tiles of `ḡ`'s rows and `a`'s rows (visited in
    /// order, so the sums keep their order).
    fn backward_x(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        a: &WgpuBuffer,
        g: &WgpuBuffer,
        dx: &WgpuBuffer,
    ) -> Result<()> {
        let ctx = self;
        let bb = BlockBuffers::of(ctx, b)?;
        let Dims { cols, heads, .. } = dims;
        let at = |u: usize| b.t_indptr[u] as usize;
        let g_tiles = ctx.tiles(OP, b.num_dst, |s, e| (e - s) * cols)?;
        let a_tiles = ctx.tiles(OP, b.num_edges(), |s, e| (e - s) * heads)?;
        for range @ (u0, u1) in ctx.split(OP, b.num_src, |s, e| span(at, s, e, 1, cols))? {
            let pw = ctx.window(&bb.t_indptr, u0, u1 + 1);
            let [dw, ew] = [&bb.t_dst, &bb.t_edges].map(|t| ctx.window(t, at(u0), at(u1)));
            let ow = ctx.rows_window(dx, u0, u1, cols);
            for (i, &(t0, t1)) in g_tiles.iter().enumerate() {
                let gw = ctx.rows_window(g, t0, t1, cols);
                let vec4 = use_vec4(dims, &[&gw, &ow], t1 > t0);
                let (lanes, grid) = ctx.row_groups(u1 - u0, if vec4 { cols / 4 } else { cols })?;
                let (k, [gs, os]) = if vec4 {
                    (&BACKWARD_X4, [14, 15])
                } else {
                    (&BACKWARD_X, [9, 10])
                };
                for (j, &(a0, a1)) in a_tiles.iter().enumerate() {
                    let aw = ctx.rows_window(a, a0, a1, heads);
                    let [t0, t1, a0, a1] = [t0, t1, a0, a1].map(|v| v as u32);
                    let f = first(i + j);
                    let rest = SegmentWeightedSumParams {
                        ptr_base: pw.base,
                        edge_base: dw.base,
                        out_base: ow.base,
                        t0,
                        t1,
                        in_base: gw.base,
                        a0,
                        a1,
                        a_base: aw.base,
                        first: f,
                        lanes,
                        ..Default::default()
                    };
                    let binds = [(6, &pw), (7, &dw), (8, &ew), (4, &aw), (gs, &gw), (os, &ow)];
                    let p = params(dims, range, rest);
                    ctx.launch_windows_grid(k, &p, &binds, grid)?;
                }
            }
        }
        Ok(())
    }

    /// `ā` over ranges of dst rows whose windows (offsets, edges and their gradients, rows of
    /// `ḡ`) fit one binding, each once per tile of `x`'s rows; one thread per (edge, head).
    fn backward_a(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &WgpuBuffer,
        g: &WgpuBuffer,
        da: &WgpuBuffer,
    ) -> Result<()> {
        let ctx = self;
        let bb = BlockBuffers::of(ctx, b)?;
        let Dims { cols, heads, .. } = dims;
        let at = |d: usize| b.indptr[d] as usize;
        let tiles = ctx.tiles(OP, b.num_src, |s, e| (e - s) * cols)?;
        for range @ (d0, d1) in ctx.split(OP, b.num_dst, |s, e| span(at, s, e, heads, cols))? {
            let pw = ctx.window(&bb.indptr, d0, d1 + 1);
            let ew = ctx.window(&bb.indices, at(d0), at(d1));
            let gw = ctx.rows_window(g, d0, d1, cols);
            let ow = ctx.rows_window(da, at(d0), at(d1), heads);
            for &(t0, t1) in &tiles {
                let xw = ctx.rows_window(x, t0, t1, cols);
                let (t0, t1) = (t0 as u32, t1 as u32);
                let rest = SegmentWeightedSumParams {
                    ptr_base: pw.base,
                    edge_base: ew.base,
                    w_base: gw.base,
                    out_base: ow.base,
                    t0,
                    t1,
                    in_base: xw.base,
                    ..Default::default()
                };
                let binds = [(1, &pw), (2, &ew), (3, &xw), (9, &gw), (11, &ow)];
                let n = ((at(d1) - at(d0)) * heads) as u64;
                ctx.launch_windows(&BACKWARD_A, &params(dims, range, rest), &binds, n)?;
            }
        }
        Ok(())
    }
}

/// The `first` flag of the `i`-th tile (pair of tiles) visited.
fn first(i: usize) -> u32 {
    (i == 0) as u32
}
