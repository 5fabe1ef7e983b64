//! `shaders/log_softmax.wgsl` behind [`LogSoftmaxKernels`]: a workgroup per row, in ranges
//! of rows that fit one binding.

use std::sync::Arc;

use crate::device::kernels::log_softmax::LogSoftmaxKernels;
use crate::device::wgpu::{Context, Kernel, LogSoftmaxParams, WgpuBuffer, WG};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/log_softmax.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "log_softmax",
    source: SHADER,
    entry: "log_softmax_f32",
};
const BACKWARD: Kernel = Kernel {
    stem: "log_softmax",
    source: SHADER,
    entry: "log_softmax_backward_f32",
};

impl LogSoftmaxKernels for Context {
    fn log_softmax(
        self: &Arc<Self>,
        x: &WgpuBuffer,
        out: &WgpuBuffer,
        r: usize,
        c: usize,
    ) -> Result<()> {
        launch_rows(self, &FORWARD, r, c, &[(1, x), (2, out)])
    }

    fn log_softmax_backward(
        self: &Arc<Self>,
        g: &WgpuBuffer,
        y: &WgpuBuffer,
        gx: &WgpuBuffer,
        r: usize,
        c: usize,
    ) -> Result<()> {
        launch_rows(self, &BACKWARD, r, c, &[(3, g), (4, y), (5, gx)])
    }
}

/// Launches a row kernel (one workgroup per row) over `[r, c]` with the given buffers, all
/// `[r, c]`, in ranges of rows that fit one binding.
fn launch_rows(
    ctx: &Context,
    k: &Kernel,
    r: usize,
    c: usize,
    buffers: &[(u32, &WgpuBuffer)],
) -> Result<()> {
    for (r0, r1) in ctx.split(k.stem, r, |a, b| (b - a) * c)? {
        let windows: Vec<_> = buffers
            .iter()
            .map(|&(slot, b)| (slot, ctx.rows_window(b, r0, r1, c)))
            .collect();
        let binds: Vec<_> = windows.iter().map(|(slot, w)| (*slot, w)).collect();
        let params = LogSoftmaxParams {
            r: (r1 - r0) as u32,
            c: c as u32,
            r0: r0 as u32,
            base: windows[0].1.base,
        };
        let grid = ctx.grid((r1 - r0) as u64 * WG as u64)?;
        ctx.launch_windows_grid(k, &params, &binds, grid)?;
    }
    Ok(())
}
