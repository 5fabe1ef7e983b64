//! `shaders/reduce.wgsl` behind [`ReduceKernels`]: a row is summed by one workgroup per
//! 1024 columns (a tree over 256 threads), then the block sums again; a column sum adds
//! blocks of `COL_BLOCK` rows in order. Each pass runs over ranges of its work items whose
//! windows fit one binding, with the same order of additions.

use std::sync::Arc;

use crate::device::kernels::reduce::{ReduceKernels, COL_BLOCK};
use crate::device::wgpu::{Context, Follow, Kernel, ReduceParams, WgpuBuffer, Window, WG};
use crate::error::{Error, Result};

const SHADER: &str = include_str!("../../../../shaders/reduce.wgsl");
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

impl ReduceKernels for Context {
    fn sum_dim(
        self: &Arc<Self>,
        x: &WgpuBuffer,
        (r, c): (usize, usize),
        dim: usize,
    ) -> Result<WgpuBuffer> {
        wgpu_sum_dim(x, r, c, dim)
    }

    fn expand(
        self: &Arc<Self>,
        _op: &'static str,
        v: &WgpuBuffer,
        (r, c): (usize, usize),
        dim: usize,
    ) -> Result<WgpuBuffer> {
        wgpu_expand(v, r, c, dim)
    }
}

/// `[r, c]` repeating `v` along `dim` (see [`ReduceKernels::expand`]), on its adapter: `v` follows the
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
