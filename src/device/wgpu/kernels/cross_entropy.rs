//! `shaders/cross_entropy.wgsl` behind [`CrossEntropyKernels`]: a workgroup per row over
//! ranges of rows that fit one binding, and one workgroup for the mean.

use std::sync::Arc;

use crate::device::kernels::cross_entropy::{inv_n, CrossEntropyKernels, Operands};
use crate::device::wgpu::{Context, CrossEntropyParams, Kernel, WgpuBuffer, WG};
use crate::error::Result;

const OP: &str = "cross_entropy";

const SHADER: &str = include_str!("../../../../shaders/cross_entropy.wgsl");
const fn kernel(entry: &'static str) -> Kernel {
    Kernel {
        stem: "cross_entropy",
        source: SHADER,
        entry,
    }
}
const ROWS: Kernel = kernel("ce_rows_f32");
const MEAN: Kernel = kernel("ce_mean_f32");
const MEAN_WEIGHTED: Kernel = kernel("ce_mean_weighted_f32");
const BACKWARD: Kernel = kernel("ce_backward_f32");
const BACKWARD_WEIGHTED: Kernel = kernel("ce_backward_weighted_f32");
const WEIGHT_GRAD: Kernel = kernel("ce_weight_grad_f32");

/// Parameters of the cross-entropy shader for rows `r0..r1` of `[n, c]`, with the
/// windows' first elements and the `first`/`last` flags of the mean.
fn words(
    n: usize,
    c: usize,
    (r0, r1): (usize, usize),
    bases: (u32, u32),
    flags: (bool, bool),
) -> CrossEntropyParams {
    CrossEntropyParams {
        r: (r1 - r0) as u32,
        c: c as u32,
        inv_n: inv_n(n).to_bits(),
        r0: r0 as u32,
        x_base: bases.0,
        v_base: bases.1,
        first: flags.0 as u32,
        last: flags.1 as u32,
    }
}

/// wgpu: row kernels run over ranges of rows that fit one binding, a workgroup per row;
/// the mean over ranges of rows that start at multiples of 256, so that its threads keep
/// their rows (see the shader).
impl CrossEntropyKernels for Context {
    fn rows(
        self: &Arc<Self>,
        o: &Operands<WgpuBuffer>,
        lse: &WgpuBuffer,
        rows: &WgpuBuffer,
    ) -> Result<()> {
        let (n, c) = (o.n, o.c);
        for range @ (r0, r1) in self.split(OP, n, |a, b| (b - a) * c)? {
            let xw = self.rows_window(o.x, r0, r1, c);
            let [yw, lw, rw] = [o.labels, lse, rows].map(|b| self.window(b, r0, r1));
            let words = words(n, c, range, (xw.base, yw.base), (false, false));
            let grid = self.grid((r1 - r0) as u64 * WG as u64)?;
            let binds = [(1, &xw), (2, &yw), (3, &lw), (4, &rw)];
            self.launch_windows_grid(&ROWS, &words, &binds, grid)?;
        }
        Ok(())
    }

    fn mean(
        self: &Arc<Self>,
        o: &Operands<WgpuBuffer>,
        rows: &WgpuBuffer,
        loss: &WgpuBuffer,
        status: &WgpuBuffer,
    ) -> Result<()> {
        let (n, c) = (o.n, o.c);
        let scratch = WgpuBuffer::new(self, 512 * 4)?;
        let step = (self.window_elems() / 256).max(1) * 256;
        let k = if o.weights.is_some() {
            &MEAN_WEIGHTED
        } else {
            &MEAN
        };
        for r0 in (0..n).step_by(step) {
            let r1 = (r0 + step).min(n);
            let [yw, rw] = [o.labels, rows].map(|b| self.window(b, r0, r1));
            let ww = o.weights.map(|w| self.window(w, r0, r1));
            let (lw, sw, scw) = (
                self.window(loss, 0, 1),
                self.window(status, 0, 1),
                self.window(&scratch, 0, 512),
            );
            let flags = (r0 == 0, r1 == n);
            let words = words(n, c, (r0, r1), (0, yw.base), flags);
            let mut binds = vec![(2, &yw), (5, &rw), (7, &lw), (8, &sw), (13, &scw)];
            if let Some(ww) = &ww {
                binds.push((6, ww));
            }
            self.launch_windows_grid(k, &words, &binds, (1, 1, 1))?;
        }
        Ok(())
    }

    fn logits_grad(
        self: &Arc<Self>,
        o: &Operands<WgpuBuffer>,
        lse: &WgpuBuffer,
        gl: &WgpuBuffer,
        gx: &WgpuBuffer,
    ) -> Result<()> {
        let (n, c) = (o.n, o.c);
        let gl = self.window(gl, 0, 1);
        let k = if o.weights.is_some() {
            &BACKWARD_WEIGHTED
        } else {
            &BACKWARD
        };
        for range @ (r0, r1) in self.split(OP, n, |a, b| (b - a) * c)? {
            let [xw, ow] = [o.x, gx].map(|b| self.rows_window(b, r0, r1, c));
            let [yw, lw] = [o.labels, lse].map(|b| self.window(b, r0, r1));
            let ww = o.weights.map(|w| self.window(w, r0, r1));
            let words = words(n, c, range, (xw.base, yw.base), (false, false));
            let mut binds = vec![(1, &xw), (2, &yw), (9, &lw), (10, &gl), (11, &ow)];
            if let Some(ww) = &ww {
                binds.push((6, ww));
            }
            self.launch_windows(k, &words, &binds, ((r1 - r0) * c) as u64)?;
        }
        Ok(())
    }

    fn weights_grad(
        self: &Arc<Self>,
        o: &Operands<WgpuBuffer>,
        lse: &WgpuBuffer,
        gl: &WgpuBuffer,
        gw: &WgpuBuffer,
    ) -> Result<()> {
        let (n, c) = (o.n, o.c);
        let gl = self.window(gl, 0, 1);
        for range @ (r0, r1) in self.split(OP, n, |a, b| (b - a) * c)? {
            let xw = self.rows_window(o.x, r0, r1, c);
            let [yw, lw, ow] = [o.labels, lse, gw].map(|b| self.window(b, r0, r1));
            let words = words(n, c, range, (xw.base, yw.base), (false, false));
            let binds = [(1, &xw), (2, &yw), (9, &lw), (10, &gl), (12, &ow)];
            self.launch_windows(&WEIGHT_GRAD, &words, &binds, (r1 - r0) as u64)?;
        }
        Ok(())
    }
}
