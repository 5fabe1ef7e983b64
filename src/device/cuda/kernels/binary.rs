//! `kernels/binary.cu` behind [`BinaryKernels`]: a thread per value (grid-stride).

use std::sync::Arc;

use crate::device::cuda::args::{AddAssignArgs, BinaryArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::binary::{BinaryKernels, BinaryShape};
use crate::error::Result;

impl BinaryKernels for Context {
    fn binary(
        self: &Arc<Self>,
        op: &'static str,
        s: BinaryShape,
        a: &CudaBuffer,
        b: &CudaBuffer,
        out: &CudaBuffer,
    ) -> Result<()> {
        let n = u32_count(op, "a", s.n)?;
        let args = BinaryArgs {
            a: a.into(),
            b: b.into(),
            out: out.into(),
            cols: s.cols as u32,
            op: s.op,
            bcast: s.bcast,
            n,
        };
        self.launch_args_1d(&args, n as u64)
    }

    fn add_assign(self: &Arc<Self>, dst: &CudaBuffer, src: &CudaBuffer, n: usize) -> Result<()> {
        let n = u32_count("add_assign", "dst", n)?;
        let args = AddAssignArgs {
            src: src.into(),
            dst: dst.into(),
            n,
        };
        self.launch_args_1d(&args, n as u64)
    }
}
