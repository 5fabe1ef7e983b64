//! `shaders/index_select.wgsl` behind [`IndexSelectKernels`]: one invocation per output
//! value, over ranges of output rows whose windows fit one binding, each once per tile of
//! the rows read at arbitrary positions. Also the row put, the gather's adjoint for
//! distinct indices, which the LSTM aggregation uses (`lstm_aggregate.rs` beside this).

use std::sync::Arc;

use crate::device::gpu::u32_count;
use crate::device::kernels::index_select::IndexSelectKernels;
use crate::device::wgpu::{Context, IndexSelectParams, Kernel, WgpuBuffer};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/index_select.wgsl");
const GATHER: Kernel = Kernel {
    stem: "index_select",
    source: SHADER,
    entry: "gather_u32",
};
const PUT: Kernel = Kernel {
    stem: "index_select",
    source: SHADER,
    entry: "put_u32",
};
const SCATTER: Kernel = Kernel {
    stem: "index_select",
    source: SHADER,
    entry: "scatter_add_f32",
};
impl IndexSelectKernels for Context {
    fn gather(
        self: &Arc<Self>,
        op: &'static str,
        x: &WgpuBuffer,
        n: usize,
        words: usize,
        idx: &WgpuBuffer,
        m: usize,
    ) -> Result<WgpuBuffer> {
        u32_count(op, "the output", m * words)?;
        // With words > 0, n * words fitting u32 bounds n too; with none nothing runs.
        u32_count(op, "x", n * words)?;
        gather_rows(x, n, words, idx, m)
    }

    fn scatter_add(
        self: &Arc<Self>,
        src: &WgpuBuffer,
        indptr: &[u32],
        pos: &[u32],
        m: usize,
        f: usize,
    ) -> Result<WgpuBuffer> {
        scatter(src, indptr, pos, m, f)
    }
}

/// Rows `idx` (`u32 [m]`, each below `n`) of the `[n, f]` table `x`, as `[m, f]`, on its
/// adapter. Ranges of output rows whose windows fit one binding, each run once per tile of
/// `x`'s rows: a value is copied in the pass of the tile holding its row, so a table past
/// the binding limit needs no copy of its own.
pub(crate) fn gather_rows(
    x: &WgpuBuffer,
    n: usize,
    f: usize,
    idx: &WgpuBuffer,
    m: usize,
) -> Result<WgpuBuffer> {
    let out = WgpuBuffer::new(x.ctx(), (m * f * 4) as u64)?;
    by_tiles("index_select", &GATHER, idx, m, f, (3, &out), (2, x), n)?;
    Ok(out)
}

/// Writes row `i` of `rows` (`[m, f]`) into row `idx[i]` of the `[n, f]` `table`, on its
/// adapter: the adjoint of [`gather_rows`] for distinct indices (each below `n`), split the
/// same way.
pub(crate) fn put_rows(
    rows: &WgpuBuffer,
    idx: &WgpuBuffer,
    m: usize,
    f: usize,
    table: &WgpuBuffer,
    n: usize,
) -> Result<()> {
    by_tiles("put_rows", &PUT, idx, m, f, (8, rows), (9, table), n)
}

/// Runs `kernel` (gather or put) over ranges of the `m` indexed rows whose windows fit one
/// binding, each once per tile of the `n`-row table. `rows` is the `[m, f]` side (bound by
/// range) and `table` the `[n, f]` side (bound by tile), each with its binding; the kernel
/// reads the rows side's and the table tile's first elements from the parameter words.
#[allow(clippy::too_many_arguments)]
fn by_tiles(
    op: &'static str,
    kernel: &Kernel,
    idx: &WgpuBuffer,
    m: usize,
    f: usize,
    (row_slot, rows): (u32, &WgpuBuffer),
    (table_slot, table): (u32, &WgpuBuffer),
    n: usize,
) -> Result<()> {
    let ctx = idx.ctx();
    let tiles = ctx.tiles(op, n, |a, b| (b - a) * f)?;
    for (r0, r1) in ctx.split(op, m, |a, b| (b - a) * f.max(1))? {
        let (iw, rw) = (ctx.window(idx, r0, r1), ctx.rows_window(rows, r0, r1, f));
        for &(t0, t1) in &tiles {
            let tw = ctx.rows_window(table, t0, t1, f);
            let params = IndexSelectParams {
                n: ((r1 - r0) * f) as u32,
                f: f as u32,
                r0: r0 as u32,
                idx_base: iw.base,
                out_base: rw.base,
                t0: t0 as u32,
                t1: t1 as u32,
                x_base: tw.base,
                ..Default::default()
            };
            let binds = [(1, &iw), (row_slot, &rw), (table_slot, &tw)];
            ctx.launch_windows(kernel, &params, &binds, ((r1 - r0) * f) as u64)?;
        }
    }
    Ok(())
}

/// The scatter-add of `src` (`[m, f]`) over the transposed index (`indptr`, `pos`) on `src`'s adapter:
/// ranges of target rows whose windows (offsets, positions, output rows) fit one binding,
/// each run once per tile of `src`'s rows, adding to the sums the previous tile left.
/// Positions increase along each sum, so the additions keep their order.
fn scatter(
    src: &WgpuBuffer,
    indptr: &[u32],
    pos: &[u32],
    m: usize,
    f: usize,
) -> Result<WgpuBuffer> {
    const OP: &str = "scatter_add";
    let ctx = src.ctx();
    let n = indptr.len() - 1;
    let t_indptr = WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(indptr))?;
    let t_pos = WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(pos))?;
    let out = WgpuBuffer::new(ctx, (n * f * 4) as u64)?;
    let tp = |r: usize| indptr[r] as usize;
    let tiles = ctx.tiles(OP, m, |a, b| (b - a) * f)?;
    let span = |a: usize, b: usize| (b - a + 1).max(tp(b) - tp(a)).max((b - a) * f);
    for (r0, r1) in ctx.split(OP, n, span)? {
        let iw = ctx.window(&t_indptr, r0, r1 + 1);
        let pw = ctx.window(&t_pos, tp(r0), tp(r1));
        let ow = ctx.rows_window(&out, r0, r1, f);
        for (i, &(t0, t1)) in tiles.iter().enumerate() {
            let sw = ctx.rows_window(src, t0, t1, f);
            let params = IndexSelectParams {
                n: ((r1 - r0) * f) as u32,
                f: f as u32,
                r0: r0 as u32,
                idx_base: iw.base,
                out_base: ow.base,
                t0: t0 as u32,
                t1: t1 as u32,
                x_base: sw.base,
                pos_base: pw.base,
                first: (i == 0) as u32,
            };
            let binds = [(4, &iw), (5, &pw), (6, &sw), (7, &ow)];
            ctx.launch_windows(&SCATTER, &params, &binds, ((r1 - r0) * f) as u64)?;
        }
    }
    Ok(out)
}
