//! `shaders/lstm_cell.wgsl` behind [`LstmCellKernels`]: a thread per (node, unit), in
//! ranges of nodes whose windows fit one binding.

use std::sync::Arc;

use crate::device::kernels::lstm_cell::LstmCellKernels;
use crate::device::wgpu::{Context, Kernel, LstmCellParams, WgpuBuffer};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/lstm_cell.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "lstm_cell",
    source: SHADER,
    entry: "lstm_cell_forward_f32",
};
const BACKWARD: Kernel = Kernel {
    stem: "lstm_cell",
    source: SHADER,
    entry: "lstm_cell_backward_f32",
};

impl LstmCellKernels for Context {
    fn lstm_cell(
        self: &Arc<Self>,
        z: &WgpuBuffer,
        c: &WgpuBuffer,
        n: usize,
        h: usize,
    ) -> Result<(WgpuBuffer, WgpuBuffer)> {
        let ctx = self;
        let out = WgpuBuffer::new(ctx, (n * 2 * h * 4) as u64)?;
        let acts = WgpuBuffer::new(ctx, (n * 4 * h * 4) as u64)?;
        launch_rows(
            ctx,
            &FORWARD,
            n,
            h,
            &[(1, z, 4), (2, c, 1), (3, &out, 2), (4, &acts, 4)],
        )?;
        Ok((out, acts))
    }

    fn lstm_cell_backward(
        self: &Arc<Self>,
        a: &WgpuBuffer,
        c: &WgpuBuffer,
        g: &WgpuBuffer,
        n: usize,
        h: usize,
    ) -> Result<(WgpuBuffer, WgpuBuffer)> {
        let ctx = self;
        let dz = WgpuBuffer::new(ctx, (n * 4 * h * 4) as u64)?;
        let dc = WgpuBuffer::new(ctx, (n * h * 4) as u64)?;
        let bufs = [(5, a, 4), (2, c, 1), (6, g, 2), (7, &dz, 4), (8, &dc, 1)];
        launch_rows(ctx, &BACKWARD, n, h, &bufs)?;
        Ok((dz, dc))
    }
}

/// Runs a cell kernel over `n` nodes in ranges whose windows fit one binding; each buffer
/// comes with its width in units of `H` (4, 1 or 2), which picks its window's base word.
fn launch_rows(
    ctx: &Context,
    k: &Kernel,
    n: usize,
    h: usize,
    bufs: &[(u32, &WgpuBuffer, usize)],
) -> Result<()> {
    for (r0, r1) in ctx.split(k.stem, n, |a, b| (b - a) * 4 * h)? {
        let windows: Vec<_> = bufs
            .iter()
            .map(|&(slot, b, w)| (slot, w, ctx.rows_window(b, r0, r1, w * h)))
            .collect();
        let base = |w: usize| windows.iter().find(|x| x.1 == w).map_or(0, |x| x.2.base);
        let words = LstmCellParams {
            n: (r1 - r0) as u32,
            h: h as u32,
            r0: r0 as u32,
            base4: base(4),
            base1: base(1),
            base2: base(2),
        };
        let binds: Vec<_> = windows.iter().map(|(slot, _, w)| (*slot, w)).collect();
        ctx.launch_windows(k, &words, &binds, ((r1 - r0) * h) as u64)?;
    }
    Ok(())
}
