//! The kernel of `src/ops/binary.rs` on a GPU backend: `a ∘ b` elementwise, `b`
//! broadcast.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// One binary op over `a` (`n` values in rows of `cols`).
#[derive(Clone, Copy, Debug)]
pub struct BinaryShape {
    /// The op: 0 add, 1 sub, 2 mul, 3 div (`BinaryOp`'s discriminant).
    pub op: u32,
    /// How `b` repeats: 0 same shape, 1 a row, 2 a column, 3 one value (`Broadcast`'s).
    pub bcast: u32,
    /// Columns of `a`.
    pub cols: usize,
    /// Values of `a` and of the output.
    pub n: usize,
}

/// The binary op on one GPU backend.
pub trait BinaryKernels: GpuDevice {
    /// Writes `a ∘ b` into `out`; `op` names the op in errors.
    fn binary(
        self: &Arc<Self>,
        op: &'static str,
        shape: BinaryShape,
        a: &Self::Buffer,
        b: &Self::Buffer,
        out: &Self::Buffer,
    ) -> Result<()>;

    /// `dst += src` over the first `n` f32 values, in place (gradient accumulation,
    /// `src/device/add.rs`): the same `x + y` per element as `binary`'s add, so a gradient
    /// summed here is bit-identical to one summed by `ops::add`.
    fn add_assign(self: &Arc<Self>, dst: &Self::Buffer, src: &Self::Buffer, n: usize)
        -> Result<()>;
}
