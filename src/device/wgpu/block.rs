//! A block's index arrays on an adapter: [`crate::device::block::DeviceBlock`] of wgpu
//! buffers.

use std::sync::Arc;

use crate::device::block::{DeviceBlock, IndexUpload};
use crate::device::wgpu::{Context, WgpuBuffer};
use crate::device::Device;
use crate::error::Result;

/// The CSR and its transpose of one block on an adapter.
pub type BlockBuffers = DeviceBlock<WgpuBuffer>;

impl IndexUpload for WgpuBuffer {
    type Ctx = Context;
    fn device(ctx: &Arc<Context>) -> Device {
        Device::Wgpu(ctx.index)
    }
    fn upload(ctx: &Arc<Context>, values: &[u32]) -> Result<WgpuBuffer> {
        WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(values))
    }
}
