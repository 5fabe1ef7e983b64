//! Device memory from a stream-ordered caching pool, counted by the device's tracker.
//!
//! Buffers are 32-bit words (every dtype on a GPU is 4 bytes wide), rounded up to the
//! shared size classes. All work runs on the device's one stream, so a buffer returned to
//! the pool by a dropped tensor can be handed out at once: any kernel that still reads it
//! was queued earlier on the same stream and runs first.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use crate::device::cuda::context::{driver_err, Context};
use crate::device::{size_class, Allocation};
use crate::error::Result;

/// Bytes of each of the two pinned staging buffers; uploads of at least one go through
/// them (a feature upload of a Cora-sized batch, 15 MB, already does, but for its tail).
const STAGING_BYTES: usize = 4 << 20;
/// Uploads at least this large go through pinned staging buffers.
const PINNED_MIN: usize = STAGING_BYTES;

/// A pooled device buffer of at least `len` bytes.
pub struct CudaBuffer {
    slice: Option<CudaSlice<u32>>,
    /// Bytes the tensor uses.
    pub len: u64,
    class: u64,
    ctx: Arc<Context>,
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
    /// A buffer of `len` bytes with undefined contents.
    pub fn new(ctx: &Arc<Context>, len: u64) -> Result<CudaBuffer> {
        let class = size_class(len);
        let alloc = ctx.memory().alloc(class)?;
        let pooled = ctx.pool.take(class);
        let slice = match pooled {
            Some(s) => s,
            // SAFETY: the contents are undefined until a kernel or copy writes them; every
            // caller writes before reading (zeros() clears, from_bytes() copies).
            None => unsafe { ctx.stream.alloc::<u32>((class / 4) as usize) }
                .map_err(|e| driver_err("alloc", e))?,
        };
        Ok(CudaBuffer {
            slice: Some(slice),
            len,
            class,
            ctx: ctx.clone(),
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
    /// through the context's two page-locked staging buffers in turn, so the copy of one
    /// chunk into pinned memory overlaps the transfer of the previous one, and the
    /// transfer runs at the bus's pinned rate rather than through the driver's bounce buffer.
    pub fn from_bytes(ctx: &Arc<Context>, bytes: &[u8]) -> Result<CudaBuffer> {
        let mut b = Self::new(ctx, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(b);
        }
        // Whole staging-sized chunks go through pinned memory; the tail (and any small
        // upload) is copied from pageable memory.
        let pinned_len = if bytes.len() >= PINNED_MIN {
            bytes.len() / STAGING_BYTES * STAGING_BYTES
        } else {
            0
        };
        if pinned_len > 0 {
            let mut staging = ctx.staging.lock().unwrap_or_else(|e| e.into_inner());
            while staging.len() < 2 {
                // SAFETY: the contents are written below before any transfer reads them.
                let s = unsafe { ctx.cuda.alloc_pinned::<u8>(STAGING_BYTES) }
                    .map_err(|e| driver_err("pinned host alloc", e))?;
                staging.push(s);
            }
            for (i, chunk) in bytes[..pinned_len].chunks(STAGING_BYTES).enumerate() {
                let pinned = &mut staging[i % 2];
                // Waits until this staging buffer's previous transfer has finished.
                pinned
                    .as_mut_slice()
                    .map_err(|e| driver_err("pinned host buffer", e))?
                    .copy_from_slice(chunk);
                let start = i * STAGING_BYTES;
                // SAFETY: the word buffer viewed as bytes; `pinned_len` bytes lie inside it.
                let mut dst = unsafe { b.slice_mut().transmute_mut::<u8>(pinned_len) }
                    .ok_or_else(|| driver_err("upload", "staging range outside the buffer"))?;
                let mut dst = dst.slice_mut(start..start + STAGING_BYTES);
                ctx.stream
                    .memcpy_htod(&*pinned, &mut dst)
                    .map_err(|e| driver_err("upload", e))?;
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

    /// The device words, mutably.
    pub fn slice_mut(&mut self) -> &mut CudaSlice<u32> {
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
