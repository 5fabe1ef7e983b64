//! `kernels/concat.cu` behind [`ConcatKernels`]: rows by one device-to-device copy per
//! input, columns by one strided-copy kernel per input.

use std::sync::Arc;

use super::slice::copy_words;
use crate::device::cuda::args::ConcatColsArgs;
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::concat::ConcatKernels;
use crate::error::Result;

/// Rows: one device-to-device copy per input; columns: one strided-copy kernel per input.
/// Values move as 32-bit words, so f32 and u32 alike.
impl ConcatKernels for Context {
    fn concat(
        self: &Arc<Self>,
        bufs: &[&CudaBuffer],
        shapes: &[(usize, usize)],
        parts: &[(usize, usize)],
        dim: usize,
        (rows, cols): (usize, usize),
    ) -> Result<CudaBuffer> {
        let ctx = self;
        u32_count("concat", "the output", rows * cols)?;
        let mut out = CudaBuffer::new(ctx, (rows * cols * 4) as u64)?;
        for ((b, &(r, c)), &(start, _)) in bufs.iter().zip(shapes).zip(parts) {
            if dim == 0 {
                copy_words(b, 0, &mut out, start * cols, r * c)?;
            } else if r * c > 0 {
                let args = ConcatColsArgs {
                    src: (*b).into(),
                    dst: (&out).into(),
                    n: (r * c) as u32,
                    width: c as u32,
                    dst_cols: cols as u32,
                    col0: start as u32,
                };
                ctx.launch_args_1d(&args, (r * c) as u64)?;
            }
        }
        Ok(out)
    }
}
