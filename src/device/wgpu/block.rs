//! A block's index arrays on an adapter, uploaded once per block (see
//! [`Block::device_copy`]) and read by the segment kernels forward and backward.

use std::sync::Arc;

use crate::device::wgpu::{Context, WgpuBuffer};
use crate::device::Device;
use crate::error::Result;
use crate::graph::Block;

/// The CSR (dst -> in-edges) and its transpose (src -> out-edges) of one block.
#[derive(Debug)]
pub struct BlockBuffers {
    /// `num_dst + 1` offsets into `indices`.
    pub indptr: WgpuBuffer,
    /// Local source index of each edge, grouped by destination.
    pub indices: WgpuBuffer,
    /// `num_src + 1` offsets into `t_dst` / `t_edges`.
    pub t_indptr: WgpuBuffer,
    /// Local destination of each out-edge, grouped by source.
    pub t_dst: WgpuBuffer,
    /// Position in `indices` of each out-edge.
    pub t_edges: WgpuBuffer,
}

impl BlockBuffers {
    /// The buffers of `block` on `ctx`'s adapter, uploading them on first use.
    pub fn of(ctx: &Arc<Context>, block: &Block) -> Result<Arc<BlockBuffers>> {
        block.device_copy(Device::Wgpu(ctx.index), |b| {
            let up = |v: &[u32]| WgpuBuffer::from_bytes(ctx, bytemuck::cast_slice(v));
            Ok(BlockBuffers {
                indptr: up(&b.indptr)?,
                indices: up(&b.indices)?,
                t_indptr: up(&b.t_indptr)?,
                t_dst: up(&b.t_dst)?,
                t_edges: up(&b.t_edges)?,
            })
        })
    }
}
