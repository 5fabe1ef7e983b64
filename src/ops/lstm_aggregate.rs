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
//!
//! The bucket and step loop of the GPUs is written once, [`gpu_forward`] and
//! [`gpu_backward`], generic over a backend implementing [`LstmKernels`] (the GPU seam,
//! `src/device/gpu.rs`); the wgpu and CUDA implementations below hold what differs: the
//! launches, wgpu's windows and row put/gather, CUDA's in-kernel dst indexing.

use std::any::Any;
use std::sync::Arc;

use crate::autograd::{no_grad, record};
use crate::device::cpu::CpuData;
use crate::device::cuda::args::{LstmHprevArgs, LstmStepArgs, LstmStepBackwardArgs, Ptr};
use crate::device::gpu::GpuDevice;
use crate::device::wgpu::{Context, Kernel, LstmAggregateParams, WgpuBuffer, Window};
use crate::device::{cuda, wgpu, Device};
use crate::error::{Error, Result};
use crate::ops::gpu::GpuTensors;
use crate::ops::index_select::{wgpu_gather, wgpu_put};
use crate::ops::lstm_pack;
pub use crate::ops::lstm_pack::{LstmPlan, PlanBucket};
use crate::ops::rows::{dims2, u32_count};
use crate::ops::{cpu_output, matmul};
use crate::tensor::Tensor;

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
        match xg.device() {
            Device::Cuda(_) => gpu_forward::<cuda::Context>(xg, &w, plan, h),
            Device::Wgpu(_) => gpu_forward::<wgpu::Context>(xg, &w, plan, h),
            Device::Cpu => {
                let (o, a, c) = match xg.storage().cpu(OP)? {
                    CpuData::F32(v) => lstm_pack::cpu_forward(v, &w, plan, h)?,
                    CpuData::F64(v) => lstm_pack::cpu_forward(v, &w, plan, h)?,
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
/// GPU the uploaded dst ids and row steps (a [`GpuIndex`] of the tensors' backend).
struct Saved {
    acts: Tensor,
    cs: Tensor,
    gpu: Option<Box<dyn Any + Send + Sync>>,
}

/// The index buffers the GPU backward reads, on backend `D`.
struct GpuIndex<D: LstmKernels> {
    dst: D::DstIds,
    steps: D::Buffer,
}

/// Sizes of one step of one bucket: bucket `bucket` of the plan, `m` nodes of degree `k`
/// from row `offset`, step `t`, `h` hidden units, `num_dst` output rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    bucket: usize,
    m: usize,
    h: usize,
    k: usize,
    t: usize,
    offset: usize,
    num_dst: usize,
}

impl Step {
    /// Step `t` of bucket `bucket` of `plan`, with `h` hidden units.
    fn of(plan: &LstmPlan, bucket: usize, h: usize, t: usize) -> Step {
        let b = &plan.buckets[bucket];
        Step {
            bucket,
            m: b.dst.len(),
            h,
            k: b.degree,
            t,
            offset: b.offset,
            num_dst: plan.num_dst,
        }
    }
}

/// The buffers of a forward step: `xg`, `acts [rows, 4H]` and `cs [rows, H]` in the
/// plan's layout; `hw = h_{t-1}·W_hh [m, 4H]` (none at `t = 0`); the bucket's next hidden
/// state `next [m, H]`; the output `out [num_dst, H]`.
pub(crate) struct StepBuffers<'a, B> {
    xg: &'a B,
    hw: Option<&'a B>,
    acts: &'a B,
    cs: &'a B,
    next: &'a B,
    out: &'a B,
}

/// The buffers of a backward step: the saved `acts`, `cs`; the output gradient
/// `grad [num_dst, H]`; `dh = h̄_t [m, H]` (none at `t = k - 1`, where h̄ is the bucket's
/// rows of `grad`); `dc [m, H]`; the step's `dz [m, 4H]`; `dxg [rows, 4H]`.
pub(crate) struct StepBackwardBuffers<'a, B> {
    acts: &'a B,
    cs: &'a B,
    grad: &'a B,
    dh: Option<&'a B>,
    dc: &'a B,
    dz: &'a B,
    dxg: &'a B,
}

/// The LSTM aggregation's kernels on one GPU backend (see `src/device/gpu.rs`); the bucket
/// and step loop around them is [`gpu_forward`] and [`gpu_backward`], once for every
/// backend.
pub(crate) trait LstmKernels: GpuTensors {
    /// The buckets' dst ids, laid out as this backend's step kernels read them.
    type DstIds: Send + Sync + 'static;

    /// Uploads the dst ids of every bucket of `plan`.
    fn upload_dst(self: &Arc<Self>, plan: &LstmPlan) -> Result<Self::DstIds>;

    /// One forward step (`lstm_step_f32`): gates, `c` and `h` of every node of the bucket;
    /// at the last step also the bucket's rows of `out`.
    fn step(&self, s: Step, dst: &Self::DstIds, b: StepBuffers<Self::Buffer>) -> Result<()>;

    /// One backward step (`lstm_step_backward_f32`): `z̄` into `dz` and `dxg`, `c̄_{t-1}`
    /// into `dc`.
    fn step_backward(
        &self,
        s: Step,
        dst: &Self::DstIds,
        b: StepBackwardBuffers<Self::Buffer>,
    ) -> Result<()>;

    /// `hprev [rows, H]` (`rows_h` = (rows, H)): `o·tanh(c)` of the row before, 0 where `steps` is 0
    /// (`lstm_hprev_f32`).
    fn hprev(
        &self,
        rows_h: (usize, usize),
        acts: &Self::Buffer,
        cs: &Self::Buffer,
        steps: &Self::Buffer,
        hprev: &Self::Buffer,
    ) -> Result<()>;
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
    let (dxg, hprev) = match g.device() {
        Device::Cuda(_) => {
            let idx = gpu.as_ref().and_then(|i| i.downcast_ref());
            gpu_backward::<cuda::Context>(&acts, &cs, g, idx, w, plan, w_grad)?
        }
        Device::Wgpu(_) => {
            let idx = gpu.as_ref().and_then(|i| i.downcast_ref());
            gpu_backward::<wgpu::Context>(&acts, &cs, g, idx, w, plan, w_grad)?
        }
        Device::Cpu => {
            let guards = (acts.storage(), cs.storage(), g.storage());
            let (a, c, gv) = (guards.0.cpu(OP)?, guards.1.cpu(OP)?, guards.2.cpu(OP)?);
            let (dxg, hprev) = match (a, c, gv) {
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
    };
    // The saved states are no longer read: free them before the weight-gradient matmul.
    drop((acts, cs, gpu));
    let dw = match hprev {
        Some(hp) => Some(matmul(&hp, &dxg, true, false)?),
        None => None,
    };
    Ok((dxg, dw))
}

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

/// The forward pass on a GPU backend: per bucket and step, the matmul `h_{t-1}·W_hh` and
/// the backend's step kernel.
fn gpu_forward<D: LstmKernels>(
    xg: &Tensor,
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
) -> Result<(Tensor, Saved)> {
    let guard = xg.storage();
    let x = D::buffer(&guard, OP)?;
    let ctx = D::context_of(x).clone();
    let rows = plan.rows();
    u32_count(OP, "xg", rows * 4 * h)?;
    u32_count(OP, "the output", plan.num_dst * h)?;
    let out = ctx.zeros((plan.num_dst * h * 4) as u64)?;
    let acts = ctx.alloc((rows * 4 * h * 4) as u64)?;
    let cs = ctx.alloc((rows * h * 4) as u64)?;
    let dst = ctx.upload_dst(plan)?;
    // Without hidden units every state is empty and the output stays zero-sized.
    for (bucket, b) in plan.buckets.iter().enumerate().filter(|_| h > 0) {
        let (m, k) = (b.dst.len(), b.degree);
        let mut hb: Option<Tensor> = None;
        for t in 0..k {
            let hw = match &hb {
                Some(hb) => Some(matmul(hb, w, false, false)?),
                None => None,
            };
            let next = ctx.alloc((m * h * 4) as u64)?;
            {
                let hw_guard = hw.as_ref().map(|t| t.storage());
                let hw = hw_guard.as_deref().map(|s| D::buffer(s, OP)).transpose()?;
                let step = Step::of(plan, bucket, h, t);
                let bufs = StepBuffers {
                    xg: x,
                    hw,
                    acts: &acts,
                    cs: &cs,
                    next: &next,
                    out: &out,
                };
                ctx.step(step, &dst, bufs)?;
            }
            hb = Some(D::output(next, vec![m, h], xg));
        }
    }
    let steps = ctx.upload_u32(&plan.steps)?;
    let index: GpuIndex<D> = GpuIndex { dst, steps };
    Ok((
        D::output(out, vec![plan.num_dst, h], xg),
        Saved {
            acts: D::output(acts, vec![rows, 4 * h], xg),
            cs: D::output(cs, vec![rows, h], xg),
            gpu: Some(Box::new(index)),
        },
    ))
}

/// The backward pass on a GPU backend: `x̄g` and, when `w_grad`, `Hprev` (see the module
/// docs). `idx` is what [`gpu_forward`] saved on this backend.
fn gpu_backward<D: LstmKernels>(
    acts: &Tensor,
    cs: &Tensor,
    g: &Tensor,
    idx: Option<&GpuIndex<D>>,
    w: &Tensor,
    plan: &LstmPlan,
    w_grad: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let guards = (acts.storage(), cs.storage(), g.storage());
    let (a, c, gv) = (
        D::buffer(&guards.0, OP)?,
        D::buffer(&guards.1, OP)?,
        D::buffer(&guards.2, OP)?,
    );
    let idx = idx.ok_or(Error::DeviceMismatch {
        op: OP,
        lhs: acts.device(),
        rhs: g.device(),
    })?;
    let ctx = D::context_of(a).clone();
    let (rows, h) = (plan.rows(), w.shape()[0]);
    u32_count(OP, "the gate gradient", rows * 4 * h)?;
    let dxg = ctx.alloc((rows * 4 * h * 4) as u64)?;
    for (bucket, b) in plan.buckets.iter().enumerate().filter(|_| h > 0) {
        let (m, k) = (b.dst.len(), b.degree);
        let dc = ctx.alloc((m * h * 4) as u64)?;
        let mut dh: Option<Tensor> = None;
        for t in (0..k).rev() {
            let dz = ctx.alloc((m * 4 * h * 4) as u64)?;
            {
                let dh_guard = dh.as_ref().map(|t| t.storage());
                let dh = dh_guard.as_deref().map(|s| D::buffer(s, OP)).transpose()?;
                let step = Step::of(plan, bucket, h, t);
                let bufs = StepBackwardBuffers {
                    acts: a,
                    cs: c,
                    grad: gv,
                    dh,
                    dc: &dc,
                    dz: &dz,
                    dxg: &dxg,
                };
                ctx.step_backward(step, &idx.dst, bufs)?;
            }
            dh = if t > 0 {
                let dz = D::output(dz, vec![m, 4 * h], g);
                Some(matmul(&dz, w, false, true)?)
            } else {
                None
            };
        }
    }
    let hprev = if w_grad {
        let hp = ctx.alloc((rows * h * 4) as u64)?;
        ctx.hprev((rows, h), a, c, &idx.steps, &hp)?;
        Some(D::output(hp, vec![rows, h], g))
    } else {
        None
    };
    Ok((D::output(dxg, vec![rows, 4 * h], g), hprev))
}

/// wgpu: a buffer of dst ids per bucket; the step kernels touch only rows of the layout
/// and of the bucket, in ranges of nodes whose windows fit one binding, and the last
/// hidden states are put into (their gradients gathered from) the output rows by
/// [`crate::ops::index_select`]'s row kernels.
impl LstmKernels for wgpu::Context {
    type DstIds = Vec<WgpuBuffer>;

    fn upload_dst(self: &Arc<Self>, plan: &LstmPlan) -> Result<Vec<WgpuBuffer>> {
        plan.buckets
            .iter()
            .map(|b| self.upload_u32(&b.dst))
            .collect()
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
            wgpu_put(b.next, &dst[s.bucket], s.m, s.h, b.out, s.num_dst)?;
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
            None => Some(wgpu_gather(b.grad, s.num_dst, s.h, &dst[s.bucket], s.m)?),
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

/// The dst ids of every bucket in one CUDA buffer, one bucket after another; a kernel gets
/// a pointer to its bucket's first id.
pub(crate) struct CudaDstIds {
    ids: cuda::CudaBuffer,
    first: Vec<usize>,
}

/// CUDA: whole buffers; the step kernels write the output rows and read the output
/// gradient's rows themselves, through the bucket's dst ids.
impl LstmKernels for cuda::Context {
    type DstIds = CudaDstIds;

    fn upload_dst(self: &Arc<Self>, plan: &LstmPlan) -> Result<CudaDstIds> {
        let all: Vec<u32> = plan.buckets.iter().flat_map(|b| b.dst.clone()).collect();
        let first = plan
            .buckets
            .iter()
            .scan(0, |at, b| {
                let first = *at;
                *at += b.dst.len();
                Some(first)
            })
            .collect();
        Ok(CudaDstIds {
            ids: self.upload_u32(&all)?,
            first,
        })
    }

    fn step(&self, s: Step, dst: &CudaDstIds, b: StepBuffers<cuda::CudaBuffer>) -> Result<()> {
        // Every count below is at most rows * 4H, which fits u32 (checked by the caller).
        let args = LstmStepArgs {
            xg: b.xg.into(),
            // Not read at t = 0: pass xg there so that the pointer is valid.
            hw: b.hw.unwrap_or(b.xg).into(),
            acts: b.acts.into(),
            cs: b.cs.into(),
            h_next: b.next.into(),
            out: b.out.into(),
            dst: Ptr::At(&dst.ids, dst.first[s.bucket]),
            m: s.m as u32,
            h: s.h as u32,
            k: s.k as u32,
            t: s.t as u32,
            offset: s.offset as u32,
        };
        self.launch_args_1d(&args, (s.m * s.h) as u64)
    }

    fn step_backward(
        &self,
        s: Step,
        dst: &CudaDstIds,
        b: StepBackwardBuffers<cuda::CudaBuffer>,
    ) -> Result<()> {
        let args = LstmStepBackwardArgs {
            acts: b.acts.into(),
            cs: b.cs.into(),
            grad: b.grad.into(),
            dst: Ptr::At(&dst.ids, dst.first[s.bucket]),
            // Not read at t = k - 1: pass the output gradient there.
            dh: b.dh.unwrap_or(b.grad).into(),
            dc: b.dc.into(),
            dz: b.dz.into(),
            dxg: b.dxg.into(),
            m: s.m as u32,
            h: s.h as u32,
            k: s.k as u32,
            t: s.t as u32,
            offset: s.offset as u32,
        };
        self.launch_args_1d(&args, (s.m * s.h) as u64)
    }

    fn hprev(
        &self,
        (rows, h): (usize, usize),
        acts: &cuda::CudaBuffer,
        cs: &cuda::CudaBuffer,
        steps: &cuda::CudaBuffer,
        hp: &cuda::CudaBuffer,
    ) -> Result<()> {
        let args = LstmHprevArgs {
            acts: acts.into(),
            cs: cs.into(),
            steps: steps.into(),
            hprev: hp.into(),
            rows: rows as u32,
            h: h as u32,
        };
        self.launch_args_1d(&args, (rows * h) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Block, Buckets};

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
