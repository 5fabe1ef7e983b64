//! The kernels of `src/ops/lstm_cell.rs` on a GPU backend: one fused LSTM cell step and
//! its backward, a thread per (node, hidden unit).

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The LSTM cell kernels on one GPU backend, over `n` nodes of `h` hidden units.
pub trait LstmCellKernels: GpuDevice {
    /// From pre-activation gates `[n, 4H]` (order i, f, g, o) and `c_prev [n, H]`, new
    /// buffers of the packed output `[h | c]` (`[n, 2H]`) and the activated gates
    /// (`[n, 4H]`).
    fn lstm_cell(
        self: &Arc<Self>,
        gates: &Self::Buffer,
        c_prev: &Self::Buffer,
        n: usize,
        h: usize,
    ) -> Result<(Self::Buffer, Self::Buffer)>;

    /// From the activated gates, `c_prev` and the packed output's gradient `[n, 2H]`, new
    /// buffers of `z̄ [n, 4H]` and `c̄_prev [n, H]`.
    fn lstm_cell_backward(
        self: &Arc<Self>,
        acts: &Self::Buffer,
        c_prev: &Self::Buffer,
        grad: &Self::Buffer,
        n: usize,
        h: usize,
    ) -> Result<(Self::Buffer, Self::Buffer)>;
}
