//! Sums and means over one dimension of a 2-D tensor, or over everything, and their
//! inverse, `expand_dim`, which repeats a row or column.
//!
//! `sum_dim(x[r, c], 0) = [c]` (down the rows), `sum_dim(x, 1) = [r]` (along each row).
//! Backward of a sum repeats the gradient along the summed dimension (`expand_dim`), and
//! the backward of `expand_dim` is the sum. Means are sums scaled by `1/n`.
//!
//! Summation order is fixed (rows in blocks of `BLOCK`, blocks added in order), so results
//! do not depend on the thread count. The wgpu kernels (`shaders/reduce.wgsl`) fix their
//! order too: a row is summed by one workgroup per 1024 columns (a tree over 256 threads),
//! then the block sums again, until one value is left; a column sum adds blocks of
//! `COL_BLOCK` rows in order, then the block sums again. Past the storage-binding limit
//! (see `src/device/wgpu/split.rs`) each pass runs over ranges of its work items (row
//! blocks, column blocks, output elements for `expand_dim`), with the same order of
//! additions, so splitting does not change the sums.
//! The CUDA kernels (`kernels/reduce.cu`) take the same passes, with a warp per row of up to
//! 1024 columns and a block per 4096 columns of a longer row.

use rayon::prelude::*;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::reduce::ReduceKernels;
use crate::error::{Error, Result};
use crate::float::{Float, PAR_MIN};
use crate::meta::{Replay, Val};
use crate::ops::gpu::GpuTensors;
use crate::ops::{cpu_output, mul_scalar, reshape};
use crate::tensor::{Storage, Tensor};

const BLOCK: usize = 256;

/// Rows one invocation of the column-sum kernels adds (the device layer's).
pub(crate) use crate::device::kernels::reduce::COL_BLOCK;

fn dims(op: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    match x.shape() {
        [r, c] => Ok((*r, *c)),
        s => Err(Error::shape(
            op,
            format!("expected a 2-D tensor, got shape {s:?}"),
        )),
    }
}

fn check_dim(op: &'static str, dim: usize) -> Result<()> {
    if dim > 1 {
        return Err(Error::shape(op, format!("dimension {dim} of a 2-D tensor")));
    }
    Ok(())
}

/// Sum over dimension `dim` (0: down the rows, giving `[cols]`; 1: along rows, `[rows]`).
pub fn sum_dim(x: &Tensor, dim: usize) -> Result<Tensor> {
    const OP: &str = "sum_dim";
    check_dim(OP, dim)?;
    let (r, c) = dims(OP, x)?;
    let out_shape = if dim == 0 { vec![c] } else { vec![r] };
    let out = match &*x.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => cpu_sum_dim(v, r, c, dim)?);
            cpu_output(buf, out_shape, x)
        }
        s => on_gpu!(s, |D, b| gpu_sum_dim::<D>(b, (r, c), dim, out_shape, x)?),
    };
    let n = if dim == 0 { r } else { c };
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(expand_dim(g, dim, n)?)])
    }))
}

/// Mean over dimension `dim`.
pub fn mean_dim(x: &Tensor, dim: usize) -> Result<Tensor> {
    check_dim("mean_dim", dim)?;
    let (r, c) = dims("mean_dim", x)?;
    let n = if dim == 0 { r } else { c };
    mul_scalar(&sum_dim(x, dim)?, 1.0 / n.max(1) as f64)
}

/// Sum of every element, as a scalar (shape `[]`).
pub fn sum_all(x: &Tensor) -> Result<Tensor> {
    const OP: &str = "sum_all";
    let n = x.numel();
    let flat = x.view(&[1, n])?;
    let out = match &*flat.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => cpu_sum_dim(v, 1, n, 1)?);
            cpu_output(buf, vec![], x)
        }
        s => on_gpu!(s, |D, b| gpu_sum_dim::<D>(b, (1, n), 1, vec![], x)?),
    };
    let in_shape = x.shape().to_vec();
    Ok(record(OP, out, &[x], move |g| {
        let row = expand_dim(&reshape(g, &[1])?, 1, n)?;
        Ok(vec![Some(reshape(&row, &in_shape)?)])
    }))
}

/// Mean of every element, as a scalar.
pub fn mean_all(x: &Tensor) -> Result<Tensor> {
    let n = x.numel().max(1);
    mul_scalar(&sum_all(x)?, 1.0 / n as f64)
}

/// Repeats `x` `n` times along `dim`: dim 0 takes a row (`[c]` or `[1, c]`) to `[n, c]`;
/// dim 1 takes a column (`[r]` or `[r, 1]`) to `[r, n]`.
pub fn expand_dim(x: &Tensor, dim: usize, n: usize) -> Result<Tensor> {
    const OP: &str = "expand_dim";
    check_dim(OP, dim)?;
    let len = match (dim, x.shape()) {
        (_, [l]) => *l,
        (0, [1, c]) => *c,
        (1, [r, 1]) => *r,
        (_, s) => {
            return Err(Error::shape(
                OP,
                format!("cannot repeat shape {s:?} along dimension {dim}"),
            ))
        }
    };
    let (r, c) = if dim == 0 { (n, len) } else { (len, n) };
    let out = match &*x.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => {
                cpu::from_fn(r * c, |i| if dim == 0 { v[i % c] } else { v[i / c] })?
            });
            cpu_output(buf, vec![r, c], x)
        }
        s => on_gpu!(s, |D, b| {
            let out = D::context_of(b).expand(OP, b, (r, c), dim)?;
            D::output(out, vec![r, c], x)
        }),
    };
    let in_shape = x.shape().to_vec();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(reshape(&sum_dim(g, dim)?, &in_shape)?)])
    }))
}

/// The sum over `dim` of the `[r, c]` matrix in `xb` (the buffer of `x`) on a GPU backend,
/// shaped `shape`; zeros when either dimension is empty.
fn gpu_sum_dim<D: GpuTensors + ReduceKernels>(
    xb: &D::Buffer,
    (r, c): (usize, usize),
    dim: usize,
    shape: Vec<usize>,
    x: &Tensor,
) -> Result<Tensor> {
    let ctx = D::context_of(xb);
    let (outer, inner) = if dim == 0 { (c, r) } else { (r, c) };
    let out = if outer == 0 || inner == 0 {
        ctx.zeros((outer * 4) as u64)?
    } else {
        ctx.sum_dim(xb, (r, c), dim)?
    };
    Ok(D::output(out, shape, x))
}

fn cpu_sum_dim<T: Float + CpuElem>(x: &[T], r: usize, c: usize, dim: usize) -> Result<CpuBuffer> {
    if dim == 1 {
        // One sum per row; long rows are split into fixed blocks summed in order.
        return cpu::from_fn(r, |i| sum_ordered(&x[i * c..(i + 1) * c]));
    }
    let alloc = cpu::reserve::<T>(c)?;
    let block_sum = |rows: &[T]| {
        let mut acc = vec![T::ZERO; c];
        for row in rows.chunks_exact(c.max(1)) {
            acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v);
        }
        acc
    };
    let partials: Vec<Vec<T>> = if r * c >= PAR_MIN && c > 0 {
        x.par_chunks(BLOCK * c).map(block_sum).collect()
    } else if c > 0 {
        x.chunks(BLOCK * c).map(block_sum).collect()
    } else {
        Vec::new()
    };
    let mut out = vec![T::ZERO; c];
    for p in partials {
        out.iter_mut().zip(p).for_each(|(o, v)| *o += v);
    }
    Ok(CpuBuffer::from_reserved(T::wrap(out), alloc))
}

/// Sums a slice in fixed blocks added in order (parallel when long).
fn sum_ordered<T: Float>(v: &[T]) -> T {
    if v.len() >= PAR_MIN {
        let parts: Vec<T> = v
            .par_chunks(PAR_MIN)
            .map(|b| b.iter().copied().sum())
            .collect();
        parts.into_iter().sum()
    } else {
        v.iter().copied().sum()
    }
}

/// Meta arm of `sum_dim(x, 1)` ([`crate::meta`]): `[r, c]` to `[r]`; nothing kept; its rule
/// expands the gradient to `[r, c]`.
pub fn meta_sum_rows(r: &mut Replay, x: &Val) -> Val {
    let out = r.alloc(x.rows, 1);
    r.unary(x, out, (x.rows, 1), vec![], false)
}

/// Meta arm of a gradient of `rows` rows summed down to a broadcast operand's `shape` (a
/// row `[1, c]` or a column; `binary`'s rules). A GPU sums the columns of more than
/// [`COL_BLOCK`] rows in passes, each leaving one partial row per block of rows,
/// `[⌈r / COL_BLOCK⌉, c]`, beside the previous pass's until it is done.
pub(crate) fn meta_reduce_to(r: &mut Replay, rows: usize, shape: (usize, usize)) -> usize {
    if !r.policy.gpu || shape.0 != 1 || rows <= COL_BLOCK {
        return r.alloc(shape.0, shape.1);
    }
    let mut left = rows;
    let mut cur: Option<usize> = None;
    loop {
        left = left.div_ceil(COL_BLOCK);
        let next = r.alloc(left, shape.1);
        if let Some(prev) = cur.replace(next) {
            r.release(prev);
        }
        if left == 1 {
            return next;
        }
    }
}
