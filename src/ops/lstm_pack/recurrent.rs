//! The recurrent products of [`super::cpu_forward`] and [`super::cpu_backward`], with
//! `W_hh` laid out for them once per call instead of once per chunk.
//!
//! A step's chunk multiplies at most [`super::chunk_rows`] rows by `W_hh` (`h·W_hh`,
//! forward) or `W_hhᵀ` (`z̄·W_hhᵀ`, backward). Through the `gemm` crate, each of those
//! calls packed `W_hh` (`[H, 4H]`, 64 KiB at H = 64) into its panels again: as many
//! values as the chunk's own rows hold, or twice as many, per call. Here `op(W_hh)`
//! (`[k, n]`: `W_hh` forward, `W_hhᵀ` backward) is laid out once per call of the op in
//! panels of 16 columns, each panel's `k` rows of 16 values contiguous (64 KiB at H =
//! 64), and the kernel reads them in place: for each tile of 6 rows of `a` (in the L1
//! cache), the panels one after another. Alone, on one thread, at the shapes of H = 64
//! and 126 rows, it multiplied at 64-69 GFLOP/s where the crate's call did 58-59.
//!
//! **The same bits as the `gemm` crate's product.** The crate's AVX2/FMA kernels sum
//! each value of C over k in one fused multiply-add after another into an accumulator
//! that starts at zero, for depths up to its depth block (at least 512), and then write
//! it (beta 1, no alpha). The kernel here does the same per value, so its results are
//! the crate's bit for bit (the test below holds it to [`matmul_op::cpu_product_rows`]).
//! Widths that are not a multiple of 16 (the backward's `H`, 100 for 100-wide features)
//! have their last panel padded with zero columns, which the kernel multiplies and does not
//! write. Where the CPU lacks AVX2 or FMA, for f64 and for depths past 512, the crate runs
//! as before.

use std::mem::MaybeUninit;

use crate::error::Result;
use crate::ops::matmul::{self as matmul_op, Gemm};

/// Depths up to which the `gemm` crate sums over k in one block (its depth block is at
/// least 512, `gemm_common::cache::kernel_params`), so one accumulator per value.
const MAX_DEPTH: usize = 512;
/// Columns of C a tile of the kernel covers: two 8-lane vectors.
const TILE_COLS: usize = 16;
/// Rows of C a tile of the kernel covers: 6 × 2 accumulators, 2 loads of B and a
/// broadcast of A fit in 16 registers.
const TILE_ROWS: usize = 6;

/// `W_hh` (`[H, 4H]`) as the two recurrent products read it.
pub(super) struct Recurrent<'a, T> {
    w: &'a [T],
    /// `op(W_hh)` in panels of 16 columns (see the module's comment) when the kernel runs,
    /// the last one padded with zeros past `op(W_hh)`'s columns.
    panels: Vec<T>,
    h: usize,
    fast: bool,
}

impl<'a, T: Gemm> Recurrent<'a, T> {
    /// `W_hh` of width `h` for the forward's product (`transposed` false: `op(W_hh) =
    /// W_hh`) or the backward's (`true`: `W_hhᵀ`), laid out in panels when the kernel runs.
    pub(super) fn new(w: &'a [T], h: usize, transposed: bool) -> Result<Self> {
        let (k, n) = if transposed { (4 * h, h) } else { (h, 4 * h) };
        let fast = kernel_runs::<T>(k, n);
        let mut panels = Vec::new();
        if fast {
            panels = crate::device::cpu::try_vec(k * padded(n))?;
            // Value (kk, j) of op(W_hh), w[kk][j] or w[j][kk], at panel j / 16, row kk.
            for j0 in (0..n).step_by(TILE_COLS) {
                for kk in 0..k {
                    panels.extend((j0..j0 + TILE_COLS).map(|j| match (j < n, transposed) {
                        (false, _) => T::default(),
                        (true, false) => w[kk * n + j],
                        (true, true) => w[j * k + kk],
                    }));
                }
            }
        }
        Ok(Recurrent { w, panels, h, fast })
    }

    /// `c = a·W_hh`: `a [m, H]`, the first `m·4H` values of `c` written without being
    /// read, and returned.
    pub(super) fn forward<'c>(
        &self,
        m: usize,
        a: &[T],
        c: &'c mut [MaybeUninit<T>],
    ) -> &'c mut [T] {
        let (k, n) = (self.h, 4 * self.h);
        if !self.fast {
            return matmul_op::cpu_product_rows_uninit(m, k, n, a, (self.w, false), c);
        }
        product(m, k, n, a, &self.panels, c)
    }

    /// `c = a·W_hhᵀ`: `a [m, 4H]`, `c [m, H]` overwritten.
    pub(super) fn backward(&self, m: usize, a: &[T], c: &mut [T]) {
        let (k, n) = (4 * self.h, self.h);
        if !self.fast {
            return matmul_op::cpu_product_rows(m, k, n, a, (self.w, true), c);
        }
        // SAFETY: `MaybeUninit<T>` has the layout of `T`, and the product only writes
        // initialised values into `c`.
        let c = unsafe { &mut *(c as *mut [T] as *mut [MaybeUninit<T>]) };
        product(m, k, n, a, &self.panels, c);
    }
}

/// Whether [`product`] runs the kernel for `[m, k]·[k, n]` products of `T`.
fn kernel_runs<T: 'static>(k: usize, n: usize) -> bool {
    let f32 = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>();
    f32 && k > 0 && k <= MAX_DEPTH && n > 0 && avx2_fma()
}

/// `n` columns rounded up to whole panels.
fn padded(n: usize) -> usize {
    n.div_ceil(TILE_COLS) * TILE_COLS
}

#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_fma() -> bool {
    false
}

/// `c = a·b` by the kernel: `a [m, k]` row-major, `b [k, n]` in panels of 16 columns
/// ([`Recurrent::new`], the last one padded with zeros), the first `m·n` values of `c`
/// (row-major) written and returned. Only where [`kernel_runs`] said so for `T`, `k` and
/// `n`.
///
/// # Panics
/// If a slice is shorter than its shape.
fn product<'c, T: Gemm>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    b: &[T],
    c: &'c mut [MaybeUninit<T>],
) -> &'c mut [T] {
    assert!(kernel_runs::<T>(k, n));
    assert!(a.len() >= m * k && b.len() >= k * padded(n) && c.len() >= m * n);
    crate::work::product(m, k, n);
    let c = &mut c[..m * n];
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `T` is f32 (checked by `kernel_runs`), so the casts keep the layout; the
    // CPU has AVX2 and FMA, and the lengths are checked above (b's panels padded to whole
    // panels). The kernel writes every value of `c`.
    unsafe {
        kernel::product(
            m,
            k,
            n,
            a.as_ptr().cast::<f32>(),
            b.as_ptr().cast::<f32>(),
            c.as_mut_ptr().cast::<f32>(),
        );
    }
    // SAFETY: every value was written just above.
    unsafe { &mut *(c as *mut [MaybeUninit<T>] as *mut [T]) }
}

#[cfg(target_arch = "x86_64")]
mod kernel {
    use std::arch::x86_64::*;

    use super::{TILE_COLS, TILE_ROWS};

    /// `c = a·b`, `a` and `c` row-major, `b` in panels of 16 columns (the last one padded
    /// with zeros): for each tile of 6 rows of `a` (the last one `m % 6` rows), every
    /// panel; of the last panel, only `n`'s columns are written.
    ///
    /// # Safety
    /// AVX2 and FMA; `a`, `b` and `c` hold `m·k`, `k·n` rounded up to whole panels, and
    /// `m·n` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn product(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
    ) {
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(TILE_ROWS);
            for j in (0..n).step_by(TILE_COLS) {
                let cols = (n - j).min(TILE_COLS);
                // SAFETY: rows i..i + rows of a, and panel j / 16 (k·16 values from k·j),
                // lie inside the shapes; of c, `cols` columns from j of those rows.
                unsafe {
                    let (a, b, c) = (a.add(i * k), b.add(j * k), c.add(i * n + j));
                    match rows {
                        6 => tile::<6>(k, (n, cols), a, b, c),
                        5 => tile::<5>(k, (n, cols), a, b, c),
                        4 => tile::<4>(k, (n, cols), a, b, c),
                        3 => tile::<3>(k, (n, cols), a, b, c),
                        2 => tile::<2>(k, (n, cols), a, b, c),
                        _ => tile::<1>(k, (n, cols), a, b, c),
                    }
                }
            }
            i += rows;
        }
    }

    /// `R` rows by 16 columns of C, of which the first `cols` are written: each value's
    /// fused multiply-adds over k in order, from zero, as the `gemm` crate's kernels sum
    /// it.
    ///
    /// # Safety
    /// AVX2 and FMA; `a` addresses `R` rows of `k` values, `b` a panel (`k` rows of 16
    /// values, contiguous), `c` `R` rows of `cols` values `n` apart.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile<const R: usize>(
        k: usize,
        (n, cols): (usize, usize),
        a: *const f32,
        b: *const f32,
        c: *mut f32,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for kk in 0..k {
            // SAFETY: the caller's contract.
            let (b0, b1) = unsafe {
                let row = b.add(kk * TILE_COLS);
                (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)))
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                let x = unsafe { _mm256_broadcast_ss(&*a.add(r * k + kk)) };
                acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            if cols == TILE_COLS {
                // SAFETY: the caller's contract.
                unsafe {
                    _mm256_storeu_ps(c.add(r * n), acc[0]);
                    _mm256_storeu_ps(c.add(r * n + 8), acc[1]);
                }
            } else {
                // A last, narrower panel: its columns past `n` are the padding's.
                let mut row = [0.0f32; TILE_COLS];
                // SAFETY: `row` holds 16 values; the caller's contract for `c`.
                unsafe {
                    _mm256_storeu_ps(row.as_mut_ptr(), acc[0]);
                    _mm256_storeu_ps(row.as_mut_ptr().add(8), acc[1]);
                    std::ptr::copy_nonoverlapping(row.as_ptr(), c.add(r * n), cols);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ops::test_values::values_over;

    fn values(n: usize, salt: u32) -> Vec<f32> {
        values_over(n, salt, 437.0, 1.1)
    }

    #[test]
    fn recurrent_products_have_the_bits_of_the_gemm_crate() {
        for h in [4, 16, 20, 64, 100] {
            let w = values(h * 4 * h, 3);
            for m in [1, 2, 5, 6, 7, 12, 128, 131] {
                let a = values(m * h, 5);
                let want = {
                    let mut c = vec![0.0f32; m * 4 * h];
                    matmul_op::cpu_product_rows(m, h, 4 * h, &a, (&w, false), &mut c);
                    c
                };
                let fwd = Recurrent::new(&w, h, false).unwrap();
                let mut c = vec![MaybeUninit::uninit(); m * 4 * h];
                let got = fwd.forward(m, &a, &mut c).to_vec();
                assert_eq!(bits(&got), bits(&want), "forward, h {h}, m {m}");

                let dz = values(m * 4 * h, 9);
                let mut want = vec![0.0f32; m * h];
                matmul_op::cpu_product_rows(m, 4 * h, h, &dz, (&w, true), &mut want);
                let bwd = Recurrent::new(&w, h, true).unwrap();
                let mut got = vec![7.0f32; m * h];
                bwd.backward(m, &dz, &mut got);
                assert_eq!(bits(&got), bits(&want), "backward, h {h}, m {m}");
            }
        }
    }

    #[test]
    fn the_kernel_runs_where_it_should() {
        if !avx2_fma() {
            return;
        }
        assert!(kernel_runs::<f32>(64, 256) && kernel_runs::<f32>(256, 64));
        // Widths that are not whole panels: the backward's at H 100, 20 and 4.
        assert!(kernel_runs::<f32>(400, 100) && kernel_runs::<f32>(80, 20));
        assert!(kernel_runs::<f32>(16, 4));
        assert!(!kernel_runs::<f64>(64, 256));
        assert!(!kernel_runs::<f32>(513, 16));
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }
}
