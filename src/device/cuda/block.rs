//! A block's index arrays on a CUDA device, uploaded once per block (see
//! [`Block::device_copy`]) and read by the segment kernels forward and backward.

use std::sync::Arc;

use crate::device::cuda::{Context, CudaBuffer};
use crate::device::Device;
use crate::error::Result;
use crate::graph::Block;

/// The CSR (dst -> in-edges) and its transpose (src -> out-edges) of one block.
#[derive(Debug)]
pub struct BlockBuffers {
    /// `num_dst + 1` offsets into `indices`.
    pub indptr: CudaBuffer,
    /// Local source index of each edge, grouped by destination.
    pub indices: CudaBuffer,
    /// `num_src + 1` offsets into `t_dst` / `t_edges`.
    pub t_indptr: CudaBuffer,
    /// Local destination of each out-edge, grouped by source.
    pub t_dst: CudaBuffer,
    /// Position in `indices` of each out-edge.
    pub t_edges: CudaBuffer,
}

impl BlockBuffers {
    /// The buffers of `block` on `ctx`'s device, uploading them on first use.
    pub fn of(ctx: &Arc<Context>, block: &Block) -> Result<Arc<BlockBuffers>> {
        block.device_copy(Device::Cuda(ctx.index), |b| {
            let up = |v: &[u32]| CudaBuffer::from_bytes(ctx, bytemuck::cast_slice(v));
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
