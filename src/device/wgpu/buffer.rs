//! wgpu's side of the GPU backends' one pooled buffer ([`PooledBuffer`],
//! `src/device/pooled.rs`): how a storage buffer is created for a size class and how a
//! freed one goes back to the pool, and the uploads and readback of a `WgpuBuffer`.
//!
//! A buffer's class bytes count as live while a tensor holds it; pooled free buffers do
//! not (as DESIGN.md asks).

use std::sync::Arc;

use crate::device::pooled::{PoolBackend, PooledBuffer};
use crate::device::wgpu::Context;
use crate::device::Allocation;
use crate::error::{Error, Result};

/// A pooled storage buffer of at least `len` bytes on a wgpu adapter.
pub type WgpuBuffer = PooledBuffer<Context>;

impl PoolBackend for Context {
    type Raw = wgpu::Buffer;

    const BUFFER: &'static str = "WgpuBuffer";

    fn allocate(self: &Arc<Self>, len: u64, class: u64) -> Result<(wgpu::Buffer, Allocation)> {
        if class > self.limits.max_buffer_size {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!(
                    "a buffer of {len} bytes passes the adapter's limit of {} bytes",
                    self.limits.max_buffer_size
                ),
            });
        }
        self.pool.acquire(class, |class| {
            self.checked_alloc("create_buffer", Some(class), || {
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: class,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
        })
    }

    /// Back to the pool, remembered while a recording that may use it is open.
    fn free(&self, class: u64, raw: wgpu::Buffer) {
        self.retire(class, raw);
    }
}

impl WgpuBuffer {
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
    /// [`PooledBuffer::host_u32`]).
    pub fn from_u32(ctx: &Arc<Context>, values: Arc<Vec<u32>>) -> Result<WgpuBuffer> {
        Ok(Self::from_bytes(ctx, bytemuck::cast_slice(&values))?.with_host(values))
    }

    /// A zero-filled buffer of `len` bytes.
    pub fn zeros(ctx: &Arc<Context>, len: u64) -> Result<WgpuBuffer> {
        let b = Self::new(ctx, len)?;
        ctx.record_clear(b.raw());
        Ok(b)
    }

    /// The wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        self.raw_ref()
    }

    /// Copies the first `len` bytes back to the host: submits the open recording with the
    /// copy into a pooled staging buffer and waits for it (one host wait).
    pub fn read(&self) -> Result<Vec<u8>> {
        let ctx = self.ctx();
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
