//! The tensor side of the GPU seam (`src/device/gpu.rs`): the one place where ops meet the
//! GPU backends by name.
//!
//! [`on_gpu!`] is the only match on the GPU variants of a tensor's storage or device that
//! an op goes through: each arm binds a type name to that backend's context and
//! instantiates the op's GPU orchestration, written once and generic over the backend, for
//! it. [`GpuTensors`] maps a tensor's storage onto a backend's buffers and back. An op
//! file (`src/ops/<op>.rs`) therefore never names a backend; its kernel trait
//! (`src/device/kernels/<op>.rs`) is implemented by each backend in its own folder.
//!
//! A new GPU backend adds one arm to each form of [`on_gpu!`] and one [`GpuTensors`]
//! impl here; nothing else in `src/ops/` changes. Each arm is built with its backend's cargo
//! feature (`wgpu`, `cuda`): without it the op's GPU body is not instantiated for the
//! backend, whose stand-in (`src/device/absent.rs`) implements no kernel trait.

use crate::device::gpu::GpuDevice;
use crate::device::{cuda, wgpu};
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};

/// Runs an op's GPU body on the backend its operands live on, with `$D` naming that
/// backend's context type (a [`GpuTensors`] implementing the op's kernel traits):
///
/// - `on_gpu!(device, |D| body)`: on the GPU `device` (a [`crate::device::Device`]);
/// - `on_gpu!(storage, |D, buf| body)`: `buf` the backend's buffer of `storage`;
/// - `on_gpu!((s1, s2, ..), |D, (b1, b2, ..)| body, else other)`: every storage on the
///   same GPU backend, `other` (an expression, often `return Err(..)`) when they are not.
///
/// The first two forms are for GPU operands (the op's CPU arm comes first); a CPU device
/// or storage reaching them returns [`not_gpu`]'s error from the enclosing function.
macro_rules! on_gpu {
    (($($s:expr),+ $(,)?), |$D:ident, ($($b:ident),+ $(,)?)| $body:expr, else $other:expr) => {
        match ($($s,)+) {
            #[cfg(feature = "wgpu")]
            ($($crate::tensor::Storage::Wgpu($b),)+) => {
                type $D = $crate::device::wgpu::Context;
                $body
            }
            #[cfg(feature = "cuda")]
            ($($crate::tensor::Storage::Cuda($b),)+) => {
                type $D = $crate::device::cuda::Context;
                $body
            }
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
    ($dev:expr, |$D:ident| $body:expr) => {
        match $dev {
            #[cfg(feature = "wgpu")]
            $crate::device::Device::Wgpu(_) => {
                type $D = $crate::device::wgpu::Context;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::device::Device::Cuda(_) => {
                type $D = $crate::device::cuda::Context;
                $body
            }
            $crate::device::Device::Cpu => return Err($crate::ops::gpu::not_gpu()),
            // A backend this build lacks: its `context` says so.
            #[allow(unreachable_patterns)]
            other => return Err($crate::ops::gpu::not_built(other)),
        }
    };
    ($s:expr, |$D:ident, $b:ident| $body:expr) => {
        match $s {
            #[cfg(feature = "wgpu")]
            $crate::tensor::Storage::Wgpu($b) => {
                type $D = $crate::device::wgpu::Context;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::tensor::Storage::Cuda($b) => {
                type $D = $crate::device::cuda::Context;
                $body
            }
            // The CPU, or a backend this build lacks, whose buffers cannot exist.
            #[allow(unreachable_patterns)]
            _ => return Err($crate::ops::gpu::not_gpu()),
        }
    };
}

/// The error of an op asked to run on a device whose backend this build lacks (its cargo
/// feature off): the backend's stand-in says which feature.
pub(crate) fn not_built(device: crate::device::Device) -> Error {
    match device.memory() {
        Err(e) => e,
        Ok(_) => Error::invalid(format!("internal: {device} reached no GPU arm")),
    }
}

/// The error of a CPU operand reaching an op's GPU path (the op's CPU arm takes CPU
/// operands first, so this means an op dispatched wrongly).
pub(crate) fn not_gpu() -> Error {
    Error::invalid("internal: a CPU operand reached an op's GPU path")
}

/// A [`GpuDevice`] whose buffers are tensor storage.
pub(crate) trait GpuTensors: GpuDevice {
    /// The buffer of `storage`, or an error naming `op` when it lives on another backend.
    fn buffer<'a>(storage: &'a Storage, op: &'static str) -> Result<&'a Self::Buffer>;

    /// `buf` as a tensor's storage.
    fn storage(buf: Self::Buffer) -> Storage;

    /// `buf` as a tensor shaped `shape`, placed and typed like `like`.
    fn output(buf: Self::Buffer, shape: Vec<usize>, like: &Tensor) -> Tensor {
        Tensor::from_storage(Self::storage(buf), shape, like.dtype(), like.device())
    }
}

impl GpuTensors for wgpu::Context {
    fn buffer<'a>(storage: &'a Storage, op: &'static str) -> Result<&'a wgpu::WgpuBuffer> {
        storage.wgpu(op)
    }

    fn storage(buf: wgpu::WgpuBuffer) -> Storage {
        Storage::Wgpu(buf)
    }
}

impl GpuTensors for cuda::Context {
    fn buffer<'a>(storage: &'a Storage, op: &'static str) -> Result<&'a cuda::CudaBuffer> {
        storage.cuda(op)
    }

    fn storage(buf: cuda::CudaBuffer) -> Storage {
        Storage::Cuda(buf)
    }
}
