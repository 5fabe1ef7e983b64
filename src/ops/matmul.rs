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
//! chunks' products into C in order. Other layouts past the limit are an error.
//!
//! CUDA: cuBLAS `sgemm` on the device's stream, with the row-major problem read as its
//! column-major transpose (`Cᵀ = op(B)ᵀ·op(A)ᵀ`), so the flags again cost no copy. cuBLAS
//! runs in its default (full f32, no TF32) math mode. Where cuBLAS does not load, or with
//! `ESPALIER_CUDA_GEMM=kernel`, `kernels/matmul.cu` runs instead: the WGSL kernel's tiling
//! in CUDA C.

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData};
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::{Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::ops::{cpu_output, cuda_output, wgpu_output};
use crate::tensor::{Storage, Tensor};

const KERNEL: Kernel = Kernel {
    stem: "matmul",
    source: include_str!("../../shaders/matmul.wgsl"),
    entry: "matmul_f32",
};
const KERNEL_CUDA: cuda::Kernel = crate::cuda_kernel!("matmul", "matmul_f32");
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
