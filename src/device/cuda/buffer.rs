//! CUDA's side of the GPU backends' one pooled buffer ([`PooledBuffer`],
//! `src/device/pooled.rs`): device memory from the stream-ordered caching pool, counted by
//! the device's tracker, and the uploads, copies and readback of a `CudaBuffer`.
//!
//! Buffers are 32-bit words (every dtype on a GPU is 4 bytes wide), rounded up to the
//! shared size classes. All work runs on the device's one stream, so a buffer returned to
//! the pool by a dropped tensor can be handed out at once: any kernel that still reads it
//! was queued earlier on the same stream and runs first.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use crate::device::cuda::staging::{PinnedChunk, CHUNK_BYTES};
use crate::device::cuda::{driver_err, Context};
use crate::device::pooled::{PoolBackend, PooledBuffer};
use crate::device::Allocation;
use crate::error::Result;

/// A pooled device buffer of at least `len` bytes on a CUDA device.
pub type CudaBuffer = PooledBuffer<Context>;

impl PoolBackend for Context {
    type Raw = CudaSlice<u32>;

    const BUFFER: &'static str = "CudaBuffer";

    /// A driver out-of-memory is retried once after freeing the pool's free buffers, then
    /// returned as [`crate::Error::OutOfMemory`].
    fn allocate(self: &Arc<Self>, _len: u64, class: u64) -> Result<(CudaSlice<u32>, Allocation)> {
        // The pool may free buffers (driver calls) before it allocates.
        self.bind()?;
        let mut attempt = 0;
        self.pool.acquire(class, |class| {
            // The pool retries once after freeing its buffers; their memory is the driver
            // pool's again only once the host has seen the frees run and the pool is trimmed.
            if attempt > 0 {
                self.release_freed_memory()?;
            }
            attempt += 1;
            // SAFETY: the contents are undefined until a kernel or copy writes them; every
            // caller writes before reading (zeros() clears, from_bytes() copies).
            unsafe { self.stream.alloc::<u32>((class / 4) as usize) }
                .map_err(|e| self.alloc_err(class, e))
        })
    }

    /// Back to the pool at once: all work runs on the device's one stream, so any kernel
    /// that still reads the buffer was queued before the next user's.
    fn free(&self, class: u64, raw: CudaSlice<u32>) {
        self.pool.put(class, raw);
    }
}

impl CudaBuffer {
    /// A zero-filled buffer.
    pub fn zeros(ctx: &Arc<Context>, len: u64) -> Result<CudaBuffer> {
        let mut b = Self::new(ctx, len)?;
        ctx.stream
            .memset_zeros(b.slice_mut())
            .map_err(|e| driver_err("memset", e))?;
        Ok(b)
    }

    /// A buffer holding `bytes` (padded with zeros to a whole word). Every upload goes
    /// through the context's page-locked staging chunks (see the `staging` module for why a
    /// chunk is never overwritten before its transfers ran): pieces of up to a chunk are
    /// copied into one and transferred from there, so the copy of one piece overlaps the
    /// transfer of the previous ones, every transfer runs at the bus's pinned rate, and the
    /// call returns without waiting for the stream unless every chunk still holds queued
    /// transfers (then it waits for the oldest, a counted host wait). Small uploads share a
    /// chunk.
    pub fn from_bytes(ctx: &Arc<Context>, bytes: &[u8]) -> Result<CudaBuffer> {
        let mut b = Self::new(ctx, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(b);
        }
        let padded = bytes.len().next_multiple_of(4);
        let mut ring = ctx.staging.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the word buffer viewed as bytes; its size class holds at least `padded`.
        let mut dst = unsafe { b.slice_mut().transmute_mut::<u8>(padded) }
            .ok_or_else(|| driver_err("upload", "staging range outside the buffer"))?;
        for (i, piece) in bytes.chunks(CHUNK_BYTES).enumerate() {
            // The last piece is padded with zeros to a whole word.
            let len = piece.len().next_multiple_of(4);
            let claim = ring.claim(len, || PinnedChunk::new(&ctx.cuda))?;
            if claim.waited {
                ctx.count_host_wait();
            }
            let staged = ring.chunk_mut(claim.index);
            // cudarc's own event of the slice is never recorded (event tracking is off), so
            // this does not wait; the claim above did where needed.
            let host = staged
                .host
                .as_mut_slice()
                .map_err(|e| driver_err("pinned host buffer", e))?;
            let range = claim.offset..claim.offset + len;
            let (data, pad) = host[range.clone()].split_at_mut(piece.len());
            data.copy_from_slice(piece);
            pad.fill(0);
            let start = i * CHUNK_BYTES;
            let mut to = dst.slice_mut(start..start + len);
            // From page-locked memory: queued, the host does not wait.
            ctx.stream
                .memcpy_htod(&host[range], &mut to)
                .map_err(|e| driver_err("upload", e))?;
            // Completes once the transfer just queued (and all work before it) ran.
            staged
                .copied
                .record(&ctx.stream)
                .map_err(|e| driver_err("staging event", e))?;
        }
        Ok(b)
    }

    /// A buffer holding `values`, which it keeps on the host as well (see
    /// [`PooledBuffer::host_u32`]).
    pub fn from_u32(ctx: &Arc<Context>, values: Arc<Vec<u32>>) -> Result<CudaBuffer> {
        Ok(Self::from_bytes(ctx, bytemuck::cast_slice(&values))?.with_host(values))
    }

    /// Copies the first `bytes` bytes (a multiple of 4) of `src` over this buffer's start,
    /// on the stream.
    pub fn copy_from(&mut self, src: &CudaBuffer, bytes: u64) -> Result<()> {
        let words = (bytes / 4) as usize;
        if words == 0 {
            return Ok(());
        }
        let ctx = self.ctx().clone();
        let from = src.slice().slice(..words);
        let mut to = self.slice_mut().slice_mut(..words);
        ctx.stream
            .memcpy_dtod(&from, &mut to)
            .map_err(|e| driver_err("device copy", e))
    }

    /// The buffer's device address (for a library that takes raw pointers, NCCL).
    pub fn device_ptr(&self) -> u64 {
        use cudarc::driver::DevicePtr;
        // cudarc's event tracking is off (see `context`): the guard records nothing.
        let (ptr, _guard) = self.slice().device_ptr(&self.ctx().stream);
        ptr
    }

    /// The device words.
    pub fn slice(&self) -> &CudaSlice<u32> {
        self.raw_ref()
    }

    /// The device words, mutably (forgets the host copy of the values).
    pub fn slice_mut(&mut self) -> &mut CudaSlice<u32> {
        self.raw_mut()
    }

    /// Copies the first `len` bytes to the host (waits for queued work).
    pub fn read(&self) -> Result<Vec<u8>> {
        let words = self.len.div_ceil(4) as usize;
        if words == 0 {
            return Ok(Vec::new());
        }
        let view = self.slice().slice(..words);
        // A copy into pageable memory returns once it is done: a host wait.
        self.ctx().count_host_wait();
        let host = self
            .ctx()
            .stream
            .clone_dtoh(&view)
            .map_err(|e| driver_err("readback", e))?;
        let mut bytes: Vec<u8> = bytemuck::cast_slice(&host).to_vec();
        bytes.truncate(self.len as usize);
        Ok(bytes)
    }
}
