//! The [`Device`] value itself: which backend and which adapter or ordinal. It names a device
//! and prints it; everything that needs the device's context (its memory, parsing a wgpu
//! adapter by name) is in `device/mod.rs`, so that errors can carry a `Device` without the
//! error type depending on the backends.

use std::fmt;

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// The CPU reference backend (rayon).
    Cpu,
    /// A wgpu adapter, by index in the adapter list.
    Wgpu(u32),
    /// A CUDA device, by ordinal.
    Cuda(u32),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
