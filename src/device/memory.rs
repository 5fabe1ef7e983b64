//! Memory accounting: the one point every allocation of a device passes through.
//!
//! Two figures per device. **Live** bytes are held by tensors now. **Reserved** bytes are
//! held from the device: live bytes plus, on the pooled GPU backends, the free buffers the
//! [`BufferPool`] keeps for reuse (on the CPU, which frees at once, reserved equals live).
//! A budget bounds both: an allocation never takes live bytes past it, and on a pooled
//! backend a new buffer is not created past it either: the pool is trimmed first, and only
//! if live bytes alone leave no room does the allocation fail with
//! [`Error::OutOfMemory`]. A device under a budget therefore never holds more than the
//! budget, as a smaller GPU would not.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::device::Device;
use crate::error::{Error, Result};

/// Live, reserved, peak and budget bytes of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes held by live allocations.
    pub live: u64,
    /// Highest `live` since creation or the last [`MemoryTracker::reset_peak`].
    pub peak: u64,
    /// Bytes held from the device: `live` plus the free buffers a GPU backend's pool keeps
    /// (equal to `live` on the CPU).
    pub reserved: u64,
    /// Highest `reserved` since creation or the last [`MemoryTracker::reset_peak`].
    pub peak_reserved: u64,
    /// The budget, if one is set.
    pub budget: Option<u64>,
}

/// Counts a device's live and reserved bytes and enforces its optional budget.
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
                reserved: 0,
                peak_reserved: 0,
                budget: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryStats> {
        // The counters stay consistent even if a holder panicked: every update is one store.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn oom(&self, s: &MemoryStats, requested: u64, budget: u64) -> Error {
        Error::OutOfMemory {
            device: self.device.to_string(),
            requested,
            live: s.live,
            budget,
        }
    }

    /// Reserves `bytes` of memory that is freed with its owner; fails with
    /// [`Error::OutOfMemory`] if that would pass the budget. The returned guard gives the
    /// bytes back (live and reserved) when dropped. Pooled GPU buffers are counted through
    /// [`BufferPool::acquire`] instead.
    pub fn alloc(&'static self, bytes: u64) -> Result<Allocation> {
        self.alloc_fresh(bytes, false).map_err(|(e, _)| e)
    }

    /// Reserves `bytes` of new memory (live and reserved); `pooled` when the buffer goes to
    /// a pool when freed, so that dropping the guard keeps the bytes reserved. On failure
    /// also says whether freeing a pool's buffers could make room (true when live bytes
    /// alone fit the budget).
    fn alloc_fresh(
        &'static self,
        bytes: u64,
        pooled: bool,
    ) -> std::result::Result<Allocation, (Error, bool)> {
        let mut s = self.lock();
        if let Some(budget) = s.budget {
            if s.live.saturating_add(bytes) > budget {
                return Err((self.oom(&s, bytes, budget), false));
            }
            if s.reserved.saturating_add(bytes) > budget {
                return Err((self.oom(&s, bytes, budget), true));
            }
        }
        s.live = s.live.saturating_add(bytes);
        s.reserved = s.reserved.saturating_add(bytes);
        s.peak = s.peak.max(s.live);
        s.peak_reserved = s.peak_reserved.max(s.reserved);
        Ok(Allocation {
            tracker: self,
            bytes,
            pooled,
        })
    }

    /// Counts `bytes` already reserved (a pooled buffer taken back) as live again.
    fn alloc_reserved(&'static self, bytes: u64) -> Result<Allocation> {
        let mut s = self.lock();
        if let Some(budget) = s.budget {
            if s.live.saturating_add(bytes) > budget {
                return Err(self.oom(&s, bytes, budget));
            }
        }
        s.live = s.live.saturating_add(bytes);
        s.peak = s.peak.max(s.live);
        Ok(Allocation {
            tracker: self,
            bytes,
            pooled: true,
        })
    }

    fn release(&self, bytes: u64, pooled: bool) {
        let mut s = self.lock();
        s.live = s.live.saturating_sub(bytes);
        if !pooled {
            s.reserved = s.reserved.saturating_sub(bytes);
        }
    }

    /// Gives back reserved bytes that no buffer holds any more (freed pool buffers).
    fn unreserve(&self, bytes: u64) {
        let mut s = self.lock();
        s.reserved = s.reserved.saturating_sub(bytes);
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

    /// Bytes reserved now: live bytes plus the pool's free buffers.
    pub fn reserved(&self) -> u64 {
        self.lock().reserved
    }

    /// Highest reserved bytes since the last reset.
    pub fn peak_reserved(&self) -> u64 {
        self.lock().peak_reserved
    }

    /// Restarts peak tracking (live and reserved) from the current figures.
    pub fn reset_peak(&self) {
        let mut s = self.lock();
        s.peak = s.live;
        s.peak_reserved = s.reserved;
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

/// Bytes reserved on a device; released when dropped (the live bytes only, for a pooled
/// buffer, whose memory the pool keeps).
#[derive(Debug)]
pub struct Allocation {
    tracker: &'static MemoryTracker,
    bytes: u64,
    pooled: bool,
}

impl Allocation {
    /// Size of the reservation in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.tracker.release(self.bytes, self.pooled);
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
/// buffers return here, and a later request of the same class takes one back. The bytes
/// of pooled buffers count as reserved, not live, in the device's tracker.
pub struct BufferPool<B> {
    tracker: &'static MemoryTracker,
    free: Mutex<HashMap<u64, Vec<B>>>,
    /// Run after every trim (see [`BufferPool::on_trim`]).
    on_trim: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl<B> std::fmt::Debug for BufferPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BufferPool({} bytes free)", self.cached_bytes())
    }
}

impl<B> BufferPool<B> {
    /// An empty pool counting into `tracker`.
    pub fn new(tracker: &'static MemoryTracker) -> Self {
        BufferPool {
            tracker,
            free: Mutex::new(HashMap::new()),
            on_trim: std::sync::OnceLock::new(),
        }
    }

    /// Sets what runs after every trim (once; a later call is ignored): a backend whose
    /// caches hold references to pooled buffers drops them there, so that the buffers'
    /// memory is really freed.
    pub fn on_trim(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_trim.set(f);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<B>>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A buffer of size class `class` and its live bytes: a pooled one if any, else one
    /// made by `create(class)`. A new buffer that would take reserved bytes past the budget
    /// first trims the pool. A `create` that fails with [`Error::OutOfMemory`] (the driver
    /// has no memory left) is retried once after trimming the pool; its second error is
    /// returned as it is.
    pub fn acquire(
        &self,
        class: u64,
        mut create: impl FnMut(u64) -> Result<B>,
    ) -> Result<(B, Allocation)> {
        {
            let mut free = self.lock();
            if let Some(b) = free.get_mut(&class).and_then(Vec::pop) {
                return match self.tracker.alloc_reserved(class) {
                    Ok(a) => Ok((b, a)),
                    Err(e) => {
                        free.entry(class).or_default().push(b);
                        Err(e)
                    }
                };
            }
        }
        let alloc = match self.tracker.alloc_fresh(class, true) {
            Ok(a) => a,
            Err((_, true)) => {
                self.trim();
                self.tracker.alloc_fresh(class, true).map_err(|(e, _)| e)?
            }
            Err((e, false)) => return Err(e),
        };
        let made = match create(class) {
            Err(Error::OutOfMemory { .. }) => {
                self.trim();
                create(class)
            }
            other => other,
        };
        match made {
            Ok(b) => Ok((b, alloc)),
            Err(e) => {
                drop(alloc);
                self.tracker.unreserve(class);
                Err(e)
            }
        }
    }

    /// Returns a buffer of size class `class` to the pool (its bytes stay reserved).
    pub fn put(&self, class: u64, buffer: B) {
        self.lock().entry(class).or_default().push(buffer);
    }

    /// Frees every pooled buffer; returns the bytes given back to the device.
    pub fn trim(&self) -> u64 {
        let freed = std::mem::take(&mut *self.lock());
        let bytes = freed.iter().map(|(c, v)| c * v.len() as u64).sum();
        self.tracker.unreserve(bytes);
        // The buffers are dropped (freed) here, outside the lock.
        drop(freed);
        if let Some(f) = self.on_trim.get() {
            f();
        }
        bytes
    }

    /// Bytes of the free buffers the pool holds.
    pub fn cached_bytes(&self) -> u64 {
        self.lock().iter().map(|(c, v)| c * v.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// A device buffer of a fake allocator: counts how many are alive.
    struct Fake(Arc<AtomicUsize>);

    impl Drop for Fake {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A fake device: a tracker, its pool, the live fake buffers, and an allocator that
    /// fails with the driver's out-of-memory for its next `fail` calls.
    struct Dev {
        mem: &'static MemoryTracker,
        pool: BufferPool<Fake>,
        alive: Arc<AtomicUsize>,
        fail: AtomicUsize,
        calls: AtomicUsize,
    }

    impl Dev {
        fn new() -> Dev {
            let mem: &'static MemoryTracker =
                Box::leak(Box::new(MemoryTracker::new(Device::Cuda(7))));
            Dev {
                mem,
                pool: BufferPool::new(mem),
                alive: Arc::new(AtomicUsize::new(0)),
                fail: AtomicUsize::new(0),
                calls: AtomicUsize::new(0),
            }
        }

        fn get(&self, class: u64) -> Result<(Fake, Allocation)> {
            self.pool.acquire(class, |class| {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let fail = self.fail.load(Ordering::SeqCst);
                if fail > 0 {
                    self.fail.store(fail - 1, Ordering::SeqCst);
                    return Err(Error::OutOfMemory {
                        device: Device::Cuda(7).to_string(),
                        requested: class,
                        live: self.mem.live(),
                        budget: 0,
                    });
                }
                self.alive.fetch_add(1, Ordering::SeqCst);
                Ok(Fake(self.alive.clone()))
            })
        }

        /// Drops a buffer the way the backends do: back to the pool, live bytes released.
        fn free(&self, class: u64, (b, a): (Fake, Allocation)) {
            self.pool.put(class, b);
            drop(a);
        }

        fn figures(&self) -> (u64, u64) {
            let s = self.mem.stats();
            (s.live, s.reserved)
        }
    }

    #[test]
    fn pooled_buffers_count_as_reserved_not_live() {
        let d = Dev::new();
        let a = d.get(1024).unwrap();
        let b = d.get(512).unwrap();
        assert_eq!(d.figures(), (1536, 1536));
        d.free(1024, a);
        assert_eq!(d.figures(), (512, 1536));
        assert_eq!(d.pool.cached_bytes(), 1024);
        // Taking it back from the pool reserves nothing new and creates nothing.
        let a = d.get(1024).unwrap();
        assert_eq!(d.figures(), (1536, 1536));
        assert_eq!(d.calls.load(Ordering::SeqCst), 2);
        d.free(1024, a);
        d.free(512, b);
        assert_eq!(d.figures(), (0, 1536));
        assert_eq!(d.mem.stats().peak_reserved, 1536);
        assert_eq!(d.pool.trim(), 1536);
        assert_eq!(d.figures(), (0, 0));
        assert_eq!(d.alive.load(Ordering::SeqCst), 0, "trim frees the buffers");
        d.mem.reset_peak();
        assert_eq!(d.mem.stats().peak_reserved, 0);
    }

    #[test]
    fn a_budget_bounds_reserved_bytes_by_trimming_the_pool_first() {
        let d = Dev::new();
        d.mem.set_budget(Some(4096));
        let a = d.get(3072).unwrap();
        d.free(3072, a);
        assert_eq!(d.figures(), (0, 3072));
        // 2048 more would reserve 5120 > 4096: the pool is trimmed, then it fits.
        let b = d.get(2048).unwrap();
        assert_eq!(d.figures(), (2048, 2048));
        assert_eq!(d.pool.cached_bytes(), 0);
        assert_eq!(d.alive.load(Ordering::SeqCst), 1);
        // Past the budget by live bytes alone: a typed error, the pool left alone.
        let c = d.get(1024).unwrap();
        d.free(1024, c);
        match d.get(3072) {
            Err(Error::OutOfMemory {
                device,
                requested,
                live,
                budget,
            }) => {
                assert_eq!(device, Device::Cuda(7).to_string());
                assert_eq!((requested, live, budget), (3072, 2048, 4096));
            }
            other => panic!("expected OutOfMemory, got {:?}", other.map(|_| ())),
        }
        assert_eq!(d.pool.cached_bytes(), 1024);
        assert_eq!(d.figures(), (2048, 3072));
        drop(b);
    }

    #[test]
    fn a_driver_out_of_memory_trims_the_pool_and_retries_once() {
        let d = Dev::new();
        let a = d.get(1024).unwrap();
        let b = d.get(2048).unwrap();
        d.free(1024, a);
        d.free(2048, b);
        assert_eq!(d.alive.load(Ordering::SeqCst), 2);
        d.fail.store(1, Ordering::SeqCst);
        let c = d.get(4096).unwrap();
        assert_eq!(d.calls.load(Ordering::SeqCst), 4, "one failure, one retry");
        assert_eq!(d.alive.load(Ordering::SeqCst), 1, "the pool was trimmed");
        assert_eq!(d.figures(), (4096, 4096));
        // Twice out of memory: the error comes back and nothing stays counted.
        d.fail.store(2, Ordering::SeqCst);
        assert!(matches!(d.get(8192), Err(Error::OutOfMemory { .. })));
        assert_eq!(d.calls.load(Ordering::SeqCst), 6);
        assert_eq!(d.figures(), (4096, 4096));
        drop(c);
    }

    #[test]
    fn other_allocation_errors_are_not_retried() {
        let d = Dev::new();
        let r = d.pool.acquire(256, |_| -> Result<Fake> {
            d.calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::Backend {
                backend: "cuda",
                msg: "invalid value".into(),
            })
        });
        assert!(matches!(r, Err(Error::Backend { .. })));
        assert_eq!(d.calls.load(Ordering::SeqCst), 1);
        assert_eq!(d.figures(), (0, 0));
    }

    #[test]
    fn without_a_pool_reserved_bytes_are_live_bytes() {
        let mem: &'static MemoryTracker = Box::leak(Box::new(MemoryTracker::new(Device::Cpu)));
        let a = mem.alloc(100).unwrap();
        let b = mem.alloc(50).unwrap();
        assert_eq!((mem.live(), mem.reserved()), (150, 150));
        drop(a);
        assert_eq!((mem.live(), mem.reserved()), (50, 50));
        assert_eq!((mem.peak(), mem.peak_reserved()), (150, 150));
        drop(b);
        assert_eq!((mem.live(), mem.reserved()), (0, 0));
    }
}
