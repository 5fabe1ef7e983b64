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

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData};
use crate::error::{Error, Result};
use crate::ops::cpu_output;
use crate::tensor::{Storage, Tensor};

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
    let buf = match (&*a.storage(), &*b.storage()) {
        (Storage::Cpu(x), Storage::Cpu(y)) => cpu_matmul(&x.data, &y.data, m, k, n, ta, tb)?,
        _ => return Err(crate::ops::no_kernel(file!())),
    };
    let out = cpu_output(buf, vec![m, n], a);
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

fn cpu_matmul(
    a: &CpuData,
    b: &CpuData,
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
    match (a, b) {
        (CpuData::F32(x), CpuData::F32(y)) => {
            let alloc = cpu::reserve::<f32>(len)?;
            let mut c = vec![0f32; len];
            if k > 0 && len > 0 {
                // SAFETY: x holds m*k values and y k*n (checked shapes); the strides above
                // address exactly those, and c holds m*n values written with strides (n, 1).
                unsafe {
                    matrixmultiply::sgemm(
                        m,
                        k,
                        n,
                        1.0,
                        x.as_ptr(),
                        rsa,
                        csa,
                        y.as_ptr(),
                        rsb,
                        csb,
                        0.0,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                }
            }
            Ok(CpuBuffer::from_reserved(CpuData::F32(c), alloc))
        }
        (CpuData::F64(x), CpuData::F64(y)) => {
            let alloc = cpu::reserve::<f64>(len)?;
            let mut c = vec![0f64; len];
            if k > 0 && len > 0 {
                // SAFETY: as above, for f64.
                unsafe {
                    matrixmultiply::dgemm(
                        m,
                        k,
                        n,
                        1.0,
                        x.as_ptr(),
                        rsa,
                        csa,
                        y.as_ptr(),
                        rsb,
                        csb,
                        0.0,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                }
            }
            Ok(CpuBuffer::from_reserved(CpuData::F64(c), alloc))
        }
        _ => Err(Error::invalid(
            "matmul: operands must both be f32 (or both f64 on the CPU)",
        )),
    }
}
