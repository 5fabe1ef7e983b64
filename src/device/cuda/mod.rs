//! The CUDA backend: CUDA C kernels from `kernels/` compiled at run time by NVRTC for the
//! device's compute capability, cuBLAS for GEMM, one stream per device.
//!
//! cudarc loads `libcuda`, `libnvrtc` and `libcublas` dynamically, so the crate builds and
//! runs without CUDA. cudarc panics when a library is missing at the first call, so
//! [`probe`] checks each library and the device count first and reports the backend
//! unavailable, with the reason, instead. The `cuda-13000` bindings look for the CUDA 13
//! libraries and fall back to CUDA 12's names.
//!
//! All work of a device runs on its one stream, in the order ops are called; buffers come
//! from a stream-ordered caching pool ([`CudaBuffer`]) counted by the device's memory
//! tracker, like every other backend.

pub mod args;
mod block;
mod buffer;
mod context;
mod gpu;
mod kernels;
mod launch;
pub mod nvrtc;
mod staging;

pub use crate::device::summary::CudaDeviceSummary;
pub use block::BlockBuffers;
pub use buffer::CudaBuffer;
pub(crate) use context::is_blas_alloc_failure;
pub use context::{context, devices, driver_version, probe, Context};
pub use launch::{Arg, Kernel, BLOCK};

use crate::error::Error;

/// Wraps a CUDA driver error.
pub(crate) fn driver_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Backend {
        backend: "cuda",
        msg: format!("{what}: {e}"),
    }
}
