//! `kernels/matmul.cu` and cuBLAS behind [`MatmulKernels`]: cuBLAS `sgemm` on the device's
//! stream with the row-major problem read as its column-major transpose, or the tiled
//! kernel (the WGSL kernel's tiling in CUDA C).

use std::sync::Arc;

use crate::device::cuda::args::MatmulArgs;
use crate::device::cuda::{is_blas_alloc_failure, Context, CudaBuffer};
use crate::device::kernels::matmul::MatmulKernels;
use crate::error::{Error, Result};

/// Rows and columns of C per block of the tiled kernel.
const TILE: usize = 64;

impl MatmulKernels for Context {
    fn matmul(
        self: &Arc<Self>,
        a: &CudaBuffer,
        b: &CudaBuffer,
        (m, k, n): (usize, usize, usize),
        (ta, tb): (bool, bool),
    ) -> Result<CudaBuffer> {
        cuda_matmul(self, a, b, (m, k, n), (ta, tb))
    }
}

/// The product on `ctx`: cuBLAS, or the tiled kernel where cuBLAS does not load or
/// `ESPALIER_CUDA_GEMM=kernel` asks for it.
fn cuda_matmul(
    ctx: &Arc<Context>,
    a: &CudaBuffer,
    b: &CudaBuffer,
    (m, k, n): (usize, usize, usize),
    (ta, tb): (bool, bool),
) -> Result<CudaBuffer> {
    let bytes = (m * n * 4) as u64;
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
                if is_blas_alloc_failure(&e) {
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
            let args = MatmulArgs {
                a: a.into(),
                b: b.into(),
                c: (&out).into(),
                m: m as u32,
                n: n as u32,
                k: k as u32,
                ta: ta as u32,
                tb: tb as u32,
            };
            ctx.launch_args(&args, cfg)?;
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
