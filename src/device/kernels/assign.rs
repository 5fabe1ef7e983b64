//! The copy of `src/ops/assign.rs` on a GPU backend (`kernels/assign.cu` and
//! `shaders/assign.wgsl` also hold the fill kernel the device buffers use for a
//! `Tensor::full` with a non-zero value).

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The in-place copy on one GPU backend.
pub trait AssignKernels: GpuDevice {
    /// Overwrites the first `bytes` bytes of `dst` with `src`'s, on the device's queue or
    /// stream.
    fn assign(dst: &mut Self::Buffer, src: &Self::Buffer, bytes: u64) -> Result<()>;
}
