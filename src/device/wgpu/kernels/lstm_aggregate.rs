//! `shaders/lstm_aggregate.wgsl` behind [`LstmKernels`]: the step kernels touch only rows
//! of the layout and of the bucket, in ranges of nodes whose windows fit one binding.

use std::sync::Arc;

use super::index_select::{gather_rows, put_rows};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::lstm_aggregate::{LstmKernels, Step, StepBackwardBuffers, StepBuffers};
use crate::device::wgpu::{Context, Kernel, LstmAggregateParams, WgpuBuffer, Window};
use crate::error::Result;

const OP: &str = "lstm_aggregate";
const SHADER: &str = include_str!("../../../../shaders/lstm_aggregate.wgsl");
const STEP: Kernel = Kernel {
    stem: "lstm_aggregate",
    source: SHADER,
    entry: "lstm_step_f32",
};
const STEP_BACKWARD: Kernel = Kernel {
    stem: "lstm_aggregate",
    source: SHADER,
    entry: "lstm_step_backward_f32",
};
const HPREV: Kernel = Kernel {
    stem: "lstm_aggregate",
    source: SHADER,
    entry: "lstm_hprev_f32",
};

/// Runs one step kernel over the nodes of a bucket (`m` nodes of degree `k` from row
/// `offset`, step `t`) in ranges whose windows fit one binding. `rows4`/`rows1` are the
/// `[rows, 4H]`/`[rows, H]` buffers of the layout, `node4`/`node1` the bucket's `[m, 4H]` and
/// `[m, H]` ones, each with its binding.
fn launch_step(
    ctx: &Context,
    kernel: &Kernel,
    (m, h, k, t, offset): (usize, usize, usize, usize, usize),
    rows4: &[(u32, &WgpuBuffer)],
    rows1: (u32, &WgpuBuffer),
    node4: &[(u32, &WgpuBuffer)],
    node1: &[(u32, &WgpuBuffer)],
) -> Result<()> {
    // Rows nodes i0..i1 touch at step t (and the row before, which holds c_{t-1}).
    let lo = |i0: usize| offset + i0 * k + t - usize::from(t > 0);
    let hi = |i1: usize| offset + (i1 - 1) * k + t + 1;
    let span = |i0: usize, i1: usize| ((hi(i1) - lo(i0)) * 4 * h).max((i1 - i0) * 4 * h);
    for (i0, i1) in ctx.split(kernel.stem, m, span)? {
        let groups = [
            windows(ctx, rows4, (lo(i0), hi(i1)), 4 * h),
            windows(ctx, &[rows1], (lo(i0), hi(i1)), h),
            windows(ctx, node4, (i0, i1), 4 * h),
            windows(ctx, node1, (i0, i1), h),
        ];
        let bases = groups.each_ref().map(|g| g.first().map_or(0, |x| x.1.base));
        let [row_base, cs_base, wide_base, node_base] = bases;
        let words = LstmAggregateParams {
            m: (i1 - i0) as u32,
            h: h as u32,
            k: k as u32,
            t: t as u32,
            offset: offset as u32,
            i0: i0 as u32,
            row_base,
            cs_base,
            wide_base,
            node_base,
        };
        let binds: Vec<_> = groups
            .iter()
            .flatten()
            .map(|(slot, w)| (*slot, w))
            .collect();
        ctx.launch_windows(kernel, &words, &binds, ((i1 - i0) * h) as u64)?;
    }
    Ok(())
}

/// Rows `a..b` (`w` values each) of each buffer, with its binding.
fn windows<'a>(
    ctx: &Context,
    bufs: &[(u32, &'a WgpuBuffer)],
    (a, b): (usize, usize),
    w: usize,
) -> Vec<(u32, Window<'a>)> {
    bufs.iter()
        .map(|&(slot, buf)| (slot, ctx.rows_window(buf, a, b, w)))
        .collect()
}

/// wgpu: a buffer of dst ids per bucket; the step kernels touch only rows of the layout
/// and of the bucket, in ranges of nodes whose windows fit one binding, and the last
/// hidden states are put into (their gradients gathered from) the output rows by
/// the row kernels of `index_select.rs` beside this file.
impl LstmKernels for Context {
    type DstIds = Vec<WgpuBuffer>;

    fn upload_dst(self: &Arc<Self>, dst: &[&[u32]]) -> Result<Vec<WgpuBuffer>> {
        dst.iter().map(|d| self.upload_u32(d)).collect()
    }

    fn step(&self, s: Step, dst: &Vec<WgpuBuffer>, b: StepBuffers<WgpuBuffer>) -> Result<()> {
        launch_step(
            self,
            &STEP,
            (s.m, s.h, s.k, s.t, s.offset),
            &[(1, b.xg), (3, b.acts)],
            (4, b.cs),
            // Unused at t = 0: bind xg there so the binding is valid.
            &[(2, b.hw.unwrap_or(b.xg))],
            &[(5, b.next)],
        )?;
        if s.t + 1 == s.k {
            // The last hidden state is the output of the bucket's dst nodes.
            put_rows(b.next, &dst[s.bucket], s.m, s.h, b.out, s.num_dst)?;
        }
        Ok(())
    }

    fn step_backward(
        &self,
        s: Step,
        dst: &Vec<WgpuBuffer>,
        b: StepBackwardBuffers<WgpuBuffer>,
    ) -> Result<()> {
        // h̄ of the last step: the output gradient's rows of the bucket's dst nodes.
        let last = match b.dh {
            Some(_) => None,
            None => Some(gather_rows(b.grad, s.num_dst, s.h, &dst[s.bucket], s.m)?),
        };
        let dh = b.dh.or(last.as_ref()).unwrap_or(b.grad);
        launch_step(
            self,
            &STEP_BACKWARD,
            (s.m, s.h, s.k, s.t, s.offset),
            &[(8, b.acts), (14, b.dxg)],
            (9, b.cs),
            &[(13, b.dz)],
            &[(11, dh), (12, b.dc)],
        )
    }

    fn hprev(
        &self,
        (rows, h): (usize, usize),
        acts: &WgpuBuffer,
        cs: &WgpuBuffer,
        steps: &WgpuBuffer,
        hp: &WgpuBuffer,
    ) -> Result<()> {
        // Rows r0..r1 read the saved states of the row before.
        let span = |r0: usize, r1: usize| (r1 - r0.saturating_sub(1)) * 4 * h;
        for (r0, r1) in self.split(OP, rows, span)? {
            let lo = r0.saturating_sub(1);
            let (aw, cw) = (
                self.rows_window(acts, lo, r1, 4 * h),
                self.rows_window(cs, lo, r1, h),
            );
            let (sw, hw) = (self.window(steps, r0, r1), self.rows_window(hp, r0, r1, h));
            let words = LstmAggregateParams {
                m: (r1 - r0) as u32,
                h: h as u32,
                offset: r0 as u32,
                row_base: aw.base,
                cs_base: cw.base,
                wide_base: sw.base,
                node_base: hw.base,
                ..Default::default()
            };
            let binds = [(8, &aw), (9, &cw), (15, &sw), (16, &hw)];
            self.launch_windows(&HPREV, &words, &binds, ((r1 - r0) * h) as u64)?;
        }
        Ok(())
    }
}
