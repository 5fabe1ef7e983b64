//! Memory accounting: the one point every allocation of a device passes through.

use std::sync::Mutex;

use crate::device::Device;
use crate::error::{Error, Result};

/// Live, peak and budget bytes of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes held by live allocations.
    pub live: u64,
    /// Highest `live` since creation or the last [`MemoryTracker::reset_peak`].
    pub peak: u64,
    /// The budget, if one is set.
    pub budget: Option<u64>,
}

/// Counts a device's live and peak bytes and enforces its optional budget.
#[derive(Debug)]
pub struct MemoryTracker {
    device: Device,
    state: Mutex<MemoryStats>,
}

impl MemoryTracker {
    /// A tracker with nothing allocated and no budget.
    pub const fn new(device: Device) -> Self {
        MemoryTracker {
            device,
            state: Mutex::new(MemoryStats {
                live: 0,
                peak: 0,
                budget: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryStats> {
        // The counters stay consistent even if a holder panicked: every update is one store.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves `bytes`; fails with [`Error::OutOfMemory`] if that would pass the budget.
    /// The returned guard gives the bytes back when dropped.
    pub fn alloc(&'static self, bytes: u64) -> Result<Allocation> {
        let mut s = self.lock();
        if let Some(budget) = s.budget {
            if s.live.saturating_add(bytes) > budget {
                return Err(Error::OutOfMemory {
                    device: self.device,
                    requested: bytes,
                    live: s.live,
                    budget,
                });
            }
        }
        s.live = s.live.saturating_add(bytes);
        s.peak = s.peak.max(s.live);
        Ok(Allocation {
            tracker: self,
            bytes,
        })
    }

    fn release(&self, bytes: u64) {
        let mut s = self.lock();
        s.live = s.live.saturating_sub(bytes);
    }

    /// Current figures.
    pub fn stats(&self) -> MemoryStats {
        *self.lock()
    }

    /// Bytes live now.
    pub fn live(&self) -> u64 {
        self.lock().live
    }

    /// Highest live bytes since the last reset.
    pub fn peak(&self) -> u64 {
        self.lock().peak
    }

    /// Restarts peak tracking from the current live bytes.
    pub fn reset_peak(&self) {
        let mut s = self.lock();
        s.peak = s.live;
    }

    /// Sets or clears the budget. Live allocations are kept even if they exceed it.
    pub fn set_budget(&self, budget: Option<u64>) {
        self.lock().budget = budget;
    }

    /// The device this tracker counts for.
    pub fn device(&self) -> Device {
        self.device
    }
}

/// Bytes reserved on a device; released when dropped.
#[derive(Debug)]
pub struct Allocation {
    tracker: &'static MemoryTracker,
    bytes: u64,
}

impl Allocation {
    /// Size of the reservation in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.tracker.release(self.bytes);
    }
}

/// The size class of a GPU allocation: at least 256 bytes, four classes per power of two
/// (at most 25% rounding). Pools on every GPU backend reuse buffers by class.
pub fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(256);
    let p = 63 - b.leading_zeros() as u64; // 2^p <= b < 2^(p+1)
    let step = 1u64 << (p - 2);
    b.div_ceil(step).saturating_mul(step)
}

/// Free device buffers kept for reuse, by size class. Shared by the GPU backends: freed
/// buffers return here, and a later request of the same class takes one back.
#[derive(Debug)]
pub struct BufferPool<B> {
    free: std::sync::Mutex<std::collections::HashMap<u64, Vec<B>>>,
}

impl<B> Default for BufferPool<B> {
    fn default() -> Self {
        BufferPool {
            free: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }
}

impl<B> BufferPool<B> {
    /// A free buffer of size class `class`, if one is pooled.
    pub fn take(&self, class: u64) -> Option<B> {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&class)
            .and_then(Vec::pop)
    }

    /// Returns a buffer of size class `class` to the pool.
    pub fn put(&self, class: u64, buffer: B) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(class)
            .or_default()
            .push(buffer);
    }

    /// Frees every pooled buffer.
    pub fn clear(&self) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
