//! `kernels/slice.cu` behind [`SliceKernels`]: rows by one device-to-device copy, columns
//! and the padding by a thread per value.

use std::sync::Arc;

use crate::device::cuda::args::{SliceColsArgs, SlicePadArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::slice::SliceKernels;
use crate::error::{Error, Result};

impl SliceKernels for Context {
    fn slice(
        self: &Arc<Self>,
        b: &CudaBuffer,
        (r, c): (usize, usize),
        dim: usize,
        (start, len): (usize, usize),
    ) -> Result<CudaBuffer> {
        const OP: &str = "slice";
        let out_shape = if dim == 0 { [len, c] } else { [r, len] };
        let n = u32_count(OP, "the slice", out_shape[0] * out_shape[1])?;
        let mut out = CudaBuffer::new(self, n as u64 * 4)?;
        if dim == 0 {
            // Rows are contiguous: one copy.
            copy_words(b, start * c, &mut out, 0, n as usize)?;
        } else {
            // The kernel indexes x's columns with u32 offsets too.
            u32_count(OP, "x", r * c)?;
            let args = SliceColsArgs {
                src: b.into(),
                dst: (&out).into(),
                c: c as u32,
                start: start as u32,
                len: len as u32,
                n,
            };
            self.launch_args_1d(&args, n as u64)?;
        }
        Ok(out)
    }

    fn slice_pad(
        self: &Arc<Self>,
        b: &CudaBuffer,
        (gr, gc): (usize, usize),
        dim: usize,
        start: usize,
        (r, c): (usize, usize),
    ) -> Result<CudaBuffer> {
        const OP: &str = "slice_backward";
        let n = u32_count(OP, "the input", r * c)?;
        let out = CudaBuffer::new(self, n as u64 * 4)?;
        let glen = if dim == 0 { gr } else { gc };
        let args = SlicePadArgs {
            g: b.into(),
            out: (&out).into(),
            c: c as u32,
            start: start as u32,
            len: glen as u32,
            dim: dim as u32,
            n,
        };
        self.launch_args_1d(&args, n as u64)?;
        Ok(out)
    }
}

/// Copies `words` 32-bit words of `src` from word `from` into `dst` from word `to`, on the
/// device's stream (a slice of rows, and `concat` of rows).
pub(crate) fn copy_words(
    src: &CudaBuffer,
    from: usize,
    dst: &mut CudaBuffer,
    to: usize,
    words: usize,
) -> Result<()> {
    if words == 0 {
        return Ok(());
    }
    let ctx = src.ctx().clone();
    let view = src.slice().slice(from..from + words);
    let mut target = dst.slice_mut().slice_mut(to..to + words);
    ctx.stream
        .memcpy_dtod(&view, &mut target)
        .map_err(|e| Error::Backend {
            backend: "cuda",
            msg: format!("device copy of {words} words: {e}"),
        })
}
