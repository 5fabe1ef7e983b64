//! Device buffers from a caching pool, counted by the adapter's memory tracker.
//!
//! Sizes are rounded up to a size class (four classes per power of two, at least 256
//! bytes), so a freed buffer serves any later request of its class; allocation on the hot
//! path is slow on every GPU API. A buffer's class bytes count as live while a tensor holds
//! it; pooled free buffers do not (as DESIGN.md asks).

use std::sync::Arc;

use crate::device::wgpu::Context;
use crate::device::{size_class, Allocation};
use crate::error::{Error, Result};

/// A pooled storage buffer of at least `len` bytes.
pub struct WgpuBuffer {
    buffer: Option<wgpu::Buffer>,
    /// Bytes the tensor uses (the buffer may be larger: its size class).
    pub len: u64,
    class: u64,
    ctx: Arc<Context>,
    /// The u32 values the buffer was uploaded from, kept while nothing writes the buffer
    /// (see [`WgpuBuffer::host_u32`]).
    host: Option<Arc<Vec<u32>>>,
    _alloc: Allocation,
}

impl std::fmt::Debug for WgpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WgpuBuffer({} bytes of {} on {:?})",
            self.len, self.class, self.ctx
        )
    }
}

impl WgpuBuffer {
    /// A buffer of `len` bytes (contents undefined) from the pool or newly created.
    pub fn new(ctx: &Arc<Context>, len: u64) -> Result<WgpuBuffer> {
        let class = size_class(len);
        if class > ctx.limits.max_buffer_size {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!(
                    "a buffer of {len} bytes passes the adapter's limit of {} bytes",
                    ctx.limits.max_buffer_size
                ),
            });
        }
        let (buffer, alloc) = ctx.pool.acquire(class, |class| {
            ctx.checked_alloc("create_buffer", Some(class), || {
                ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: class,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
        })?;
        Ok(WgpuBuffer {
            buffer: Some(buffer),
            len,
            class,
            ctx: ctx.clone(),
            host: None,
            _alloc: alloc,
        })
    }

    /// A buffer holding `bytes`.
    pub fn from_bytes(ctx: &Arc<Context>, bytes: &[u8]) -> Result<WgpuBuffer> {
        let b = Self::new(ctx, bytes.len() as u64)?;
        if bytes.len() % 4 != 0 {
            // Copies move whole words: an odd count of 2-byte values (f16, bf16) is padded
            // with zeros to a whole word.
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().div_ceil(4) * 4, 0);
            ctx.upload(b.raw(), &padded)?;
        } else {
            ctx.upload(b.raw(), bytes)?;
        }
        Ok(b)
    }

    /// A buffer holding `values`, which it keeps on the host as well (see
    /// [`WgpuBuffer::host_u32`]).
    pub fn from_u32(ctx: &Arc<Context>, values: Arc<Vec<u32>>) -> Result<WgpuBuffer> {
        let mut b = Self::from_bytes(ctx, bytemuck::cast_slice(&values))?;
        b.host = Some(values);
        Ok(b)
    }

    /// The u32 values this buffer was uploaded from by [`WgpuBuffer::from_u32`], while
    /// nothing has written it since: ops that need indices on the host (to check or
    /// transpose them) read them here instead of waiting for a readback.
    pub fn host_u32(&self) -> Option<Arc<Vec<u32>>> {
        self.host.clone()
    }

    /// Drops the host copy of the values: the buffer is about to be written.
    pub fn forget_host(&mut self) {
        self.host = None;
    }

    /// A zero-filled buffer of `len` bytes.
    pub fn zeros(ctx: &Arc<Context>, len: u64) -> Result<WgpuBuffer> {
        let b = Self::new(ctx, len)?;
        ctx.record_clear(b.raw());
        Ok(b)
    }

    /// The wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        // Only `drop` takes the buffer out.
        self.buffer.as_ref().expect("buffer present until drop")
    }

    /// The context it belongs to.
    pub fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Copies the first `len` bytes back to the host: submits the open recording with the
    /// copy into a pooled staging buffer and waits for it (one host wait).
    pub fn read(&self) -> Result<Vec<u8>> {
        let ctx = &self.ctx;
        if self.len == 0 {
            return Ok(Vec::new());
        }
        let size = self.len.div_ceil(4) * 4;
        let staging = ctx.staging(size)?;
        ctx.record_copy(self.raw(), 0, &staging.buffer, 0, size);
        let index = ctx.submit()?;
        let (tx, rx) = std::sync::mpsc::channel();
        staging
            .buffer
            .slice(..size)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        ctx.wait(index)?;
        let failed = |msg: String| Error::Backend {
            backend: "wgpu",
            msg: format!("readback: {msg}"),
        };
        rx.recv()
            .map_err(|_| failed("map callback never ran".into()))?
            .map_err(|e| failed(e.to_string()))?;
        let data = staging
            .buffer
            .slice(..size)
            .get_mapped_range()
            .map_err(|e| failed(e.to_string()))?[..self.len as usize]
            .to_vec();
        staging.buffer.unmap();
        ctx.put_staging(staging);
        Ok(data)
    }
}

impl Drop for WgpuBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.ctx.retire(self.class, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::device::size_class;

    #[test]
    fn size_classes_cover_requests_with_bounded_waste() {
        for b in [
            0u64,
            1,
            255,
            256,
            257,
            1000,
            4096,
            4097,
            1 << 20,
            (1 << 20) + 1,
            3_000_000_000,
        ] {
            let c = size_class(b);
            assert!(c >= b.max(256), "{b} -> {c}");
            assert!(c as f64 <= b.max(256) as f64 * 1.25 + 1.0, "{b} -> {c}");
            assert_eq!(c % 4, 0);
        }
        assert_eq!(size_class(256), 256);
        assert_eq!(size_class(257), 320);
    }
}
