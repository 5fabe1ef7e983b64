//! The state a wgpu [`Context`](super::Context) owns, as types of their own, so that the
//! files whose `impl Context` blocks use it (`launch.rs`, `recorder.rs`) and the context
//! that holds it do not import each other: compiled pipelines, the bind-group cache, and
//! the open recording.

/// A compute pipeline with its explicit bind-group layout.
pub(crate) struct Pipeline {
    pub(super) pipeline: wgpu::ComputePipeline,
    pub(super) layout: wgpu::BindGroupLayout,
    /// Whether the entry reads the parameter block (binding 0).
    pub(super) params: bool,
}

/// Bind groups kept per (layout, storage bindings); cleared when the pool frees buffers
/// (a cached bind group keeps its buffers alive) and when it grows past
/// `launch::BIND_GROUPS_CAP`.
pub(crate) type BindGroupCache = std::collections::HashMap<
    (wgpu::BindGroupLayout, Vec<(u32, wgpu::Buffer, u64, u64)>),
    wgpu::BindGroup,
>;

/// The ring's size in bytes: the parameter slots one recording may use.
pub(super) const RING_BYTES: u64 = 1 << 20;

/// The open recording of a context.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(super) encoder: Option<wgpu::CommandEncoder>,
    pub(super) pass: Option<wgpu::ComputePass<'static>>,
    /// Parameter words staged for the ring, one slot per dispatch.
    pub(super) params: Vec<u8>,
    /// Buffers freed during the recording: recorded commands may still use them.
    pub(super) freed: std::collections::HashSet<wgpu::Buffer>,
    /// Mapped staging chunks for uploads recorded into the encoder.
    pub(super) belt: Option<wgpu::util::StagingBelt>,
}

impl Recorder {
    pub(super) fn is_open(&self) -> bool {
        self.encoder.is_some()
    }

    pub(super) fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        // A copy or clear ends the open compute pass: they are recorded outside passes.
        self.pass = None;
        self.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("espalier"),
            })
        })
    }
}
