//! Matrix product with transpose flags: `C[m, n] = op(A) · op(B)`, where `op(X)` is `X` or
//! `Xᵀ`, so that no transpose is ever materialised.
//!
//! Backward (ḡ = ∂L/∂C):
//! - `∂op(A) = ḡ · op(B)ᵀ`; stored `A` gets it as is, or transposed when `op(A) = Aᵀ`:
//!   `Ā = matmul(ḡ, B, false, !tb)` or `Ā = matmul(B, ḡ, tb, true)`.
//! - `∂op(B) = op(A)ᵀ · ḡ`: `B̄ = matmul(A, ḡ, !ta, false)` or `B̄ = matmul(ḡ, A, true, ta)`.
//!
//! CPU kernel: the `matrixmultiply` crate. It is pure Rust, packs cache-blocked panels
//! with SIMD micro-kernels for f32 and f64 (the f64 path serves gradient checks), runs
//! multithreaded, and takes arbitrary row and column strides, which is what lets the
//! transpose flags cost nothing.
//!
//! wgpu kernel (`shaders/matmul.wgsl`): 64x64 output tiles per workgroup of 16x16 threads,
//! 4x4 register blocking, k in steps of 16 staged in workgroup memory (8 KiB, within the
//! 16 KiB every adapter guarantees); the flags choose how tiles are loaded, so transposed
//! operands cost no copy either. Each output is one dot product in k order: deterministic.
//! Operands past the adapter's storage-binding limit are split where their rows are
//! contiguous: `op(A) = A` splits C's rows (each chunk a launch over a row range of A and
//! C); `op(A) = Aᵀ` with `op(B) = B` (the weight gradient `Xᵀ·G`) splits k, adding the
//! chunks' products into C in order. With both transposed, one operand is first
//! transposed into a buffer of its own (in tiles that fit), which gives one of the two
//! layouts above. What remains an error is an operand past the limit together with another
//! that must be bound whole (`B` with `op(A) = A`, `C` with `op(A) = Aᵀ`).

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData};
use crate::device::wgpu::{Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::ops::{cpu_output, wgpu_output};
use crate::tensor::{Storage, Tensor};

const SHADER: &str = include_str!("../../shaders/matmul.wgsl");
const KERNEL: Kernel = Kernel {
    stem: "matmul",
    source: SHADER,
    entry: "matmul_f32",
};
const TRANSPOSE: Kernel = Kernel {
    stem: "matmul",
    source: SHADER,
    entry: "transpose_f32",
};
/// Rows and columns of C per workgroup.
const TILE: usize = 64;

/// `op(a) · op(b)` for 2-D `a`, `b`; `ta`/`tb` transpose the stored operand.
pub fn matmul(a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
    const OP: &str = "matmul";
    a.same_device(b, OP)?;
    a.expect_float(OP)?;
    let (ar, ac) = dims(a)?;
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
            Some(matmul(&sa, g, !ta, false)?)
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
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let (cols, rows) = (n.div_ceil(TILE), m.div_ceil(TILE));
    // Row blocks past the per-dimension limit fold into z; the shader recombines them.
    if cols > max || rows.div_ceil(max) > max || [m, n, k].iter().any(|&d| d > u32::MAX as usize) {
        return Err(Error::shape(
            "matmul",
            format!("{m}x{k} by {k}x{n} exceeds the dispatch grid of this adapter"),
        ));
    }
    let out = WgpuBuffer::new(ctx, bytes)?;
    let run = |rows: (usize, usize), ks: (usize, usize), accumulate: bool| -> Result<()> {
        // Byte ranges of A, B and C that rows i0..i1 and k range l0..l1 touch.
        let ((i0, i1), (l0, l1)) = (rows, ks);
        let (mm, kk) = (i1 - i0, l1 - l0);
        let a_range = if ta {
            (l0 * m, kk * m)
        } else {
            (i0 * k, mm * k)
        };
        let b_range = if tb { (0, n * k) } else { (l0 * n, kk * n) };
        let c_range = (i0 * n, mm * n);
        let words = [
            mm as u32,
            n as u32,
            kk as u32,
            ta as u32,
            tb as u32,
            accumulate as u32,
        ];
        let four = |(o, l): (usize, usize)| ((o * 4) as u64, (l * 4) as u64);
        let (ao, al) = four(a_range);
        let (bo, bl) = four(b_range);
        let (co, cl) = four(c_range);
        let y = mm.div_ceil(TILE).min(max);
        let z = mm.div_ceil(TILE).div_ceil(y);
        ctx.launch_ranges(
            &KERNEL,
            &words,
            &[(1, a, ao, al), (2, b, bo, bl), (3, &out, co, cl)],
            (cols as u32, y as u32, z as u32),
        )
    };
    let limit = ctx.chunk_bytes() as usize / 4;
    let fits = |elems: usize| elems <= limit;
    if fits(m * k) && fits(k * n) && fits(m * n) {
        run((0, m), (0, k), false)?;
    } else if !ta && fits(k * n) {
        // Row blocks of A and C; a multiple of TILE rows keeps the offsets aligned.
        let step = (limit / k.max(n)) / TILE * TILE;
        if step == 0 {
            return Err(too_large(m, k, n, ta, tb));
        }
        for i0 in (0..m).step_by(step) {
            run((i0, (i0 + step).min(m)), (0, k), false)?;
        }
    } else if ta && tb {
        // Aᵀ·Bᵀ: with B transposed into a buffer of its own, Aᵀ·B' splits k as below;
        // when C is too large for that, A transposed gives A'·Bᵀ, which splits C's rows.
        return if fits(m * n) {
            wgpu_matmul(a, &transpose(b, n, k)?, m, k, n, true, false)
        } else {
            wgpu_matmul(&transpose(a, k, m)?, b, m, k, n, false, true)
        };
    } else if ta && !tb && fits(m * n) {
        let step = (limit / m.max(n)) / TILE * TILE;
        if step == 0 {
            return Err(too_large(m, k, n, ta, tb));
        }
        for l0 in (0..k).step_by(step) {
            run((0, m), (l0, (l0 + step).min(k)), l0 > 0)?;
        }
    } else {
        return Err(too_large(m, k, n, ta, tb));
    }
    Ok(out)
}

/// `[cols, rows]`, the transpose of the `[rows, cols]` matrix in `src`, in tiles whose
/// windows (rows of `src`, rows of the result) fit one binding: `g` rows of `src` by `h` of
/// its columns.
fn transpose(src: &WgpuBuffer, rows: usize, cols: usize) -> Result<WgpuBuffer> {
    let ctx = src.ctx();
    let out = WgpuBuffer::new(ctx, (rows * cols * 4) as u64)?;
    let limit = ctx.window_elems();
    if cols > limit || rows > limit {
        return Err(Error::shape(
            "matmul",
            format!("a {rows}x{cols} operand has rows past the storage-binding limit"),
        ));
    }
    let g = (limit / cols).clamp(1, rows);
    let h = ((limit - g) / rows + 1).min(cols);
    for r0 in (0..rows).step_by(g) {
        let r1 = (r0 + g).min(rows);
        for c0 in (0..cols).step_by(h) {
            let c1 = (c0 + h).min(cols);
            let sw = ctx.window(src, r0 * cols + c0, (r1 - 1) * cols + c1);
            let dw = ctx.window(&out, c0 * rows + r0, (c1 - 1) * rows + r1);
            let n = (r1 - r0) * (c1 - c0);
            let words = [rows, cols, n, 0, 0, 0, r0, c0, c1 - c0];
            let words = [&words.map(|v| v as u32)[..], &[sw.base, dw.base]].concat();
            ctx.launch_windows(&TRANSPOSE, &words, &[(4, &sw), (5, &dw)], n as u64)?;
        }
    }
    Ok(out)
}

fn too_large(m: usize, k: usize, n: usize, ta: bool, tb: bool) -> Error {
    Error::shape(
        "matmul",
        format!(
            "{m}x{k} by {k}x{n} (ta: {ta}, tb: {tb}) has an operand past the adapter's \
             storage-binding limit in a layout that cannot be split"
        ),
    )
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
        let mut c = vec![T::default(); len];
        if k > 0 && len > 0 {
            // SAFETY: x holds m*k values and y k*n (checked shapes); the strides above
            // address exactly those, and c holds m*n values written with strides (n, 1).
            unsafe {
                T::gemm(
                    m,
                    k,
                    n,
                    x.as_ptr(),
                    rsa,
                    csa,
                    y.as_ptr(),
                    rsb,
                    csb,
                    c.as_mut_ptr(),
                    n as isize,
                )
            };
        }
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
