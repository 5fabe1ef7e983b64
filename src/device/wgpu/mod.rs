//! The wgpu backend: WGSL compute shaders on any adapter wgpu reaches (Vulkan, Metal, DX12;
//! Mesa's lavapipe in CI).
//!
//! One [`Context`] per adapter per process holds the device and queue, a pipeline cache
//! keyed by shader and entry point, a caching buffer pool by size class, and the adapter's
//! memory tracker. wgpu's validation errors are captured with error scopes and an
//! uncaptured-error handler and returned as [`crate::Error::Backend`]; wgpu's default handler,
//! which panics, is never left installed.

mod block;
mod buffer;
mod context;
mod gpu;
mod kernels;
mod launch;
mod layout;
pub mod params;
mod recorder;
mod split;
mod state;

pub use crate::device::summary::AdapterSummary;
pub use block::BlockBuffers;
pub use buffer::WgpuBuffer;
pub use context::{adapters, context, resolve_adapter, software_warning, Context};
pub use launch::{Kernel, WG};
pub use params::*;
pub use split::{Follow, Window};
