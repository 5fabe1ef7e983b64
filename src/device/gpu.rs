//! The seam between the ops and the GPU backends.
//!
//! An op's GPU half (allocation, uploads, host logic between kernels: cross-entropy's
//! label check, the LSTM aggregation's bucket and step loop) is written **once**, generic
//! over a [`GpuDevice`]: it allocates, uploads, splits and reads back through this trait,
//! and launches its kernels through its kernel trait in `src/device/kernels/<op>.rs` (for
//! example `CrossEntropyKernels`), one method per launch with neutral parameters. Each
//! backend implements the kernel traits in its own folder, `src/device/<backend>/kernels/`,
//! where it marshals parameters (wgpu: the `#[repr(C)]` structs of [`super::wgpu::params`]
//! over binding windows; CUDA: the argument structs of [`super::cuda::args`], each checked
//! against its kernel's signature in `kernels/*.cu`) and where the backends truly differ in
//! algorithm (wgpu splits rows across binding windows, CUDA gives long rows a block each).
//! The tensor side of the seam (a storage's buffer, a buffer as a tensor, the one match on
//! a backend) is `src/ops/gpu.rs`.
//!
//! A new GPU backend (Metal, HIP) implements [`GpuDevice`] for its context, the shared
//! pooled buffer's [`super::pooled::PoolBackend`], and every kernel trait; the ops'
//! orchestration does not change.

use std::sync::Arc;

use crate::error::{Error, Result};

/// What the composite ops need of a GPU backend's context (see the module docs). Buffers
/// are 4-byte words; sizes are in bytes.
pub trait GpuDevice: Send + Sync + Sized + 'static {
    /// A device buffer of this backend.
    type Buffer: Send + Sync + 'static;

    /// The backend's short name: `wgpu`, `cuda`.
    const BACKEND: &'static str;

    /// The context `buf` belongs to.
    fn context_of(buf: &Self::Buffer) -> &Arc<Self>;

    /// The buffer's size in bytes (of its tensor's whole storage).
    fn bytes(buf: &Self::Buffer) -> u64;

    /// A buffer of `bytes` bytes with undefined contents (a kernel writes it before any read).
    fn alloc(self: &Arc<Self>, bytes: u64) -> Result<Self::Buffer>;

    /// A buffer of `bytes` zero bytes.
    fn zeros(self: &Arc<Self>, bytes: u64) -> Result<Self::Buffer>;

    /// A buffer holding `values`.
    fn upload_u32(self: &Arc<Self>, values: &[u32]) -> Result<Self::Buffer>;

    /// A buffer of `n` 4-byte values, each the 32-bit `word` (an f32's bits or a u32).
    fn fill(self: &Arc<Self>, n: usize, word: u32) -> Result<Self::Buffer>;

    /// The buffer's bytes on the host (waits for the work that writes it).
    fn read(buf: &Self::Buffer) -> Result<Vec<u8>>;

    /// The u32 values the buffer was uploaded from, while nothing has written it since.
    fn host_u32(buf: &Self::Buffer) -> Option<Arc<Vec<u32>>>;

    /// Cuts `0..n` rows into consecutive ranges, each the longest whose `span(start, end)`
    /// (elements of the largest binding the range needs, growing with `end`) fits one
    /// binding; an error naming `what` when a single row does not fit. A backend without a
    /// cap on bindings (CUDA) returns the one range `0..n` (none when `n` is 0).
    fn split(
        &self,
        what: &str,
        n: usize,
        span: impl Fn(usize, usize) -> usize,
    ) -> Result<Vec<(usize, usize)>>;
}

/// Word `i` (4 bytes, native order) of `bytes`, or 0 past the end.
pub fn word_at(bytes: &[u8], i: usize) -> u32 {
    bytes
        .get(i * 4..i * 4 + 4)
        .map_or(0, bytemuck::pod_read_unaligned::<u32>)
}

/// `n` as the u32 a GPU kernel indexes values with; an error naming `op` and `what` if a
/// tensor holds more values than that.
pub(crate) fn u32_count(op: &'static str, what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        Error::shape(
            op,
            format!("{what} holds {n} values; GPU kernels index at most 2^32 - 1"),
        )
    })
}
