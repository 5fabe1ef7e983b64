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
//! `COL_BLOCK` rows in order, then the block sums again.
//! The CUDA kernels (`kernels/reduce.cu`) take the same passes, with a warp per row of up to
//! 1024 columns and a block per 4096 columns of a longer row.

use rayon::prelude::*;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuElem};
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::{Kernel, WgpuBuffer, WG};
use crate::error::{Error, Result};
use crate::float::{Float, PAR_MIN};
use crate::ops::rows::u32_count;
use crate::ops::{cpu_output, cuda_output, mul_scalar, reshape, wgpu_output};
use crate::tensor::{Storage, Tensor};

const BLOCK: usize = 256;

const SHADER: &str = include_str!("../../shaders/reduce.wgsl");
const fn kernel(entry: &'static str) -> Kernel {
    Kernel {
        stem: "reduce",
        source: SHADER,
        entry,
    }
}
const SUM_ROWS: Kernel = kernel("sum_rows_f32");
const SUM_ROWS_SMALL: Kernel = kernel("sum_rows_small_f32");
const SUM_COLS: Kernel = kernel("sum_cols_f32");
const EXPAND: Kernel = kernel("expand_f32");
/// Columns one workgroup of `sum_rows_f32` sums (4 per thread).
const ROW_BLOCK: usize = 1024;
/// Rows at or below this length are summed by one invocation each.
const SMALL_ROW: usize = 32;
/// Rows one invocation of `sum_cols_f32` adds.
const COL_BLOCK: usize = 64;

const SUM_ROWS_CUDA: cuda::Kernel = crate::cuda_kernel!("reduce", "sum_rows_f32");
const SUM_ROWS_SMALL_CUDA: cuda::Kernel = crate::cuda_kernel!("reduce", "sum_rows_small_f32");
const SUM_COLS_CUDA: cuda::Kernel = crate::cuda_kernel!("reduce", "sum_cols_f32");
const EXPAND_CUDA: cuda::Kernel = crate::cuda_kernel!("reduce", "expand_f32");
/// Rows at or below this length are summed by one warp each on CUDA (32 values a lane).
const SMALL_ROW_CUDA: usize = 1024;
/// Columns one block of `sum_rows_f32` sums on CUDA (16 per thread).
const ROW_CHUNK_CUDA: usize = 4096;
/// Threads per block of the CUDA `sum_rows_f32`.
const ROW_THREADS_CUDA: u32 = 256;

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
        Storage::Cuda(b) => cuda_output(cuda_sum_dim(b, r, c, dim)?, out_shape, x),
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => cpu_sum_dim(v, r, c, dim)?);
            cpu_output(buf, out_shape, x)
        }
        Storage::Wgpu(b) => wgpu_output(wgpu_sum_dim(b, r, c, dim)?, out_shape, x),
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
        Storage::Cuda(b) => cuda_output(cuda_sum_dim(b, 1, n, 1)?, vec![], x),
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => cpu_sum_dim(v, 1, n, 1)?);
            cpu_output(buf, vec![], x)
        }
        Storage::Wgpu(b) => wgpu_output(wgpu_sum_dim(b, 1, n, 1)?, vec![], x),
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
        Storage::Cuda(b) => {
            let total = u32_count(OP, "the output", r * c)?;
            let out = CudaBuffer::new(b.ctx(), total as u64 * 4)?;
            let args = [
                Arg::Buf(b),
                Arg::Buf(&out),
                Arg::U32(c as u32),
                Arg::U32(dim as u32),
                Arg::U32(total),
            ];
            b.ctx().launch_1d(&EXPAND_CUDA, total as u64, &args)?;
            cuda_output(out, vec![r, c], x)
        }
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => {
                cpu::from_fn(r * c, |i| if dim == 0 { v[i % c] } else { v[i / c] })?
            });
            cpu_output(buf, vec![r, c], x)
        }
        Storage::Wgpu(b) => {
            let out = WgpuBuffer::new(b.ctx(), (r * c * 4) as u64)?;
            let words = [c as u32, dim as u32];
            b.ctx()
                .launch_chunked(&EXPAND, &words, &[(4, &out)], &[(3, b)], (r * c) as u64)?;
            wgpu_output(out, vec![r, c], x)
        }
    };
    let in_shape = x.shape().to_vec();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(reshape(&sum_dim(g, dim)?, &in_shape)?)])
    }))
}

/// Sum over `dim` of the `[r, c]` f32 matrix in `x`, on its adapter.
fn wgpu_sum_dim(x: &WgpuBuffer, r: usize, c: usize, dim: usize) -> Result<WgpuBuffer> {
    let ctx = x.ctx();
    let (outer, inner) = if dim == 0 { (c, r) } else { (r, c) };
    if outer == 0 || inner == 0 {
        return WgpuBuffer::zeros(ctx, (outer * 4) as u64);
    }
    if dim == 1 && c <= SMALL_ROW {
        let out = WgpuBuffer::new(ctx, (r * 4) as u64)?;
        let words = [r as u32, c as u32];
        ctx.launch(&SUM_ROWS_SMALL, &words, &[(1, x), (2, &out)], r as u64)?;
        return Ok(out);
    }
    // Each pass leaves one partial sum per block; the partials are summed again in order.
    let mut cur: Option<WgpuBuffer> = None;
    let (mut rr, mut cc) = (r, c);
    loop {
        let src = cur.as_ref().unwrap_or(x);
        let (next, blocks) = if dim == 1 {
            let nb = cc.div_ceil(ROW_BLOCK);
            let out = WgpuBuffer::new(ctx, (rr * nb * 4) as u64)?;
            let words = [rr as u32, cc as u32, nb as u32];
            let grid = ctx.grid((rr * nb) as u64 * WG as u64)?;
            ctx.launch_grid(&SUM_ROWS, &words, &[(1, src), (2, &out)], grid)?;
            (out, nb)
        } else {
            let nb = rr.div_ceil(COL_BLOCK);
            let out = WgpuBuffer::new(ctx, (nb * cc * 4) as u64)?;
            let words = [rr as u32, cc as u32, COL_BLOCK as u32];
            ctx.launch(&SUM_COLS, &words, &[(1, src), (2, &out)], (nb * cc) as u64)?;
            (out, nb)
        };
        cur = Some(next);
        if blocks == 1 {
            break;
        }
        if dim == 1 {
            cc = blocks;
        } else {
            rr = blocks;
        }
    }
    cur.ok_or_else(|| Error::invalid("sum_dim: no pass ran"))
}

/// Sum over `dim` of the `[r, c]` f32 matrix in `x`, on its CUDA device: the passes of
/// [`wgpu_sum_dim`], with a warp per short row and a block per 4096 columns of a long one.
fn cuda_sum_dim(x: &CudaBuffer, r: usize, c: usize, dim: usize) -> Result<CudaBuffer> {
    const OP: &str = "sum_dim";
    let ctx = x.ctx();
    let (outer, inner) = if dim == 0 { (c, r) } else { (r, c) };
    if outer == 0 || inner == 0 {
        return CudaBuffer::zeros(ctx, (outer * 4) as u64);
    }
    u32_count(OP, "x", r * c)?;
    let mut cur: Option<CudaBuffer> = None;
    let (mut rr, mut cc) = (r, c);
    loop {
        let src = cur.as_ref().unwrap_or(x);
        if dim == 1 && cc <= SMALL_ROW_CUDA {
            let out = CudaBuffer::new(ctx, (rr * 4) as u64)?;
            let args = [
                Arg::Buf(src),
                Arg::Buf(&out),
                Arg::U32(rr as u32),
                Arg::U32(cc as u32),
            ];
            ctx.launch_rows(&SUM_ROWS_SMALL_CUDA, rr as u64, &args)?;
            return Ok(out);
        }
        // Each pass leaves one partial sum per block; the partials are summed again in order.
        let (next, blocks) = if dim == 1 {
            let nb = cc.div_ceil(ROW_CHUNK_CUDA);
            let out = CudaBuffer::new(ctx, (rr * nb * 4) as u64)?;
            let args = [
                Arg::Buf(src),
                Arg::Buf(&out),
                Arg::U32(rr as u32),
                Arg::U32(cc as u32),
                Arg::U32(nb as u32),
                Arg::U32(ROW_CHUNK_CUDA as u32),
            ];
            let grid = ctx.grid_blocks((rr * nb) as u64, ROW_THREADS_CUDA);
            ctx.launch(&SUM_ROWS_CUDA, grid, &args)?;
            (out, nb)
        } else {
            let nb = rr.div_ceil(COL_BLOCK);
            let out = CudaBuffer::new(ctx, (nb * cc * 4) as u64)?;
            let args = [
                Arg::Buf(src),
                Arg::Buf(&out),
                Arg::U32(rr as u32),
                Arg::U32(cc as u32),
                Arg::U32(COL_BLOCK as u32),
            ];
            ctx.launch_1d(&SUM_COLS_CUDA, (nb * cc) as u64, &args)?;
            (out, nb)
        };
        if blocks == 1 {
            return Ok(next);
        }
        cur = Some(next);
        if dim == 1 {
            cc = blocks;
        } else {
            rr = blocks;
        }
    }
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
