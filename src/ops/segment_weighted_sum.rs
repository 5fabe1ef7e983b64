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
//! On wgpu (`shaders/segment_weighted_sum.wgsl`) the forward and `x̄` kernels give a group
//! of threads each output row, lanes over columns, one invocation per value (or four with
//! `vec4` loads when `D % 4 == 0`) summing in the CPU's edge order; `ā` has one invocation
//! per (dst, head).
//! Past the storage-binding limit, every kernel runs over ranges of output rows,
//! times tiles of the tensors it reads at arbitrary rows (see
//! `src/device/wgpu/split.rs` and the shader): the backward sums keep their order, the
//! forward's in-edges are summed tile by tile, which may round differently from one pass.
//! On CUDA (`kernels/segment_weighted_sum.cu`) a warp owns an output row of `out` and of
//! `x̄`, lanes over columns, summing in the CPU's edge order; for `ā` a warp owns a dst
//! node's edges and each dot product is a warp reduction.
//!
//! Both GPU backends run through the GPU seam (`src/ops/gpu.rs`): the checks,
//! allocation and tensors around the kernels are written once ([`gpu_forward`],
//! [`gpu_backward`]), and each backend implements [`SegmentWeightedSumKernels`]
//! (`src/device/kernels/`) in its own folder (wgpu: binding windows and tiles; CUDA:
//! typed arguments checked against the `.cu` signatures).

use std::sync::Arc;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::device::kernels::segment_weighted_sum::{Dims, SegmentWeightedSumKernels};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{rows_from_fn, u32_count};
use crate::ops::segment_softmax::{check_edges, for_each_segment};
use crate::ops::segment_sum::check_input;
use crate::tensor::{Storage, Tensor};

const OP: &str = "segment_weighted_sum";
const BOP: &str = "segment_weighted_sum_backward";
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
            (xs, as_) => on_gpu!(
                (xs, as_),
                |D, (xb, ab)| gpu_forward::<D>(xb, ab, x, block, dims)?,
                else return Err(Error::DeviceMismatch {
                    op: OP,
                    lhs: x.device().to_string(),
                    rhs: a.device().to_string(),
                })
            ),
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
        (xs, as_, gs) => on_gpu!(
            (xs, as_, gs),
            |D, (xb, ab, gb)| gpu_backward::<D>([xb, ab, gb], g, block, dims, need_x, need_a),
            else Err(Error::DeviceMismatch {
            op: BOP,
            lhs: x.device().to_string(),
            rhs: g.device().to_string(),
            })
        ),
    }
}

/// The forward on a GPU backend: `out [num_dst, H·D]` from the buffers of `x` and `a`.
fn gpu_forward<D: GpuTensors + SegmentWeightedSumKernels>(
    xb: &D::Buffer,
    ab: &D::Buffer,
    x: &Tensor,
    b: &Block,
    dims: Dims,
) -> Result<Tensor> {
    u32_count(OP, "x", b.num_src * dims.cols)?;
    let values = u32_count(OP, "the output", b.num_dst * dims.cols)? as usize;
    let ctx = D::context_of(xb);
    let out = ctx.alloc((values * 4) as u64)?;
    if values > 0 {
        ctx.forward(b, dims, xb, ab, &out)?;
    }
    Ok(D::output(out, vec![b.num_dst, dims.cols], x))
}

/// The backward on a GPU backend: `(x̄, ā)` from the buffers of `x`, `a` and the output
/// gradient `g`, each computed only when asked for.
fn gpu_backward<D: GpuTensors + SegmentWeightedSumKernels>(
    [xb, ab, gb]: [&D::Buffer; 3],
    g: &Tensor,
    b: &Block,
    dims: Dims,
    need_x: bool,
    need_a: bool,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    let (ns, e) = (b.num_src, b.num_edges());
    let x_values = u32_count(BOP, "x", ns * dims.cols)? as usize;
    u32_count(BOP, "the gradient", b.num_dst * dims.cols)?;
    let a_values = u32_count(BOP, "a", e * dims.heads)? as usize;
    let ctx = D::context_of(xb);
    let gx = if need_x {
        let dx = ctx.alloc((x_values * 4) as u64)?;
        if x_values > 0 {
            ctx.backward_x(b, dims, ab, gb, &dx)?;
        }
        Some(D::output(dx, vec![ns, dims.cols], g))
    } else {
        None
    };
    let ga = if need_a {
        let bytes = (a_values * 4) as u64;
        let da = if dims.per_head == 0 {
            // Empty dot products: zeros, with no column to launch over.
            ctx.zeros(bytes)?
        } else {
            let da = ctx.alloc(bytes)?;
            if a_values > 0 {
                ctx.backward_a(b, dims, xb, gb, &da)?;
            }
            da
        };
        Some(D::output(da, vec![e, dims.heads], g))
    } else {
        None
    };
    Ok((gx, ga))
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

/// Meta arm of [`segment_weighted_sum`]`(x, a)` ([`crate::meta`]): `[num_dst, H·D]`, then
/// the block's arrays; keeps `x`, `a` and the block; its rule allocates `x̄` then `ā`.
pub fn meta_segment_weighted_sum(r: &mut Replay, x: &Val, a: &Val, block: &SymBlock) -> Val {
    let shape = (block.sizes.num_dst, x.cols);
    let out = r.alloc(shape.0, shape.1);
    r.block_upload(block);
    let keep = r.share(block.buf);
    r.binary_saving_inputs(out, x, a, shape, vec![keep])
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
