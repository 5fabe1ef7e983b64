//! `shaders/matmul.wgsl` behind [`MatmulKernels`]: 64x64 output tiles per workgroup, and
//! the splits of operands past the adapter's storage-binding limit (see
//! `src/ops/matmul.rs`'s module docs): row blocks, k chunks, or blocks of C times chunks of
//! k through compact copies.

use std::sync::Arc;

use crate::device::kernels::matmul::MatmulKernels;
use crate::device::wgpu::{Context, Kernel, MatmulParams, WgpuBuffer};
use crate::error::{Error, Result};

const SHADER: &str = include_str!("../../../../shaders/matmul.wgsl");
const KERNEL: Kernel = Kernel {
    stem: "matmul",
    source: SHADER,
    entry: "matmul_f32",
};
const COPY2D: Kernel = Kernel {
    stem: "matmul",
    source: SHADER,
    entry: "copy2d_f32",
};
/// Rows and columns of C per workgroup.
const TILE: usize = 64;

impl MatmulKernels for Context {
    fn matmul(
        self: &Arc<Self>,
        a: &WgpuBuffer,
        b: &WgpuBuffer,
        (m, k, n): (usize, usize, usize),
        (ta, tb): (bool, bool),
    ) -> Result<WgpuBuffer> {
        wgpu_matmul(self, a, b, (m, k, n), (ta, tb))
    }
}

/// The product on `ctx`: one launch, or the splits of the module docs past the binding
/// limit.
fn wgpu_matmul(
    ctx: &Arc<Context>,
    a: &WgpuBuffer,
    b: &WgpuBuffer,
    (m, k, n): (usize, usize, usize),
    (ta, tb): (bool, bool),
) -> Result<WgpuBuffer> {
    let bytes = (m * n * 4) as u64;
    if [m, n, k].iter().any(|&d| d > u32::MAX as usize) {
        return Err(Error::shape(
            "matmul",
            format!("{m}x{k} by {k}x{n} does not fit u32 indices"),
        ));
    }
    // Column tiles past the grid's per-dimension limit go to the blocked split too.
    let grid_ok = n.div_ceil(TILE) <= ctx.limits.max_compute_workgroups_per_dimension as usize;
    let out = WgpuBuffer::new(ctx, bytes)?;
    // Rows i0..i1 of C and the k range l0..l1, with the element ranges of A, B and C they
    // touch (contiguous in the layouts that call it).
    let run = |rows: (usize, usize), ks: (usize, usize), accumulate: bool| -> Result<()> {
        let ((i0, i1), (l0, l1)) = (rows, ks);
        let (mm, kk) = (i1 - i0, l1 - l0);
        let a_range = if ta {
            (l0 * m, kk * m)
        } else {
            (i0 * k, mm * k)
        };
        let b_range = if tb { (0, n * k) } else { (l0 * n, kk * n) };
        let c_range = (i0 * n, mm * n);
        let ops = [(a, a_range), (b, b_range), (&out, c_range)];
        gemm(ops, (mm, n, kk), (ta, tb), accumulate)
    };
    let limit = ctx.chunk_bytes() as usize / 4;
    let fits = |elems: usize| elems <= limit;
    // Row blocks of A and C, or k chunks, of a multiple of TILE rows: aligned offsets.
    let row_step = (limit / k.max(n)) / TILE * TILE;
    let k_step = (limit / m.max(n)) / TILE * TILE;
    if !grid_ok {
        blocked((a, b, &out), (m, k, n), (ta, tb))?;
    } else if fits(m * k) && fits(k * n) && fits(m * n) {
        run((0, m), (0, k), false)?;
    } else if !ta && fits(k * n) && row_step > 0 {
        for i0 in (0..m).step_by(row_step) {
            run((i0, (i0 + row_step).min(m)), (0, k), false)?;
        }
    } else if ta && !tb && fits(m * n) && k_step > 0 {
        for l0 in (0..k).step_by(k_step) {
            run((0, m), (l0, (l0 + k_step).min(k)), l0 > 0)?;
        }
    } else {
        blocked((a, b, &out), (m, k, n), (ta, tb))?;
    }
    Ok(out)
}

/// One launch of the tiled kernel: `op(A)·op(B)` of `(m, n, k)` into C (added to it when
/// `accumulate`), each operand bound as its element range `(offset, len)`, which holds it
/// in the kernel's layout (offsets aligned by the callers).
fn gemm(
    ops: [(&WgpuBuffer, (usize, usize)); 3],
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    accumulate: bool,
) -> Result<()> {
    let ctx = ops[0].0.ctx();
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let words = MatmulParams {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        ta: ta as u32,
        tb: tb as u32,
        accumulate: accumulate as u32,
        ..Default::default()
    };
    let ranges: Vec<_> = (1..)
        .zip(ops)
        .map(|(slot, (buf, (o, l)))| (slot, buf, (o * 4) as u64, (l * 4) as u64))
        .collect();
    // Row blocks past the per-dimension limit fold into z (m < 2³² keeps z within it);
    // the shader recombines them.
    let y = m.div_ceil(TILE).min(max);
    let z = m.div_ceil(TILE).div_ceil(y);
    let grid = (n.div_ceil(TILE) as u32, y as u32, z as u32);
    ctx.launch_ranges(&KERNEL, &words, &ranges, grid)
}

/// The split for what the contiguous ones cannot take (an operand past the limit beside
/// one that would have to be bound whole, both operands transposed, rows too long for
/// `TILE` of them): blocks of C times chunks of k, each about the square root of a binding
/// on a side. Every block of op(A), op(B) is first copied into a buffer of its own,
/// row-major (so a transposed operand costs one strided copy), the kernel multiplies them
/// into a block of C, adding the chunks of k in order, and the block is copied into C.
fn blocked(
    (a, b, c): (&WgpuBuffer, &WgpuBuffer, &WgpuBuffer),
    (m, k, n): (usize, usize, usize),
    (ta, tb): (bool, bool),
) -> Result<()> {
    let ctx = a.ctx();
    let side = ctx.window_elems().isqrt().max(1);
    let (bm, bk, bn) = (m.min(side), k.min(side), n.min(side));
    // Row and column strides of op(A) ([m, k]) and op(B) ([k, n]) in the stored operands.
    let sa = if ta { (1, m) } else { (k, 1) };
    let sb = if tb { (1, k) } else { (n, 1) };
    for i0 in (0..m).step_by(bm) {
        let mm = bm.min(m - i0);
        for j0 in (0..n).step_by(bn) {
            let nn = bn.min(n - j0);
            let cb = WgpuBuffer::new(ctx, (mm * nn * 4) as u64)?;
            for l0 in (0..k).step_by(bk) {
                let kk = bk.min(k - l0);
                let ab = WgpuBuffer::new(ctx, (mm * kk * 4) as u64)?;
                let bb = WgpuBuffer::new(ctx, (kk * nn * 4) as u64)?;
                copy2d((a, sa, (i0, l0)), (mm, kk), (&ab, (kk, 1), 0))?;
                copy2d((b, sb, (l0, j0)), (kk, nn), (&bb, (nn, 1), 0))?;
                let ops = [
                    (&ab, (0, mm * kk)),
                    (&bb, (0, kk * nn)),
                    (&cb, (0, mm * nn)),
                ];
                gemm(ops, (mm, nn, kk), (false, false), l0 > 0)?;
            }
            copy2d((&cb, (nn, 1), (0, 0)), (mm, nn), (c, (n, 1), i0 * n + j0))?;
        }
    }
    Ok(())
}

/// Copies the `rows × cols` block at `(r0, c0)` of a matrix stored in `src` with row and
/// column strides `(srs, scs)` to `dst` from element `off` with strides `(drs, dcs)`, in
/// tiles whose windows on both sides fit one binding (halving the longer side until they
/// do).
fn copy2d(
    (src, (srs, scs), (r0, c0)): (&WgpuBuffer, (usize, usize), (usize, usize)),
    (rows, cols): (usize, usize),
    (dst, (drs, dcs), off): (&WgpuBuffer, (usize, usize), usize),
) -> Result<()> {
    let ctx = src.ctx();
    let limit = ctx.window_elems();
    let span =
        |g: usize, h: usize| ((g - 1) * srs + (h - 1) * scs).max((g - 1) * drs + (h - 1) * dcs) + 1;
    let (mut g, mut h) = (rows, cols);
    while span(g, h) > limit {
        if (g - 1) * srs.max(drs) >= (h - 1) * scs.max(dcs) {
            g = g.div_ceil(2);
        } else {
            h = h.div_ceil(2);
        }
    }
    for tr in (0..rows).step_by(g) {
        let gg = g.min(rows - tr);
        for tc in (0..cols).step_by(h) {
            let hh = h.min(cols - tc);
            let s_lo = (r0 + tr) * srs + (c0 + tc) * scs;
            let d_lo = off + tr * drs + tc * dcs;
            let sw = ctx.window(src, s_lo, s_lo + (gg - 1) * srs + (hh - 1) * scs + 1);
            let dw = ctx.window(dst, d_lo, d_lo + (gg - 1) * drs + (hh - 1) * dcs + 1);
            let u = |v: usize| v as u32;
            let words = MatmulParams {
                count: u(gg * hh),
                w: u(hh),
                tr: u(tr),
                tc: u(tc),
                r0: u(r0),
                c0: u(c0),
                srs: u(srs),
                scs: u(scs),
                drs: u(drs),
                dcs: u(dcs),
                off: u(off),
                src_base: sw.base,
                dst_base: dw.base,
                ..Default::default()
            };
            ctx.launch_windows(&COPY2D, &words, &[(4, &sw), (5, &dw)], (gg * hh) as u64)?;
        }
    }
    Ok(())
}
