//! The stand-in of a GPU backend whose cargo feature (`wgpu`, `cuda`) is off.
//!
//! It has the names the layers above the device use (`Context`, the buffer type,
//! `context`, the device listing), so that nothing outside `src/device/` changes with the
//! features, and no device: `context` returns [`Error::BackendUnavailable`] naming the
//! missing feature, the listings are empty, and `Context` is an empty enum, so that no
//! buffer of the backend can exist and every method is unreachable by its type.
//!
//! The ops' GPU bodies are not instantiated for a stand-in (`src/ops/gpu.rs`'s `on_gpu!`
//! has an arm per backend built in), so a stand-in implements only what the tensor and the
//! device layer call: [`GpuDevice`], [`PoolBackend`] and the gradient sums' [`BinaryKernels`].

/// A stand-in backend named `$name` (its cargo feature), with buffer type `$Buffer`.
#[allow(unused_macros)] // with every backend built, there is no stand-in
macro_rules! absent_backend {
    ($name:literal, $Buffer:ident) => {
        use std::sync::Arc;

        use crate::device::gpu::GpuDevice;
        use crate::device::kernels::binary::{BinaryKernels, BinaryShape};
        use crate::device::pooled::{PoolBackend, PooledBuffer};
        use crate::device::{Allocation, MemoryTracker};
        use crate::error::{Error, Result};

        /// The context of a device of this backend: none exists in this build.
        #[derive(Debug)]
        pub enum Context {}

        /// A buffer of this backend: none exists in this build.
        pub type $Buffer = PooledBuffer<Context>;

        /// The context of device `index`: always the error that this build lacks the
        /// backend.
        pub fn context(index: u32) -> Result<Arc<Context>> {
            Err(Error::BackendUnavailable {
                backend: format!("{}:{index}", $name),
                reason: format!(
                    "this build of espalier has no {} backend (built without the cargo \
                     feature `{}`)",
                    $name, $name
                ),
            })
        }

        impl Context {
            /// The device's memory tracker.
            pub fn memory(&self) -> &'static MemoryTracker {
                match *self {}
            }

            /// Waits for the device's queued work.
            pub fn sync(&self) -> Result<()> {
                match *self {}
            }

            /// Blocking host waits so far.
            pub fn host_waits(&self) -> u64 {
                match *self {}
            }

            /// Frees the pool's free buffers.
            pub fn trim_pool(&self) -> u64 {
                match *self {}
            }
        }

        impl PoolBackend for Context {
            type Raw = std::convert::Infallible;

            const BUFFER: &'static str = stringify!($Buffer);

            fn allocate(self: &Arc<Self>, _: u64, _: u64) -> Result<(Self::Raw, Allocation)> {
                match **self {}
            }

            fn free(&self, _: u64, raw: Self::Raw) {
                match raw {}
            }
        }

        impl GpuDevice for Context {
            type Buffer = $Buffer;

            const BACKEND: &'static str = $name;

            fn context_of(buf: &$Buffer) -> &Arc<Context> {
                buf.ctx()
            }

            fn bytes(buf: &$Buffer) -> u64 {
                buf.len
            }

            fn alloc(self: &Arc<Self>, _: u64) -> Result<$Buffer> {
                match **self {}
            }

            fn zeros(self: &Arc<Self>, _: u64) -> Result<$Buffer> {
                match **self {}
            }

            fn upload_u32(self: &Arc<Self>, _: &[u32]) -> Result<$Buffer> {
                match **self {}
            }

            fn fill(self: &Arc<Self>, _: usize, _: u32) -> Result<$Buffer> {
                match **self {}
            }

            fn read(buf: &$Buffer) -> Result<Vec<u8>> {
                match **buf.ctx() {}
            }

            fn host_u32(buf: &$Buffer) -> Option<Arc<Vec<u32>>> {
                match **buf.ctx() {}
            }

            fn split(
                &self,
                _: &str,
                _: usize,
                _: impl Fn(usize, usize) -> usize,
            ) -> Result<Vec<(usize, usize)>> {
                match *self {}
            }
        }

        impl BinaryKernels for Context {
            fn binary(
                self: &Arc<Self>,
                _: &'static str,
                _: BinaryShape,
                _: &$Buffer,
                _: &$Buffer,
                _: &$Buffer,
            ) -> Result<()> {
                match **self {}
            }

            fn add_assign(self: &Arc<Self>, _: &$Buffer, _: &$Buffer, _: usize) -> Result<()> {
                match **self {}
            }
        }

        impl PooledBuffer<Context> {
            /// A buffer holding `bytes`.
            pub fn from_bytes(ctx: &Arc<Context>, _: &[u8]) -> Result<$Buffer> {
                match **ctx {}
            }

            /// A buffer holding `values`.
            pub fn from_u32(ctx: &Arc<Context>, _: Arc<Vec<u32>>) -> Result<$Buffer> {
                match **ctx {}
            }

            /// A buffer of `n` copies of the 32-bit `word`.
            pub fn filled(ctx: &Arc<Context>, _: usize, _: u32) -> Result<$Buffer> {
                match **ctx {}
            }

            /// The buffer's bytes on the host.
            pub fn read(&self) -> Result<Vec<u8>> {
                match **self.ctx() {}
            }
        }
    };
}

/// The wgpu backend's stand-in (cargo feature `wgpu` off).
#[cfg(not(feature = "wgpu"))]
pub mod wgpu {
    absent_backend!("wgpu", WgpuBuffer);

    pub use crate::device::summary::AdapterSummary;

    /// The wgpu adapters: none in this build.
    pub fn adapters() -> Vec<AdapterSummary> {
        Vec::new()
    }

    /// The adapter `spec` names: always the error that this build lacks wgpu.
    pub fn resolve_adapter(_spec: &str) -> Result<u32> {
        context(0).map(|_| 0)
    }

    impl Context {
        /// Command submissions so far.
        pub fn submits(&self) -> u64 {
            match *self {}
        }

        /// The largest single buffer, in bytes.
        pub fn max_buffer_size(&self) -> u64 {
            match *self {}
        }

        /// Caps storage bindings at `bytes`.
        pub fn set_chunk_cap(&self, _: Option<u64>) {
            match *self {}
        }
    }
}

/// The CUDA backend's stand-in (cargo feature `cuda` off).
#[cfg(not(feature = "cuda"))]
pub mod cuda {
    absent_backend!("cuda", CudaBuffer);

    pub use crate::device::summary::CudaDeviceSummary;

    /// Why no CUDA device can be used: this build lacks the backend.
    pub fn probe() -> std::result::Result<usize, String> {
        Err(
            "this build of espalier has no cuda backend (built without the cargo feature \
             `cuda`)"
                .into(),
        )
    }

    /// The CUDA devices: none in this build (the reason, as `probe` gives it).
    pub fn devices() -> std::result::Result<Vec<CudaDeviceSummary>, String> {
        probe().map(|_| Vec::new())
    }

    impl Context {
        /// Free and total device memory.
        pub fn mem_info(&self) -> Result<(u64, u64)> {
            match *self {}
        }

        /// The device's UUID.
        pub fn uuid(&self) -> Result<[u8; 16]> {
            match *self {}
        }
    }
}
