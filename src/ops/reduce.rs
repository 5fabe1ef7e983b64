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
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::ReduceParams;
use crate::device::wgpu::{Follow, Kernel, WgpuBuffer, Window, WG};
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
pub(crate) const COL_BLOCK: usize = 64;

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
        Storage::Wgpu(b) => wgpu_output(wgpu_expand(b, r, c, dim)?, vec![r, c], x),
    };
    let in_shape = x.shape().to_vec();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(reshape(&sum_dim(g, dim)?, &in_shape)?)])
    }))
}

/// `[r, c]` repeating `v` along `dim` (see [`expand_dim`]), on its adapter: `v` follows the
/// output through a row (dim 0) or column (dim 1) broadcast, so each range of the output
/// binds the values of `v` it reads.
fn wgpu_expand(v: &WgpuBuffer, r: usize, c: usize, dim: usize) -> Result<WgpuBuffer> {
    let ctx = v.ctx();
    let out = WgpuBuffer::new(ctx, (r * c * 4) as u64)?;
    let follow = if dim == 0 {
        Follow::Row(c)
    } else {
        Follow::Col(c)
    };
    let params = ReduceParams {
        c: c as u32,
        d: dim as u32,
        ..Default::default()
    };
    ctx.launch_followed(&EXPAND, params, &[(4, &out)], Some((3, v, follow)), r * c)?;
    Ok(out)
}

/// The sum kernels' parameters (see the shader): items `i0..i1`, the windows of the
/// output and of `x`, columns `c`, the pass's `d`, and the rows `rows` of `r` it sums.
fn words(
    (i0, i1): (usize, usize),
    (out, x): (&Window, &Window),
    c: usize,
    d: usize,
    r: usize,
    rows: (usize, usize),
) -> ReduceParams {
    let [n, base, c, d, r, row_lo, row_hi] =
        [i1 - i0, i0, c, d, r, rows.0, rows.1].map(|v| v as u32);
    ReduceParams {
        n,
        base,
        same_base: out.base,
        follow_base: x.base,
        c,
        d,
        r,
        row_lo,
        row_hi,
    }
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
        for (r0, r1) in ctx.split("sum_dim", r, |a, b| (b - a) * c)? {
            let (xw, ow) = (ctx.rows_window(x, r0, r1, c), ctx.window(&out, r0, r1));
            let words = words((r0, r1), (&ow, &xw), c, 0, r, (0, r));
            let binds = [(1, &xw), (2, &ow)];
            ctx.launch_windows(&SUM_ROWS_SMALL, &words, &binds, (r1 - r0) as u64)?;
        }
        return Ok(out);
    }
    // Each pass leaves one partial sum per block; the partials are summed again in order.
    let mut cur: Option<WgpuBuffer> = None;
    let (mut rr, mut cc) = (r, c);
    loop {
        let src = cur.as_ref().unwrap_or(x);
        let (next, blocks) = if dim == 1 {
            sum_rows_pass(src, rr, cc)?
        } else {
            sum_cols_pass(src, rr, cc)?
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

/// One pass of row sums over `[r, c]`: a partial sum per (row, block of `ROW_BLOCK`
/// columns), `[r, nb]`; returns it and `nb`. Work items (row, block) are split into ranges
/// whose columns fit one binding, so a single long row (`sum_all`) splits too.
fn sum_rows_pass(x: &WgpuBuffer, r: usize, c: usize) -> Result<(WgpuBuffer, usize)> {
    let ctx = x.ctx();
    let nb = c.div_ceil(ROW_BLOCK);
    let out = WgpuBuffer::new(ctx, (r * nb * 4) as u64)?;
    // Elements lo..hi of x that items w0..w1 read.
    let lo = |w: usize| (w / nb) * c + (w % nb) * ROW_BLOCK;
    let hi = |w: usize| (w / nb) * c + c.min((w % nb + 1) * ROW_BLOCK);
    let span = |w0: usize, w1: usize| (hi(w1 - 1) - lo(w0)).max(w1 - w0);
    for (w0, w1) in ctx.split("sum_dim", r * nb, span)? {
        let (xw, ow) = (ctx.window(x, lo(w0), hi(w1 - 1)), ctx.window(&out, w0, w1));
        let words = words((w0, w1), (&ow, &xw), c, nb, r, (0, r));
        let grid = ctx.grid((w1 - w0) as u64 * WG as u64)?;
        ctx.launch_windows_grid(&SUM_ROWS, &words, &[(1, &xw), (2, &ow)], grid)?;
    }
    Ok((out, nb))
}

/// One pass of column sums over `[r, c]`: a partial sum per (block of `COL_BLOCK` rows,
/// column), `[nb, c]`; returns it and `nb`. Dispatches cover ranges of (block, column)
/// invocations; when a block's rows do not fit one binding (very wide rows), each block
/// runs in groups of rows that do, and columns, every group adding to what the previous
/// left, so the additions keep their order and the sums do not change.
fn sum_cols_pass(x: &WgpuBuffer, r: usize, c: usize) -> Result<(WgpuBuffer, usize)> {
    let ctx = x.ctx();
    let nb = r.div_ceil(COL_BLOCK);
    let out = WgpuBuffer::new(ctx, (nb * c * 4) as u64)?;
    let limit = ctx.window_elems();
    // Invocations i0..i1 (i = blk * c + col) summing rows ra..rb of their blocks.
    let launch = |(i0, i1): (usize, usize), (ra, rb): (usize, usize)| -> Result<()> {
        let lo = |i: usize| (i / c * COL_BLOCK).max(ra) * c + i % c;
        let hi = |i: usize| (r.min((i / c + 1) * COL_BLOCK).min(rb) - 1) * c + i % c + 1;
        let (xw, ow) = (ctx.window(x, lo(i0), hi(i1 - 1)), ctx.window(&out, i0, i1));
        let words = words((i0, i1), (&ow, &xw), c, COL_BLOCK, r, (ra, rb));
        ctx.launch_windows(&SUM_COLS, &words, &[(1, &xw), (2, &ow)], (i1 - i0) as u64)
    };
    if COL_BLOCK * c <= limit {
        let lo = |i: usize| (i / c) * COL_BLOCK * c + i % c;
        let hi = |i: usize| (r.min((i / c + 1) * COL_BLOCK) - 1) * c + i % c + 1;
        let span = |i0: usize, i1: usize| (hi(i1 - 1) - lo(i0)).max(i1 - i0);
        for range in ctx.split("sum_dim", nb * c, span)? {
            launch(range, (0, r))?;
        }
    } else {
        let group = (limit / c).max(1);
        for blk in 0..nb {
            let rows = blk * COL_BLOCK..r.min((blk + 1) * COL_BLOCK);
            for ra in rows.clone().step_by(group) {
                let rb = (ra + group).min(rows.end);
                let span = |c0: usize, c1: usize| (rb - ra - 1) * c + (c1 - c0);
                for (c0, c1) in ctx.split("sum_dim", c, span)? {
                    launch((blk * c + c0, blk * c + c1), (ra, rb))?;
                }
            }
        }
    }
    Ok((out, nb))
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
