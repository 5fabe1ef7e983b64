//! The kernels of `src/ops/index_select.rs` on a GPU backend: the row gather and the
//! row scatter-add over a transposed index.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// The row gather and scatter-add on one GPU backend. The indices were checked (each
/// below the table's rows) and, for the scatter, transposed on the host by the op.
pub trait IndexSelectKernels: GpuDevice {
    /// Rows `idx` (`u32 [m]`, each below `n`) of the `[n, words]` table `x` (`words` 4-byte
    /// words a row: `f` values, or `f / 2` pairs of half-precision values), as a new
    /// `[m, words]` buffer. `op` names the op in a count error (the backend checks its
    /// counts fit its kernels' u32 parameters).
    fn gather(
        self: &Arc<Self>,
        op: &'static str,
        x: &Self::Buffer,
        n: usize,
        words: usize,
        idx: &Self::Buffer,
        m: usize,
    ) -> Result<Self::Buffer>;

    /// The `[n, f]` sums of the rows of `src [m, f]` over the transposed index: output row
    /// `r` adds rows `pos[indptr[r]..indptr[r + 1]]` of `src` in that order (`n + 1`
    /// offsets). The caller checked that `m·f` and `n·f` fit u32.
    fn scatter_add(
        self: &Arc<Self>,
        src: &Self::Buffer,
        indptr: &[u32],
        pos: &[u32],
        m: usize,
        f: usize,
    ) -> Result<Self::Buffer>;
}
