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

use std::mem::MaybeUninit;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData};
use crate::device::kernels::matmul::MatmulKernels;
use crate::error::{Error, Result};
use crate::meta::{Replay, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::tensor::{Storage, Tensor};

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
    crate::work::product(m, k, n);
    let out = match (&*a.storage(), &*b.storage()) {
        (Storage::Cpu(x), Storage::Cpu(y)) => {
            let buf = cpu_matmul(&x.data, &y.data, m, k, n, ta, tb)?;
            cpu_output(buf, vec![m, n], a)
        }
        (xs, ys) => on_gpu!(
            (xs, ys),
            |D, (x, y)| gpu_matmul::<D>(x, y, (m, k, n), (ta, tb), a)?,
            else return Err(Error::DeviceMismatch {
                op: OP,
                lhs: a.device().to_string(),
                rhs: b.device().to_string(),
            })
        ),
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

/// `op(a)·op(b)` (`[m, n]`) on a GPU backend, from the buffers of `a` and `b`; zeros
/// without a product to compute.
fn gpu_matmul<D: GpuTensors + MatmulKernels>(
    x: &D::Buffer,
    y: &D::Buffer,
    (m, k, n): (usize, usize, usize),
    flags: (bool, bool),
    like: &Tensor,
) -> Result<Tensor> {
    let ctx = D::context_of(x);
    let out = if m == 0 || n == 0 || k == 0 {
        ctx.zeros((m * n * 4) as u64)?
    } else {
        ctx.matmul(x, y, (m, k, n), flags)?
    };
    Ok(D::output(out, vec![m, n], like))
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
                cpu_gemm(m, k, n, a, b, c.as_mut_ptr(), true);
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

/// `c = a·op(b)` on the CPU, on the calling thread, into a slice the caller owns: `a [m,
/// k]` row-major, `b` stored `[k, n]`, or `[n, k]` when `tb` (`op(b) = bᵀ`), `c [m, n]`
/// overwritten. For a caller that splits a product's rows over rayon's pool itself, each
/// task multiplying its rows and then reading them while they are in cache (the LSTM's
/// packed steps write theirs straight into their gate rows). A row of C has the same
/// bits whatever the other rows and the thread count (see [`cpu_gemm`]), so the rows are
/// those of [`matmul`]'s CPU arm for the whole product. Counts its multiply-adds
/// ([`crate::work`]).
///
/// # Panics
/// If a slice is shorter than its shape.
pub(crate) fn cpu_product_rows<T: Gemm>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    b: (&[T], bool),
    c: &mut [T],
) {
    // SAFETY: `MaybeUninit<T>` has the layout of `T`, and the product only writes
    // initialised values into `c`.
    let c = unsafe { &mut *(c as *mut [T] as *mut [MaybeUninit<T>]) };
    cpu_product_rows_uninit(m, k, n, a, b, c);
}

/// [`cpu_product_rows`] into rows that need not hold values yet (a new buffer's, not
/// zero-filled first): writes the first `m·n` values of `c` without reading them and
/// returns them, initialised.
///
/// # Panics
/// If a slice is shorter than its shape.
pub(crate) fn cpu_product_rows_uninit<'c, T: Gemm>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    (b, tb): (&[T], bool),
    c: &'c mut [MaybeUninit<T>],
) -> &'c mut [T] {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    crate::work::product(m, k, n);
    let c = &mut c[..m * n];
    if k == 0 || m == 0 || n == 0 {
        for v in c.iter_mut() {
            v.write(T::default());
        }
        // SAFETY: every value was written just above.
        return unsafe { &mut *(c as *mut [MaybeUninit<T>] as *mut [T]) };
    }
    let a = Operand {
        ptr: a.as_ptr(),
        rs: k as isize,
        cs: 1,
    };
    let (rs, cs) = if tb { (1, k as isize) } else { (n as isize, 1) };
    let b = Operand {
        ptr: b.as_ptr(),
        rs,
        cs,
    };
    // SAFETY: the lengths are checked above; a and op(b) address m x k and k x n values
    // under these strides, and c has room for m x n. With beta = 0 the kernel writes
    // every value of c without reading any, so all of them are initialised afterwards,
    // and `MaybeUninit<T>` has the layout of `T`.
    unsafe {
        cpu_gemm(m, k, n, a, b, c.as_mut_ptr().cast::<T>(), false);
        &mut *(c as *mut [MaybeUninit<T>] as *mut [T])
    }
}

/// `c = aᵀ·b` on the CPU, over rayon's pool when it is large enough: `a [k, m]` and `b
/// [k, n]` row-major, `c [m, n]` overwritten; a sum over the k rows (a weight gradient
/// over a batch of rows, as [`matmul`]`(a, b, true, false)` computes it). Counts its
/// multiply-adds ([`crate::work`]).
///
/// # Panics
/// If a slice is shorter than its shape.
pub(crate) fn cpu_product_tn<T: Gemm>(k: usize, m: usize, n: usize, a: &[T], b: &[T], c: &mut [T]) {
    assert!(a.len() >= k * m && b.len() >= k * n && c.len() >= m * n);
    crate::work::product(m, k, n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(T::default());
        return;
    }
    let a = Operand {
        ptr: a.as_ptr(),
        rs: 1,
        cs: m as isize,
    };
    let b = Operand {
        ptr: b.as_ptr(),
        rs: n as isize,
        cs: 1,
    };
    // SAFETY: the lengths are checked above; aᵀ (m x k) and b (k x n) lie inside a and b
    // under these strides, and c has room for m x n.
    unsafe { cpu_gemm(m, k, n, a, b, c.as_mut_ptr(), true) };
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
/// crate, on rayon's pool when `pool` and the product is large enough. The crate splits C's rows and
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
unsafe fn cpu_gemm<T: Gemm>(
    m: usize,
    k: usize,
    n: usize,
    a: Operand<T>,
    b: Operand<T>,
    c: *mut T,
    pool: bool,
) {
    let min = general_rows(n, k, a, b);
    if m >= min {
        // SAFETY: the caller's contract.
        unsafe { gemm_call(m, k, n, a, b, c, pool) };
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
        gemm_call(min, k, n, padded, b, out.as_mut_ptr(), pool);
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

/// One `gemm` call: `C = op(A)·op(B)`, beta 1 over a C it does not read; threaded as
/// [`cpu_gemm`] says.
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
    pool: bool,
) {
    let threads = rayon::current_num_threads();
    let work = m.saturating_mul(n).saturating_mul(k);
    let par = if pool && threads > 1 && work >= GEMM_PAR_MIN {
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

/// Meta arm of `matmul(a, b)` ([`crate::meta`]): `[r, c]`; keeps both; its rule allocates
/// `ā` `[r, k]` if `a` needs it, then `b̄`.
pub fn meta_matmul(r: &mut Replay, a: &Val, b: &Val) -> Val {
    let out = r.alloc(a.rows, b.cols);
    r.binary_saving_inputs(out, a, b, (a.rows, b.cols), vec![])
}

/// Meta arm of [`matmul_rows`]`(a, rows, b)`: `[rows, c]`; keeps `a` itself and `b`; its
/// rule gives `a` the product's `[rows, k]` padded to `a`'s rows (a new buffer, then the
/// product goes), then `b̄`.
pub fn meta_matmul_rows(r: &mut Replay, a: &Val, rows: usize, b: &Val) -> Val {
    let out = r.alloc(rows, b.cols);
    let saved = vec![r.share(a.buf), r.share(b.buf)];
    let (a2, b2) = (*a, *b);
    r.record(
        out,
        (rows, b.cols),
        &[a, b],
        saved,
        Box::new(move |r, _| {
            let ga = a2.grad.then(|| {
                let small = r.alloc(rows, a2.cols);
                let full = r.alloc(a2.rows, a2.cols);
                r.release(small);
                full
            });
            let gb = b2.grad.then(|| r.alloc(b2.rows, b2.cols));
            vec![ga, gb]
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::ops::{mul, slice, sum_all};

    use crate::ops::test_values::values;

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
        unsafe { cpu_gemm(m, k, n, a, b, c.as_mut_ptr(), true) };
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
    fn cpu_product_rows_in_pieces_write_the_bits_of_matmul() {
        // The whole product split over rayon's pool by matmul, against pieces of rows
        // multiplied on one thread each (down to one row, which the crate runs through
        // another kernel unless padded); B plain and transposed; k = 0 and m = 0 too.
        for (m, k, n) in [
            (300, 130, 70),
            (97, 400, 100),
            (5, 3, 8),
            (4, 0, 6),
            (0, 5, 6),
        ] {
            for tb in [false, true] {
                let (a, b) = (values(m * k, 1), values(k * n, 2));
                let bshape = if tb { [n, k] } else { [k, n] };
                let want = matmul(
                    &Tensor::from_f32(a.clone(), &[m, k], Device::Cpu).unwrap(),
                    &Tensor::from_f32(b.clone(), &bshape, Device::Cpu).unwrap(),
                    false,
                    tb,
                )
                .unwrap()
                .to_vec_f32()
                .unwrap();
                for piece in [m.max(1), 16, 1] {
                    // Garbage first: every value must be overwritten.
                    let mut got = vec![f32::NAN; m * n];
                    for (i, c) in got.chunks_mut(piece * n.max(1)).enumerate() {
                        let rows = c.len() / n.max(1);
                        let a = &a[i * piece * k..(i * piece + rows) * k];
                        cpu_product_rows(rows, k, n, a, (&b, tb), c);
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n} tb {tb} by {piece}");
                }
            }
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
