//! `kernels/dropout.cu` behind [`DropoutKernels`]: a thread per value (grid-stride).

use std::sync::Arc;

use crate::device::cuda::args::{DropoutArgs, DropoutIdsArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::dropout::{DropoutKernels, Mask};
use crate::error::Result;

impl DropoutKernels for Context {
    fn dropout(
        self: &Arc<Self>,
        m: Mask,
        x: &CudaBuffer,
        ids: Option<&CudaBuffer>,
        out: &CudaBuffer,
    ) -> Result<()> {
        let n = u32_count("dropout", "x", m.r * m.c)?;
        let (x, out, c) = (x.into(), out.into(), m.c as u32);
        let (key, threshold, scale) = (m.key, m.threshold, m.scale);
        match ids {
            Some(ids) => {
                let args = DropoutIdsArgs {
                    x,
                    out,
                    ids: ids.into(),
                    c,
                    key,
                    threshold,
                    scale,
                    n,
                };
                self.launch_args_1d(&args, n as u64)
            }
            None => {
                let args = DropoutArgs {
                    x,
                    out,
                    c,
                    key,
                    threshold,
                    scale,
                    n,
                };
                self.launch_args_1d(&args, n as u64)
            }
        }
    }
}
