//! Attention-weighted sum over each dst node's in-edges, with heads as a dimension.
//!
//! For features `x[num_src, H·D]` (head `h` owns columns `h·D .. (h+1)·D`) and per-edge
//! weights `a[E, H]` (row = edge position in `block.indices`):
//!
//! ```text
//! out[d, h·D + j] = Σ_{e ∈ N(d)} a[e, h] · x[src(e), h·D + j]          out: [num_dst, H·D]
//! ```
//!
//! Backward:
//! - `x̄[u, h·D + j] = Σ_{(d, e) out of u} a[e, h] · ḡ[d, h·D + j]`, over the transposed CSR
//!   (one task per src row);
//! - `ā[e, h] = Σ_j ḡ[dst(e), h·D + j] · x[src(e), h·D + j]`, one task per (dst, head)
//!   owning that node's edges.
//!
//! Every output value has one owner in each direction: no float atomics, deterministic.
//! Saved: `x` and `a` (shared, not copied) and the block. `H` is `a`'s column count.
//!
//! On CUDA (`kernels/segment_weighted_sum.cu`) a warp owns an output row of `out` and of
//! `x̄`, lanes over columns, summing in the CPU's edge order; for `ā` a warp owns a dst
//! node's edges and each dot product is a warp reduction.

use std::sync::Arc;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::{Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::graph::Block;
use crate::ops::rows::{rows_from_fn, u32_count};
use crate::ops::segment_softmax::{check_edges, for_each_segment};
use crate::ops::segment_sum::check_input;
use crate::ops::{cpu_output, cuda_output, wgpu_output};
use crate::tensor::{Storage, Tensor};

const OP: &str = "segment_weighted_sum";
const SHADER: &str = include_str!("../../shaders/segment_weighted_sum.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_f32",
};
const BACKWARD_X: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_backward_x_f32",
};
const BACKWARD_A: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_backward_a_f32",
};
const FORWARD_CUDA: cuda::Kernel =
    crate::cuda_kernel!("segment_weighted_sum", "segment_weighted_sum_f32");
const BACKWARD_X_CUDA: cuda::Kernel = crate::cuda_kernel!(
    "segment_weighted_sum",
    "segment_weighted_sum_backward_x_f32"
);
const BACKWARD_A_CUDA: cuda::Kernel = crate::cuda_kernel!(
    "segment_weighted_sum",
    "segment_weighted_sum_backward_a_f32"
);

/// Shapes of one call: columns of `x`, heads, columns per head.
#[derive(Clone, Copy)]
struct Dims {
    cols: usize,
    heads: usize,
    per_head: usize,
}

impl Dims {
    fn params(self, rows: usize) -> [u32; 4] {
        [rows, self.cols, self.heads, self.per_head].map(|v| v as u32)
    }

    /// Launches `kernel` (a warp per row of `rows`) on `buffers`, then `params(rows)`;
    /// nothing runs when the `values` it writes are none.
    fn launch_cuda(
        self,
        op: &'static str,
        kernel: &cuda::Kernel,
        buffers: &[&CudaBuffer],
        rows: usize,
        values: usize,
    ) -> Result<()> {
        if u32_count(op, "the output", values)? == 0 {
            return Ok(());
        }
        let ctx = buffers[0].ctx();
        u32_count(op, "the rows", rows * self.cols)?;
        let mut args: Vec<Arg> = buffers.iter().map(|b| Arg::Buf(b)).collect();
        args.extend(self.params(rows).map(Arg::U32));
        ctx.launch_rows(kernel, rows as u64, &args)
    }
}

fn check(op: &'static str, x: &Tensor, a: &Tensor, block: &Block) -> Result<Dims> {
    x.expect_float(op)?;
    x.same_device(a, op)?;
    let cols = check_input(op, x, block)?;
    let heads = check_edges(op, "a", a, block)?;
    if a.dtype() != x.dtype() || heads == 0 || cols % heads != 0 {
        return Err(Error::shape(
            op,
            format!(
                "x {:?} ({}) must split into a's {heads} heads ({:?}, {})",
                x.shape(),
                x.dtype().name(),
                a.shape(),
                a.dtype().name()
            ),
        ));
    }
    Ok(Dims {
        cols,
        heads,
        per_head: cols / heads,
    })
}

/// `out[d, h·D + j] = Σ_{e ∈ N(d)} a[e, h] · x[src(e), h·D + j]`: `x[num_src, H·D]`,
/// `a[E, H]` to `[num_dst, H·D]`. Both inputs get gradients.
pub fn segment_weighted_sum(x: &Tensor, a: &Tensor, block: &Arc<Block>) -> Result<Tensor> {
    let dims = check(OP, x, a, block)?;
    let out = {
        let guards = (x.storage(), a.storage());
        match (&*guards.0, &*guards.1) {
            (Storage::Cpu(xb), Storage::Cpu(ab)) => {
                let buf = float_cpu2!(OP, &xb.data, &ab.data, (xv, av) => cpu_forward(xv, av, block, dims)?);
                cpu_output(buf, vec![block.num_dst, dims.cols], x)
            }
            (Storage::Wgpu(xb), Storage::Wgpu(ab)) => {
                let ctx = xb.ctx();
                let indptr = WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(&block.indptr))?;
                let indices = WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(&block.indices))?;
                let out = WgpuBuffer::new(ctx, (block.num_dst * dims.cols * 4) as u64)?;
                ctx.launch(
                    &FORWARD,
                    &dims.params(block.num_dst),
                    &[(1, &indptr), (2, &indices), (3, xb), (4, ab), (5, &out)],
                    (block.num_dst * dims.cols) as u64,
                )?;
                wgpu_output(out, vec![block.num_dst, dims.cols], x)
            }
            (Storage::Cuda(xb), Storage::Cuda(ab)) => {
                let ctx = xb.ctx();
                let values = block.num_dst * dims.cols;
                u32_count(OP, "x", block.num_src * dims.cols)?;
                let bb = cuda::BlockBuffers::of(ctx, block)?;
                let out = CudaBuffer::new(ctx, (values * 4) as u64)?;
                dims.launch_cuda(
                    OP,
                    &FORWARD_CUDA,
                    &[&bb.indptr, &bb.indices, xb, ab, &out],
                    block.num_dst,
                    values,
                )?;
                cuda_output(out, vec![block.num_dst, dims.cols], x)
            }
            _ => {
                return Err(Error::DeviceMismatch {
                    op: OP,
                    lhs: x.device(),
                    rhs: a.device(),
                })
            }
        }
    };
    let (xs, asv, block) = (x.detach(), a.detach(), block.clone());
    let (need_x, need_a) = (x.requires_grad(), a.requires_grad());
    Ok(record(OP, out, &[x, a], move |g| {
        let (gx, ga) = segment_weighted_sum_backward(&xs, &asv, g, &block, need_x, need_a)?;
        Ok(vec![gx, ga])
    }))
}

/// The backward kernels: `(x̄, ā)` from the inputs and the output gradient `ḡ[num_dst, H·D]`,
/// each computed only when asked for.
pub fn segment_weighted_sum_backward(
    x: &Tensor,
    a: &Tensor,
    g: &Tensor,
    block: &Arc<Block>,
    need_x: bool,
    need_a: bool,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    const BOP: &str = "segment_weighted_sum_backward";
    let dims = check(BOP, x, a, block)?;
    x.same_device(g, BOP)?;
    if g.shape() != [block.num_dst, dims.cols] || g.dtype() != x.dtype() {
        return Err(Error::shape(
            BOP,
            format!(
                "gradient {:?} for an output [{}, {}]",
                g.shape(),
                block.num_dst,
                dims.cols
            ),
        ));
    }
    let (ns, e) = (block.num_src, block.num_edges());
    let guards = (x.storage(), a.storage(), g.storage());
    match (&*guards.0, &*guards.1, &*guards.2) {
        (Storage::Cpu(xb), Storage::Cpu(ab), Storage::Cpu(gb)) => {
            macro_rules! go {
                ($xv:expr, $av:expr, $gv:expr) => {{
                    let gx = if need_x {
                        Some(cpu_output(
                            cpu_backward_x($av, $gv, block, dims)?,
                            vec![ns, dims.cols],
                            g,
                        ))
                    } else {
                        None
                    };
                    let ga = if need_a {
                        Some(cpu_output(
                            cpu_backward_a($xv, $gv, block, dims)?,
                            vec![e, dims.heads],
                            g,
                        ))
                    } else {
                        None
                    };
                    Ok((gx, ga))
                }};
            }
            match (&xb.data, &ab.data, &gb.data) {
                (CpuData::F32(xv), CpuData::F32(av), CpuData::F32(gv)) => go!(xv, av, gv),
                (CpuData::F64(xv), CpuData::F64(av), CpuData::F64(gv)) => go!(xv, av, gv),
                _ => Err(x.dtype_error(BOP, "f32")),
            }
        }
        (Storage::Wgpu(xb), Storage::Wgpu(ab), Storage::Wgpu(gb)) => {
            let ctx = xb.ctx();
            let upload = |v: &[u32]| WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(v));
            let gx = if need_x {
                let (tp, td, te) = (
                    upload(&block.t_indptr)?,
                    upload(&block.t_dst)?,
                    upload(&block.t_edges)?,
                );
                let dx = WgpuBuffer::new(ctx, (ns * dims.cols * 4) as u64)?;
                ctx.launch(
                    &BACKWARD_X,
                    &dims.params(ns),
                    &[(6, &tp), (7, &td), (8, &te), (4, ab), (9, gb), (10, &dx)],
                    (ns * dims.cols) as u64,
                )?;
                Some(wgpu_output(dx, vec![ns, dims.cols], g))
            } else {
                None
            };
            let ga = if need_a {
                let (ip, ix) = (upload(&block.indptr)?, upload(&block.indices)?);
                let da = WgpuBuffer::new(ctx, (e * dims.heads * 4) as u64)?;
                ctx.launch(
                    &BACKWARD_A,
                    &dims.params(block.num_dst),
                    &[(1, &ip), (2, &ix), (3, xb), (9, gb), (11, &da)],
                    (block.num_dst * dims.heads) as u64,
                )?;
                Some(wgpu_output(da, vec![e, dims.heads], g))
            } else {
                None
            };
            Ok((gx, ga))
        }
        (Storage::Cuda(xb), Storage::Cuda(ab), Storage::Cuda(gb)) => {
            let ctx = xb.ctx();
            u32_count(BOP, "x", ns * dims.cols)?;
            u32_count(BOP, "the gradient", block.num_dst * dims.cols)?;
            let bb = cuda::BlockBuffers::of(ctx, block)?;
            let gx = if need_x {
                let dx = CudaBuffer::new(ctx, (ns * dims.cols * 4) as u64)?;
                dims.launch_cuda(
                    BOP,
                    &BACKWARD_X_CUDA,
                    &[&bb.t_indptr, &bb.t_dst, &bb.t_edges, ab, gb, &dx],
                    ns,
                    ns * dims.cols,
                )?;
                Some(cuda_output(dx, vec![ns, dims.cols], g))
            } else {
                None
            };
            let ga = if need_a {
                let bytes = (e * dims.heads * 4) as u64;
                let da = if dims.per_head == 0 {
                    // Empty dot products: zeros, and no row to launch over.
                    CudaBuffer::zeros(ctx, bytes)?
                } else {
                    let da = CudaBuffer::new(ctx, bytes)?;
                    dims.launch_cuda(
                        BOP,
                        &BACKWARD_A_CUDA,
                        &[&bb.indptr, &bb.indices, xb, gb, &da],
                        block.num_dst,
                        e * dims.heads,
                    )?;
                    da
                };
                Some(cuda_output(da, vec![e, dims.heads], g))
            } else {
                None
            };
            Ok((gx, ga))
        }
        _ => Err(Error::DeviceMismatch {
            op: BOP,
            lhs: x.device(),
            rhs: g.device(),
        }),
    }
}

fn cpu_forward<T: Float + CpuElem>(x: &[T], a: &[T], b: &Block, dims: Dims) -> Result<CpuBuffer> {
    let Dims {
        cols,
        heads,
        per_head,
    } = dims;
    let work = (b.num_edges() + b.num_dst) * cols;
    rows_from_fn(b.num_dst, cols, work, |d, row: &mut [T]| {
        let start = b.indptr[d] as usize;
        for (k, &u) in b.neighbors(d).iter().enumerate() {
            let e = start + k;
            let xu = &x[u as usize * cols..(u as usize + 1) * cols];
            for h in 0..heads {
                let w = a[e * heads + h];
                let span = h * per_head..(h + 1) * per_head;
                row[span.clone()]
                    .iter_mut()
                    .zip(&xu[span])
                    .for_each(|(o, &v)| *o += w * v);
            }
        }
    })
}

fn cpu_backward_x<T: Float + CpuElem>(
    a: &[T],
    g: &[T],
    b: &Block,
    dims: Dims,
) -> Result<CpuBuffer> {
    let Dims {
        cols,
        heads,
        per_head,
    } = dims;
    let work = (b.num_edges() + b.num_src) * cols;
    rows_from_fn(b.num_src, cols, work, |u, row: &mut [T]| {
        let (s, t) = (b.t_indptr[u] as usize, b.t_indptr[u + 1] as usize);
        for (&d, &e) in b.t_dst[s..t].iter().zip(&b.t_edges[s..t]) {
            let gd = &g[d as usize * cols..(d as usize + 1) * cols];
            for h in 0..heads {
                let w = a[e as usize * heads + h];
                let span = h * per_head..(h + 1) * per_head;
                row[span.clone()]
                    .iter_mut()
                    .zip(&gd[span])
                    .for_each(|(o, &v)| *o += w * v);
            }
        }
    })
}

fn cpu_backward_a<T: Float + CpuElem>(
    x: &[T],
    g: &[T],
    b: &Block,
    dims: Dims,
) -> Result<CpuBuffer> {
    let Dims {
        cols,
        heads,
        per_head,
    } = dims;
    let len = b.num_edges() * heads;
    let alloc = cpu::reserve::<T>(len)?;
    let mut da = vec![T::ZERO; len];
    for_each_segment(
        &mut da,
        &b.indptr,
        heads,
        b.num_edges() * cols * 2,
        |d, das| {
            let gd = &g[d * cols..(d + 1) * cols];
            for (k, &u) in b.neighbors(d).iter().enumerate() {
                let xu = &x[u as usize * cols..(u as usize + 1) * cols];
                for h in 0..heads {
                    let span = h * per_head..(h + 1) * per_head;
                    das[k * heads + h] = gd[span.clone()]
                        .iter()
                        .zip(&xu[span])
                        .map(|(&p, &q)| p * q)
                        .sum();
                }
            }
        },
    );
    Ok(CpuBuffer::from_reserved(T::wrap(da), alloc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_sum_by_hand_with_two_heads() {
        // dst 0 <- {1 (weights 0.5, 2), 2 (1, 0)}, dst 1 <- {}; heads of width 1.
        let b = Arc::new(Block::new(3, vec![0, 2, 2], vec![1, 2], vec![0, 1, 2]).unwrap());
        let x = Tensor::from_f64(vec![9., 9., 1., 2., 3., 4.], &[3, 2]).unwrap();
        let a = Tensor::from_f64(vec![0.5, 2., 1., 0.], &[2, 2]).unwrap();
        let y = segment_weighted_sum(&x, &a, &b).unwrap();
        assert_eq!(y.to_vec_f64().unwrap(), vec![0.5 + 3., 4., 0., 0.]);
        let a3 = Tensor::from_f64(vec![0.; 6], &[2, 3]).unwrap();
        assert!(matches!(
            segment_weighted_sum(&x, &a3, &b),
            Err(Error::Shape { .. })
        ));
    }
}
