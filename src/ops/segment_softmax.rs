//! Softmax over each dst node's in-edges, per head (GAT's attention normalisation).
//!
//! For per-edge scores `x[E, H]` (row `e` = edge position in `block.indices`, one column per
//! head) and the in-edges `N(d)` of each dst node `d`:
//!
//! ```text
//! y[e, h] = exp(x[e, h] - m[d, h]) / Σ_{e' ∈ N(d)} exp(x[e', h] - m[d, h]),
//! m[d, h] = max_{e' ∈ N(d)} x[e', h]                 (subtract the max: no overflow)
//! ```
//!
//! Backward: `x̄[e, h] = y[e, h] · (ḡ[e, h] - Σ_{e' ∈ N(d)} ḡ[e', h] · y[e', h])`.
//!
//! The edges of a dst node are contiguous, so one task per (dst, head) owns its outputs in
//! both directions: no atomics, deterministic, no transposed CSR needed. Saved: the output
//! `y` and the block. A dst node without in-edges owns no rows.
//!
//! On wgpu (`shaders/segment_softmax.wgsl`) one invocation owns a (dst, head) and loops
//! over its edges, except for rows of at least `long_row` edges (by
//! default 64 on a hardware adapter, none on a software one): those take a 64-thread
//! workgroup per head, reduced by the prelude's `wg_max64` / `wg_sum64` (subgroups where
//! the adapter has them), from a list of the dispatch's long rows the op uploads.
//!
//! On CUDA (`kernels/segment_softmax.cu`) a warp owns a dst node: its edges' rows are
//! contiguous, lanes stride over them, and the per-head max and sums are warp reductions
//! (a fixed order, so deterministic; the sums are a tree rather than the CPU's serial order).
//!
//! Both GPU backends run through the GPU seam (`src/ops/gpu.rs`): the allocation and
//! the tensors around the kernels are written once ([`gpu_forward`], [`gpu_backward`]),
//! and each backend implements [`SegmentSoftmaxKernels`] (`src/device/kernels/`) in its
//! own folder (`device/wgpu/kernels/segment_softmax.rs`: windows of dst rows;
//! `device/cuda/kernels/segment_softmax.rs`: typed arguments checked against the `.cu`).

use std::sync::Arc;

use rayon::prelude::*;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuElem};
use crate::device::kernels::segment_softmax::SegmentSoftmaxKernels;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, parallel};
use crate::tensor::{Storage, Tensor};

const OP: &str = "segment_softmax";

/// Per dst node and head, the softmax of `x[E, H]` over the node's in-edges.
pub fn segment_softmax(x: &Tensor, block: &Arc<Block>) -> Result<Tensor> {
    x.expect_float(OP)?;
    let heads = check_edges(OP, "x", x, block)?;
    let e = block.num_edges();
    let out = match &*x.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => cpu_forward(v, block, heads)?);
            cpu_output(buf, vec![e, heads], x)
        }
        s => on_gpu!(s, |D, b| gpu_forward::<D>(b, x, block, heads)?),
    };
    let y = out.detach();
    let block = block.clone();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(segment_softmax_backward(&y, g, &block)?)])
    }))
}

/// The backward kernel: `x̄` from the softmax output `y[E, H]` and its gradient `ḡ[E, H]`.
pub fn segment_softmax_backward(y: &Tensor, g: &Tensor, block: &Arc<Block>) -> Result<Tensor> {
    const BOP: &str = "segment_softmax_backward";
    y.same_device(g, BOP)?;
    let heads = check_edges(BOP, "y", y, block)?;
    if g.shape() != y.shape() || g.dtype() != y.dtype() {
        return Err(Error::shape(
            BOP,
            format!("gradient {:?} for an output {:?}", g.shape(), y.shape()),
        ));
    }
    let e = block.num_edges();
    let guards = (y.storage(), g.storage());
    match (&*guards.0, &*guards.1) {
        (Storage::Cpu(yb), Storage::Cpu(gb)) => {
            let buf = float_cpu2!(BOP, &yb.data, &gb.data, (yv, gv) => cpu_backward(yv, gv, block, heads)?);
            Ok(cpu_output(buf, vec![e, heads], g))
        }
        (ys, gs) => on_gpu!(
            (ys, gs),
            |D, (yb, gb)| gpu_backward::<D>(yb, gb, g, block, heads),
            else Err(Error::DeviceMismatch {
                op: BOP,
                lhs: y.device().to_string(),
                rhs: g.device().to_string(),
            })
        ),
    }
}

/// The forward on a GPU backend: `y [E, H]` from the scores `xb` (the buffer of `x`).
fn gpu_forward<D: GpuTensors + SegmentSoftmaxKernels>(
    xb: &D::Buffer,
    x: &Tensor,
    block: &Block,
    heads: usize,
) -> Result<Tensor> {
    let e = block.num_edges();
    let ctx = D::context_of(xb);
    let y = ctx.alloc((e * heads * 4) as u64)?;
    ctx.forward(block, heads, xb, &y)?;
    Ok(D::output(y, vec![e, heads], x))
}

/// The backward on a GPU backend: `x̄ [E, H]` from the buffers of `y` and of its gradient
/// `g`.
fn gpu_backward<D: GpuTensors + SegmentSoftmaxKernels>(
    yb: &D::Buffer,
    gb: &D::Buffer,
    g: &Tensor,
    block: &Block,
    heads: usize,
) -> Result<Tensor> {
    let e = block.num_edges();
    let ctx = D::context_of(yb);
    let dx = ctx.alloc((e * heads * 4) as u64)?;
    ctx.backward(block, heads, yb, gb, &dx)?;
    Ok(D::output(dx, vec![e, heads], g))
}

/// Checks that `t` is `[num_edges, H]` over a well-formed block; returns `H`.
pub(crate) fn check_edges(
    op: &'static str,
    what: &str,
    t: &Tensor,
    block: &Block,
) -> Result<usize> {
    let (rows, heads) = dims2(op, what, t)?;
    if rows != block.num_edges() {
        return Err(Error::shape(
            op,
            format!(
                "{what} has {rows} rows (shape {:?}) but the block has {} edges",
                t.shape(),
                block.num_edges()
            ),
        ));
    }
    Ok(heads)
}

/// `v` cut into each dst node's edge rows (`width` values per edge), in dst order.
pub(crate) fn split_segments<'a, T>(
    mut v: &'a mut [T],
    indptr: &[u32],
    width: usize,
) -> Vec<&'a mut [T]> {
    let mut out = Vec::with_capacity(indptr.len().saturating_sub(1));
    for w in indptr.windows(2) {
        let (seg, rest) = v.split_at_mut((w[1] - w[0]) as usize * width);
        out.push(seg);
        v = rest;
    }
    out
}

/// Runs `f(d, rows of d)` for every dst node, in parallel when `work` is large.
pub(crate) fn for_each_segment<T: Send>(
    v: &mut [T],
    indptr: &[u32],
    width: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let segs = split_segments(v, indptr, width);
    if parallel(work) {
        segs.into_par_iter().enumerate().for_each(|(d, s)| f(d, s));
    } else {
        segs.into_iter().enumerate().for_each(|(d, s)| f(d, s));
    }
}

fn cpu_forward<T: Float + CpuElem>(x: &[T], b: &Block, heads: usize) -> Result<CpuBuffer> {
    let len = b.num_edges() * heads;
    let alloc = cpu::reserve::<T>(len)?;
    let mut y = vec![T::ZERO; len];
    if heads == 0 {
        return Ok(CpuBuffer::from_reserved(T::wrap(y), alloc));
    }
    for_each_segment(&mut y, &b.indptr, heads, 3 * len, |d, ys| {
        let s = b.indptr[d] as usize * heads;
        let xs = &x[s..s + ys.len()];
        for h in 0..heads {
            let col = || (h..xs.len()).step_by(heads);
            let m = col().map(|i| xs[i]).fold(T::NEG_INFINITY, T::max);
            let mut sum = T::ZERO;
            for i in col() {
                let v = (xs[i] - m).exp();
                ys[i] = v;
                sum += v;
            }
            for i in col() {
                ys[i] = ys[i] / sum;
            }
        }
    });
    Ok(CpuBuffer::from_reserved(T::wrap(y), alloc))
}

fn cpu_backward<T: Float + CpuElem>(
    y: &[T],
    g: &[T],
    b: &Block,
    heads: usize,
) -> Result<CpuBuffer> {
    let len = b.num_edges() * heads;
    let alloc = cpu::reserve::<T>(len)?;
    let mut dx = vec![T::ZERO; len];
    if heads == 0 {
        return Ok(CpuBuffer::from_reserved(T::wrap(dx), alloc));
    }
    for_each_segment(&mut dx, &b.indptr, heads, 3 * len, |d, dxs| {
        let s = b.indptr[d] as usize * heads;
        let (ys, gs) = (&y[s..s + dxs.len()], &g[s..s + dxs.len()]);
        for h in 0..heads {
            let col = || (h..dxs.len()).step_by(heads);
            let dot: T = col().map(|i| gs[i] * ys[i]).sum();
            for i in col() {
                dxs[i] = ys[i] * (gs[i] - dot);
            }
        }
    });
    Ok(CpuBuffer::from_reserved(T::wrap(dx), alloc))
}

/// Meta arm of [`segment_softmax`] over `[E, H]` scores ([`crate::meta`]): its output, then
/// the block's arrays; keeps its output and the block; its rule allocates `[E, H]`.
pub fn meta_segment_softmax(r: &mut Replay, x: &Val, block: &SymBlock) -> Val {
    let out = r.alloc(x.rows, x.cols);
    r.block_upload(block);
    let saved = vec![r.share(out), r.share(block.buf)];
    r.unary(x, out, (x.rows, x.cols), saved, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_each_segment_sum_to_one() {
        // dst 0 <- 3 edges, dst 1 <- none, dst 2 <- 1 edge; 2 heads; huge scores stay finite.
        let b = Arc::new(Block::new(3, vec![0, 3, 3, 4], vec![0, 1, 2, 2], vec![0, 1, 2]).unwrap());
        let x = Tensor::from_f64(vec![1., 1000., 2., 1000., 3., -5., 7., 0.], &[4, 2]).unwrap();
        let y = segment_softmax(&x, &b).unwrap().to_vec_f64().unwrap();
        let s0: f64 = (0..3).map(|e| y[e * 2]).sum();
        let s1: f64 = (0..3).map(|e| y[e * 2 + 1]).sum();
        assert!((s0 - 1.0).abs() < 1e-12 && (s1 - 1.0).abs() < 1e-12);
        assert!(
            (y[3] - 0.5).abs() < 1e-12,
            "two equal huge scores share: {y:?}"
        );
        assert_eq!(&y[6..], &[1.0, 1.0]);
        let bad = Tensor::from_f64(vec![0.; 6], &[3, 2]).unwrap();
        assert!(matches!(
            segment_softmax(&bad, &b),
            Err(Error::Shape { .. })
        ));
    }
}
