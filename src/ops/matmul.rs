//! Matrix product with transpose flags: `C[m, n] = op(A) · op(B)`, where `op(X)` is `X` or
//! `Xᵀ`, so that no transpose is ever materialised.
//!
//! Backward (ḡ = ∂L/∂C):
//! - `∂op(A) = ḡ · op(B)ᵀ`; stored `A` gets it as is, or transposed when `op(A) = Aᵀ`:
//!   `Ā = matmul(ḡ, B, false, !tb)` or `Ā = matmul(B, ḡ, tb, true)`.
//! - `∂op(B) = op(A)ᵀ · ḡ`: `B̄ = matmul(A, ḡ, !ta, false)` or `B̄ = matmul(ḡ, A, true, ta)`.
//!
//! CPU kernel: the `gemm` crate (the GEMM of faer and candle). It packs cache-blocked
//! panels for SIMD micro-kernels chosen at run time (AVX2/FMA on x86-64, NEON on ARM; its
//! AVX-512 kernels, behind the crate's `x86-v4` feature, are left off: no clear gain on the
//! LSTM here, and a longer build), for f32 and f64 (the f64 path serves gradient checks), takes arbitrary row and column strides,
//! which is what lets the transpose flags cost nothing, and threads over rayon's pool, so
//! one pool owns the cores. On the products of a SAGE-LSTM layer it took 14% less CPU time
//! than `matrixmultiply` split over rayon by row blocks, each block repacking the other
//! operand (see docs/BENCHMARKS.md). Its results do not depend on the thread count, and a
//! row's do not depend on the rows beside it (`cpu_gemm`).
//!
//! wgpu kernel (`shaders/matmul.wgsl`): 64x64 output tiles per workgroup of 16x16 threads,
//! 4x4 register blocking, k in steps of 16 staged in workgroup memory (8 KiB, within the
//! 16 KiB every adapter guarantees); the flags choose how tiles are loaded, so transposed
//! operands cost no copy either. Each output is one dot product in k order: deterministic.
//! Operands past the adapter's storage-binding limit are split where their rows are
//! contiguous: `op(A) = A` splits C's rows (each chunk a launch over a row range of A and
//! C); `op(A) = Aᵀ` with `op(B) = B` (the weight gradient `Xᵀ·G`) splits k, adding the
//! chunks' products into C in order. Everything else (both operands transposed, `B` past
//! the limit with `op(A) = A`, `C` past it with `op(A) = Aᵀ`) runs blocks of C times
//! chunks of k through compact copies of the operands' blocks (see `blocked`), so no
//! layout or size is left that cannot split.
//!
//! CUDA: cuBLAS `sgemm` on the device's stream, with the row-major problem read as its
//! column-major transpose (`Cᵀ = op(B)ᵀ·op(A)ᵀ`), so the flags again cost no copy. cuBLAS
//! runs in its default (full f32, no TF32) math mode. Where cuBLAS does not load, or with
//! `ESPALIER_CUDA_GEMM=kernel`, `kernels/matmul.cu` runs instead: the WGSL kernel's tiling
//! in CUDA C.

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData};
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::MatmulParams;
use crate::device::wgpu::{Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::ops::{cpu_output, cuda_output, wgpu_output};
use crate::tensor::{Storage, Tensor};

const SHADER: &str = include_str!("../../shaders/matmul.wgsl");
const KERNEL: Kernel = Kernel {
    stem: "matmul",
    source: SHADER,
    entry: "matmul_f32",
};
const KERNEL_CUDA: cuda::Kernel = crate::cuda_kernel!("matmul", "matmul_f32");
const COPY2D: Kernel = Kernel {
    stem: "matmul",
    source: SHADER,
    entry: "copy2d_f32",
};
/// Rows and columns of C per workgroup.
const TILE: usize = 64;

/// `op(a) · op(b)` for 2-D `a`, `b`; `ta`/`tb` transpose the stored operand.
pub fn matmul(a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
    product(a, None, b, ta, tb)
}

/// `a[..rows] · b`: the first `rows` rows of `a` times `b`, read in place. The value (and
/// its bits) of `matmul(&slice(a, 0, 0, rows)?, b, false, false)`, without the copy of the
/// rows; backward keeps `a` itself and gives it `ḡ·bᵀ` padded with zero rows (the
/// slice's rule). It saves memory where `a` is kept anyway (a SAGE layer's self term over
/// the dst prefix of its src rows).
pub fn matmul_rows(a: &Tensor, rows: usize, b: &Tensor) -> Result<Tensor> {
    let (ar, _) = dims(a)?;
    if rows > ar {
        return Err(Error::shape(
            "matmul",
            format!("the first {rows} rows of A {:?}", a.shape()),
        ));
    }
    product(a, Some(rows), b, false, false)
}

/// `matmul` over the first `prefix` stored rows of `a` (all of them with `None`), read in
/// place: a row prefix of a row-major matrix is itself one, and `Aᵀ` over it has the same
/// strides, so every backend takes it as a smaller A. `b` is read whole, so a prefix
/// with `tb` is never asked for (`matmul_rows` has no transposes; its `B̄` rule asks
/// for `A[..rows]ᵀ·ḡ`).
fn product(a: &Tensor, prefix: Option<usize>, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
    const OP: &str = "matmul";
    a.same_device(b, OP)?;
    a.expect_float(OP)?;
    let (ar, ac) = dims(a)?;
    let ar = prefix.unwrap_or(ar);
    let (br, bc) = dims(b)?;
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if tb { (bc, br) } else { (br, bc) };
    if k != k2 {
        return Err(Error::shape(
            OP,
            format!(
                "op(A) is {m}x{k} (A {:?}, transposed: {ta}) but op(B) is {k2}x{n} (B {:?}, transposed: {tb})",
                a.shape(),
                b.shape()
            ),
        ));
    }
    crate::ops::work::product(m, k, n);
    let out = match (&*a.storage(), &*b.storage()) {
        (Storage::Cpu(x), Storage::Cpu(y)) => {
            let buf = cpu_matmul(&x.data, &y.data, m, k, n, ta, tb)?;
            cpu_output(buf, vec![m, n], a)
        }
        (Storage::Wgpu(x), Storage::Wgpu(y)) => {
            wgpu_output(wgpu_matmul(x, y, m, k, n, ta, tb)?, vec![m, n], a)
        }
        (Storage::Cuda(x), Storage::Cuda(y)) => {
            cuda_output(cuda_matmul(x, y, m, k, n, ta, tb)?, vec![m, n], a)
        }
        _ => {
            return Err(Error::DeviceMismatch {
                op: OP,
                lhs: a.device(),
                rhs: b.device(),
            })
        }
    };
    let (sa, sb) = (a.clone(), b.clone());
    Ok(record(OP, out, &[a, b], move |g| {
        let ga = if !sa.requires_grad() {
            None
        } else if prefix.is_some() {
            let rows = matmul(g, &sb, false, !tb)?;
            Some(crate::ops::slice::slice_backward(&rows, 0, 0, sa.shape())?)
        } else if ta {
            Some(matmul(&sb, g, tb, true)?)
        } else {
            Some(matmul(g, &sb, false, !tb)?)
        };
        let gb = if !sb.requires_grad() {
            None
        } else if tb {
            Some(matmul(g, &sa, true, ta)?)
        } else {
            // With a prefix, only its rows of A take part: `A[..rows]ᵀ·ḡ`.
            Some(product(&sa, prefix, g, !ta, false)?)
        };
        Ok(vec![ga, gb])
    }))
}

fn dims(t: &Tensor) -> Result<(usize, usize)> {
    match t.shape() {
        [r, c] => Ok((*r, *c)),
        s => Err(Error::shape(
            "matmul",
            format!("expected a 2-D operand, got shape {s:?}"),
        )),
    }
}

fn wgpu_matmul(
    a: &WgpuBuffer,
    b: &WgpuBuffer,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
) -> Result<WgpuBuffer> {
    let ctx = a.ctx();
    let bytes = (m * n * 4) as u64;
    if m == 0 || n == 0 || k == 0 {
        return WgpuBuffer::zeros(ctx, bytes);
    }
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

fn cuda_matmul(
    a: &CudaBuffer,
    b: &CudaBuffer,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
) -> Result<CudaBuffer> {
    let ctx = a.ctx();
    let bytes = (m * n * 4) as u64;
    if m == 0 || n == 0 || k == 0 {
        return CudaBuffer::zeros(ctx, bytes);
    }
    if [m, n, k].iter().any(|&d| d > i32::MAX as usize) {
        return Err(Error::shape(
            "matmul",
            format!("{m}x{k} by {k}x{n}: a dimension passes cuBLAS's 32-bit sizes"),
        ));
    }
    let mut out = CudaBuffer::new(ctx, bytes)?;
    let blas = if ctx.gemm_kernel_forced() {
        None
    } else {
        match ctx.blas() {
            Ok(b) => Some(b),
            // No memory for cuBLAS's workspace: the caller splits the work.
            Err(e @ Error::OutOfMemory { .. }) => return Err(e),
            // cuBLAS cannot be used here: the tiled kernel computes the same product.
            Err(_) => None,
        }
    };
    match blas {
        Some(blas) => {
            use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
            use cudarc::cublas::{Gemm, GemmConfig};
            // Row-major C[m, n] is column-major Cᵀ[n, m] = op(B)ᵀ · op(A)ᵀ: cuBLAS's A is
            // our B and its B our A, each read with the flags below.
            let cfg = GemmConfig {
                transa: if tb { CUBLAS_OP_T } else { CUBLAS_OP_N },
                transb: if ta { CUBLAS_OP_T } else { CUBLAS_OP_N },
                m: n as i32,
                n: m as i32,
                k: k as i32,
                alpha: 1.0f32,
                lda: if tb { k } else { n } as i32,
                ldb: if ta { m } else { k } as i32,
                beta: 0.0f32,
                ldc: n as i32,
            };
            let (x, y) = (f32_view(b, k * n)?, f32_view(a, m * k)?);
            // SAFETY: as above, for the output of m·n words.
            let mut c = unsafe { out.slice_mut().transmute_mut::<f32>(m * n) }
                .ok_or_else(|| Error::shape("matmul", "output smaller than its shape"))?;
            // SAFETY: the leading dimensions and sizes above address exactly the m·k, k·n
            // and m·n values of the three buffers.
            unsafe { blas.gemm(cfg, &x, &y, &mut c) }.map_err(|e| {
                if cuda::is_blas_alloc_failure(&e) {
                    ctx.out_of_memory(0)
                } else {
                    Error::Backend {
                        backend: "cuda",
                        msg: format!("cuBLAS sgemm {m}x{k} by {k}x{n}: {e:?}"),
                    }
                }
            })?;
        }
        None => {
            // Row blocks past the grid's y limit are looped over inside the kernel.
            let (cols, rows) = (n.div_ceil(TILE), m.div_ceil(TILE).min(65_535));
            if cols > i32::MAX as usize {
                return Err(Error::shape("matmul", format!("{n} columns pass the grid")));
            }
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (cols as u32, rows as u32, 1),
                block_dim: (16, 16, 1),
                shared_mem_bytes: 0,
            };
            let args = [
                Arg::Buf(a),
                Arg::Buf(b),
                Arg::Buf(&out),
                Arg::U32(m as u32),
                Arg::U32(n as u32),
                Arg::U32(k as u32),
                Arg::U32(ta as u32),
                Arg::U32(tb as u32),
            ];
            ctx.launch(&KERNEL_CUDA, cfg, &args)?;
        }
    }
    Ok(out)
}

/// The first `len` words of `buf` as f32 values, for cuBLAS.
fn f32_view(buf: &CudaBuffer, len: usize) -> Result<cudarc::driver::CudaView<'_, f32>> {
    // SAFETY: the words are f32 bits; transmute checks that `len` words fit the buffer.
    unsafe { buf.slice().transmute::<f32>(len) }
        .ok_or_else(|| Error::shape("matmul", "operand smaller than its shape"))
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

/// A float type of the CPU GEMM: f32, and f64 for the gradient checks.
pub(crate) trait Gemm: Copy + Default + 'static + crate::device::cpu::CpuElem {
    const ONE: Self;
}

impl Gemm for f32 {
    const ONE: f32 = 1.0;
}

impl Gemm for f64 {
    const ONE: f64 = 1.0;
}

fn cpu_matmul(
    a: &CpuData,
    b: &CpuData,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
) -> Result<CpuBuffer> {
    fn run<T: Gemm>(
        x: &[T],
        y: &[T],
        m: usize,
        k: usize,
        n: usize,
        ta: bool,
        tb: bool,
    ) -> Result<CpuBuffer> {
        // Strides of op(A) (m x k) and op(B) (k x n) over the row-major stored operands.
        let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
        let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
        let len = m * n;
        let alloc = cpu::reserve::<T>(len)?;
        let c = if k > 0 && len > 0 {
            let mut c: Vec<T> = cpu::try_vec(len)?;
            let a = Operand {
                ptr: x.as_ptr(),
                rs: rsa,
                cs: csa,
            };
            let b = Operand {
                ptr: y.as_ptr(),
                rs: rsb,
                cs: csb,
            };
            // SAFETY: x holds at least m*k values (all of A, or with matmul_rows at least
            // its first m rows) and y k*n (checked shapes); the strides above
            // address exactly those. c has room for m*n values; with beta = 0 the kernel
            // writes every one of them without reading any, so they are all initialised
            // when the length is set.
            unsafe {
                cpu_gemm(m, k, n, a, b, c.as_mut_ptr());
                c.set_len(len);
            }
            c
        } else {
            cpu::try_filled(len, T::default())?
        };
        Ok(CpuBuffer::from_reserved(T::wrap(c), alloc))
    }
    match (a, b) {
        (CpuData::F32(x), CpuData::F32(y)) => run(x, y, m, k, n, ta, tb),
        (CpuData::F64(x), CpuData::F64(y)) => run(x, y, m, k, n, ta, tb),
        _ => Err(Error::invalid(
            "matmul: operands must both be f32 (or both f64 on the CPU)",
        )),
    }
}

/// `c = a·b` on the CPU into a slice the caller owns: `a [m, k]` and `b [k, n]` row-major,
/// `c [m, n]` overwritten. The bits of [`matmul`]'s CPU arm for the same operands (the
/// same kernel call), without a buffer of its own: the LSTM's recurrent step writes its
/// product straight into its gate rows. Counts its multiply-adds ([`crate::ops::work`]).
///
/// # Panics
/// If a slice is shorter than its shape.
pub(crate) fn cpu_product_into<T: Gemm>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    b: &[T],
    c: &mut [T],
) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    crate::ops::work::product(m, k, n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(T::default());
        return;
    }
    let a = Operand {
        ptr: a.as_ptr(),
        rs: k as isize,
        cs: 1,
    };
    let b = Operand {
        ptr: b.as_ptr(),
        rs: n as isize,
        cs: 1,
    };
    // SAFETY: the lengths are checked above; a and b address m x k and k x n values
    // under these strides, and c has room for m x n.
    unsafe { cpu_gemm(m, k, n, a, b, c.as_mut_ptr()) };
}

/// A strided read-only matrix operand.
#[derive(Clone, Copy)]
struct Operand<T> {
    ptr: *const T,
    rs: isize,
    cs: isize,
}

/// Fewer multiply-adds than this run on the calling thread: a fork costs more.
const GEMM_PAR_MIN: usize = 1 << 20;

/// `C = op(A)·op(B)` (C row-major `m x n`, written without being read) by the `gemm`
/// crate, on rayon's pool when the product is large enough. The crate splits C's rows and
/// columns over the pool's threads, never the depth, and sums each element over k in
/// the same blocks whatever the split, so the bits do not depend on the thread count.
///
/// Each row of C also has the same bits whatever the number of rows multiplied with it
/// (predicting one node gives the bits of that node's row in a batch; a packed LSTM step
/// gives each row's bits whatever rows share the step): products with fewer rows than
/// [`general_rows`] are padded with zero rows up to it, because the crate runs other
/// kernels, summing in another order, for a single row or a small C.
///
/// # Safety
/// `a` and `b` must address `m·k` and `k·n` values under their strides, and `c` must
/// have room for `m·n` values.
unsafe fn cpu_gemm<T: Gemm>(m: usize, k: usize, n: usize, a: Operand<T>, b: Operand<T>, c: *mut T) {
    let min = general_rows(n, k, a, b);
    if m >= min {
        // SAFETY: the caller's contract.
        unsafe { gemm_call(m, k, n, a, b, c) };
        return;
    }
    // op(A)'s m rows in a buffer of `min` rows, in the same orientation (the kernels the
    // crate picks depend on which stride is 1), and a C of `min` rows.
    let (rs, cs) = if a.cs == 1 {
        (k as isize, 1)
    } else {
        (1, min as isize)
    };
    let mut pad = vec![T::default(); min * k];
    for i in 0..m {
        for j in 0..k {
            // SAFETY: (i, j) lies inside op(A)'s m x k under the caller's strides.
            pad[i * rs as usize + j * cs as usize] =
                unsafe { *a.ptr.offset(i as isize * a.rs + j as isize * a.cs) };
        }
    }
    let mut out = vec![T::default(); min * n];
    let padded = Operand {
        ptr: pad.as_ptr(),
        rs,
        cs,
    };
    // SAFETY: `pad` holds min x k values under (rs, cs), `out` min x n.
    unsafe {
        gemm_call(min, k, n, padded, b, out.as_mut_ptr());
        std::ptr::copy_nonoverlapping(out.as_ptr(), c, m * n);
    }
}

/// The fewest rows from which `gemm` 0.19 multiplies with the kernels it uses for any
/// larger C of these n, k and strides. Below it, it takes other paths: a horizontal
/// kernel when `m·n <= 256` with row-major op(A) and column-major op(B) (x86), a
/// matrix-vector kernel for one row (two or more columns and k > 2), and another depth
/// blocking when `m, n <= 64` with k > 512. One column (`n = 1`) runs the matrix-vector
/// kernel at every m past the horizontal one's range. The test
/// `rows_of_a_product_have_the_same_bits_whatever_the_number_of_rows` holds the crate to it.
fn general_rows<T>(n: usize, k: usize, a: Operand<T>, b: Operand<T>) -> usize {
    let mut min = 1;
    if a.cs == 1 && b.rs == 1 {
        min = 256 / n.max(1) + 1;
    }
    if k > 2 && n > 1 {
        min = min.max(2);
    }
    if k > 512 && n <= 64 {
        min = min.max(65);
    }
    min
}

/// One `gemm` call: `C = op(A)·op(B)`, beta 1 over a C it does not read.
///
/// # Safety
/// As [`cpu_gemm`].
unsafe fn gemm_call<T: Gemm>(
    m: usize,
    k: usize,
    n: usize,
    a: Operand<T>,
    b: Operand<T>,
    c: *mut T,
) {
    let threads = rayon::current_num_threads();
    let work = m.saturating_mul(n).saturating_mul(k);
    let par = if threads > 1 && work >= GEMM_PAR_MIN {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the caller's contract; `gemm` takes (m, n, k), then each matrix as
    // (pointer, column stride, row stride); with `read_dst` false it writes C = beta·A·B.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            n as isize,
            false,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            T::default(),
            T::ONE,
            false,
            false,
            false,
            par,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::ops::{mul, slice, sum_all};

    fn values(n: usize, salt: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| ((i.wrapping_mul(2654435761) ^ salt) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    #[test]
    fn matmul_rows_equals_the_product_of_the_sliced_rows_bit_for_bit() {
        // Large enough that the product is split over rayon's pool.
        let (r, rows, k, n) = (300, 200, 130, 70);
        let run = |in_place: bool| {
            let a = Tensor::from_f32(values(r * k, 1), &[r, k], Device::Cpu)
                .unwrap()
                .requires_grad_leaf();
            let b = Tensor::from_f32(values(k * n, 2), &[k, n], Device::Cpu)
                .unwrap()
                .requires_grad_leaf();
            let y = if in_place {
                matmul_rows(&a, rows, &b).unwrap()
            } else {
                matmul(&slice(&a, 0, 0, rows).unwrap(), &b, false, false).unwrap()
            };
            let w = Tensor::from_f32(values(rows * n, 3), &[rows, n], Device::Cpu).unwrap();
            sum_all(&mul(&y, &w).unwrap()).unwrap().backward().unwrap();
            let ga = a.grad().unwrap().to_vec_f32().unwrap();
            let gb = b.grad().unwrap().to_vec_f32().unwrap();
            (y.to_vec_f32().unwrap(), ga, gb)
        };
        let (y, ga, gb) = run(true);
        assert_eq!((y.len(), ga.len()), (rows * n, r * k));
        assert!(ga[rows * k..].iter().all(|&v| v == 0.0));
        assert_eq!((y, ga, gb), run(false));
    }

    /// `op(A)·op(B)` over the first `m` rows of op(A) (a view with A's strides).
    fn product(
        a: &[f32],
        b: &[f32],
        dims: (usize, usize, usize, usize),
        ta: bool,
        tb: bool,
    ) -> Vec<f32> {
        let (rows, m, k, n) = dims;
        let (rs, cs) = if ta {
            (1, rows as isize)
        } else {
            (k as isize, 1)
        };
        let (brs, bcs) = if tb { (1, k as isize) } else { (n as isize, 1) };
        let mut c = vec![f32::NAN; m * n];
        let (a, b) = (
            Operand {
                ptr: a.as_ptr(),
                rs,
                cs,
            },
            Operand {
                ptr: b.as_ptr(),
                rs: brs,
                cs: bcs,
            },
        );
        // SAFETY: a holds rows x k values, b k x n, c m x n; m <= rows.
        unsafe { cpu_gemm(m, k, n, a, b, c.as_mut_ptr()) };
        c
    }

    #[test]
    fn rows_of_a_product_have_the_same_bits_whatever_the_number_of_rows() {
        // Every path the crate takes below and above `general_rows`: one column, small C
        // (horizontal kernels), one row, k past 512 with small C, and general sizes, for
        // each transpose of each operand.
        let rows = 300;
        for &(k, n) in &[
            (2, 5),
            (3, 1),
            (7, 3),
            (97, 16),
            (97, 200),
            (513, 1),
            (600, 64),
            (700, 65),
        ] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a = values(rows * k, 5);
                let b = values(k * n, 6);
                let all = product(&a, &b, (rows, rows, k, n), ta, tb);
                for m in [1, 2, 3, 15, 64, 65, 128, 129, 257] {
                    let some = product(&a, &b, (rows, m, k, n), ta, tb);
                    assert!(
                        some == all[..m * n],
                        "k {k} n {n} ta {ta} tb {tb}: {m} rows differ from the same rows of {rows}"
                    );
                }
            }
        }
    }

    #[test]
    fn product_has_the_same_bits_on_one_thread_and_on_two() {
        let (m, k, n) = (300, 700, 260);
        let (a, b) = (values(m * k, 7), values(k * n, 8));
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| product(&a, &b, (m, m, k, n), false, false))
        };
        let one = on(1);
        assert!(one.iter().all(|v| v.is_finite()));
        assert!(one == on(2));
    }

    #[test]
    fn cpu_product_into_writes_the_bits_of_matmul() {
        // Large enough that the product is split over rayon's pool; k = 0 and m = 0 too.
        for (m, k, n) in [(300, 130, 70), (5, 3, 8), (4, 0, 6), (0, 5, 6)] {
            let (a, b) = (values(m * k, 1), values(k * n, 2));
            let want = matmul(
                &Tensor::from_f32(a.clone(), &[m, k], Device::Cpu).unwrap(),
                &Tensor::from_f32(b.clone(), &[k, n], Device::Cpu).unwrap(),
                false,
                false,
            )
            .unwrap()
            .to_vec_f32()
            .unwrap();
            // Garbage first: every value must be overwritten.
            let mut got = vec![f32::NAN; m * n];
            cpu_product_into(m, k, n, &a, &b, &mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n}");
        }
    }

    #[test]
    fn matmul_rows_past_the_rows_of_a_is_a_shape_error() {
        let a = Tensor::from_f32(vec![0.0; 6], &[3, 2], Device::Cpu).unwrap();
        let b = Tensor::from_f32(vec![0.0; 4], &[2, 2], Device::Cpu).unwrap();
        assert!(matches!(matmul_rows(&a, 4, &b), Err(Error::Shape { .. })));
        assert_eq!(matmul_rows(&a, 0, &b).unwrap().shape(), &[0, 2]);
    }
}
