//! `shaders/segment_max.wgsl` behind [`SegmentMaxKernels`]: a group of threads per output
//! row (dst rows forward, src rows backward), lanes over features, four with `vec4` loads
//! when the windows allow.

use std::sync::Arc;

use crate::device::kernels::segment_max::SegmentMaxKernels;
use crate::device::wgpu::{BlockBuffers, Context, Kernel, SegmentMaxParams, WgpuBuffer};
use crate::error::Result;
use crate::graph::Block;

const OP: &str = "segment_max";
const SHADER: &str = include_str!("../../../../shaders/segment_max.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "segment_max",
    source: SHADER,
    entry: "segment_max_f32",
};
const FORWARD4: Kernel = Kernel {
    stem: "segment_max",
    source: SHADER,
    entry: "segment_max_vec4_f32",
};
const BACKWARD: Kernel = Kernel {
    stem: "segment_max",
    source: SHADER,
    entry: "segment_max_backward_f32",
};
const BACKWARD4: Kernel = Kernel {
    stem: "segment_max",
    source: SHADER,
    entry: "segment_max_backward_vec4_f32",
};

/// wgpu: a group of threads per output row, over ranges of output rows whose windows fit
/// one binding, each once per tile of the rows read at arbitrary positions.
impl SegmentMaxKernels for Context {
    fn forward(
        self: &Arc<Self>,
        b: &Block,
        f: usize,
        x: &WgpuBuffer,
        out: &WgpuBuffer,
        arg: &WgpuBuffer,
    ) -> Result<()> {
        let bb = BlockBuffers::of(self, b)?;
        let at = |d: usize| b.indptr[d] as usize;
        let tiles = self.tiles(OP, b.num_src, |s, e| (e - s) * f)?;
        for (d0, d1) in self.split(OP, b.num_dst, |s, e| span(at, s, e, f))? {
            let pw = self.window(&bb.indptr, d0, d1 + 1);
            let ew = self.window(&bb.indices, at(d0), at(d1));
            let [ow, aw] = [out, arg].map(|t| self.rows_window(t, d0, d1, f));
            for (i, &(t0, t1)) in tiles.iter().enumerate() {
                let xw = self.rows_window(x, t0, t1, f);
                // Four features per load when rows and windows start on a multiple of 4 (an
                // empty tile binds one word, too short for a vec4).
                let vec4 = f % 4 == 0 && [&xw, &ow, &aw].iter().all(|w| w.base % 4 == 0) && t1 > t0;
                let (lanes, grid) = self.row_groups(d1 - d0, if vec4 { f / 4 } else { f })?;
                let words = words(
                    (d0, d1),
                    f,
                    [pw.base, ew.base, ow.base],
                    (t0, t1),
                    xw.base,
                    i,
                    lanes,
                );
                let (k, slots) = if vec4 {
                    (&FORWARD4, [12, 13, 14])
                } else {
                    (&FORWARD, [3, 4, 5])
                };
                let binds = [
                    (1, &pw),
                    (2, &ew),
                    (slots[0], &xw),
                    (slots[1], &ow),
                    (slots[2], &aw),
                ];
                self.launch_windows_grid(k, &words, &binds, grid)?;
            }
        }
        Ok(())
    }

    fn backward(
        self: &Arc<Self>,
        b: &Block,
        f: usize,
        arg: &WgpuBuffer,
        g: &WgpuBuffer,
        grad_x: &WgpuBuffer,
    ) -> Result<()> {
        let bb = BlockBuffers::of(self, b)?;
        let at = |u: usize| b.t_indptr[u] as usize;
        let tiles = self.tiles(OP, b.num_dst, |s, e| (e - s) * f)?;
        for (u0, u1) in self.split(OP, b.num_src, |s, e| span(at, s, e, f))? {
            let pw = self.window(&bb.t_indptr, u0, u1 + 1);
            let [dw, ew] = [&bb.t_dst, &bb.t_edges].map(|t| self.window(t, at(u0), at(u1)));
            let ow = self.rows_window(grad_x, u0, u1, f);
            for (i, &(t0, t1)) in tiles.iter().enumerate() {
                let [gw, aw] = [g, arg].map(|t| self.rows_window(t, t0, t1, f));
                // As forward: four features per load when every window starts on a multiple
                // of 4.
                let vec4 = f % 4 == 0 && [&gw, &aw, &ow].iter().all(|w| w.base % 4 == 0) && t1 > t0;
                let (lanes, grid) = self.row_groups(u1 - u0, if vec4 { f / 4 } else { f })?;
                let words = words(
                    (u0, u1),
                    f,
                    [pw.base, dw.base, ow.base],
                    (t0, t1),
                    gw.base,
                    i,
                    lanes,
                );
                let (k, slots) = if vec4 {
                    (&BACKWARD4, [15, 16, 17])
                } else {
                    (&BACKWARD, [9, 10, 11])
                };
                let binds = [
                    (6, &pw),
                    (7, &dw),
                    (8, &ew),
                    (slots[0], &aw),
                    (slots[1], &gw),
                    (slots[2], &ow),
                ];
                self.launch_windows_grid(k, &words, &binds, grid)?;
            }
        }
        Ok(())
    }
}

/// The largest window rows `s..e` of a CSR (offsets `at`) bind: offsets, edges, `f` values
/// per row.
fn span(at: impl Fn(usize) -> usize, s: usize, e: usize, f: usize) -> usize {
    (e - s + 1).max(at(e) - at(s)).max((e - s) * f)
}

/// The kernels' parameters: output rows, the windows' first elements (offsets, edges,
/// outputs), the tile and its window's first element, and whether it is the first tile.
fn words(
    rows: (usize, usize),
    f: usize,
    [ptr_base, edge_base, out_base]: [u32; 3],
    tile: (usize, usize),
    in_base: u32,
    i: usize,
    lanes: u32,
) -> SegmentMaxParams {
    let (r0, r1) = rows;
    SegmentMaxParams {
        rows: (r1 - r0) as u32,
        f: f as u32,
        row0: r0 as u32,
        ptr_base,
        edge_base,
        out_base,
        t0: tile.0 as u32,
        t1: tile.1 as u32,
        in_base,
        first: (i == 0) as u32,
        lanes,
    }
}
