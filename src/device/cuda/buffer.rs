//! Device memory from a stream-ordered caching pool, counted by the device's tracker.
//!
//! Buffers are 32-bit words (every dtype on a GPU is 4 bytes wide), rounded up to the
//! shared size classes. All work runs on the device's one stream, so a buffer returned to
//! the pool by a dropped tensor can be handed out at once: any kernel that still reads it
//! was queued earlier on the same stream and runs first.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use crate::device::cuda::staging::{PinnedChunk, CHUNK_BYTES};
use crate::device::cuda::{driver_err, Context};
use crate::device::{size_class, Allocation};
use crate::error::Result;

/// Uploads at least this large go through the pinned staging chunks.
const PINNED_MIN: usize = CHUNK_BYTES;

/// A pooled device buffer of at least `len` bytes.
pub struct CudaBuffer {
    slice: Option<CudaSlice<u32>>,
    /// Bytes the tensor uses.
    pub len: u64,
    class: u64,
    ctx: Arc<Context>,
    /// The u32 values the buffer was uploaded from, kept while nothing writes the buffer
    /// (see [`CudaBuffer::host_u32`]).
    host: Option<Arc<Vec<u32>>>,
    _alloc: Allocation,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBuffer({} bytes of {} on {:?})",
            self.len, self.class, self.ctx
        )
    }
}

impl CudaBuffer {
    /// A buffer of `len` bytes with undefined contents. A driver out-of-memory is retried
    /// once after freeing the pool's free buffers, then returned as
    /// [`crate::Error::OutOfMemory`].
    pub fn new(ctx: &Arc<Context>, len: u64) -> Result<CudaBuffer> {
        let class = size_class(len);
        let (slice, alloc) = ctx.pool.acquire(class, |class| {
            // SAFETY: the contents are undefined until a kernel or copy writes them; every
            // caller writes before reading (zeros() clears, from_bytes() copies).
            unsafe { ctx.stream.alloc::<u32>((class / 4) as usize) }
                .map_err(|e| ctx.alloc_err(class, e))
        })?;
        Ok(CudaBuffer {
            slice: Some(slice),
            len,
            class,
            ctx: ctx.clone(),
            host: None,
            _alloc: alloc,
        })
    }

    /// A zero-filled buffer.
    pub fn zeros(ctx: &Arc<Context>, len: u64) -> Result<CudaBuffer> {
        let mut b = Self::new(ctx, len)?;
        ctx.stream
            .memset_zeros(b.slice_mut())
            .map_err(|e| driver_err("memset", e))?;
        Ok(b)
    }

    /// A buffer holding `bytes` (padded with zeros to a whole word). Large uploads go
    /// through the context's page-locked staging chunks (see the `staging` module for why a
    /// chunk is never overwritten before its transfer ran), so the copy of one chunk into
    /// pinned memory overlaps the transfer of the previous ones, and the transfer runs at
    /// the bus's pinned rate rather than through the driver's bounce buffer.
    pub fn from_bytes(ctx: &Arc<Context>, bytes: &[u8]) -> Result<CudaBuffer> {
        let mut b = Self::new(ctx, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(b);
        }
        // Whole chunks go through pinned memory; the tail (and any small upload) is copied
        // from pageable memory, which the driver copies into its own staging memory before
        // `memcpy_htod` returns, so the vector may be dropped at once.
        let pinned_len = if bytes.len() >= PINNED_MIN {
            bytes.len() / CHUNK_BYTES * CHUNK_BYTES
        } else {
            0
        };
        if pinned_len > 0 {
            let mut ring = ctx.staging.lock().unwrap_or_else(|e| e.into_inner());
            for (i, chunk) in bytes[..pinned_len].chunks(CHUNK_BYTES).enumerate() {
                let claim = ring.claim(|| {
                    // SAFETY: the contents are written below before any transfer reads them.
                    let host = unsafe { ctx.cuda.alloc_pinned::<u8>(CHUNK_BYTES) }
                        .map_err(|e| driver_err("pinned host alloc", e))?;
                    let copied = ctx
                        .cuda
                        .new_event(None)
                        .map_err(|e| driver_err("staging event", e))?;
                    Ok(PinnedChunk { host, copied })
                })?;
                if claim.waited {
                    ctx.count_host_wait();
                }
                let staged = ring.chunk_mut(claim.index);
                // cudarc's own event of the slice is never recorded on a single stream
                // (see `staging`), so this does not wait; the claim above did.
                staged
                    .host
                    .as_mut_slice()
                    .map_err(|e| driver_err("pinned host buffer", e))?
                    .copy_from_slice(chunk);
                let start = i * CHUNK_BYTES;
                // SAFETY: the word buffer viewed as bytes; `pinned_len` bytes lie inside it.
                let mut dst = unsafe { b.slice_mut().transmute_mut::<u8>(pinned_len) }
                    .ok_or_else(|| driver_err("upload", "staging range outside the buffer"))?;
                let mut dst = dst.slice_mut(start..start + CHUNK_BYTES);
                ctx.stream
                    .memcpy_htod(&staged.host, &mut dst)
                    .map_err(|e| driver_err("upload", e))?;
                // Completes once the transfer just queued (and all work before it) ran.
                staged
                    .copied
                    .record(&ctx.stream)
                    .map_err(|e| driver_err("staging event", e))?;
            }
        }
        let tail = &bytes[pinned_len..];
        if !tail.is_empty() {
            let mut words = vec![0u32; tail.len().div_ceil(4)];
            bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..tail.len()].copy_from_slice(tail);
            let first = pinned_len / 4;
            let mut view = b.slice_mut().slice_mut(first..first + words.len());
            ctx.stream
                .memcpy_htod(&words, &mut view)
                .map_err(|e| driver_err("upload", e))?;
        }
        Ok(b)
    }

    /// A buffer holding `values`, which it keeps on the host as well (see
    /// [`CudaBuffer::host_u32`]).
    pub fn from_u32(ctx: &Arc<Context>, values: Arc<Vec<u32>>) -> Result<CudaBuffer> {
        let mut b = Self::from_bytes(ctx, bytemuck::cast_slice(&values))?;
        b.host = Some(values);
        Ok(b)
    }

    /// The u32 values this buffer was uploaded from by [`CudaBuffer::from_u32`], while
    /// nothing has written it since: ops that need indices on the host (to check or
    /// transpose them) read them here instead of waiting for a readback.
    pub fn host_u32(&self) -> Option<Arc<Vec<u32>>> {
        self.host.clone()
    }

    /// Drops the host copy of the values: the buffer is about to be written.
    pub fn forget_host(&mut self) {
        self.host = None;
    }

    /// Copies the first `bytes` bytes (a multiple of 4) of `src` over this buffer's start,
    /// on the stream.
    pub fn copy_from(&mut self, src: &CudaBuffer, bytes: u64) -> Result<()> {
        let words = (bytes / 4) as usize;
        if words == 0 {
            return Ok(());
        }
        let ctx = self.ctx.clone();
        let from = src.slice().slice(..words);
        let mut to = self.slice_mut().slice_mut(..words);
        ctx.stream
            .memcpy_dtod(&from, &mut to)
            .map_err(|e| driver_err("device copy", e))
    }

    /// The device words.
    pub fn slice(&self) -> &CudaSlice<u32> {
        self.slice.as_ref().expect("slice present until drop")
    }

    /// The device words, mutably (forgets the host copy of the values).
    pub fn slice_mut(&mut self) -> &mut CudaSlice<u32> {
        self.host = None;
        self.slice.as_mut().expect("slice present until drop")
    }

    /// The context it belongs to.
    pub fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Copies the first `len` bytes to the host (waits for queued work).
    pub fn read(&self) -> Result<Vec<u8>> {
        let words = self.len.div_ceil(4) as usize;
        if words == 0 {
            return Ok(Vec::new());
        }
        let view = self.slice().slice(..words);
        // A copy into pageable memory returns once it is done: a host wait.
        self.ctx.count_host_wait();
        let host = self
            .ctx
            .stream
            .clone_dtoh(&view)
            .map_err(|e| driver_err("readback", e))?;
        let mut bytes: Vec<u8> = bytemuck::cast_slice(&host).to_vec();
        bytes.truncate(self.len as usize);
        Ok(bytes)
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if let Some(s) = self.slice.take() {
            self.ctx.pool.put(self.class, s);
        }
    }
}
