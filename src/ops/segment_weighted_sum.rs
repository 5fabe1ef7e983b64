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
//! Both GPU backends run through the GPU seam (`src/device/gpu.rs`): the checks,
//! allocation and tensors around the kernels are written once ([`gpu_forward`],
//! [`gpu_backward`]), and each backend implements `SegmentWeightedSumKernels` (wgpu: the
//! [`SegmentWeightedSumParams`] over binding windows and tiles; CUDA: the argument structs
//! of `src/device/cuda/args.rs`, checked against the `.cu` signatures).

use std::sync::Arc;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::device::cuda::args::{
    SegmentWeightedSumArgs, SegmentWeightedSumBackwardAArgs, SegmentWeightedSumBackwardXArgs,
};
use crate::device::cuda::{self, CudaBuffer};
use crate::device::wgpu::SegmentWeightedSumParams;
use crate::device::wgpu::{self as wgpu_dev, BlockBuffers, Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::graph::Block;
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{rows_from_fn, u32_count};
use crate::ops::segment_softmax::{check_edges, for_each_segment};
use crate::ops::segment_sum::check_input;
use crate::tensor::{Storage, Tensor};

const OP: &str = "segment_weighted_sum";
const BOP: &str = "segment_weighted_sum_backward";
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
const FORWARD4: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_vec4_f32",
};
const BACKWARD_X4: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_backward_x_vec4_f32",
};
const BACKWARD_A: Kernel = Kernel {
    stem: "segment_weighted_sum",
    source: SHADER,
    entry: "segment_weighted_sum_backward_a_f32",
};
/// Shapes of one call: columns of `x`, heads, columns per head.
#[derive(Clone, Copy)]
struct Dims {
    cols: usize,
    heads: usize,
    per_head: usize,
}

impl Dims {
    /// The kernels' parameters: `rest` with the output rows `r0..r1` and the dimensions
    /// filled in (see the shader).
    fn params(
        self,
        (r0, r1): (usize, usize),
        rest: SegmentWeightedSumParams,
    ) -> SegmentWeightedSumParams {
        let [rows, cols, heads, per_head, row0] =
            [r1 - r0, self.cols, self.heads, self.per_head, r0].map(|v| v as u32);
        SegmentWeightedSumParams {
            rows,
            cols,
            heads,
            per_head,
            row0,
            ..rest
        }
    }

    /// Whether the wgpu row kernels read four columns at once: each head's columns split
    /// into vec4s, and every row window starts on a multiple of 4 (`nonempty`: an empty
    /// tile binds one word, too short for a vec4).
    fn vec4(self, windows: &[&crate::device::wgpu::Window], nonempty: bool) -> bool {
        self.per_head % 4 == 0 && windows.iter().all(|w| w.base % 4 == 0) && nonempty
    }

    /// `rows` output rows and then `cols`, `heads` and `per_head`, as the CUDA kernels
    /// take them (the gpu_* functions check that the values fit u32 before a launch).
    fn cuda_words(self, op: &'static str, rows: usize) -> Result<[u32; 4]> {
        Ok([
            u32_count(op, "the output rows", rows)?,
            u32_count(op, "the columns", self.cols)?,
            u32_count(op, "the heads", self.heads)?,
            u32_count(op, "the columns per head", self.per_head)?,
        ])
    }
}

/// The largest window rows `s..e` of a CSR (offsets `at`) bind: offsets, edges of `width`
/// values, rows of `cols` values.
fn span(at: impl Fn(usize) -> usize, s: usize, e: usize, width: usize, cols: usize) -> usize {
    (e - s + 1)
        .max((at(e) - at(s)) * width.max(1))
        .max((e - s) * cols)
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
                gpu_forward::<wgpu_dev::Context>(xb, ab, x, block, dims)?
            }
            (Storage::Cuda(xb), Storage::Cuda(ab)) => {
                gpu_forward::<cuda::Context>(xb, ab, x, block, dims)?
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
            let bufs = [xb, ab, gb];
            gpu_backward::<wgpu_dev::Context>(bufs, g, block, dims, need_x, need_a)
        }
        (Storage::Cuda(xb), Storage::Cuda(ab), Storage::Cuda(gb)) => {
            let bufs = [xb, ab, gb];
            gpu_backward::<cuda::Context>(bufs, g, block, dims, need_x, need_a)
        }
        _ => Err(Error::DeviceMismatch {
            op: BOP,
            lhs: x.device(),
            rhs: g.device(),
        }),
    }
}

/// The weighted segment sum kernels on one GPU backend (see `src/device/gpu.rs`): one
/// method per kernel, each marshalling its typed parameters and launching it the
/// backend's way. They run only when there are values to write, each fewer than 2^32,
/// and (for `backward_a`) columns per head to sum over.
trait SegmentWeightedSumKernels: GpuTensors {
    /// Writes `out [num_dst, H·D]` from `x [num_src, H·D]` and the edge weights `a [E, H]`.
    fn forward(
        self: &Arc<Self>,
        block: &Block,
        dims: Dims,
        x: &Self::Buffer,
        a: &Self::Buffer,
        out: &Self::Buffer,
    ) -> Result<()>;

    /// Writes `x̄ [num_src, H·D]` from `a` and the output gradient `g`, over the
    /// transposed CSR.
    fn backward_x(
        self: &Arc<Self>,
        block: &Block,
        dims: Dims,
        a: &Self::Buffer,
        g: &Self::Buffer,
        dx: &Self::Buffer,
    ) -> Result<()>;

    /// Writes `ā [E, H]` from `x` and the output gradient `g`.
    fn backward_a(
        self: &Arc<Self>,
        block: &Block,
        dims: Dims,
        x: &Self::Buffer,
        g: &Self::Buffer,
        da: &Self::Buffer,
    ) -> Result<()>;
}

/// The forward on a GPU backend: `out [num_dst, H·D]` from the buffers of `x` and `a`.
fn gpu_forward<D: SegmentWeightedSumKernels>(
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
fn gpu_backward<D: SegmentWeightedSumKernels>(
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

/// wgpu: the row kernels give a group of threads each output row. Every kernel runs over
/// ranges of output rows whose windows fit one binding, each once per tile of the tensors
/// it reads at arbitrary rows.
impl SegmentWeightedSumKernels for wgpu_dev::Context {
    /// The forward kernel over ranges of dst rows whose windows (offsets, edges and their
    /// weights, output rows) fit one binding, each once per tile of `x`'s rows.
    fn forward(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &WgpuBuffer,
        a: &WgpuBuffer,
        out: &WgpuBuffer,
    ) -> Result<()> {
        let ctx = self;
        let bb = BlockBuffers::of(ctx, b)?;
        let Dims { cols, heads, .. } = dims;
        let at = |d: usize| b.indptr[d] as usize;
        let tiles = ctx.tiles(OP, b.num_src, |s, e| (e - s) * cols)?;
        for range @ (d0, d1) in ctx.split(OP, b.num_dst, |s, e| span(at, s, e, heads, cols))? {
            let pw = ctx.window(&bb.indptr, d0, d1 + 1);
            let ew = ctx.window(&bb.indices, at(d0), at(d1));
            let aw = ctx.rows_window(a, at(d0), at(d1), heads);
            let ow = ctx.rows_window(out, d0, d1, cols);
            for (i, &(t0, t1)) in tiles.iter().enumerate() {
                let xw = ctx.rows_window(x, t0, t1, cols);
                let vec4 = dims.vec4(&[&xw, &ow], t1 > t0);
                let (lanes, grid) = ctx.row_groups(d1 - d0, if vec4 { cols / 4 } else { cols })?;
                let (t0, t1) = (t0 as u32, t1 as u32);
                let rest = SegmentWeightedSumParams {
                    ptr_base: pw.base,
                    edge_base: ew.base,
                    w_base: aw.base,
                    out_base: ow.base,
                    t0,
                    t1,
                    in_base: xw.base,
                    first: first(i),
                    lanes,
                    ..Default::default()
                };
                let (k, [xs, os]) = if vec4 {
                    (&FORWARD4, [12, 13])
                } else {
                    (&FORWARD, [3, 5])
                };
                let binds = [(1, &pw), (2, &ew), (xs, &xw), (4, &aw), (os, &ow)];
                ctx.launch_windows_grid(k, &dims.params(range, rest), &binds, grid)?;
            }
        }
        Ok(())
    }

    /// `x̄` over ranges of src rows whose windows (transposed offsets and edges, output rows)
    /// fit one binding, each once per pair of tiles of `ḡ`'s rows and `a`'s rows (visited in
    /// order, so the sums keep their order).
    fn backward_x(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        a: &WgpuBuffer,
        g: &WgpuBuffer,
        dx: &WgpuBuffer,
    ) -> Result<()> {
        let ctx = self;
        let bb = BlockBuffers::of(ctx, b)?;
        let Dims { cols, heads, .. } = dims;
        let at = |u: usize| b.t_indptr[u] as usize;
        let g_tiles = ctx.tiles(OP, b.num_dst, |s, e| (e - s) * cols)?;
        let a_tiles = ctx.tiles(OP, b.num_edges(), |s, e| (e - s) * heads)?;
        for range @ (u0, u1) in ctx.split(OP, b.num_src, |s, e| span(at, s, e, 1, cols))? {
            let pw = ctx.window(&bb.t_indptr, u0, u1 + 1);
            let [dw, ew] = [&bb.t_dst, &bb.t_edges].map(|t| ctx.window(t, at(u0), at(u1)));
            let ow = ctx.rows_window(dx, u0, u1, cols);
            for (i, &(t0, t1)) in g_tiles.iter().enumerate() {
                let gw = ctx.rows_window(g, t0, t1, cols);
                let vec4 = dims.vec4(&[&gw, &ow], t1 > t0);
                let (lanes, grid) = ctx.row_groups(u1 - u0, if vec4 { cols / 4 } else { cols })?;
                let (k, [gs, os]) = if vec4 {
                    (&BACKWARD_X4, [14, 15])
                } else {
                    (&BACKWARD_X, [9, 10])
                };
                for (j, &(a0, a1)) in a_tiles.iter().enumerate() {
                    let aw = ctx.rows_window(a, a0, a1, heads);
                    let [t0, t1, a0, a1] = [t0, t1, a0, a1].map(|v| v as u32);
                    let f = first(i + j);
                    let rest = SegmentWeightedSumParams {
                        ptr_base: pw.base,
                        edge_base: dw.base,
                        out_base: ow.base,
                        t0,
                        t1,
                        in_base: gw.base,
                        a0,
                        a1,
                        a_base: aw.base,
                        first: f,
                        lanes,
                        ..Default::default()
                    };
                    let binds = [(6, &pw), (7, &dw), (8, &ew), (4, &aw), (gs, &gw), (os, &ow)];
                    let p = dims.params(range, rest);
                    ctx.launch_windows_grid(k, &p, &binds, grid)?;
                }
            }
        }
        Ok(())
    }

    /// `ā` over ranges of dst rows whose windows (offsets, edges and their gradients, rows of
    /// `ḡ`) fit one binding, each once per tile of `x`'s rows.
    fn backward_a(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &WgpuBuffer,
        g: &WgpuBuffer,
        da: &WgpuBuffer,
    ) -> Result<()> {
        let ctx = self;
        let bb = BlockBuffers::of(ctx, b)?;
        let Dims { cols, heads, .. } = dims;
        let at = |d: usize| b.indptr[d] as usize;
        let tiles = ctx.tiles(OP, b.num_src, |s, e| (e - s) * cols)?;
        for range @ (d0, d1) in ctx.split(OP, b.num_dst, |s, e| span(at, s, e, heads, cols))? {
            let pw = ctx.window(&bb.indptr, d0, d1 + 1);
            let ew = ctx.window(&bb.indices, at(d0), at(d1));
            let gw = ctx.rows_window(g, d0, d1, cols);
            let ow = ctx.rows_window(da, at(d0), at(d1), heads);
            for &(t0, t1) in &tiles {
                let xw = ctx.rows_window(x, t0, t1, cols);
                let (t0, t1) = (t0 as u32, t1 as u32);
                let rest = SegmentWeightedSumParams {
                    ptr_base: pw.base,
                    edge_base: ew.base,
                    w_base: gw.base,
                    out_base: ow.base,
                    t0,
                    t1,
                    in_base: xw.base,
                    ..Default::default()
                };
                let binds = [(1, &pw), (2, &ew), (3, &xw), (9, &gw), (11, &ow)];
                let n = ((d1 - d0) * heads) as u64;
                ctx.launch_windows(&BACKWARD_A, &dims.params(range, rest), &binds, n)?;
            }
        }
        Ok(())
    }
}

/// CUDA: a warp owns an output row of `out` and of `x̄`, lanes over columns; for `ā` a
/// warp owns a dst node's edges.
impl SegmentWeightedSumKernels for cuda::Context {
    fn forward(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &CudaBuffer,
        a: &CudaBuffer,
        out: &CudaBuffer,
    ) -> Result<()> {
        let bb = cuda::BlockBuffers::of(self, b)?;
        let [rows, cols, heads, per_head] = dims.cuda_words(OP, b.num_dst)?;
        let args = SegmentWeightedSumArgs {
            indptr: (&bb.indptr).into(),
            indices: (&bb.indices).into(),
            x: x.into(),
            a: a.into(),
            out: out.into(),
            rows,
            cols,
            heads,
            per_head,
        };
        self.launch_args_rows(&args, rows as u64)
    }

    fn backward_x(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        a: &CudaBuffer,
        g: &CudaBuffer,
        dx: &CudaBuffer,
    ) -> Result<()> {
        let bb = cuda::BlockBuffers::of(self, b)?;
        let [rows, cols, heads, per_head] = dims.cuda_words(BOP, b.num_src)?;
        let args = SegmentWeightedSumBackwardXArgs {
            t_indptr: (&bb.t_indptr).into(),
            t_dst: (&bb.t_dst).into(),
            t_edges: (&bb.t_edges).into(),
            a: a.into(),
            g: g.into(),
            dx: dx.into(),
            rows,
            cols,
            heads,
            per_head,
        };
        self.launch_args_rows(&args, rows as u64)
    }

    fn backward_a(
        self: &Arc<Self>,
        b: &Block,
        dims: Dims,
        x: &CudaBuffer,
        g: &CudaBuffer,
        da: &CudaBuffer,
    ) -> Result<()> {
        let bb = cuda::BlockBuffers::of(self, b)?;
        let [rows, cols, heads, per_head] = dims.cuda_words(BOP, b.num_dst)?;
        let args = SegmentWeightedSumBackwardAArgs {
            indptr: (&bb.indptr).into(),
            indices: (&bb.indices).into(),
            x: x.into(),
            g: g.into(),
            da: da.into(),
            rows,
            cols,
            heads,
            per_head,
        };
        self.launch_args_rows(&args, rows as u64)
    }
}

/// The `first` flag of the `i`-th tile (pair of tiles) visited.
fn first(i: usize) -> u32 {
    (i == 0) as u32
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
