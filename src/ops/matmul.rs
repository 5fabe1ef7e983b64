//! Matrix product with transpose flags: `C[m, n] = op(A) · op(B)`, where `op(X)` is `X` or
//! `Xᵀ`, so that no transpose is ever materialised.
//!
//! Backward (ḡ = ∂L/∂C):
//! - `∂op(A) = ḡ · op(B)ᵀ`; stored `A` gets it as is, or transposed when `op(A) = Aᵀ`:
//!   `Ā = matmul(ḡ, B, false, !tb)` or `Ā = matmul(B, ḡ, tb, true)`.
//! - `∂op(B) = op(A)ᵀ · ḡ`: `B̄ = matmul(A, ḡ, !ta, false)` or `B̄ = matmul(ḡ, A, true, ta)`.
//!
//! CPU kernel: the `matrixmultiply` crate. It is pure Rust, packs cache-blocked panels
//! with SIMD micro-kernels for f32 and f64 (the f64 path serves gradient checks) and takes
//! arbitrary row and column strides, which is what lets the transpose flags cost nothing.
//! It runs single-threaded per block of C, the blocks spread over rayon's pool
//! (`par_gemm`), and writes C without a zero-fill first.
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
        ctx.blas().ok()
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
            unsafe { blas.gemm(cfg, &x, &y, &mut c) }.map_err(|e| Error::Backend {
                backend: "cuda",
                msg: format!("cuBLAS sgemm {m}x{k} by {k}x{n}: {e:?}"),
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

/// The `matrixmultiply` kernel of a float type.
trait Gemm: Copy + Default + crate::device::cpu::CpuElem {
    /// `C = op(A)·op(B)` with the given strides (matrixmultiply's `sgemm`/`dgemm`).
    ///
    /// # Safety
    /// The pointers must address `m·k`, `k·n` and `m·n` values under the strides.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
    );
}

impl Gemm for f32 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        c: *mut f32,
        rsc: isize,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, 1) }
    }
}

impl Gemm for f64 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        c: *mut f64,
        rsc: isize,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { matrixmultiply::dgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, 1) }
    }
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
                par_gemm(m, k, n, a, b, c.as_mut_ptr());
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

/// A strided read-only matrix operand.
#[derive(Clone, Copy)]
struct Operand<T> {
    ptr: *const T,
    rs: isize,
    cs: isize,
}

/// The output pointer, shared by the tasks that write disjoint blocks of it.
#[derive(Clone, Copy)]
struct OutPtr<T>(*mut T);

// SAFETY: the operands are only read while the product runs, and each task writes its
// own block of C (disjoint rows or columns), so sharing the pointers between the rayon
// tasks of one product is sound.
unsafe impl<T> Send for Operand<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Operand<T> {}
// SAFETY: as above.
unsafe impl<T> Send for OutPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for OutPtr<T> {}

/// Fewer multiply-adds than this run on the calling thread: a fork costs more.
const GEMM_PAR_MIN: usize = 1 << 20;
/// Blocks of C split across tasks have a multiple of this many rows or columns (a
/// multiple of every `matrixmultiply` micro-kernel's tile), so the tiles stay whole.
const GEMM_ALIGN: usize = 64;

/// `C = op(A)·op(B)` (C row-major `m x n`) on rayon's pool: C is cut into blocks of rows
/// (or of columns, when it has few rows), each computed by a single-threaded
/// `matrixmultiply` call. The library's own threading is off: its threads and rayon's
/// would share the same cores and, between ops, rayon's idle workers spin in
/// `sched_yield` against the GEMM's threads (a third of the samples of a K = 4 profile).
/// Each element of C sums over k in the same order whatever the split, so the result is
/// the same bits for any thread count.
///
/// # Safety
/// `a` and `b` must address `m·k` and `k·n` values under their strides, and `c` must
/// have room for `m·n` values.
unsafe fn par_gemm<T: Gemm>(m: usize, k: usize, n: usize, a: Operand<T>, b: Operand<T>, c: *mut T) {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads();
    let work = m.saturating_mul(n).saturating_mul(k);
    // More blocks than threads, so that a thread slowed by another process's load does
    // not hold the others up; each block repacks the other operand, which costs 1/64 of
    // its arithmetic at most.
    let blocks = |len: usize| (threads * 4).min(len / GEMM_ALIGN).max(1);
    let by_rows = blocks(m) >= blocks(n);
    let len = if by_rows { m } else { n };
    let parts = blocks(len);
    if threads <= 1 || work < GEMM_PAR_MIN || parts <= 1 {
        // SAFETY: the caller's contract.
        unsafe { T::gemm(m, k, n, a.ptr, a.rs, a.cs, b.ptr, b.rs, b.cs, c, n as isize) };
        return;
    }
    let step = len.div_ceil(parts).div_ceil(GEMM_ALIGN) * GEMM_ALIGN;
    let out = OutPtr(c);
    (0..len.div_ceil(step)).into_par_iter().for_each(|p| {
        let (a, b, out) = (a, b, out);
        let s0 = p * step;
        let s = step.min(len - s0);
        // SAFETY: rows s0..s0+s of op(A) and C, or columns s0..s0+s of op(B) and C, lie
        // inside the caller's operands; the blocks of C are disjoint.
        unsafe {
            if by_rows {
                let ap = a.ptr.offset(a.rs * s0 as isize);
                let cp = out.0.add(s0 * n);
                T::gemm(s, k, n, ap, a.rs, a.cs, b.ptr, b.rs, b.cs, cp, n as isize);
            } else {
                let bp = b.ptr.offset(b.cs * s0 as isize);
                let cp = out.0.add(s0);
                T::gemm(m, k, s, a.ptr, a.rs, a.cs, bp, b.rs, b.cs, cp, n as isize);
            }
        }
    });
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

    #[test]
    fn matmul_rows_past_the_rows_of_a_is_a_shape_error() {
        let a = Tensor::from_f32(vec![0.0; 6], &[3, 2], Device::Cpu).unwrap();
        let b = Tensor::from_f32(vec![0.0; 4], &[2, 2], Device::Cpu).unwrap();
        assert!(matches!(matmul_rows(&a, 4, &b), Err(Error::Shape { .. })));
        assert_eq!(matmul_rows(&a, 0, &b).unwrap().shape(), &[0, 2]);
    }
}
