//! [`AssignKernels`] on CUDA: a device-to-device copy on the stream.

use crate::device::cuda::{Context, CudaBuffer};
use crate::device::kernels::assign::AssignKernels;
use crate::error::Result;

impl AssignKernels for Context {
    fn assign(dst: &mut CudaBuffer, src: &CudaBuffer, bytes: u64) -> Result<()> {
        dst.copy_from(src, bytes)
    }
}
