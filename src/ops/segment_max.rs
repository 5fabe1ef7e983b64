//! Max aggregation over a block's in-edges, with the argmax kept as an edge position.
//!
//! `out[d, j] = max_{e ∈ in-edges(d)} x[src(e), j]`, and 0 for a dst node without in-edges.
//! `arg[d, j]` is the **edge position** `e` (an index into `block.indices`) that won, or
//! `u32::MAX` for none. Ties go to the first edge in edge order, so a duplicate edge never
//! wins twice; a NaN wins (and stays), so it propagates instead of vanishing.
//!
//! Backward scatters through the argmax over the transposed CSR: for each src `u` and
//! feature `j`, `x̄[u, j] = Σ_{(d, e) out of u, arg[d, j] = e} ḡ[d, j]`. Comparing edge
//! positions rather than src ids is what makes duplicate edges and self-loops exact.
//!
//! Forward runs one task per dst row, backward one per src row: no atomics, deterministic.
//! Saved: the argmax (`u32 [num_dst, f]`, on the op's device) and the block; not `x`.
//!
//! On wgpu (`shaders/segment_max.wgsl`) a group of threads owns an output row (dst rows
//! forward, src rows backward), lanes over features; one invocation owns each (row,
//! feature), or four with `vec4` loads when `f % 4 == 0` (both directions), with the same
//! scan order and tie and NaN rules.
//! Past the storage-binding limit both run over ranges of output rows, times tiles of the
//! input they read at arbitrary rows (see `src/device/wgpu/split.rs`); the tie and NaN
//! rules are a total order on (value, edge position), so the max and argmax do not change,
//! and the backward sums keep their order.
//! On CUDA (`kernels/segment_max.cu`) a warp owns a row, lanes over its features, likewise.
//!
//! Both GPU backends run through the GPU seam (`src/ops/gpu.rs`): the checks,
//! allocation and tensors around the kernels are written once ([`gpu_forward`],
//! [`gpu_backward`]), and each backend implements [`SegmentMaxKernels`]
//! (`src/device/kernels/`) in its own folder (`device/wgpu/kernels/segment_max.rs`:
//! windows and tiles; `device/cuda/kernels/segment_max.rs`: typed arguments).

use std::sync::Arc;

use rayon::prelude::*;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuElem};
use crate::device::kernels::segment_max::SegmentMaxKernels;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{parallel, rows_from_fn, u32_count, u32_data};
use crate::ops::segment_sum::check_input;
use crate::tensor::{DType, Storage, Tensor};

const OP: &str = "segment_max";
/// Per dst node and feature, the max over its in-neighbours' rows of `x`
/// (`[num_src, f]` to `[num_dst, f]`); zero for a node without in-edges.
pub fn segment_max(x: &Tensor, block: &Arc<Block>) -> Result<Tensor> {
    x.expect_float(OP)?;
    let f = check_input(OP, x, block)?;
    let shape = vec![block.num_dst, f];
    let (out, arg) = match &*x.storage() {
        Storage::Cpu(b) => {
            let (buf, arg) = float_cpu!(OP, &b.data, v => cpu_forward(v, block, f)?);
            (cpu_output(buf, shape.clone(), x), Storage::Cpu(arg))
        }
        s => on_gpu!(s, |D, b| gpu_forward::<D>(b, x, block, f)?),
    };
    let arg = Tensor::from_storage(arg, shape, DType::U32, x.device());
    let block = block.clone();
    Ok(record(OP, out, &[x], move |g| {
        let gx = match (&*g.storage(), &*arg.storage()) {
            (Storage::Cpu(b), Storage::Cpu(ab)) => {
                let a = u32_data(OP, &arg, &ab.data)?;
                let buf = float_cpu!(OP, &b.data, v => cpu_backward(v, a, &block, f)?);
                cpu_output(buf, vec![block.num_src, f], g)
            }
            (gs, args) => on_gpu!(
                (gs, args),
                |D, (b, ab)| gpu_backward::<D>(b, ab, g, &block, f)?,
                else return Err(Error::DeviceMismatch {
                    op: OP,
                    lhs: g.device().to_string(),
                    rhs: arg.device().to_string(),
                })
            ),
        };
        Ok(vec![Some(gx)])
    }))
}

/// The forward on a GPU backend: the max (a tensor like `x`) and the argmax (storage of
/// u32 values) of `xb`, the buffer of `x`.
fn gpu_forward<D: GpuTensors + SegmentMaxKernels>(
    xb: &D::Buffer,
    x: &Tensor,
    b: &Block,
    f: usize,
) -> Result<(Tensor, Storage)> {
    u32_count(OP, "x", b.num_src * f)?;
    let n = u32_count(OP, "the output", b.num_dst * f)?;
    let ctx = D::context_of(xb);
    let out = ctx.alloc(n as u64 * 4)?;
    let arg = ctx.alloc(n as u64 * 4)?;
    if n > 0 {
        ctx.forward(b, f, xb, &out, &arg)?;
    }
    Ok((D::output(out, vec![b.num_dst, f], x), D::storage(arg)))
}

/// The backward on a GPU backend: `x̄ [num_src, f]` from the buffers of the output
/// gradient `g` and of the argmax.
fn gpu_backward<D: GpuTensors + SegmentMaxKernels>(
    gb: &D::Buffer,
    arg: &D::Buffer,
    g: &Tensor,
    b: &Block,
    f: usize,
) -> Result<Tensor> {
    u32_count(OP, "the gradient", b.num_dst * f)?;
    let n = u32_count(OP, "x", b.num_src * f)?;
    let ctx = D::context_of(gb);
    let out = ctx.alloc(n as u64 * 4)?;
    if n > 0 {
        ctx.backward(b, f, arg, gb, &out)?;
    }
    Ok(D::output(out, vec![b.num_src, f], g))
}

/// True if `v` replaces the running max `m`: larger, or the first NaN. Comparisons only,
/// no branch, so that a row's loop over it vectorises.
#[inline(always)]
fn beats<T: Float>(v: T, m: T) -> bool {
    #[allow(clippy::eq_op)]
    let (v_nan, m_num) = (v != v, m == m);
    v > m || (v_nan & m_num)
}

/// One edge of a dst row: where `x` (the edge's src row) beats the running max `o`,
/// it replaces it and `e` replaces the argmax `a` (selects, so the loop vectorises; with
/// AVX2 where the CPU has it).
fn max_row<T: Float>(o: &mut [T], a: &mut [u32], x: &[T], e: u32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { max_row_avx2(o, a, x, e) };
        return;
    }
    max_row_any(o, a, x, e)
}

/// [`max_row`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_row_avx2<T: Float>(o: &mut [T], a: &mut [u32], x: &[T], e: u32) {
    max_row_any(o, a, x, e)
}

#[inline(always)]
fn max_row_any<T: Float>(o: &mut [T], a: &mut [u32], x: &[T], e: u32) {
    for ((o, a), &v) in o.iter_mut().zip(a.iter_mut()).zip(x) {
        let take = beats(v, *o);
        *o = if take { v } else { *o };
        *a = if take { e } else { *a };
    }
}

/// The max values and their argmax edge positions.
fn cpu_forward<T: Float + CpuElem>(x: &[T], b: &Block, f: usize) -> Result<(CpuBuffer, CpuBuffer)> {
    let len = b.num_dst * f;
    let (vals_alloc, arg_alloc) = (cpu::reserve::<T>(len)?, cpu::reserve::<u32>(len)?);
    let mut vals = vec![T::ZERO; len];
    let mut arg = vec![u32::MAX; len];
    let kernel = |d: usize, (vrow, arow): (&mut [T], &mut [u32])| {
        let start = b.indptr[d];
        let row = |u: u32| &x[u as usize * f..(u as usize + 1) * f];
        let nb = b.neighbors(d);
        // The first edge is the max so far, whatever its values (NaN included).
        if let Some(&u) = nb.first() {
            vrow.copy_from_slice(row(u));
            arow.fill(start);
        }
        for (k, &u) in nb.iter().enumerate().skip(1) {
            max_row(vrow, arow, row(u), start + k as u32);
        }
    };
    if f > 0 {
        let work = (b.num_edges() + b.num_dst) * f;
        if parallel(work) {
            vals.par_chunks_mut(f)
                .zip(arg.par_chunks_mut(f))
                .enumerate()
                .for_each(|(d, rows)| kernel(d, rows));
        } else {
            vals.chunks_mut(f)
                .zip(arg.chunks_mut(f))
                .enumerate()
                .for_each(|(d, rows)| kernel(d, rows));
        }
    }
    Ok((
        CpuBuffer::from_reserved(T::wrap(vals), vals_alloc),
        CpuBuffer::from_reserved(u32::wrap(arg), arg_alloc),
    ))
}

fn cpu_backward<T: Float + CpuElem>(
    g: &[T],
    arg: &[u32],
    b: &Block,
    f: usize,
) -> Result<CpuBuffer> {
    let work = (b.num_edges() + b.num_src) * f;
    rows_from_fn(b.num_src, f, work, |u, row: &mut [T]| {
        let (s, e) = (b.t_indptr[u] as usize, b.t_indptr[u + 1] as usize);
        for (&d, &edge) in b.t_dst[s..e].iter().zip(&b.t_edges[s..e]) {
            let range = d as usize * f..(d as usize + 1) * f;
            // Adding 0 where another edge won keeps the bits: the sum starts at +0, so
            // it is never -0, and NaN and infinities stay as they are.
            for ((o, &gv), &a) in row.iter_mut().zip(&g[range.clone()]).zip(&arg[range]) {
                *o += if a == edge { gv } else { T::ZERO };
            }
        }
    })
}

/// Meta arm of [`segment_max`] ([`crate::meta`]): its output `[num_dst, c]` and the saved
/// argmax (u32, the same shape), then the block's arrays; keeps the argmax and the block;
/// its rule allocates `[num_src, c]`.
pub fn meta_segment_max(r: &mut Replay, x: &Val, block: &SymBlock) -> Val {
    let num_dst = block.sizes.num_dst;
    let out = r.alloc(num_dst, x.cols);
    let arg = r.alloc(num_dst, x.cols);
    r.block_upload(block);
    let saved = vec![arg, r.share(block.buf)];
    r.unary(x, out, (num_dst, x.cols), saved, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_with_duplicates_self_loop_and_empty_dst() {
        // dst 0 <- {1, 0, 1} (duplicate, self-loop), dst 1 <- {}.
        let b = Arc::new(Block::new(2, vec![0, 3, 3], vec![1, 0, 1], vec![0, 1]).unwrap());
        let x = Tensor::from_f64(vec![5., -1., 2., 3.], &[2, 2])
            .unwrap()
            .requires_grad_leaf();
        let y = segment_max(&x, &b).unwrap();
        assert_eq!(y.to_vec_f64().unwrap(), vec![5., 3., 0., 0.]);
        // Column 0 from the self-loop, column 1 from the first copy of edge 1 -> 0 only.
        crate::ops::sum_all(&y).unwrap().backward().unwrap();
        assert_eq!(
            x.grad().unwrap().to_vec_f64().unwrap(),
            vec![1., 0., 0., 1.]
        );
    }

    #[test]
    fn nan_propagates() {
        let b = Arc::new(Block::new(2, vec![0, 2], vec![0, 1], vec![0, 1]).unwrap());
        let x = Tensor::from_f64(vec![f64::NAN, 1.0], &[2, 1]).unwrap();
        assert!(segment_max(&x, &b).unwrap().item().unwrap().is_nan());
        let x = Tensor::from_f64(vec![1.0, f64::NAN], &[2, 1]).unwrap();
        assert!(segment_max(&x, &b).unwrap().item().unwrap().is_nan());
    }
}
