//! The kernels of `src/ops/segment_weighted_sum.rs` on a GPU backend: the attention-weighted
//! sum over each dst node's in-edges and its two gradients.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;
use crate::graph::Block;

/// Shapes of one call: columns of `x`, heads, columns per head.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Columns of `x` (`H·D`).
    pub cols: usize,
    /// Heads `H`.
    pub heads: usize,
    /// Columns per head `D`.
    pub per_head: usize,
}

/// The weighted segment sum kernels on one GPU backend: one
/// method per kernel, each marshalling its typed parameters and launching it the
/// backend's way. They run only when there are values to write, each fewer than 2^32,
/// and (for `backward_a`) columns per head to sum over.
pub trait SegmentWeightedSumKernels: GpuDevice {
    /// Writes `out [num_dst, H·D]` from `x [num_src, H·D]` and the edge weights `a [E, H]`.
    fn forward(
        self: &Arc<Self>,
        block: &Block,
        dims: Dims,
        x: &Self::Buffer,
        a: &Self::Buffer,
        out: &Self::Buffer,
    ) -> Result<()>;

    /// Writes `x̄ [num_src, H·D]` from `a` and the output gradient `g`, over the
    /// transposed CSR.
    fn backward_x(
        self: &Arc<Self>,
        block: &Block,
        dims: Dims,
        a: &Self::Buffer,
        g: &Self::Buffer,
        dx: &Self::Buffer,
    ) -> Result<()>;

    /// Writes `ā [E, H]` from `x` and the output gradient `g`.
    fn backward_a(
        self: &Arc<Self>,
        block: &Block,
        dims: Dims,
        x: &Self::Buffer,
        g: &Self::Buffer,
        da: &Self::Buffer,
    ) -> Result<()>;
}
