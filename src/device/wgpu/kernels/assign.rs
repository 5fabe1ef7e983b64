//! [`AssignKernels`] on wgpu: a buffer-to-buffer copy recorded on the queue.

use crate::device::kernels::assign::AssignKernels;
use crate::device::wgpu::{Context, WgpuBuffer};
use crate::error::Result;

impl AssignKernels for Context {
    fn assign(dst: &mut WgpuBuffer, src: &WgpuBuffer, bytes: u64) -> Result<()> {
        dst.ctx().copy(src, 0, dst, 0, bytes)
    }
}
