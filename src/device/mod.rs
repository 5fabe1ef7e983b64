//! Devices and their memory accounting.
//!
//! A [`Device`] is a cheap value naming where a tensor lives: the CPU (the reference
//! backend, always present), a wgpu adapter or a CUDA device by ordinal. Each device has one
//! [`MemoryTracker`] through which every allocation of that device passes, so live and peak
//! bytes are exact and an optional budget makes any device behave like a smaller GPU.
//!
//! Each device also counts its blocking host waits ([`Device::host_waits`]): every point
//! where the host thread stops until the device has done queued work.

mod absent;
pub mod add;
pub mod block;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
// The GPU seam and the pooled buffer serve the backends built in: parts of them are unused
// without one of the features.
#[cfg_attr(not(all(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub mod gpu;
pub mod heap;
mod id;
pub mod kernels;
mod memory;
#[cfg_attr(not(all(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub mod pooled;
pub mod summary;
#[cfg(feature = "wgpu")]
pub mod wgpu;
#[cfg(feature = "wgpu")]
pub mod wgpu_shader;

// A backend whose cargo feature is off is its stand-in: the same names, no device
// (`context` reports the backend missing from this build), so nothing above the device
// layer changes with the features.
#[cfg(not(feature = "cuda"))]
pub use absent::cuda;
#[cfg(not(feature = "wgpu"))]
pub use absent::wgpu;

use std::str::FromStr;

pub use id::Device;
pub use memory::{size_class, Allocation, BufferPool, MemoryStats, MemoryTracker};

use crate::error::{Error, Result};

impl Device {
    /// The memory tracker of this device.
    pub fn memory(self) -> Result<&'static MemoryTracker> {
        match self {
            Device::Cpu => Ok(cpu::memory()),
            Device::Wgpu(i) => Ok(self::wgpu::context(i)?.memory()),
            Device::Cuda(i) => Ok(self::cuda::context(i)?.memory()),
        }
    }

    /// Sets (or with `None` clears) the memory budget of this device, in bytes.
    pub fn set_memory_budget(self, budget: Option<u64>) -> Result<()> {
        self.memory()?.set_budget(budget);
        Ok(())
    }

    /// Live, reserved, peak and budget bytes of this device.
    pub fn memory_stats(self) -> Result<MemoryStats> {
        Ok(self.memory()?.stats())
    }

    /// Waits until every kernel and copy queued on this device has finished (a no-op on
    /// the CPU, whose ops return when done). GPU ops return once their work is queued, so
    /// timing a phase of GPU work means synchronising at its end.
    pub fn sync(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Wgpu(i) => self::wgpu::context(i)?.sync(),
            Device::Cuda(i) => self::cuda::context(i)?.sync(),
        }
    }

    /// Blocking host waits on this device since the process started: a monotonic count of
    /// the times the host thread stopped until queued device work was done. Counted:
    ///
    /// - CUDA: every stream synchronisation ([`Device::sync`]), every device-to-host read
    ///   (`to_vec_*`, `item`, an op reading a status or label word back), and every upload
    ///   that blocked on a page-locked staging chunk still in transfer;
    /// - wgpu: every `device.poll` that waits ([`Device::sync`]), which every readback
    ///   (submit, map and read) goes through, so one `to_vec_*` counts one;
    /// - CPU: none, ever (ops return when their work is done): always 0.
    ///
    /// Not counted: the driver's own internal staging of small pageable uploads, popping
    /// wgpu's error scopes (which waits for no GPU work), device creation, and trimming a
    /// CUDA pool on a driver without stream-ordered allocation (each free synchronises
    /// there). The difference of two readings is the waits of the work in between.
    pub fn host_waits(self) -> Result<u64> {
        match self {
            Device::Cpu => Ok(0),
            Device::Wgpu(i) => Ok(self::wgpu::context(i)?.host_waits()),
            Device::Cuda(i) => Ok(self::cuda::context(i)?.host_waits()),
        }
    }

    /// Command submissions to the device's queue so far: on wgpu, one per submitted
    /// recording (ops record into one command encoder, submitted when the host reads a
    /// result, at [`Device::sync`], when the recording's parameter ring is full, or before an
    /// upload into a buffer the recording may still read). The CPU and CUDA (whose kernels go straight to a stream) report 0.
    /// The difference of two readings is the submissions of the work in between.
    pub fn submits(self) -> Result<u64> {
        match self {
            Device::Wgpu(i) => Ok(self::wgpu::context(i)?.submits()),
            Device::Cpu | Device::Cuda(_) => Ok(0),
        }
    }

    /// The largest single buffer the device can allocate, where it has such a limit (wgpu's
    /// `max_buffer_size`); `None` on the CPU and CUDA.
    pub fn max_buffer_bytes(self) -> Result<Option<u64>> {
        match self {
            Device::Wgpu(i) => Ok(Some(self::wgpu::context(i)?.max_buffer_size())),
            Device::Cpu | Device::Cuda(_) => Ok(None),
        }
    }

    /// Whether the device splits an op's work at a storage-binding size (wgpu's
    /// `max_storage_buffer_binding_size`); false on the CPU and CUDA, which bind no sizes.
    pub fn has_binding_limit(self) -> bool {
        matches!(self, Device::Wgpu(_))
    }

    /// Caps every storage binding at `bytes` (`None`: the adapter's own limit) on a device
    /// with binding limits, so that ops split their work as they do past that limit on
    /// large tensors (for `espalier check` and the tests); nothing on other devices.
    pub fn set_binding_cap(self, bytes: Option<u64>) -> Result<()> {
        if let Device::Wgpu(i) = self {
            self::wgpu::context(i)?.set_chunk_cap(bytes);
        }
        Ok(())
    }

    /// Device memory free now, as the driver reports it, where it does (CUDA); `None` on
    /// the CPU and on wgpu, which do not say.
    pub fn free_memory(self) -> Result<Option<u64>> {
        match self {
            Device::Cuda(i) => Ok(Some(self::cuda::context(i)?.mem_info()?.0)),
            Device::Cpu | Device::Wgpu(_) => Ok(None),
        }
    }

    /// Frees the free buffers a GPU backend's pool keeps (nothing on the CPU); returns
    /// the bytes given back to the device.
    pub fn trim_pool(self) -> Result<u64> {
        match self {
            Device::Cpu => Ok(0),
            Device::Wgpu(i) => Ok(self::wgpu::context(i)?.trim_pool()),
            Device::Cuda(i) => Ok(self::cuda::context(i)?.trim_pool()),
        }
    }

    /// True on a GPU backend (wgpu, CUDA), false on the CPU.
    pub fn is_gpu(self) -> bool {
        !matches!(self, Device::Cpu)
    }

    /// The device of the `local`-th rank on a machine whose first rank trains on `self`:
    /// ranks sharing a machine spread over its CUDA devices (`cuda:N` is the first one's,
    /// wrapping around the devices found); other devices are shared as they are.
    pub fn for_local_rank(self, local: usize) -> Device {
        match self {
            Device::Cuda(first) => {
                let count = self::cuda::probe().unwrap_or(1).max(1);
                Device::Cuda(((first as usize + local) % count) as u32)
            }
            other => other,
        }
    }

    /// How the device allocates, as the memory estimator replays it.
    pub fn alloc_policy(self) -> AllocPolicy {
        AllocPolicy {
            gpu: self.is_gpu(),
            // CUDA's LSTM step kernels index the output rows through the dst ids; wgpu's
            // put and gather them through bucket-local buffers.
            lstm_rows_in_kernel: matches!(self, Device::Cuda(_)),
            // wgpu's cross-entropy mean reduces through a scratch buffer; CUDA's does not.
            mean_scratch: matches!(self, Device::Wgpu(_)),
        }
    }

    /// Short name of the backend: `cpu`, `wgpu` or `cuda`.
    pub fn backend(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Wgpu(_) => "wgpu",
            Device::Cuda(_) => "cuda",
        }
    }
}

/// What the memory estimator needs to know of how a device allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocPolicy {
    /// A GPU: allocations round up to the pool's size classes ([`size_class`]), ops upload
    /// the index arrays they read, and readouts stay on the device until read. Otherwise
    /// exact bytes and no uploads.
    pub gpu: bool,
    /// The LSTM aggregation's step kernels read and write the output rows themselves: one
    /// upload of every bucket's dst ids, no per-bucket gather of gradient rows.
    pub lstm_rows_in_kernel: bool,
    /// The cross-entropy's mean takes a 512-word scratch buffer while it runs.
    pub mean_scratch: bool,
}

impl FromStr for Device {
    type Err = Error;

    /// Parses `cpu`, `wgpu`, `wgpu:N`, `wgpu:NAME` (part of an adapter's name), `cuda` or
    /// `cuda:N`. `wgpu` alone takes `ESPALIER_WGPU_ADAPTER` (index or name) if set, else 0.
    fn from_str(s: &str) -> Result<Device> {
        if s == "wgpu" {
            if let Ok(spec) = std::env::var("ESPALIER_WGPU_ADAPTER") {
                return Ok(Device::Wgpu(self::wgpu::resolve_adapter(&spec)?));
            }
        }
        if let Some(spec) = s.strip_prefix("wgpu:") {
            if spec.parse::<u32>().is_err() && !spec.is_empty() {
                return Ok(Device::Wgpu(self::wgpu::resolve_adapter(spec)?));
            }
        }
        let (name, index) = match s.split_once(':') {
            Some((n, i)) => {
                let i = i.parse::<u32>().map_err(|_| {
                    Error::invalid(format!("device `{s}`: `{i}` is not a device index"))
                })?;
                (n, Some(i))
            }
            None => (s, None),
        };
        match (name, index) {
            ("cpu", None) => Ok(Device::Cpu),
            ("wgpu", i) => Ok(Device::Wgpu(i.unwrap_or(0))),
            ("cuda", i) => Ok(Device::Cuda(i.unwrap_or(0))),
            _ => Err(Error::invalid(format!(
                "unknown device `{s}`: expected cpu, wgpu[:N] or cuda[:N]"
            ))),
        }
    }
}
