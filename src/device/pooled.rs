//! The pooled buffer of the GPU backends, one type for all of them.
//!
//! A [`PooledBuffer`] is a backend's raw allocation rounded up to a size class
//! ([`super::size_class`]), taken from and given back to its context's
//! [`super::BufferPool`] (reuse by class, trim), with the tensor's byte length, its
//! accounting ([`Allocation`]: the class bytes count as live while a tensor holds it) and
//! the host copy of the u32 values it was uploaded from. A backend supplies only
//! [`PoolBackend`]: how a raw allocation is made and how a freed one goes back; its
//! uploads, copies and readback are inherent methods of `PooledBuffer<its context>` in its
//! own folder (`WgpuBuffer`, `CudaBuffer` are those types).

use std::sync::Arc;

use crate::device::{size_class, Allocation};
use crate::error::Result;

/// What a GPU backend's context supplies to [`PooledBuffer`]: allocate and free.
pub trait PoolBackend: std::fmt::Debug + Send + Sync + Sized + 'static {
    /// The backend's raw device allocation.
    type Raw: Send + Sync + 'static;

    /// The buffer type's name in `Debug` output (`WgpuBuffer`, `CudaBuffer`).
    const BUFFER: &'static str;

    /// A raw allocation of `class` bytes for a tensor of `len` bytes, pooled or new (through
    /// the context's `BufferPool`), and its accounting.
    fn allocate(self: &Arc<Self>, len: u64, class: u64) -> Result<(Self::Raw, Allocation)>;

    /// Gives back `raw` of size class `class`, freed by its buffer: to the pool, once no
    /// queued work reads it (each backend knows when that is).
    fn free(&self, class: u64, raw: Self::Raw);
}

/// A pooled device buffer of at least `len` bytes on the backend of context `C`.
pub struct PooledBuffer<C: PoolBackend> {
    raw: Option<C::Raw>,
    /// Bytes the tensor uses (the buffer may be larger: its size class).
    pub len: u64,
    class: u64,
    ctx: Arc<C>,
    /// The u32 values the buffer was uploaded from, kept while nothing writes the buffer
    /// (see [`PooledBuffer::host_u32`]).
    host: Option<Arc<Vec<u32>>>,
    _alloc: Allocation,
}

impl<C: PoolBackend> std::fmt::Debug for PooledBuffer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}({} bytes of {} on {:?})",
            C::BUFFER,
            self.len,
            self.class,
            self.ctx
        )
    }
}

impl<C: PoolBackend> PooledBuffer<C> {
    /// A buffer of `len` bytes (contents undefined: every caller writes it before reading)
    /// from the pool or newly allocated.
    pub fn new(ctx: &Arc<C>, len: u64) -> Result<Self> {
        let class = size_class(len);
        let (raw, alloc) = ctx.allocate(len, class)?;
        Ok(PooledBuffer {
            raw: Some(raw),
            len,
            class,
            ctx: ctx.clone(),
            host: None,
            _alloc: alloc,
        })
    }

    /// The buffer, keeping `values` (what it holds) on the host as well (see
    /// [`PooledBuffer::host_u32`]).
    pub(crate) fn with_host(mut self, values: Arc<Vec<u32>>) -> Self {
        self.host = Some(values);
        self
    }

    /// The u32 values this buffer was uploaded from (`from_u32`), while nothing has
    /// written it since: ops that need indices on the host (to check or transpose them)
    /// read them here instead of waiting for a readback.
    pub fn host_u32(&self) -> Option<Arc<Vec<u32>>> {
        self.host.clone()
    }

    /// Drops the host copy of the values: the buffer is about to be written.
    pub fn forget_host(&mut self) {
        self.host = None;
    }

    /// The context it belongs to.
    pub fn ctx(&self) -> &Arc<C> {
        &self.ctx
    }

    /// The raw allocation.
    pub(crate) fn raw_ref(&self) -> &C::Raw {
        // Only `drop` takes it out.
        self.raw.as_ref().expect("allocation present until drop")
    }

    /// The raw allocation, to be written (forgets the host copy of the values).
    pub(crate) fn raw_mut(&mut self) -> &mut C::Raw {
        self.host = None;
        self.raw.as_mut().expect("allocation present until drop")
    }
}

impl<C: PoolBackend> Drop for PooledBuffer<C> {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.ctx.free(self.class, raw);
        }
    }
}
