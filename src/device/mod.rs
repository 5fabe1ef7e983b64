//! Devices and their memory accounting.
//!
//! A [`Device`] is a cheap value naming where a tensor lives: the CPU (the reference
//! backend, always present), a wgpu adapter or a CUDA device by ordinal. Each device has one
//! [`MemoryTracker`] through which every allocation of that device passes, so live and peak
//! bytes are exact and an optional budget makes any device behave like a smaller GPU.

pub mod cpu;
mod memory;

use std::fmt;
use std::str::FromStr;

pub use memory::{Allocation, MemoryStats, MemoryTracker};

use crate::error::{Error, Result};

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

impl Device {
    /// The memory tracker of this device.
    pub fn memory(self) -> Result<&'static MemoryTracker> {
        match self {
            Device::Cpu => Ok(cpu::memory()),
            Device::Wgpu(_) | Device::Cuda(_) => Err(Error::BackendUnavailable {
                backend: self.to_string(),
                reason: "this build of espalier has no such backend yet".into(),
            }),
        }
    }

    /// Sets (or with `None` clears) the memory budget of this device, in bytes.
    pub fn set_memory_budget(self, budget: Option<u64>) -> Result<()> {
        self.memory()?.set_budget(budget);
        Ok(())
    }

    /// Live, peak and budget bytes of this device.
    pub fn memory_stats(self) -> Result<MemoryStats> {
        Ok(self.memory()?.stats())
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

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses `cpu`, `wgpu`, `wgpu:N`, `cuda` or `cuda:N`.
    fn from_str(s: &str) -> Result<Device> {
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
