//! A block's index arrays on a CUDA device: [`crate::device::block::DeviceBlock`] of CUDA
//! buffers.

use std::sync::Arc;

use crate::device::block::{DeviceBlock, IndexUpload};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::Device;
use crate::error::Result;

/// The CSR and its transpose of one block on a CUDA device.
pub type BlockBuffers = DeviceBlock<CudaBuffer>;

impl IndexUpload for CudaBuffer {
    type Ctx = Context;
    fn device(ctx: &Arc<Context>) -> Device {
        Device::Cuda(ctx.index)
    }
    fn upload(ctx: &Arc<Context>, values: &[u32]) -> Result<CudaBuffer> {
        CudaBuffer::from_bytes(ctx, bytemuck::cast_slice(values))
    }
}
