//! `shaders/lstm_aggregate.wgsl` behind [`LstmKernels`]: the step kernels touch only rows
//! of the layout and of the bucket, in ranges of nodes whose windows fit one binding; the
//! forward step reads the input projections `xw` at the rows its index names, bound by
//! tiles of rows like a gather's table (one tile when `xw` fits one binding).

use std::sync::Arc;

use super::index_select::{gather_rows, put_rows};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::lstm_aggregate::{LstmKernels, Step, StepBackwardBuffers, StepBuffers};
use crate::device::wgpu::{Context, Kernel, LstmAggregateParams, WgpuBuffer, Window};
use crate::error::{Error, Result};

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

/// The buffers of one step kernel by shape, each with its binding: `rows4`/`rows1` the
/// `[rows, 4H]`/`[rows, H]` buffers of the layout, `node4`/`node1` the bucket's `[m, 4H]`
/// and `[m, H]` ones (`node4` is `None` where the step does not read it: the forward's
/// first step, which binds one word of the table there), and in the forward the table the
/// step reads through its index.
struct StepBinds<'a> {
    rows4: &'a [(u32, &'a WgpuBuffer)],
    rows1: (u32, &'a WgpuBuffer),
    node4: (u32, Option<&'a WgpuBuffer>),
    node1: &'a [(u32, &'a WgpuBuffer)],
    indexed: Option<Indexed<'a>>,
}

/// The forward's input projections `xw` (`n` rows of 4H, read at arbitrary rows: bound by
/// tile) and the index of the row each row of the layout reads (bound as the window of the
/// dispatch's rows), each with its binding.
struct Indexed<'a> {
    table: (u32, &'a WgpuBuffer),
    n: usize,
    idx: (u32, &'a WgpuBuffer),
}

/// Runs one step kernel over the nodes of a bucket (`m` nodes of degree `k` from row
/// `offset`, step `t`) in ranges whose windows fit one binding; with an indexed table,
/// each range once per tile of its rows (one tile when the table fits one binding).
fn launch_step(
    ctx: &Context,
    kernel: &Kernel,
    (m, h, k, t, offset): (usize, usize, usize, usize, usize),
    b: &StepBinds,
) -> Result<()> {
    // Rows nodes i0..i1 touch at step t (and the row before, which holds c_{t-1}).
    let lo = |i0: usize| offset + i0 * k + t - usize::from(t > 0);
    let hi = |i1: usize| offset + (i1 - 1) * k + t + 1;
    let span = |i0: usize, i1: usize| ((hi(i1) - lo(i0)) * 4 * h).max((i1 - i0) * 4 * h);
    let tiles = match &b.indexed {
        Some(g) => ctx.tiles(kernel.stem, g.n, |r0, r1| (r1 - r0) * 4 * h)?,
        None => vec![(0, 0)],
    };
    for (i0, i1) in ctx.split(kernel.stem, m, span)? {
        let node4 = match b.node4 {
            (slot, Some(buf)) => (slot, ctx.rows_window(buf, i0, i1, 4 * h)),
            // Not read: one word of a buffer bound read-only beside it.
            (slot, None) => match &b.indexed {
                Some(g) => (slot, ctx.window(g.table.1, 0, 0)),
                None => return Err(unbound(kernel, slot)),
            },
        };
        let groups = [
            windows(ctx, b.rows4, (lo(i0), hi(i1)), 4 * h),
            windows(ctx, &[b.rows1], (lo(i0), hi(i1)), h),
            vec![node4],
            windows(ctx, b.node1, (i0, i1), h),
        ];
        let bases = groups.each_ref().map(|g| g.first().map_or(0, |x| x.1.base));
        let [row_base, cs_base, wide_base, node_base] = bases;
        let idx = b.indexed.as_ref().map(|g| {
            let (slot, buf) = g.idx;
            (slot, ctx.window(buf, lo(i0), hi(i1)))
        });
        for &(t0, t1) in &tiles {
            let table = b.indexed.as_ref().map(|g| {
                let (slot, buf) = g.table;
                (slot, ctx.rows_window(buf, t0, t1, 4 * h))
            });
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
                idx_base: idx.as_ref().map_or(0, |w| w.1.base),
                t0: t0 as u32,
                t1: t1 as u32,
                x_base: table.as_ref().map_or(0, |w| w.1.base),
            };
            let binds: Vec<_> = groups
                .iter()
                .flatten()
                .chain(&idx)
                .chain(&table)
                .map(|(slot, w)| (*slot, w))
                .collect();
            ctx.launch_windows(kernel, &words, &binds, ((i1 - i0) * h) as u64)?;
        }
    }
    Ok(())
}

/// A step kernel given no buffer for a binding it declares.
fn unbound(kernel: &Kernel, slot: u32) -> Error {
    Error::Backend {
        backend: "wgpu",
        msg: format!(
            "{}::{}: no buffer for binding {slot}",
            kernel.stem, kernel.entry
        ),
    }
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
        let binds = StepBinds {
            rows4: &[(3, b.acts)],
            rows1: (4, b.cs),
            node4: (2, b.hw),
            node1: &[(5, b.next)],
            indexed: Some(Indexed {
                table: (1, b.xw),
                n: b.num_src,
                idx: (6, b.idx),
            }),
        };
        launch_step(self, &STEP, (s.m, s.h, s.k, s.t, s.offset), &binds)?;
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
        let binds = StepBinds {
            rows4: &[(8, b.acts), (14, b.dxg)],
            rows1: (9, b.cs),
            node4: (13, Some(b.dz)),
            node1: &[(11, dh), (12, b.dc)],
            indexed: None,
        };
        launch_step(self, &STEP_BACKWARD, (s.m, s.h, s.k, s.t, s.offset), &binds)
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
