//! LSTM aggregation over degree buckets (DGL's `SAGEConv(aggregator_type="lstm")` reducer).
//!
//! For each dst node `d` with in-edges `e₀ … e_{k-1}` (edge order, `k = deg(d) ≥ 1`), an
//! LSTM runs exactly `k` steps from `h = c = 0`, step `t` reading neighbour `src(e_t)`:
//!
//! ```text
//! z_t = xw[idx[row(d, t)]] + h_{t-1}·W_hh     (xw = x·W_ih + b per src row, see below)
//! (h_t, c_t) = cell(z_t, c_{t-1})               (ops::lstm_cell's maths)
//! out[d] = h_{k-1}                               (zero for a node without in-edges)
//! ```
//!
//! **Layout.** The dst nodes are grouped by in-degree ([`Buckets`]); each bucket of `m`
//! nodes and degree `k` is one dense `[m, k, ·]` batch. An [`LstmPlan`] lays the buckets'
//! rows one after another, node-major inside a bucket: `row(b, i, t) = offset_b + i·k + t`,
//! which is the order of [`crate::graph::Bucket::src_indices`]. The caller passes the
//! input projections of the src rows, `xw [ns, 4H]`, and the src row of every row of the
//! layout, `idx = plan.src` (u32 `[R]`); the op reads row `idx[row]` of `xw` where a
//! step needs it: every arm reads it inside the cell step (the CPU's cell pass, the GPUs'
//! step kernels), so the gathered rows `xg = xw[idx]` `[R, 4H]` never exist. Backward
//! computes the rows' gradient `x̄g` `[R, 4H]` in the layout and sums it into the src rows
//! with `index_select`'s backward (`scatter_add`, each src row's rows in increasing
//! order), so every value has the bits of a gather followed by the op on the gathered
//! rows. The sum runs as a step of its own in the autograd graph
//! ([`crate::autograd::Through`]), after the op's rule, as the gather's backward ran: the
//! op's incoming gradient is gone by then.
//!
//! **Per bucket and step:** one matmul (`h_{t-1}·W_hh`, skipped at `t = 0` where `h = 0`)
//! and one fused cell kernel that adds the gathered projection, applies the gates, saves
//! what backward needs and, at the last step, writes the node's output row. The CPU arm
//! runs several buckets as one packed sequence instead, step `t` one product over the
//! nodes still running ([`crate::ops::lstm_packs`], `ops/lstm_pack.rs`), split into
//! chunks of rows that each multiply and then run their cells while in cache: the same
//! values, bit for bit, with far fewer matmuls.
//!
//! **Backward** (per bucket, `t = k-1 … 0`): one fused kernel turns `(h̄_t, c̄_t)` into
//! `z̄_t` (written to `x̄g` and to a bucket-local buffer) and `c̄_{t-1}`; one matmul
//! `h̄_{t-1} = z̄_t·W_hhᵀ`. Then, on a GPU, `W̄_hh = Σ h_{t-1}ᵀ·z̄_t` is one matmul over
//! all rows, `W̄_hh = Hprevᵀ·x̄g`, where `Hprev[row] = o·tanh(c)` of the row before (0 at
//! `t = 0`). The CPU sums it step by step instead, from `t = 1`, each step's `h_{t-1}`
//! recomputed beside its `z̄_t` (`ops/lstm_pack.rs`): no `Hprev`, and no products of the
//! zero rows of step 0.
//!
//! **Saved for backward: 5 f32 values per (node, step, hidden unit)**: the activated gates
//! (4) and the cell state `c` (1); `h_{t-1}` is recomputed as `o·tanh(c)`. Transients: in
//! backward `x̄g` (4 per (node, step, unit)) and, on a GPU, `Hprev` (1) live together with
//! the saved 5, then `x̄g` with `x̄w` (4 per src row and unit). Buckets are processed one
//! after another, so splitting the explosion bucket ([`Buckets::split_explosion`]) bounds the per-step
//! buffers (`[m, 4H]`) of one launch (on the CPU, a pack's steps hold at most the
//! largest bucket's nodes or `rows / 6`, whichever is more).
//!
//! Deterministic: every output value is written by one task, and the matmuls are fixed-order.
//! The fused kernels run a thread per (node, hidden unit) (`shaders/lstm_aggregate.wgsl`,
//! `kernels/lstm_aggregate.cu`).
//!
//! On wgpu the step kernels write the bucket's last hidden state to a bucket-local buffer,
//! which is then put into the output rows of its dst nodes, and backward gathers those rows
//! of the output gradient once per bucket (the row gather and put of `index_select`'s
//! wgpu kernels), so the step kernels only touch rows of the layout and of the bucket. Past the
//! storage-binding limit they run over ranges of a bucket's nodes, and the forward step
//! reads `xw`, whose rows it reads at arbitrary positions, a tile of rows per pass, as a
//! gather reads its table (see `src/device/wgpu/split.rs`); the results do not change.
//!
//! The bucket and step loop of the GPUs is written once, [`gpu_forward`] and
//! [`gpu_backward`], generic over a backend implementing [`LstmKernels`] (the GPU seam,
//! `src/ops/gpu.rs`); each backend's `kernels/lstm_aggregate.rs` holds what differs: the
//! launches, wgpu's windows and row put/gather, CUDA's in-kernel dst indexing.

use std::any::Any;
use std::sync::Arc;

use crate::autograd::{no_grad, record_through, Through};
use crate::device::cpu::CpuData;
use crate::device::kernels::lstm_aggregate::{LstmKernels, Step, StepBackwardBuffers, StepBuffers};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::meta::{Replay, Rule, Val};
use crate::ops::gpu::GpuTensors;
use crate::ops::index_select::{check_indices, gpu_checked_indices};
use crate::ops::lstm_pack;
pub use crate::ops::lstm_pack::{LstmPlan, PlanBucket};
use crate::ops::meta_scatter_add;
use crate::ops::rows::{dims2, expect_vector, u32_count, u32_data};
use crate::ops::{cpu_output, matmul, scatter_add};
use crate::tensor::Tensor;

pub(crate) const OP: &str = "lstm_aggregate";
/// The step through which the op reads the rows of `xw` (its backward: the scatter).
const ROWS: &str = "lstm_aggregate rows";
/// LSTM aggregation (see the module docs): `xw [num_src, 4H]` the input projections `x·W_ih
/// + b` of the block's src rows, `idx` u32 `[rows]` the src row each row of the plan's
/// layout reads (`plan.src`, on `xw`'s device), `w_hh [H, 4H]`; returns `[num_dst, H]`,
/// the last hidden state of each dst node (zeros without in-edges). Gradients flow to `xw`
/// (the rows' gradients `x̄g` summed into their src rows, as `index_select`'s backward
/// does) and `w_hh`.
pub fn lstm_aggregate(
    xw: &Tensor,
    idx: &Tensor,
    w_hh: &Tensor,
    plan: &Arc<LstmPlan>,
) -> Result<Tensor> {
    xw.expect_float(OP)?;
    xw.same_device(w_hh, OP)?;
    xw.same_device(idx, OP)?;
    let (ns, g4) = dims2(OP, "xw", xw)?;
    let (h, w4) = dims2(OP, "w_hh", w_hh)?;
    if g4 != 4 * h || w4 != 4 * h || xw.dtype() != w_hh.dtype() {
        return Err(Error::shape(
            OP,
            format!(
                "xw must be [src rows, 4H] and w_hh [H, 4H] of one dtype; got {:?} ({}) and {:?} ({})",
                xw.shape(),
                xw.dtype().name(),
                w_hh.shape(),
                w_hh.dtype().name()
            ),
        ));
    }
    expect_vector(OP, "idx", idx, plan.rows())?;
    let rows = plan.rows();
    let w = w_hh.detach();
    let (out, saved) = no_grad(|| -> Result<(Tensor, Saved)> {
        match xw.device() {
            Device::Cpu => {
                let guards = (xw.storage(), idx.storage());
                let src = u32_data(OP, idx, guards.1.cpu(OP)?)?;
                check_indices(OP, src, ns)?;
                let (o, a, c) = match guards.0.cpu(OP)? {
                    CpuData::F32(v) => lstm_pack::cpu_forward(v, src, &w, plan, h)?,
                    CpuData::F64(v) => lstm_pack::cpu_forward(v, src, &w, plan, h)?,
                    _ => return Err(xw.dtype_error(OP, "f32")),
                };
                Ok((
                    cpu_output(o, vec![plan.num_dst, h], xw),
                    Saved {
                        acts: cpu_output(a, vec![rows, 4 * h], xw),
                        cs: cpu_output(c, vec![rows, h], xw),
                        gpu: None,
                    },
                ))
            }
            dev => on_gpu!(dev, |D| gpu_forward::<D>(xw, idx, &w, plan, h)),
        }
    })?;
    let plan = plan.clone();
    let w_grad = w_hh.requires_grad();
    let idx = idx.clone();
    // The rows' gradient x̄g goes to a step of its own, `index_select`'s backward (each src
    // row sums its rows' gradients in row order), which runs once this rule's incoming
    // gradient and saved states are freed, as the gather's did.
    let through = Through {
        op: ROWS,
        from: xw,
        shape: vec![rows, 4 * h],
        backward: Box::new(move |dxg| Ok(vec![Some(scatter_add(dxg, &idx, ns)?)])),
    };
    Ok(record_through(OP, out, through, &[w_hh], move |g| {
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
struct GpuIndex<D: GpuTensors + LstmKernels> {
    dst: D::DstIds,
    steps: D::Buffer,
}

/// Step `t` of bucket `bucket` of `plan`, with `h` hidden units.
fn step_of(plan: &LstmPlan, bucket: usize, h: usize, t: usize) -> Step {
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
        Device::Cpu => {
            // The CPU sums W̄_hh step by step inside its backward (no `Hprev`).
            let (dxg, dw) = {
                let guards = (acts.storage(), cs.storage(), g.storage());
                let (a, c, gv) = (guards.0.cpu(OP)?, guards.1.cpu(OP)?, guards.2.cpu(OP)?);
                match (a, c, gv) {
                    (CpuData::F32(a), CpuData::F32(c), CpuData::F32(gv)) => {
                        lstm_pack::cpu_backward(a, c, gv, w, plan, h, w_grad)?
                    }
                    (CpuData::F64(a), CpuData::F64(c), CpuData::F64(gv)) => {
                        lstm_pack::cpu_backward(a, c, gv, w, plan, h, w_grad)?
                    }
                    _ => return Err(g.dtype_error(OP, acts.dtype().name())),
                }
            };
            drop((acts, cs, gpu));
            return Ok((
                cpu_output(dxg, vec![rows, 4 * h], g),
                dw.map(|b| cpu_output(b, vec![h, 4 * h], g)),
            ));
        }
        dev => on_gpu!(dev, |D| {
            let idx = gpu.as_ref().and_then(|i| i.downcast_ref());
            gpu_backward::<D>(&acts, &cs, g, idx, w, plan, w_grad)?
        }),
    };
    // The saved states are no longer read: free them before the weight-gradient matmul.
    drop((acts, cs, gpu));
    let dw = match hprev {
        Some(hp) => Some(matmul(&hp, &dxg, true, false)?),
        None => None,
    };
    Ok((dxg, dw))
}

/// The forward pass on a GPU backend: per bucket and step, the matmul `h_{t-1}·W_hh` and
/// the backend's step kernel, which reads each row's input projection `xw[idx[row]]` in
/// place (the indices checked on the host first, from their upload's copy).
fn gpu_forward<D: GpuTensors + LstmKernels>(
    xw: &Tensor,
    idx: &Tensor,
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
) -> Result<(Tensor, Saved)> {
    let guards = (xw.storage(), idx.storage());
    let (x, ib) = (D::buffer(&guards.0, OP)?, D::buffer(&guards.1, OP)?);
    let ns = xw.shape()[0];
    gpu_checked_indices::<D>(OP, idx, ib, ns)?;
    u32_count(OP, "xw", ns * 4 * h)?;
    let ctx = D::context_of(x).clone();
    let rows = plan.rows();
    u32_count(OP, "the gates", rows * 4 * h)?;
    u32_count(OP, "the output", plan.num_dst * h)?;
    let out = ctx.zeros((plan.num_dst * h * 4) as u64)?;
    let acts = ctx.alloc((rows * 4 * h * 4) as u64)?;
    let cs = ctx.alloc((rows * h * 4) as u64)?;
    let ids: Vec<&[u32]> = plan.buckets.iter().map(|b| b.dst.as_slice()).collect();
    let dst = ctx.upload_dst(&ids)?;
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
                let step = step_of(plan, bucket, h, t);
                let bufs = StepBuffers {
                    xw: x,
                    num_src: ns,
                    idx: ib,
                    hw,
                    acts: &acts,
                    cs: &cs,
                    next: &next,
                    out: &out,
                };
                ctx.step(step, &dst, bufs)?;
            }
            hb = Some(D::output(next, vec![m, h], xw));
        }
    }
    let steps = ctx.upload_u32(&plan.steps)?;
    let index: GpuIndex<D> = GpuIndex { dst, steps };
    Ok((
        D::output(out, vec![plan.num_dst, h], xw),
        Saved {
            acts: D::output(acts, vec![rows, 4 * h], xw),
            cs: D::output(cs, vec![rows, h], xw),
            gpu: Some(Box::new(index)),
        },
    ))
}

/// The backward pass on a GPU backend: `x̄g` and, when `w_grad`, `Hprev` (see the module
/// docs). `idx` is what [`gpu_forward`] saved on this backend.
fn gpu_backward<D: GpuTensors + LstmKernels>(
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
        lhs: acts.device().to_string(),
        rhs: g.device().to_string(),
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
                let step = step_of(plan, bucket, h, t);
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

/// Meta arm of [`lstm_aggregate`] ([`crate::meta`]) over dense `(nodes, degree)`
/// `buckets` ([`meta_lstm_buckets`]) of a block of `num_dst` dst nodes, reading the rows
/// of `xw` through `idx` (kept). On the CPU, whose arm runs the buckets as the packs of
/// [`crate::ops::lstm_packs`]: the output, 5 saved values per (row, unit) (gates and cell
/// state) and, per step of a pack, the next `h` `[n_t, F]` beside the previous one (the
/// product `h·W_hh` is written into the step's gate rows). Backward: `x̄g` `[rows, 4F]`,
/// `W̄_hh` `[F, 4F]` (summed over the steps), per step `z̄` `[n_t, 4F]`, `h̄` `[n_t, F]`
/// beside the previous one and, from the second step, `h_{t-1}` `[min(n_t, 1024), F]`
/// for `W̄_hh` (a block of rows at a time);
/// then the saved values go; `x̄g` goes to the rows' step ([`meta_lstm_rows`]), whose
/// rule scatters it into the src rows after this one.
/// On a GPU, bucket by bucket instead ([`meta_lstm_gpu`]).
pub fn meta_lstm_aggregate(
    r: &mut Replay,
    xw: &Val,
    idx: &Val,
    w_hh: &Val,
    num_dst: usize,
    buckets: Vec<(usize, usize)>,
) -> Val {
    if r.policy.gpu {
        return meta_lstm_gpu(r, xw, idx, w_hh, num_dst, buckets);
    }
    let (f, rows) = (w_hh.rows, idx.rows);
    let out = r.alloc(num_dst, f);
    let acts = r.alloc(rows, f.saturating_mul(4));
    let cs = r.alloc(rows, f);
    let packs = lstm_pack::lstm_packs(&buckets);
    for steps in &packs {
        meta_lstm_steps(r, steps.iter().copied(), f, false);
    }
    let w_grad = w_hh.grad;
    let xr = meta_lstm_rows(r, xw, idx, f.saturating_mul(4));
    let rule: Rule = Box::new(move |r, _| {
        let dxg = r.alloc(rows, f.saturating_mul(4));
        let dw = w_grad.then(|| r.alloc(f, f.saturating_mul(4)));
        for steps in &packs {
            let mut dh: Option<usize> = None;
            for (t, &m) in steps.iter().enumerate().rev() {
                let dz = r.alloc(m, f.saturating_mul(4));
                let next = (t > 0).then(|| r.alloc(m, f));
                let hp_rows = m.min(lstm_pack::HPREV_ROWS);
                if let Some(hp) = (t > 0 && w_grad).then(|| r.alloc(hp_rows, f)) {
                    r.release(hp);
                }
                if t > 0 {
                    r.release(dz);
                }
                if let Some(prev) = dh {
                    r.release(prev);
                }
                if t == 0 {
                    r.release(dz);
                }
                dh = next;
            }
        }
        r.release(acts);
        r.release(cs);
        vec![Some(dxg), dw]
    });
    let agg = r.record(out, (num_dst, f), &[&xr, w_hh], vec![], rule);
    r.release(xr.buf);
    agg
}

/// The GPU arm over dense `(nodes, degree)` buckets, its step kernels reading the rows of
/// `xw` through `idx` (kept) in place: the output, gates `[rows, 4F]` and cells
/// `[rows, F]`, the buckets' dst ids (u32 `[m]` each, or one buffer of them all where the
/// kernels index rows themselves, [`crate::device::AllocPolicy::lstm_rows_in_kernel`];
/// uploaded and kept for the backward); per bucket and step, `h·W_hh` `[m, 4F]` and the next `h` `[m, F]` beside
/// the previous one; then the rows' step numbers (u32 `[rows]`, kept). Backward: `x̄g`
/// `[rows, 4F]`; per bucket `c̄` `[m, F]` and per step, last first, `z̄` `[m, 4F]` (at the
/// last step with the gradient's rows of the bucket gathered, `[m, F]`, transient, unless
/// the kernels read them) and `h̄` `[m, F]` beside the previous one; `Hprev` `[rows, F]`;
/// the saved values and ids go before `W̄_hh = Hprevᵀ·x̄g`; `x̄g` goes to the rows' step
/// ([`meta_lstm_rows`]).
fn meta_lstm_gpu(
    r: &mut Replay,
    xw: &Val,
    idx: &Val,
    w_hh: &Val,
    num_dst: usize,
    buckets: Vec<(usize, usize)>,
) -> Val {
    let (f, rows) = (w_hh.rows, idx.rows);
    let f4 = f.saturating_mul(4);
    let out = r.alloc(num_dst, f);
    let acts = r.alloc(rows, f4);
    let cs = r.alloc(rows, f);
    let dst: Vec<usize> = match r.policy.lstm_rows_in_kernel {
        true => vec![r.alloc(buckets.iter().map(|&(m, _)| m).sum(), 1)],
        false => buckets.iter().map(|&(m, _)| r.alloc(m, 1)).collect(),
    };
    let gathers_last = !r.policy.lstm_rows_in_kernel;
    for &(m, k) in &buckets {
        meta_lstm_steps(r, std::iter::repeat_n(m, k), f, true);
    }
    let steps = r.alloc(rows, 1);
    let w_grad = w_hh.grad;
    let xr = meta_lstm_rows(r, xw, idx, f4);
    let rule: Rule = Box::new(move |r, _| {
        let dxg = r.alloc(rows, f4);
        for &(m, k) in &buckets {
            let dc = r.alloc(m, f);
            let mut dh: Option<usize> = None;
            for t in (0..k).rev() {
                let dz = r.alloc(m, f4);
                if t + 1 == k && gathers_last {
                    let last = r.alloc(m, f);
                    r.release(last);
                }
                let next = (t > 0).then(|| r.alloc(m, f));
                r.release(dz);
                if let Some(prev) = dh {
                    r.release(prev);
                }
                dh = next;
            }
            r.release(dc);
        }
        let hprev = w_grad.then(|| r.alloc(rows, f));
        for b in [acts, cs, steps].into_iter().chain(dst) {
            r.release(b);
        }
        vec![Some(dxg), meta_w_hh_grad(r, hprev, f)]
    });
    let agg = r.record(out, (num_dst, f), &[&xr, w_hh], vec![], rule);
    r.release(xr.buf);
    agg
}

/// `W̄_hh` `[F, 4F]` from `Hprev` (which goes after it), where `W_hh` needs a gradient.
fn meta_w_hh_grad(r: &mut Replay, hprev: Option<usize>, f: usize) -> Option<usize> {
    hprev.map(|hp| {
        let dw = r.alloc(f, f.saturating_mul(4));
        r.release(hp);
        dw
    })
}

/// The step through which the LSTM reads `xw` on either arm ([`Through`]): a node over
/// `xw` that keeps `idx` and whose rule scatters the rows' gradient `x̄g` `[rows, 4F]` into
/// `x̄w` `[ns, 4F]` ([`crate::ops::meta_scatter_add`]). Its output, the rows, is never
/// built: a buffer of no bytes, which the caller releases.
fn meta_lstm_rows(r: &mut Replay, xw: &Val, idx: &Val, f4: usize) -> Val {
    let (ns, rows) = (xw.rows, idx.rows);
    let saved = vec![r.share(idx.buf)];
    let none = r.alloc_bytes(0);
    let rule: Rule = Box::new(move |r, _| vec![Some(meta_scatter_add(r, ns, f4, rows))]);
    r.record(none, (rows, f4), &[xw], saved, rule)
}

/// The forward steps of one LSTM sequence of `F = f` units over `m` nodes a step: from the
/// second step `h·W_hh` `[m, 4F]` when `product_buffer` (a GPU's matmul; the CPU writes
/// the product into the saved gates), and the next `h` `[m, F]` beside the previous one;
/// the last `h` goes after the sequence.
fn meta_lstm_steps(
    r: &mut Replay,
    steps: impl IntoIterator<Item = usize>,
    f: usize,
    product_buffer: bool,
) {
    let mut hb: Option<usize> = None;
    for m in steps {
        let hw = hb
            .filter(|_| product_buffer)
            .map(|_| r.alloc(m, f.saturating_mul(4)));
        let next = r.alloc(m, f);
        if let Some(prev) = hb.replace(next) {
            r.release(prev);
        }
        if let Some(hw) = hw {
            r.release(hw);
        }
    }
    if let Some(hb) = hb {
        r.release(hb);
    }
}

/// The LSTM's dense batches `(nodes, degree)` from a block's degree histogram, in the
/// order of [`crate::graph::Buckets`] (increasing degree; the largest degree's bucket, the
/// explosion bucket, cut into pieces of at most `split` nodes): the meta arm of
/// [`LstmPlan`]'s buckets.
pub fn meta_lstm_buckets(hist: &[usize], split: Option<usize>) -> Vec<(usize, usize)> {
    let max = hist.iter().rposition(|&n| n > 0).unwrap_or(0);
    let mut v = Vec::new();
    for (k, &m) in hist.iter().enumerate().skip(1).filter(|&(_, &m)| m > 0) {
        match split.filter(|&n| k == max && n > 0) {
            Some(n) => {
                let mut left = m;
                while left > 0 {
                    v.push((left.min(n), k));
                    left -= left.min(n);
                }
            }
            None => v.push((m, k)),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Block, Buckets};
    use crate::ops::index_select;

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
    fn zero_degree_rows_are_zero_and_shapes_and_indices_are_checked() {
        let b = block();
        let plan = Arc::new(LstmPlan::new(&b, &Buckets::new(&b, None)).unwrap());
        let h = 2;
        let xw = Tensor::from_f64(vec![0.3; 6 * 4 * h], &[6, 4 * h]).unwrap();
        let idx = Tensor::from_u32(plan.src.clone(), &[5], Device::Cpu).unwrap();
        let w = Tensor::from_f64(vec![0.1; h * 4 * h], &[h, 4 * h]).unwrap();
        let out = lstm_aggregate(&xw, &idx, &w, &plan).unwrap();
        assert_eq!(out.shape(), &[4, h]);
        let v = out.to_vec_f64().unwrap();
        assert_eq!(&v[2..4], &[0.0, 0.0]);
        assert!(v[0] != 0.0);
        let narrow = Tensor::from_f64(vec![0.3; 6 * 3 * h], &[6, 3 * h]).unwrap();
        assert!(matches!(
            lstm_aggregate(&narrow, &idx, &w, &plan),
            Err(Error::Shape { .. })
        ));
        let short = Tensor::from_u32(vec![0; 4], &[4], Device::Cpu).unwrap();
        assert!(matches!(
            lstm_aggregate(&xw, &short, &w, &plan),
            Err(Error::Shape { .. })
        ));
        let beyond = Tensor::from_u32(vec![0, 4, 6, 1, 4], &[5], Device::Cpu).unwrap();
        assert!(matches!(
            lstm_aggregate(&xw, &beyond, &w, &plan),
            Err(Error::InvalidArgument(_))
        ));
    }

    /// The rows read through `idx` give the bits of the rows gathered first (the op's
    /// input before the gather moved into it): output, and `x̄w` = the scatter of `x̄g`.
    #[test]
    fn reading_through_the_index_gives_the_bits_of_gathered_rows() {
        let b = block();
        let plan = Arc::new(LstmPlan::new(&b, &Buckets::new(&b, None)).unwrap());
        let (h, rows) = (3, plan.rows());
        let vals = |n: usize, salt: u32| -> Vec<f32> {
            (0..n as u32)
                .map(|i| ((i.wrapping_mul(2654435761) ^ salt) % 1000) as f32 / 500.0 - 1.0)
                .collect()
        };
        let xw = Tensor::from_f32(vals(6 * 4 * h, 1), &[6, 4 * h], Device::Cpu)
            .unwrap()
            .requires_grad_leaf();
        let w = Tensor::from_f32(vals(h * 4 * h, 2), &[h, 4 * h], Device::Cpu)
            .unwrap()
            .requires_grad_leaf();
        let idx = Tensor::from_u32(plan.src.clone(), &[rows], Device::Cpu).unwrap();
        let g = Tensor::from_f32(vals(4 * h, 3), &[4, h], Device::Cpu).unwrap();
        let run = |x: &Tensor, i: &Tensor| -> (Vec<f32>, Vec<f32>) {
            let out = lstm_aggregate(x, i, &w, &plan).unwrap();
            let loss = crate::ops::sum_all(&crate::ops::mul(&out, &g).unwrap()).unwrap();
            loss.backward().unwrap();
            let dw = w.grad().unwrap().to_vec_f32().unwrap();
            w.zero_grad();
            (out.to_vec_f32().unwrap(), dw)
        };
        let fused = run(&xw, &idx);
        let dxw = xw.grad().unwrap().to_vec_f32().unwrap();
        let xg = index_select(&xw.detach(), &idx)
            .unwrap()
            .requires_grad_leaf();
        let identity = Tensor::from_u32((0..rows as u32).collect(), &[rows], Device::Cpu).unwrap();
        assert_eq!(fused, run(&xg, &identity));
        let scattered = scatter_add(&xg.grad().unwrap(), &idx, 6).unwrap();
        assert_eq!(dxw, scattered.to_vec_f32().unwrap());
    }
}
