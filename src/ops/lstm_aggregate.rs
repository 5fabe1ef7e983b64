//! LSTM aggregation over degree buckets (DGL's `SAGEConv(aggregator_type="lstm")` reducer).
//!
//! For each dst node `d` with in-edges `e₀ … e_{k-1}` (edge order, `k = deg(d) ≥ 1`), an
//! LSTM runs exactly `k` steps from `h = c = 0`, step `t` reading neighbour `src(e_t)`:
//!
//! ```text
//! z_t = xg[row(d, t)] + h_{t-1}·W_hh           (xg = gathered x·W_ih + b, see below)
//! (h_t, c_t) = cell(z_t, c_{t-1})               (ops::lstm_cell's maths)
//! out[d] = h_{k-1}                               (zero for a node without in-edges)
//! ```
//!
//! **Layout.** The dst nodes are grouped by in-degree ([`Buckets`]); each bucket of `m`
//! nodes and degree `k` is one dense `[m, k, ·]` batch. An [`LstmPlan`] lays the buckets'
//! rows one after another, node-major inside a bucket: `row(b, i, t) = offset_b + i·k + t`,
//! which is the order of [`crate::graph::Bucket::src_indices`]. The caller gathers the
//! input projections in that order (`xg = index_select(x·W_ih + b, plan.src)`), so the op
//! itself needs no scatter, and `x̄g` comes back in the same layout.
//!
//! **Per bucket and step:** one matmul (`h_{t-1}·W_hh`, skipped at `t = 0` where `h = 0`)
//! and one fused cell kernel that adds the gathered projection, applies the gates, saves
//! what backward needs and, at the last step, writes the node's output row. The CPU arm
//! runs several buckets as one packed sequence instead, step `t` one matmul over the
//! nodes still running ([`crate::ops::lstm_packs`], `ops/lstm_pack.rs`): the same values,
//! bit for bit, with far fewer matmuls.
//!
//! **Backward** (per bucket, `t = k-1 … 0`): one fused kernel turns `(h̄_t, c̄_t)` into
//! `z̄_t` (written to `x̄g` and to a bucket-local buffer) and `c̄_{t-1}`; one matmul
//! `h̄_{t-1} = z̄_t·W_hhᵀ`. Then `W̄_hh = Σ h_{t-1}ᵀ·z̄_t` is one matmul over all rows,
//! `W̄_hh = Hprevᵀ·x̄g`, where `Hprev[row] = o·tanh(c)` of the row before (0 at `t = 0`).
//!
//! **Saved for backward: 5 f32 values per (node, step, hidden unit)**: the activated gates
//! (4) and the cell state `c` (1); `h_{t-1}` is recomputed as `o·tanh(c)`. Transients: in
//! backward `x̄g` (4 per (node, step, unit)) and `Hprev` (1) live together with the saved
//! 5; the forward input `xg` (4) is not saved. Buckets are processed one after another, so
//! splitting the explosion bucket ([`Buckets::split_explosion`]) bounds the per-step
//! buffers (`[m, 4H]`) of one launch (on the CPU, a pack's steps hold at most the
//! largest bucket's nodes or `rows / 6`, whichever is more).
//!
//! Deterministic: every output value is written by one task, and the matmuls are fixed-order.
//! The fused kernels run a thread per (node, hidden unit) (`shaders/lstm_aggregate.wgsl`,
//! `kernels/lstm_aggregate.cu`).
//!
//! On wgpu the step kernels write the bucket's last hidden state to a bucket-local buffer,
//! which is then put into the output rows of its dst nodes, and backward gathers those rows
//! of the output gradient once per bucket ([`crate::ops::index_select`]'s row gather and
//! put), so the step kernels only touch rows of the layout and of the bucket. Past the
//! storage-binding limit they run over ranges of a bucket's nodes (see
//! `src/device/wgpu/split.rs`); the results do not change.

use std::sync::Arc;

use crate::autograd::{no_grad, record};
use crate::device::cpu::CpuData;
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::LstmAggregateParams;
use crate::device::wgpu::{Context, Kernel, WgpuBuffer, Window};
use crate::error::{Error, Result};
use crate::graph::{Block, Buckets};
use crate::ops::index_select::{wgpu_gather, wgpu_put};
use crate::ops::lstm_pack;
use crate::ops::rows::{dims2, u32_count};
use crate::ops::{cpu_output, cuda_output, matmul, wgpu_output};
use crate::tensor::{Storage, Tensor};

pub(crate) const OP: &str = "lstm_aggregate";
const SHADER: &str = include_str!("../../shaders/lstm_aggregate.wgsl");
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
const STEP_CUDA: cuda::Kernel = crate::cuda_kernel!("lstm_aggregate", "lstm_step_f32");
const STEP_BACKWARD_CUDA: cuda::Kernel =
    crate::cuda_kernel!("lstm_aggregate", "lstm_step_backward_f32");
const HPREV_CUDA: cuda::Kernel = crate::cuda_kernel!("lstm_aggregate", "lstm_hprev_f32");

/// One bucket of an [`LstmPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanBucket {
    /// In-degree (steps) of every node of the bucket.
    pub degree: usize,
    /// First row of the bucket in the plan's layout.
    pub offset: usize,
    /// Local dst ids of the bucket's nodes, in row order.
    pub dst: Vec<u32>,
}

/// Where every (dst node, step) of a block lives when its buckets run as dense batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LstmPlan {
    /// Dst nodes of the block (rows of the output).
    pub num_dst: usize,
    /// Buckets in execution order.
    pub buckets: Vec<PlanBucket>,
    /// Local src id of every row (`Σ m·k` = the block's edges): the gather index.
    pub src: Vec<u32>,
    /// Step `t` of every row.
    pub steps: Vec<u32>,
}

impl LstmPlan {
    /// The plan of `buckets`, which must cover every dst node of `block` with an in-edge
    /// exactly once (zero-degree nodes are in no bucket; they aggregate to zeros).
    pub fn new(block: &Block, buckets: &Buckets) -> Result<LstmPlan> {
        let mut seen = vec![false; block.num_dst];
        let mut src = Vec::with_capacity(block.num_edges());
        let mut steps = Vec::with_capacity(block.num_edges());
        let mut out = Vec::with_capacity(buckets.buckets.len());
        for b in &buckets.buckets {
            if b.degree == 0 {
                return Err(Error::invalid(format!(
                    "{OP}: a bucket of degree 0 ({} nodes); zero-degree nodes need no LSTM",
                    b.dst.len()
                )));
            }
            let offset = src.len();
            src.extend(b.src_indices(block)?);
            for &d in &b.dst {
                if std::mem::replace(&mut seen[d as usize], true) {
                    return Err(Error::invalid(format!("{OP}: dst {d} is in two buckets")));
                }
                steps.extend(0..b.degree as u32);
            }
            out.push(PlanBucket {
                degree: b.degree,
                offset,
                dst: b.dst.clone(),
            });
        }
        if let Some(d) = (0..block.num_dst).find(|&d| !seen[d] && block.degree(d) > 0) {
            return Err(Error::invalid(format!(
                "{OP}: dst {d} (in-degree {}) is in no bucket",
                block.degree(d)
            )));
        }
        if src.len() >= u32::MAX as usize {
            return Err(Error::invalid(format!(
                "{OP}: {} rows do not fit u32 offsets",
                src.len()
            )));
        }
        Ok(LstmPlan {
            num_dst: block.num_dst,
            buckets: out,
            src,
            steps,
        })
    }

    /// Rows of the layout (the block's edges).
    pub fn rows(&self) -> usize {
        self.src.len()
    }
}

/// LSTM aggregation (see the module docs): `xg [rows, 4H]` in the plan's row layout (the
/// gathered `x·W_ih + b`), `w_hh [H, 4H]`; returns `[num_dst, H]`, the last hidden state of
/// each dst node (zeros without in-edges). Gradients flow to `xg` and `w_hh`.
pub fn lstm_aggregate(xg: &Tensor, w_hh: &Tensor, plan: &Arc<LstmPlan>) -> Result<Tensor> {
    xg.expect_float(OP)?;
    xg.same_device(w_hh, OP)?;
    let (rows, g4) = dims2(OP, "xg", xg)?;
    let (h, w4) = dims2(OP, "w_hh", w_hh)?;
    if rows != plan.rows() || g4 != 4 * h || w4 != 4 * h || xg.dtype() != w_hh.dtype() {
        return Err(Error::shape(
            OP,
            format!(
                "xg must be [{}, 4H] and w_hh [H, 4H] of one dtype; got {:?} ({}) and {:?} ({})",
                plan.rows(),
                xg.shape(),
                xg.dtype().name(),
                w_hh.shape(),
                w_hh.dtype().name()
            ),
        ));
    }
    let w = w_hh.detach();
    let (out, saved) = no_grad(|| -> Result<(Tensor, Saved)> {
        match &*xg.storage() {
            Storage::Cuda(x) => cuda_forward(x, &w, plan, h, xg),
            Storage::Cpu(x) => {
                let (o, a, c) = match &x.data {
                    CpuData::F32(v) => lstm_pack::cpu_forward(v, &w, plan, h, xg)?,
                    CpuData::F64(v) => lstm_pack::cpu_forward(v, &w, plan, h, xg)?,
                    _ => return Err(xg.dtype_error(OP, "f32")),
                };
                Ok((
                    cpu_output(o, vec![plan.num_dst, h], xg),
                    Saved {
                        acts: cpu_output(a, vec![rows, 4 * h], xg),
                        cs: cpu_output(c, vec![rows, h], xg),
                        gpu: None,
                    },
                ))
            }
            Storage::Wgpu(x) => wgpu_forward(x, &w, plan, h, xg),
        }
    })?;
    let plan = plan.clone();
    let w_grad = w_hh.requires_grad();
    Ok(record(OP, out, &[xg, w_hh], move |g| {
        let (dxg, dw) = backward(saved, &w, &plan, g, w_grad)?;
        Ok(vec![Some(dxg), dw])
    }))
}

/// What backward reads: activated gates `[rows, 4H]`, cell states `[rows, H]`, and on a
/// GPU the uploaded per-bucket dst ids and row steps.
struct Saved {
    acts: Tensor,
    cs: Tensor,
    gpu: Option<GpuIndex>,
}

enum GpuIndex {
    Wgpu(WgpuIndex),
    Cuda(CudaIndex),
}

struct WgpuIndex {
    dst: Vec<WgpuBuffer>,
    steps: WgpuBuffer,
}

/// On CUDA every bucket's dst ids lie in one buffer, one bucket after another; kernels get
/// a pointer to their bucket's first id.
struct CudaIndex {
    dst: CudaBuffer,
    steps: CudaBuffer,
}

fn backward(
    saved: Saved,
    w: &Tensor,
    plan: &LstmPlan,
    g: &Tensor,
    w_grad: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let h = w.shape()[0];
    if g.shape() != [plan.num_dst, h] {
        return Err(Error::shape(
            OP,
            format!(
                "gradient of shape {:?} for an output of [{}, {h}]",
                g.shape(),
                plan.num_dst
            ),
        ));
    }
    let rows = plan.rows();
    let Saved { acts, cs, gpu } = saved;
    let (dxg, hprev) = {
        let guards = (acts.storage(), cs.storage(), g.storage());
        match (&*guards.0, &*guards.1, &*guards.2, &gpu) {
            (Storage::Cpu(a), Storage::Cpu(c), Storage::Cpu(gv), _) => {
                let (dxg, hprev) = match (&a.data, &c.data, &gv.data) {
                    (CpuData::F32(a), CpuData::F32(c), CpuData::F32(gv)) => {
                        lstm_pack::cpu_backward(a, c, gv, w, plan, h, w_grad, g)?
                    }
                    (CpuData::F64(a), CpuData::F64(c), CpuData::F64(gv)) => {
                        lstm_pack::cpu_backward(a, c, gv, w, plan, h, w_grad, g)?
                    }
                    _ => return Err(g.dtype_error(OP, acts.dtype().name())),
                };
                (
                    cpu_output(dxg, vec![rows, 4 * h], g),
                    hprev.map(|b| cpu_output(b, vec![rows, h], g)),
                )
            }
            (Storage::Wgpu(a), Storage::Wgpu(c), Storage::Wgpu(gv), Some(GpuIndex::Wgpu(idx))) => {
                wgpu_backward(a, c, gv, idx, w, plan, h, w_grad, g)?
            }
            (Storage::Cuda(a), Storage::Cuda(c), Storage::Cuda(gv), Some(GpuIndex::Cuda(idx))) => {
                cuda_backward(a, c, gv, idx, w, plan, h, w_grad, g)?
            }
            _ => {
                return Err(Error::DeviceMismatch {
                    op: OP,
                    lhs: acts.device(),
                    rhs: g.device(),
                })
            }
        }
    };
    // The saved states are no longer read: free them before the weight-gradient matmul.
    drop((acts, cs, gpu));
    let dw = match hprev {
        Some(hp) => Some(matmul(&hp, &dxg, true, false)?),
        None => None,
    };
    Ok((dxg, dw))
}

fn upload_u32(ctx: &Arc<Context>, v: &[u32]) -> Result<WgpuBuffer> {
    WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(v))
}

/// Runs one step kernel over the nodes of a bucket (`m` nodes of degree `k` from row
/// `offset`, step `t`) in ranges whose windows fit one binding. `rows4`/`rows1` are the
/// `[rows, 4H]`/`[rows, H]` buffers of the layout, `node4`/`node1` the bucket's `[m, 4H]` and
/// `[m, H]` ones, each with its binding.
fn launch_step(
    ctx: &Arc<Context>,
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

fn wgpu_forward(
    x: &WgpuBuffer,
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
    like: &Tensor,
) -> Result<(Tensor, Saved)> {
    let ctx = x.ctx().clone();
    let rows = plan.rows();
    let out = WgpuBuffer::zeros(&ctx, (plan.num_dst * h * 4) as u64)?;
    let acts = WgpuBuffer::new(&ctx, (rows * 4 * h * 4) as u64)?;
    let cs = WgpuBuffer::new(&ctx, (rows * h * 4) as u64)?;
    let mut dst = Vec::with_capacity(plan.buckets.len());
    for b in &plan.buckets {
        let (m, k) = (b.dst.len(), b.degree);
        let dst_b = upload_u32(&ctx, &b.dst)?;
        let mut hb: Option<Tensor> = None;
        for t in 0..k {
            let hw = match &hb {
                Some(hb) => Some(matmul(hb, w, false, false)?),
                None => None,
            };
            let next = WgpuBuffer::new(&ctx, (m * h * 4) as u64)?;
            {
                let hw_guard = hw.as_ref().map(|t| t.storage());
                // Unused at t = 0: bind xg there so the binding is valid.
                let hw_buf = match &hw_guard {
                    Some(s) => s.wgpu(OP)?,
                    None => x,
                };
                launch_step(
                    &ctx,
                    &STEP,
                    (m, h, k, t, b.offset),
                    &[(1, x), (3, &acts)],
                    (4, &cs),
                    &[(2, hw_buf)],
                    &[(5, &next)],
                )?;
            }
            if t + 1 == k {
                // The last hidden state is the output of the bucket's dst nodes.
                wgpu_put(&next, &dst_b, m, h, &out, plan.num_dst)?;
            }
            hb = Some(wgpu_output(next, vec![m, h], like));
        }
        dst.push(dst_b);
    }
    let steps = upload_u32(&ctx, &plan.steps)?;
    Ok((
        wgpu_output(out, vec![plan.num_dst, h], like),
        Saved {
            acts: wgpu_output(acts, vec![rows, 4 * h], like),
            cs: wgpu_output(cs, vec![rows, h], like),
            gpu: Some(GpuIndex::Wgpu(WgpuIndex { dst, steps })),
        },
    ))
}

#[allow(clippy::too_many_arguments)]
fn wgpu_backward(
    acts: &WgpuBuffer,
    cs: &WgpuBuffer,
    g: &WgpuBuffer,
    idx: &WgpuIndex,
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
    w_grad: bool,
    like: &Tensor,
) -> Result<(Tensor, Option<Tensor>)> {
    let ctx = acts.ctx().clone();
    let rows = plan.rows();
    let dxg = WgpuBuffer::new(&ctx, (rows * 4 * h * 4) as u64)?;
    for (b, dst_b) in plan.buckets.iter().zip(&idx.dst) {
        let (m, k) = (b.dst.len(), b.degree);
        let dc = WgpuBuffer::new(&ctx, (m * h * 4) as u64)?;
        // h̄ of the last step: the output gradient's rows of the bucket's dst nodes.
        let g_b = wgpu_gather(g, plan.num_dst, h, dst_b, m)?;
        let mut dh: Option<Tensor> = None;
        for t in (0..k).rev() {
            let dz = WgpuBuffer::new(&ctx, (m * 4 * h * 4) as u64)?;
            {
                let dh_guard = dh.as_ref().map(|t| t.storage());
                let dh_buf = match &dh_guard {
                    Some(s) => s.wgpu(OP)?,
                    None => &g_b,
                };
                launch_step(
                    &ctx,
                    &STEP_BACKWARD,
                    (m, h, k, t, b.offset),
                    &[(8, acts), (14, &dxg)],
                    (9, cs),
                    &[(13, &dz)],
                    &[(11, dh_buf), (12, &dc)],
                )?;
            }
            dh = if t > 0 {
                let dz = wgpu_output(dz, vec![m, 4 * h], like);
                Some(matmul(&dz, w, false, true)?)
            } else {
                None
            };
        }
    }
    let hprev = if w_grad {
        let hp = WgpuBuffer::new(&ctx, (rows * h * 4) as u64)?;
        // Rows r0..r1 read the saved states of the row before.
        let span = |r0: usize, r1: usize| (r1 - r0.saturating_sub(1)) * 4 * h;
        for (r0, r1) in ctx.split(OP, rows, span)? {
            let lo = r0.saturating_sub(1);
            let (aw, cw) = (
                ctx.rows_window(acts, lo, r1, 4 * h),
                ctx.rows_window(cs, lo, r1, h),
            );
            let (sw, hw) = (
                ctx.window(&idx.steps, r0, r1),
                ctx.rows_window(&hp, r0, r1, h),
            );
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
            ctx.launch_windows(&HPREV, &words, &binds, ((r1 - r0) * h) as u64)?;
        }
        Some(wgpu_output(hp, vec![rows, h], like))
    } else {
        None
    };
    Ok((wgpu_output(dxg, vec![rows, 4 * h], like), hprev))
}

fn cuda_forward(
    x: &CudaBuffer,
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
    like: &Tensor,
) -> Result<(Tensor, Saved)> {
    let ctx = x.ctx().clone();
    let rows = plan.rows();
    u32_count(OP, "xg", rows * 4 * h)?;
    u32_count(OP, "the output", plan.num_dst * h)?;
    let out = CudaBuffer::zeros(&ctx, (plan.num_dst * h * 4) as u64)?;
    let acts = CudaBuffer::new(&ctx, (rows * 4 * h * 4) as u64)?;
    let cs = CudaBuffer::new(&ctx, (rows * h * 4) as u64)?;
    let all_dst: Vec<u32> = plan.buckets.iter().flat_map(|b| b.dst.clone()).collect();
    let dst = CudaBuffer::from_bytes(&ctx, bytemuck::cast_slice(&all_dst))?;
    // Without hidden units every state is empty and the output stays zero-sized.
    let mut first = 0;
    for b in plan.buckets.iter().filter(|_| h > 0) {
        let (m, k) = (b.dst.len(), b.degree);
        let mut hb: Option<Tensor> = None;
        for t in 0..k {
            let hw = match &hb {
                Some(hb) => Some(matmul(hb, w, false, false)?),
                None => None,
            };
            let next = CudaBuffer::new(&ctx, (m * h * 4) as u64)?;
            if m > 0 {
                let hw_guard = hw.as_ref().map(|t| t.storage());
                // Not read at t = 0: pass xg there so that the pointer is valid.
                let hw_buf = match &hw_guard {
                    Some(s) => s.cuda(OP)?,
                    None => x,
                };
                // Every count below is at most rows * 4H, which fits u32 (checked above).
                let args = [
                    Arg::Buf(x),
                    Arg::Buf(hw_buf),
                    Arg::Buf(&acts),
                    Arg::Buf(&cs),
                    Arg::Buf(&next),
                    Arg::Buf(&out),
                    Arg::BufAt(&dst, first),
                    Arg::U32(m as u32),
                    Arg::U32(h as u32),
                    Arg::U32(k as u32),
                    Arg::U32(t as u32),
                    Arg::U32(b.offset as u32),
                ];
                ctx.launch_1d(&STEP_CUDA, (m * h) as u64, &args)?;
            }
            hb = Some(cuda_output(next, vec![m, h], like));
        }
        first += m;
    }
    let steps = CudaBuffer::from_bytes(&ctx, bytemuck::cast_slice(&plan.steps))?;
    Ok((
        cuda_output(out, vec![plan.num_dst, h], like),
        Saved {
            acts: cuda_output(acts, vec![rows, 4 * h], like),
            cs: cuda_output(cs, vec![rows, h], like),
            gpu: Some(GpuIndex::Cuda(CudaIndex { dst, steps })),
        },
    ))
}

#[allow(clippy::too_many_arguments)]
fn cuda_backward(
    acts: &CudaBuffer,
    cs: &CudaBuffer,
    g: &CudaBuffer,
    idx: &CudaIndex,
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
    w_grad: bool,
    like: &Tensor,
) -> Result<(Tensor, Option<Tensor>)> {
    let ctx = acts.ctx().clone();
    let rows = plan.rows();
    u32_count(OP, "the gate gradient", rows * 4 * h)?;
    let dxg = CudaBuffer::new(&ctx, (rows * 4 * h * 4) as u64)?;
    let mut first = 0;
    for b in plan.buckets.iter().filter(|_| h > 0) {
        let (m, k) = (b.dst.len(), b.degree);
        let dc = CudaBuffer::new(&ctx, (m * h * 4) as u64)?;
        let mut dh: Option<Tensor> = None;
        for t in (0..k).rev() {
            let dz = CudaBuffer::new(&ctx, (m * 4 * h * 4) as u64)?;
            if m > 0 {
                let dh_guard = dh.as_ref().map(|t| t.storage());
                // Not read at t = k - 1: pass the output gradient there.
                let dh_buf = match &dh_guard {
                    Some(s) => s.cuda(OP)?,
                    None => g,
                };
                // Every count below is at most rows * 4H, which fits u32 (checked above).
                let args = [
                    Arg::Buf(acts),
                    Arg::Buf(cs),
                    Arg::Buf(g),
                    Arg::BufAt(&idx.dst, first),
                    Arg::Buf(dh_buf),
                    Arg::Buf(&dc),
                    Arg::Buf(&dz),
                    Arg::Buf(&dxg),
                    Arg::U32(m as u32),
                    Arg::U32(h as u32),
                    Arg::U32(k as u32),
                    Arg::U32(t as u32),
                    Arg::U32(b.offset as u32),
                ];
                ctx.launch_1d(&STEP_BACKWARD_CUDA, (m * h) as u64, &args)?;
            }
            dh = if t > 0 {
                let dz = cuda_output(dz, vec![m, 4 * h], like);
                Some(matmul(&dz, w, false, true)?)
            } else {
                None
            };
        }
        first += m;
    }
    let hprev = if w_grad {
        let hp = CudaBuffer::new(&ctx, (rows * h * 4) as u64)?;
        if rows * h > 0 {
            let args = [
                Arg::Buf(acts),
                Arg::Buf(cs),
                Arg::Buf(&idx.steps),
                Arg::Buf(&hp),
                Arg::U32(rows as u32),
                Arg::U32(h as u32),
            ];
            ctx.launch_1d(&HPREV_CUDA, (rows * h) as u64, &args)?;
        }
        Some(cuda_output(hp, vec![rows, h], like))
    } else {
        None
    };
    Ok((cuda_output(dxg, vec![rows, 4 * h], like), hprev))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dst degrees 2, 0, 1, 2 over 2 extra sources.
    fn block() -> Block {
        Block::new(
            6,
            vec![0, 2, 2, 3, 5],
            vec![4, 5, 0, 1, 4],
            (0..6).collect(),
        )
        .unwrap()
    }

    #[test]
    fn plan_covers_each_node_once() {
        let b = block();
        let plan = LstmPlan::new(&b, &Buckets::new(&b, None)).unwrap();
        assert_eq!(plan.rows(), 5);
        assert_eq!(plan.src, vec![0, 4, 5, 1, 4]);
        assert_eq!(plan.steps, vec![0, 0, 1, 0, 1]);
        assert_eq!(plan.buckets[1].dst, vec![0, 3]);
        assert_eq!(plan.buckets[1].offset, 1);
        let split = Buckets::new(&b, Some(2)).split_explosion(1).unwrap();
        let p2 = LstmPlan::new(&b, &split).unwrap();
        assert_eq!(p2.src, plan.src);
        assert_eq!(p2.buckets.len(), 3);

        let mut missing = Buckets::new(&b, None);
        missing.buckets.pop();
        assert!(LstmPlan::new(&b, &missing).is_err());
        let mut twice = Buckets::new(&b, None);
        let again = twice.buckets[0].clone();
        twice.buckets.push(again);
        assert!(LstmPlan::new(&b, &twice).is_err());
    }

    #[test]
    fn zero_degree_rows_are_zero_and_shapes_are_checked() {
        let b = block();
        let plan = Arc::new(LstmPlan::new(&b, &Buckets::new(&b, None)).unwrap());
        let h = 2;
        let xg = Tensor::from_f64(vec![0.3; 5 * 4 * h], &[5, 4 * h]).unwrap();
        let w = Tensor::from_f64(vec![0.1; h * 4 * h], &[h, 4 * h]).unwrap();
        let out = lstm_aggregate(&xg, &w, &plan).unwrap();
        assert_eq!(out.shape(), &[4, h]);
        let v = out.to_vec_f64().unwrap();
        assert_eq!(&v[2..4], &[0.0, 0.0]);
        assert!(v[0] != 0.0);
        let short = Tensor::from_f64(vec![0.3; 4 * 4 * h], &[4, 4 * h]).unwrap();
        assert!(matches!(
            lstm_aggregate(&short, &w, &plan),
            Err(Error::Shape { .. })
        ));
    }
}
