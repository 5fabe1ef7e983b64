//! `kernels/index_select.cu` behind [`IndexSelectKernels`]: a warp per output row, lanes
//! over its words (gather) or features (scatter-add, summing its positions in order).

use std::sync::Arc;

use crate::device::cuda::args::{GatherArgs, ScatterAddArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::index_select::IndexSelectKernels;
use crate::error::Result;

impl IndexSelectKernels for Context {
    fn gather(
        self: &Arc<Self>,
        op: &'static str,
        x: &CudaBuffer,
        n: usize,
        words: usize,
        idx: &CudaBuffer,
        m: usize,
    ) -> Result<CudaBuffer> {
        // The kernel offsets rows in 64 bits: x and the output may hold 2^32 values or
        // more (a resident feature matrix does), only the counts it takes must fit.
        u32_count(op, "the output's rows", m)?;
        u32_count(op, "x's rows", n)?;
        u32_count(op, "a row", words)?;
        let total = m * words;
        let out = CudaBuffer::new(self, total as u64 * 4)?;
        // With no output values nothing runs; otherwise m and n are at most the counts
        // checked above.
        if total > 0 {
            let args = GatherArgs {
                idx: idx.into(),
                x: x.into(),
                out: (&out).into(),
                m: m as u32,
                f: words as u32,
                rows: n as u32,
            };
            self.launch_args_rows(&args, m as u64)?;
        }
        Ok(out)
    }

    fn scatter_add(
        self: &Arc<Self>,
        src: &CudaBuffer,
        indptr: &[u32],
        pos: &[u32],
        _m: usize,
        f: usize,
    ) -> Result<CudaBuffer> {
        let n = indptr.len() - 1;
        let total = n * f;
        let out = CudaBuffer::new(self, total as u64 * 4)?;
        // With no output values nothing runs; otherwise n is at most `total`, which the
        // caller checked fits u32.
        if total > 0 {
            let t_indptr = CudaBuffer::from_bytes(self, bytemuck::cast_slice(indptr))?;
            let t_pos = CudaBuffer::from_bytes(self, bytemuck::cast_slice(pos))?;
            let args = ScatterAddArgs {
                t_indptr: (&t_indptr).into(),
                t_pos: (&t_pos).into(),
                src: src.into(),
                out: (&out).into(),
                n: n as u32,
                f: f as u32,
            };
            self.launch_args_rows(&args, n as u64)?;
        }
        Ok(out)
    }
}
