//! The plan of [`crate::ops::lstm_aggregate`] (where each (dst node, step) lives) and its
//! CPU arm: buckets packed into one sequence.
//!
//! Per bucket and step, the recurrent product `h_{t-1}·W_hh` is a GEMM over the bucket's
//! `m` nodes, which for the small buckets of a sampled block is dominated by packing
//! `W_hh` (`[F, 4F]`) into the GEMM's panels, once per call: a bucket of degree `k` costs
//! `k - 1` calls whatever its size. Packed sequences (PyTorch's `PackedSequence`) run
//! several buckets together instead: their nodes are laid in decreasing degree, so the
//! nodes still running at step `t` (degree `> t`) are a prefix of the pack, and step `t`
//! is one GEMM over that prefix, `k_max - 1` calls per pack.
//!
//! **Packs** ([`lstm_packs`]): the plan's buckets are taken in decreasing degree and
//! grouped greedily while the pack's nodes stay within `max(m_max, rows / 6)`, `m_max`
//! the largest bucket's nodes: a forward step holds two `h [n_t, H]`, backward `z̄ [n_t,
//! 4H]` and `h̄ [n_t, H]`, so a step's buffers are never larger than the largest bucket's
//! were or than the cell states `[rows, H]` kept beside them.
//!
//! **The CPU's row order** for the saved gates and cell states is its own, step-major
//! within each pack (see [`cpu_forward`]): a step's rows are contiguous, so its recurrent
//! product is written straight into its gate rows, and the cell passes stream through
//! memory instead of jumping a node's degree of rows between nodes. `x̄g` keeps the
//! plan's layout, which every backend shares. The forward reads each node's
//! projected row `xw[src[row]]` in place (the gather fused into the cell step); the rows a
//! step touches, of `xw` forward and of `x̄g` backward, are prefetched a node ahead.
//!
//! **Chunks.** A step's nodes run over rayon's pool in chunks of about 128 KiB of gate
//! rows ([`chunk_rows`]): forward, a chunk's recurrent product and then its cells;
//! backward, its cells and then its rows of `h̄_{t-1} = z̄_t·W_hhᵀ`. A chunk's gates are
//! read back from cache instead of memory, and one fork serves the product and the
//! cells. The products themselves (`lstm_pack/recurrent.rs`) read `W_hh` as laid out
//! once per call of the op, not packed again for every chunk, with the `gemm` crate's
//! bits.

//! Every value is the one the per-bucket order computes, bit for bit: a row of a GEMM
//! does not depend on the other rows, and each node's steps read and write only its own
//! rows of the layout.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::device::cpu::{self, CpuBuffer, CpuElem};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::graph::{Block, Buckets};
use crate::ops::lstm_cell::{cell_rows, cell_rows_backward, hidden_rows};
use crate::ops::matmul::{self as matmul_op, Gemm};
use crate::ops::rows::parallel;
use crate::tensor::Tensor;
use recurrent::Recurrent;

mod recurrent;

/// The op whose plan and CPU arms this file holds.
const OP: &str = "lstm_aggregate";

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

/// The packs of buckets given as `(nodes, degree)` in plan order: for each pack, the
/// number of nodes still running at each step `t = 0 … k_max - 1` (non-increasing).
pub fn lstm_packs(buckets: &[(usize, usize)]) -> Vec<Vec<usize>> {
    groups(buckets)
        .iter()
        .map(|g| active(&g.iter().map(|&b| buckets[b]).collect::<Vec<_>>()))
        .collect()
}

/// Values per (node, hidden unit) a step holds beside the saved states, at most: a
/// backward step's `z̄` (4) and `h̄` (1) and the GPUs' forward step (`h·W_hh`, 4, and two
/// `h`). A pack of at most `rows / STEP_VALUES` nodes holds at most `[rows, H]`, what the
/// saved cell states take.
const STEP_VALUES: usize = 6;

/// Bucket indices of each pack, in decreasing degree (see the module docs).
fn groups(buckets: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let rows = buckets
        .iter()
        .fold(0usize, |a, &(m, k)| a.saturating_add(m.saturating_mul(k)));
    let cap = buckets
        .iter()
        .map(|b| b.0)
        .max()
        .unwrap_or(0)
        .max(rows / STEP_VALUES);
    let mut out = Vec::new();
    let mut pack: Vec<usize> = Vec::new();
    let (mut nodes, mut last) = (0usize, usize::MAX);
    for b in (0..buckets.len()).rev() {
        let (m, k) = buckets[b];
        if !pack.is_empty() && (nodes.saturating_add(m) > cap || k > last) {
            out.push(std::mem::take(&mut pack));
            nodes = 0;
        }
        pack.push(b);
        nodes = nodes.saturating_add(m);
        last = k;
    }
    if !pack.is_empty() {
        out.push(pack);
    }
    out
}

/// Nodes running at each step of a pack of `(nodes, degree)` buckets: `n_t = Σ m` over
/// the buckets of degree `> t`, as suffix sums over the degrees (saturating, for the
/// estimator's absurd sizes).
fn active(pack: &[(usize, usize)]) -> Vec<usize> {
    let steps = pack.iter().map(|b| b.1).max().unwrap_or(0);
    let mut n = vec![0usize; steps];
    for &(m, k) in pack.iter().filter(|b| b.1 > 0) {
        n[k - 1] = n[k - 1].saturating_add(m);
    }
    for t in (1..steps).rev() {
        n[t - 1] = n[t - 1].saturating_add(n[t]);
    }
    n
}

/// One pack, nodes in pack order: the first row of each node in the layout, its dst id,
/// the nodes running at each step, and the node's rows of a `[rows, w]` buffer (none for
/// `w = 0`).
struct Pack<'a, T> {
    base: Vec<usize>,
    dst: Vec<usize>,
    steps: Vec<usize>,
    rows: Vec<&'a mut [T]>,
}

/// The packs of `plan` over the per-node rows of a `[rows, w]` buffer.
fn packs<'a, T>(plan: &LstmPlan, buf: &'a mut [T], w: usize) -> Vec<Pack<'a, T>> {
    let sizes: Vec<_> = plan
        .buckets
        .iter()
        .map(|b| (b.dst.len(), b.degree))
        .collect();
    let mut by_bucket: Vec<Vec<&'a mut [T]>> = Vec::new();
    let mut buf = buf;
    for b in &plan.buckets {
        let len = b.dst.len() * b.degree;
        let (here, rest) = std::mem::take(&mut buf).split_at_mut(len * w);
        buf = rest;
        by_bucket.push(if w > 0 {
            here.chunks_mut(b.degree * w).collect()
        } else {
            Vec::new()
        });
    }
    groups(&sizes)
        .into_iter()
        .map(|g| {
            let mut p = Pack {
                base: Vec::new(),
                dst: Vec::new(),
                steps: active(&g.iter().map(|&b| sizes[b]).collect::<Vec<_>>()),
                rows: Vec::new(),
            };
            for &b in &g {
                let pb = &plan.buckets[b];
                p.base
                    .extend((0..pb.dst.len()).map(|i| pb.offset + i * pb.degree));
                p.dst.extend(pb.dst.iter().map(|&d| d as usize));
                p.rows.extend(std::mem::take(&mut by_bucket[b]));
            }
            p
        })
        .collect()
}

/// Runs `f` over `items`, over rayon's pool when `work` is worth it.
fn for_each<I, F>(work: usize, items: I, f: F)
where
    I: IndexedParallelIterator,
    F: Fn(I::Item) + Sync + Send,
{
    if parallel(work) {
        items.for_each(f);
    } else {
        // Never split: the whole range runs on the calling thread.
        items.with_min_len(usize::MAX).for_each(f);
    }
}

/// Where each pack's steps lie in the CPU's own layout of the saved gates and cell
/// states (see [`cpu_forward`]): the first row of step `t` of every pack, in pack order.
fn step_rows(steps: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut row = 0;
    steps
        .iter()
        .map(|n| {
            n.iter()
                .map(|&n_t| {
                    let first = row;
                    row += n_t;
                    first
                })
                .collect()
        })
        .collect()
}

/// Asks the CPU to bring `row` into its cache ahead of use: the rows of the plan's layout
/// that a step reads or writes lie a node's degree of rows apart, a jump the hardware
/// prefetcher does not predict (nor the src rows of `xw` they read), so without it each
/// node's first touch of its `xw` row (forward) or `x̄g` row (backward) waits on memory.
/// No effect on any value.
#[inline(always)]
fn prefetch<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = row.as_ptr().cast::<i8>();
        for off in (0..std::mem::size_of_val(row)).step_by(64) {
            // SAFETY: `p + off` lies inside `row`; a prefetch reads nothing the program
            // sees and cannot fault.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// Nodes of a step that one task runs: its recurrent product and then its cells (forward),
/// or its cells and then its product with `W_hhᵀ` (backward), while the task's gate rows
/// (about 128 KiB) are still in cache. At least 16 rows, so that a product's packing of
/// `W_hh` stays small beside its multiply-adds.
fn chunk_rows(h: usize) -> usize {
    (32 * 1024 / (4 * h).max(1)).clamp(16, 512)
}

/// A chunk of a parallel forward step: (chunk index, ((its gate rows, its cell rows), its
/// rows of the next `h`)); the gate and cell rows are new, not yet written.
type CellChunk<'b, T> = (
    usize,
    (
        (&'b mut [MaybeUninit<T>], &'b mut [MaybeUninit<T>]),
        &'b mut [T],
    ),
);

/// `piece` filled with zeros, as initialised values (a new buffer's rows, zeroed by the
/// task that writes them next, while they are in its cache).
fn zeroed<T: Float>(piece: &mut [MaybeUninit<T>]) -> &mut [T] {
    for v in piece.iter_mut() {
        v.write(T::ZERO);
    }
    // SAFETY: every value was written just above; `MaybeUninit<T>` has the layout of `T`.
    unsafe { &mut *(piece as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// The values of `rows`, which must all have been written.
///
/// # Safety
/// Every value of `rows` is initialised.
unsafe fn assume_init<T>(rows: &[MaybeUninit<T>]) -> &[T] {
    // SAFETY: the caller's contract; `MaybeUninit<T>` has the layout of `T`.
    unsafe { &*(rows as *const [MaybeUninit<T>] as *const [T]) }
}

/// A chunk of a parallel backward step: (chunk index, (((its nodes' `x̄g` rows, new, not
/// yet written, their `c̄`), their rows of `z̄`), their rows of `h̄` for step `t - 1`)).
type GradChunk<'b, 'a, 'c, T> = (
    usize,
    (
        (
            (&'b mut [&'a mut [MaybeUninit<T>]], &'b mut [T]),
            &'b mut [T],
        ),
        &'b mut Option<&'c mut [T]>,
    ),
);

/// What a backward step's cells read: the forward's saved gates and cell states, the
/// output rows' gradient `g` (a node's row: its `dst`), the incoming `h̄` of the nodes
/// below `still` (`dh_in`, from step `t + 1`), zeros for a first step's `c_{t-1}`, the
/// step and the width `(t, H)`, and the first rows of steps `t` and `t - 1`.
struct StepCells<'a, T> {
    saved: (&'a [T], &'a [T]),
    g: &'a [T],
    dst: &'a [usize],
    dh_in: Option<&'a [T]>,
    zeros: &'a [T],
    at: (usize, usize),
    first: (usize, usize),
    still: usize,
}

impl<T: Float> StepCells<'_, T> {
    /// The cells of a chunk of the step's nodes from node `i0`: each node's `c̄` row
    /// (`dcr`) and `z̄` row (`dzr`), the latter also written into its `x̄g` row (`dx`).
    fn backward(&self, i0: usize, dx: &mut [&mut [MaybeUninit<T>]], dcr: &mut [T], dzr: &mut [T]) {
        let ((acts, cs), (t, h), (q, qp)) = (self.saved, self.at, self.first);
        for l in 0..dx.len() {
            if let Some(next) = dx.get(l + 1) {
                prefetch(&next[t * 4 * h..(t + 1) * 4 * h]);
            }
            let dx = &mut dx[l];
            let i = i0 + l;
            let r = q + i;
            let a = &acts[r * 4 * h..(r + 1) * 4 * h];
            let c = &cs[r * h..(r + 1) * h];
            let cp = if t > 0 {
                &cs[(qp + i) * h..(qp + i + 1) * h]
            } else {
                self.zeros
            };
            let hbar = match self.dh_in {
                Some(dh) if i < self.still => &dh[i * h..(i + 1) * h],
                _ => &self.g[self.dst[i] * h..(self.dst[i] + 1) * h],
            };
            let dzr = &mut dzr[l * 4 * h..(l + 1) * 4 * h];
            cell_rows_backward(a, (c, cp), hbar, &mut dcr[l * h..(l + 1) * h], dzr);
            for (y, &v) in dx[t * 4 * h..(t + 1) * 4 * h].iter_mut().zip(&*dzr) {
                y.write(v);
            }
        }
    }
}

/// Nodes of a pack's longest-running step, the first (0 for an empty pack).
fn step_max(steps: &[usize]) -> usize {
    steps.first().copied().unwrap_or(0)
}

/// Rows of `h_{t-1}` a backward step holds at once for `W̄_hh`: a bound on that buffer
/// (and on what it adds to the step's memory), large enough that each block's product is
/// a long sum.
pub(crate) const HPREV_ROWS: usize = 1024;

/// Adds a backward step's `h_{t-1}ᵀ·z̄_t` to `W̄_hh` `[H, 4H]` (`dw`): `z̄_t` `[n, 4H]`
/// (`dz`), `h_{t-1} = o·tanh(c)` from `(acts, cs)`, the gates and cell states from the
/// first row of step `t - 1` on in [`cpu_forward`]'s row order (the nodes of step `t`
/// are the first of step `t - 1`'s). In blocks of [`HPREV_ROWS`] rows, in order: each
/// block's `h_{t-1}` into `hp` (over the pool in pieces of `per` rows), its product into
/// `term`, then added to `dw`.
fn add_w_hh_terms<T: Float + CpuElem + Gemm>(
    (acts, cs): (&[T], &[T]),
    dz: &[T],
    h: usize,
    per: usize,
    (hp, term, dw): (&mut [T], &mut [T], &mut [T]),
) {
    let n = dz.len() / (4 * h);
    for b0 in (0..n).step_by(HPREV_ROWS) {
        let m = (n - b0).min(HPREV_ROWS);
        let hp = &mut hp[..m * h];
        let fill = |(j, rows): (usize, &mut [T])| {
            let (r, m) = (b0 + j * per, rows.len() / h);
            let (a, c) = (&acts[r * 4 * h..(r + m) * 4 * h], &cs[r * h..(r + m) * h]);
            hidden_rows(h, a, c, rows);
        };
        for_each(m * 3 * h, hp.par_chunks_mut(per * h).enumerate(), fill);
        let z = &dz[b0 * 4 * h..(b0 + m) * 4 * h];
        matmul_op::cpu_product_tn(m, h, 4 * h, hp, z, term);
        for (y, &v) in dw.iter_mut().zip(&*term) {
            *y += v;
        }
    }
}

/// Two buffers of `[n, H]` rows that trade places each step: forward, a step's `h` and
/// the step's before; backward, a step's incoming `h̄` and the `h̄_{t-1}` it writes.
/// They are allocated once for a whole pass, at the largest step's size, instead of once
/// a step: every step writes all the rows it later reads, so nothing needs zeroing again,
/// and a step's buffer is still in cache from the step before. The memory tracker still
/// counts one buffer a step, reserved and freed by the caller as before, so what it sees
/// (and the estimator's replay of it) does not change.
struct StepBuffers<T> {
    bufs: [Vec<T>; 2],
    /// Which of `bufs` holds the step before's rows.
    prev: usize,
}

impl<T: Float> StepBuffers<T> {
    /// Room for the largest of `nodes` rows of width `w`.
    fn new(nodes: impl Iterator<Item = usize>, w: usize) -> Result<Self> {
        let len = nodes.max().unwrap_or(0).saturating_mul(w);
        Ok(StepBuffers {
            bufs: [
                cpu::try_filled(len, T::ZERO)?,
                cpu::try_filled(len, T::ZERO)?,
            ],
            prev: 0,
        })
    }

    /// The first `prev_len` values of the step before (when `has_prev`) and the first
    /// `len` of this step's buffer.
    fn pair(&mut self, prev_len: usize, len: usize, has_prev: bool) -> (Option<&[T]>, &mut [T]) {
        let [a, b] = &mut self.bufs;
        let (prev, this) = if self.prev == 0 { (a, b) } else { (b, a) };
        (has_prev.then(|| &prev[..prev_len]), &mut this[..len])
    }

    /// This step's buffer becomes the step before's.
    fn swap(&mut self) {
        self.prev ^= 1;
    }
}

/// Forward: `(out [num_dst, H], activated gates [rows, 4H], cell states [rows, H])`.
///
/// The gates and cell states are kept in the CPU's own row order, which only
/// [`cpu_backward`] reads: pack after pack, step after step, the nodes of a step in pack
/// order, so that a step's rows are contiguous. The recurrent product `h_{t-1}·W_hh` is
/// then written straight into the step's gate rows (no buffer of its own), and the cell
/// pass adds each node's projected row `xw[src[row]]` to it in place (the same sum, bit
/// for bit, as adding a separate product to a gathered copy of the rows; `src` is the
/// plan's `src`, each row's row of `xw`). A step runs as chunks of [`chunk_rows`] nodes
/// over rayon's pool, each chunk's product followed by its cells (a row of a product has
/// the same bits whatever rows share it: [`matmul_op::cpu_product_rows`]).
pub(crate) fn cpu_forward<T: Float + CpuElem + Gemm>(
    xw: &[T],
    src: &[u32],
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
) -> Result<(CpuBuffer, CpuBuffer, CpuBuffer)> {
    let rows = plan.rows();
    let (out_alloc, acts_alloc, cs_alloc) = (
        cpu::reserve::<T>(plan.num_dst * h)?,
        cpu::reserve::<T>(rows * 4 * h)?,
        cpu::reserve::<T>(rows * h)?,
    );
    let mut out = cpu::try_filled(plan.num_dst * h, T::ZERO)?;
    // The gates and cell states are not zero-filled: every row is written by its step
    // before anything reads it (a new buffer's spare room, its length set at the end).
    let mut acts: Vec<T> = cpu::try_vec(rows * 4 * h)?;
    let mut cs: Vec<T> = cpu::try_vec(rows * h)?;
    let acts_rows = &mut acts.spare_capacity_mut()[..rows * 4 * h];
    let cs_rows = &mut cs.spare_capacity_mut()[..rows * h];
    // The cell state before a sequence's first step.
    let zeros = vec![T::ZERO; h];
    if h > 0 {
        let guard = w.storage();
        let wv = T::slice(guard.cpu(OP)?).ok_or_else(|| w.dtype_error(OP, "f32"))?;
        let packs = packs::<T>(plan, &mut [], 0);
        let firsts = step_rows(&packs.iter().map(|p| p.steps.clone()).collect::<Vec<_>>());
        let per = chunk_rows(h);
        let rec = Recurrent::new(wv, h, false)?;
        let rec = &rec;
        // The hidden states of a step and of the one before, each `[n_t, H]`: two buffers
        // of the largest step's size for the whole pass, each step's rows written in full
        // before they are read (see [`StepBuffers`]).
        let mut hbufs = StepBuffers::<T>::new(packs.iter().map(|p| step_max(&p.steps)), h)?;
        for (p, first) in packs.iter().zip(&firsts) {
            // What the memory tracker counts: the step's `h`, as a buffer of its own.
            let mut held: Option<crate::device::Allocation> = None;
            for (t, &n) in p.steps.iter().enumerate() {
                let (done, rest) = cs_rows.split_at_mut(first[t] * h);
                let cp = if t > 0 {
                    // SAFETY: the steps before this one (every row below `first[t]`)
                    // wrote their cell states.
                    unsafe { assume_init(&done[first[t - 1] * h..(first[t - 1] + n) * h]) }
                } else {
                    &[]
                };
                let c_t = &mut rest[..n * h];
                let a_t = &mut acts_rows[first[t] * 4 * h..(first[t] + n) * 4 * h];
                let alloc = cpu::reserve::<T>(n * h)?;
                let (prev, next) = hbufs.pair(n * h, n * h, held.is_some());
                let base = &p.base;
                let hv = prev;
                let zeros = &zeros;
                let chunk = |(j, ((z, c), hrow)): CellChunk<'_, T>| {
                    let (i0, m) = (j * per, c.len() / h);
                    // The chunk's gate rows: the recurrent product, or zeros at the first
                    // step (the cells copy the projection over them); its cell rows as
                    // zeros, which the cells overwrite: written while in cache.
                    let z = match hv {
                        Some(hv) => {
                            let a = &hv[i0 * h..(i0 + m) * h];
                            rec.forward(m, a, z)
                        }
                        None => zeroed(z),
                    };
                    let c = zeroed(c);
                    for i in 0..m {
                        if let Some(&b) = base.get(i0 + i + 1).filter(|_| i + 1 < m) {
                            let s = src[b + t] as usize;
                            prefetch(&xw[s * 4 * h..(s + 1) * 4 * h]);
                        }
                        let r = src[base[i0 + i] + t] as usize * 4 * h;
                        let c_prev = match hv {
                            Some(_) => &cp[(i0 + i) * h..(i0 + i + 1) * h],
                            None => zeros,
                        };
                        cell_rows(
                            &mut z[i * 4 * h..(i + 1) * 4 * h],
                            &xw[r..r + 4 * h],
                            hv.is_some(),
                            c_prev,
                            &mut c[i * h..(i + 1) * h],
                            &mut hrow[i * h..(i + 1) * h],
                        );
                    }
                };
                let items = a_t
                    .par_chunks_mut(per * 4 * h)
                    .zip(c_t.par_chunks_mut(per * h))
                    .zip(next.par_chunks_mut(per * h))
                    .enumerate();
                let product = if t > 0 { 4 * h * h } else { 0 };
                for_each(n * (9 * h + product), items, chunk);
                // Nodes of degree t + 1 end here: their hidden state is the output.
                let still = p.steps.get(t + 1).copied().unwrap_or(0);
                for i in still..n {
                    let d = p.dst[i];
                    out[d * h..(d + 1) * h].copy_from_slice(&next[i * h..(i + 1) * h]);
                }
                hbufs.swap();
                held = Some(alloc);
            }
        }
    }
    // SAFETY: the packs' steps cover every row of the CPU's order once (`step_rows`), and
    // each step wrote all of its gate and cell rows.
    unsafe {
        acts.set_len(rows * 4 * h);
        cs.set_len(rows * h);
    }
    Ok((
        CpuBuffer::from_reserved(T::wrap(out), out_alloc),
        CpuBuffer::from_reserved(T::wrap(acts), acts_alloc),
        CpuBuffer::from_reserved(T::wrap(cs), cs_alloc),
    ))
}

/// Backward: `(x̄g, W̄_hh if W_hh needs a gradient)`, from the gates and cell states in
/// [`cpu_forward`]'s row order; `x̄g` in the plan's. A step runs as chunks of
/// [`chunk_rows`] nodes, each chunk's cells followed by its rows of `h̄_{t-1} =
/// z̄_t·W_hhᵀ`, the bits of the whole step's product (the buffer of `h̄` is counted as
/// the matmul op's output would be, so the memory tracker sees what it saw before).
///
/// `W̄_hh = Σ_t h_{t-1}ᵀ·z̄_t` is summed step by step, pack after pack and within a pack
/// from the last step to the first, over the steps from `t = 1` (at `t = 0`, `h_{t-1} =
/// 0`): after its cells, a step recomputes its nodes' `h_{t-1} = o·tanh(c)` of step
/// `t - 1` a block of rows at a time (a buffer of at most [`HPREV_ROWS`] rows, counted a
/// step at a time) and adds each block's `[H, 4H]` product ([`add_w_hh_terms`]). The GPUs' arms instead multiply `Hprevᵀ·x̄g` over all rows in
/// one product, step-0 rows (zero) included: the sums run in another order, so the two
/// differ in the last bits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cpu_backward<T: Float + CpuElem + Gemm>(
    acts: &[T],
    cs: &[T],
    g: &[T],
    w: &Tensor,
    plan: &LstmPlan,
    h: usize,
    w_grad: bool,
) -> Result<(CpuBuffer, Option<CpuBuffer>)> {
    let rows = plan.rows();
    let dxg_alloc = cpu::reserve::<T>(rows * 4 * h)?;
    // Not zero-filled: each (node, step) row is written once, by its step.
    let mut dxg: Vec<T> = cpu::try_vec(rows * 4 * h)?;
    // W̄_hh `[H, 4H]`, summed step by step (see the doc above).
    let mut dw = match w_grad {
        true => Some((
            cpu::reserve::<T>(h * 4 * h)?,
            cpu::try_filled(h * 4 * h, T::ZERO)?,
        )),
        false => None,
    };
    let zeros = vec![T::ZERO; h];
    if h > 0 {
        let guard = w.storage();
        let wv = T::slice(guard.cpu(OP)?).ok_or_else(|| w.dtype_error(OP, "f32"))?;
        let per = chunk_rows(h);
        let rec = Recurrent::new(wv, h, true)?;
        let rec = &rec;
        let mut packs = packs(plan, &mut dxg.spare_capacity_mut()[..rows * 4 * h], 4 * h);
        let firsts = step_rows(&packs.iter().map(|p| p.steps.clone()).collect::<Vec<_>>());
        // A step's z̄ `[n_t, 4H]`, and its incoming h̄ and outgoing h̄_{t-1} `[n_t, H]`:
        // buffers of the largest step's size for the whole pass ([`StepBuffers`]).
        let most = packs.iter().map(|p| step_max(&p.steps)).max().unwrap_or(0);
        let mut dzbuf = cpu::try_filled(most.saturating_mul(4 * h), T::ZERO)?;
        let mut hbufs = StepBuffers::<T>::new(packs.iter().map(|p| step_max(&p.steps)), h)?;
        // A block of a step's `h_{t-1}` rows `[≤ HPREV_ROWS, H]` for W̄_hh, and a block's
        // term `[H, 4H]`.
        let (mut hpbuf, mut term) = match w_grad {
            true => (
                cpu::try_filled(most.min(HPREV_ROWS).saturating_mul(h), T::ZERO)?,
                cpu::try_filled(h * 4 * h, T::ZERO)?,
            ),
            false => (Vec::new(), Vec::new()),
        };
        for (p, first) in packs.iter_mut().zip(&firsts) {
            let mut dc = cpu::try_filled(p.base.len() * h, T::ZERO)?;
            // What the memory tracker counts: the step's incoming h̄, as a buffer of its own.
            let mut dh: Option<crate::device::Allocation> = None;
            for t in (0..p.steps.len()).rev() {
                let n = p.steps[t];
                // Nodes below `still` ran past step t: their h̄ comes from step t + 1.
                let still = p.steps.get(t + 1).copied().unwrap_or(0);
                let alloc = cpu::reserve::<T>(n * 4 * h)?;
                let dz = &mut dzbuf[..n * 4 * h];
                let next = (t > 0).then(|| cpu::reserve::<T>(n * h)).transpose()?;
                // Step 0's h_{t-1} is zero: it adds nothing to W̄_hh.
                let hp_rows = n.min(HPREV_ROWS);
                let hp_alloc = (t > 0 && w_grad)
                    .then(|| cpu::reserve::<T>(hp_rows * h))
                    .transpose()?;
                let (dh_in, hn) = hbufs.pair(still * h, n * h, dh.is_some());
                let chunks = n.div_ceil(per);
                let mut next_rows: Vec<Option<&mut [T]>> = match next {
                    Some(_) => hn.chunks_mut(per * h).map(Some).collect(),
                    None => (0..chunks).map(|_| None).collect(),
                };

                let cells = StepCells {
                    saved: (acts, cs),
                    g,
                    dst: &p.dst,
                    dh_in,
                    zeros: &zeros,
                    at: (t, h),
                    first: (first[t], if t > 0 { first[t - 1] } else { 0 }),
                    still,
                };
                let chunk = |(j, (((dx, dcr), dzr), hn)): GradChunk<'_, '_, '_, T>| {
                    cells.backward(j * per, dx, dcr, dzr);
                    if let Some(hn) = hn {
                        let m = dx.len();
                        rec.backward(m, dzr, hn);
                    }
                };
                let items = p.rows[..n]
                    .par_chunks_mut(per)
                    .zip(dc[..n * h].par_chunks_mut(per * h))
                    .zip(dz.par_chunks_mut(per * 4 * h))
                    .zip(next_rows.par_iter_mut())
                    .enumerate();
                let product = if t > 0 { 4 * h * h } else { 0 };
                for_each(n * (12 * h + product), items, chunk);
                drop(next_rows);
                // W̄_hh += h_{t-1}ᵀ·z̄_t over the step's nodes, in blocks of rows.
                if let (Some(hp_alloc), Some((_, dw))) = (hp_alloc, dw.as_mut()) {
                    let qp = cells.first.1;
                    let rows_before = (&acts[qp * 4 * h..], &cs[qp * h..]);
                    let terms = (&mut hpbuf[..], &mut term[..], &mut dw[..]);
                    add_w_hh_terms(rows_before, dz, h, per, terms);
                    drop(hp_alloc);
                }
                // Freed in the order of the matmul op's arm: z̄, then the step's incoming
                // h̄; at step 0 (no product) the other way round.
                if t > 0 {
                    drop(alloc);
                    dh = next;
                    hbufs.swap();
                } else {
                    dh = next;
                    drop(alloc);
                }
            }
        }
    }
    // SAFETY: the packs' steps wrote every (node, step) row of the plan's layout, the
    // `rows` rows in all (none when h = 0).
    unsafe { dxg.set_len(rows * 4 * h) };
    let dw = dw.map(|(alloc, v)| CpuBuffer::from_reserved(T::wrap(v), alloc));
    Ok((CpuBuffer::from_reserved(T::wrap(dxg), dxg_alloc), dw))
}

#[cfg(test)]
mod tests;
