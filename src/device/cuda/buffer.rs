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

    /// A buffer holding `bytes` (a multiple of 4 long).
    pub fn from_bytes(ctx: &Arc<Context>, bytes: &[u8]) -> Result<CudaBuffer> {
        let mut b = Self::new(ctx, bytes.len() as u64)?;
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
        if !words.is_empty() {
            let mut view = b.slice_mut().slice_mut(..words.len());
            ctx.stream
                .memcpy_htod(&words, &mut view)
                .map_err(|e| driver_err("upload", e))?;
        }
        Ok(b)
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
        let words = (self.len / 4) as usize;
        if words == 0 {
            return Ok(Vec::new());
        }
        let view = self.slice().slice(..words);
        let host = self
            .ctx
            .stream
            .clone_dtoh(&view)
            .map_err(|e| driver_err("readback", e))?;
        Ok(bytemuck::cast_slice(&host).to_vec())
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if let Some(s) = self.slice.take() {
            self.ctx.pool.put(self.class, s);
        }
    }
}
