//! `shaders/segment_softmax.wgsl` behind [`SegmentSoftmaxKernels`]: a thread per (dst
//! node, head), and a workgroup per (long row, head) for rows of many edges.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::device::kernels::segment_softmax::SegmentSoftmaxKernels;
use crate::device::wgpu::{BlockBuffers, Context, Kernel, SegmentSoftmaxParams, WgpuBuffer, WG};
use crate::error::Result;
use crate::graph::Block;

const SHADER: &str = include_str!("../../../../shaders/segment_softmax.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "segment_softmax",
    source: SHADER,
    entry: "segment_softmax_f32",
};
const BACKWARD: Kernel = Kernel {
    stem: "segment_softmax",
    source: SHADER,
    entry: "segment_softmax_backward_f32",
};
const FORWARD_LONG: Kernel = Kernel {
    stem: "segment_softmax",
    source: SHADER,
    entry: "segment_softmax_long_f32",
};
const BACKWARD_LONG: Kernel = Kernel {
    stem: "segment_softmax",
    source: SHADER,
    entry: "segment_softmax_long_backward_f32",
};

impl SegmentSoftmaxKernels for Context {
    fn forward(
        self: &Arc<Self>,
        block: &Block,
        heads: usize,
        x: &WgpuBuffer,
        y: &WgpuBuffer,
    ) -> Result<()> {
        wgpu_launch(
            self,
            [&FORWARD, &FORWARD_LONG],
            block,
            heads,
            &[(2, x), (3, y)],
        )
    }

    fn backward(
        self: &Arc<Self>,
        block: &Block,
        heads: usize,
        y: &WgpuBuffer,
        g: &WgpuBuffer,
        dx: &WgpuBuffer,
    ) -> Result<()> {
        let bufs = [(4, y), (5, g), (6, dx)];
        wgpu_launch(self, [&BACKWARD, &BACKWARD_LONG], block, heads, &bufs)
    }
}

/// Runs `k` (and `long`, for the rows of at least [`Context::long_row`] edges)
/// with `bufs` (all `[E, H]`) over ranges of dst
/// rows whose windows (offsets, the rows of their edges) fit one binding: a dst row's edges
/// are contiguous, so the op splits like a row-wise one and the results do not change.
fn wgpu_launch(
    ctx: &Arc<Context>,
    [k, long]: [&Kernel; 2],
    block: &Block,
    heads: usize,
    bufs: &[(u32, &WgpuBuffer)],
) -> Result<()> {
    let bb = BlockBuffers::of(ctx, block)?;
    let long_deg = ctx.long_row();
    let at = |d: usize| block.indptr[d] as usize;
    let span = |a: usize, b: usize| (b - a + 1).max((at(b) - at(a)) * heads);
    for (d0, d1) in ctx.split(k.stem, block.num_dst, span)? {
        let pw = ctx.window(&bb.indptr, d0, d1 + 1);
        let windows: Vec<_> = bufs
            .iter()
            .map(|&(slot, b)| (slot, ctx.rows_window(b, at(d0), at(d1), heads)))
            .collect();
        let mut binds: Vec<_> = windows.iter().map(|(slot, w)| (*slot, w)).collect();
        binds.push((1, &pw));
        let long_rows: Vec<u32> = (d0..d1)
            .filter(|&d| block.degree(d) as u64 >= long_deg as u64)
            .map(|d| d as u32)
            .collect();
        let words = SegmentSoftmaxParams {
            num_dst: (d1 - d0) as u32,
            heads: heads as u32,
            d0: d0 as u32,
            ptr_base: pw.base,
            e_base: windows[0].1.base,
            long_deg,
            num_long: long_rows.len() as u32,
        };
        ctx.launch_windows(k, &words, &binds, ((d1 - d0) * heads) as u64)?;
        if !long_rows.is_empty() {
            let list = ctx.upload_u32(&long_rows)?;
            let lw = ctx.window(&list, 0, long_rows.len());
            binds.push((7, &lw));
            let groups = (long_rows.len() * heads) as u64;
            ctx.launch_windows_grid(long, &words, &binds, ctx.grid(groups * WG as u64)?)?;
        }
    }
    Ok(())
}
