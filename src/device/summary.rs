//! What `espalier devices` shows of each GPU device: plain data, defined outside the
//! backends' folders so that a build without a backend (its cargo feature off) still has
//! the types, with no device to fill them.

/// What `espalier devices` shows of an adapter.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterSummary {
    /// The `N` of `wgpu:N`.
    pub index: u32,
    /// The adapter's name.
    pub name: String,
    /// The graphics API (Vulkan, Metal, Dx12, Gl).
    pub backend: String,
    /// Discrete, integrated, virtual or CPU.
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Largest storage buffer binding, in bytes.
    pub max_storage_buffer_binding_size: u64,
    /// Largest buffer, in bytes.
    pub max_buffer_size: u64,
    /// Most workgroups per dispatch dimension.
    pub max_compute_workgroups_per_dimension: u32,
    /// Workgroup shared memory, in bytes.
    pub max_compute_workgroup_storage_size: u32,
    /// Whether the adapter supports timestamp queries.
    pub timestamp_queries: bool,
    /// Whether shaders may use `f16`.
    pub shader_f16: bool,
    /// Whether shaders may use subgroup operations (the prelude's reductions do).
    pub subgroups: bool,
}

/// What `espalier devices` shows of a CUDA device.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CudaDeviceSummary {
    /// The `N` of `cuda:N`.
    pub index: u32,
    /// The device's name.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Total device memory in bytes.
    pub total_bytes: u64,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Theoretical memory bandwidth in bytes/s (memory clock × bus width × 2).
    pub peak_bandwidth: f64,
    /// The driver's CUDA version, e.g. (13, 0).
    pub driver_cuda: (i32, i32),
    /// NVRTC's version, e.g. (13, 0).
    pub nvrtc: (i32, i32),
    /// True for espalier's emulated CUDA device (`cuda-emu/`), which runs on the CPU.
    pub emulated: bool,
}
