//! A block's index arrays on a GPU, uploaded once per block and device (see
//! [`Block::device_copy`]) and read by the segment kernels forward and backward. One type
//! for every GPU backend: a backend supplies its buffer type's [`IndexUpload`].

use std::sync::Arc;

use crate::device::Device;
use crate::error::Result;
use crate::graph::Block;

/// A device buffer that can be made from host `u32` values on a backend context.
pub trait IndexUpload: Sized + Send + Sync + 'static {
    /// The backend's device context.
    type Ctx;
    /// The device `ctx` drives.
    fn device(ctx: &Arc<Self::Ctx>) -> Device;
    /// A buffer holding `values`.
    fn upload(ctx: &Arc<Self::Ctx>, values: &[u32]) -> Result<Self>;
}

/// The CSR (dst -> in-edges) and its transpose (src -> out-edges) of one block on a device.
#[derive(Debug)]
pub struct DeviceBlock<B> {
    /// `num_dst + 1` offsets into `indices`.
    pub indptr: B,
    /// Local source index of each edge, grouped by destination.
    pub indices: B,
    /// `num_src + 1` offsets into `t_dst` / `t_edges`.
    pub t_indptr: B,
    /// Local destination of each out-edge, grouped by source.
    pub t_dst: B,
    /// Position in `indices` of each out-edge.
    pub t_edges: B,
}

impl<B: IndexUpload> DeviceBlock<B> {
    /// The buffers of `block` on `ctx`'s device, uploading them on first use.
    pub fn of(ctx: &Arc<B::Ctx>, block: &Block) -> Result<Arc<DeviceBlock<B>>> {
        block.device_copy(&B::device(ctx).to_string(), |b| {
            let up = |v: &[u32]| B::upload(ctx, v);
            Ok(DeviceBlock {
                indptr: up(&b.indptr)?,
                indices: up(&b.indices)?,
                t_indptr: up(&b.t_indptr)?,
                t_dst: up(&b.t_dst)?,
                t_edges: up(&b.t_edges)?,
            })
        })
    }
}
