//! The tensor side of the GPU seam (`src/device/gpu.rs`): a tensor's storage as a backend's
//! buffer and back, so that an op's GPU orchestration, generic over the backend, takes and
//! returns tensors.

use crate::device::gpu::GpuDevice;
use crate::device::{cuda, wgpu};
use crate::error::Result;
use crate::tensor::{Storage, Tensor};

/// A [`GpuDevice`] whose buffers are tensor storage.
pub(crate) trait GpuTensors: GpuDevice {
    /// The buffer of `storage`, or an error naming `op` when it lives on another backend.
    fn buffer<'a>(storage: &'a Storage, op: &'static str) -> Result<&'a Self::Buffer>;

    /// `buf` as a tensor's storage.
    fn storage(buf: Self::Buffer) -> Storage;

    /// `buf` as a tensor shaped `shape`, placed and typed like `like`.
    fn output(buf: Self::Buffer, shape: Vec<usize>, like: &Tensor) -> Tensor {
        Tensor::from_storage(Self::storage(buf), shape, like.dtype(), like.device())
    }
}

impl GpuTensors for wgpu::Context {
    fn buffer<'a>(storage: &'a Storage, op: &'static str) -> Result<&'a wgpu::WgpuBuffer> {
        storage.wgpu(op)
    }

    fn storage(buf: wgpu::WgpuBuffer) -> Storage {
        Storage::Wgpu(buf)
    }
}

impl GpuTensors for cuda::Context {
    fn buffer<'a>(storage: &'a Storage, op: &'static str) -> Result<&'a cuda::CudaBuffer> {
        storage.cuda(op)
    }

    fn storage(buf: cuda::CudaBuffer) -> Storage {
        Storage::Cuda(buf)
    }
}
