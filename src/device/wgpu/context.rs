//! Adapter discovery and the per-adapter context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::device::summary::AdapterSummary;
use crate::device::{Device, MemoryTracker};
use crate::error::{Error, Result};

fn instance() -> &'static wgpu::Instance {
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        // Compute runs on the primary APIs (Vulkan, Metal, DX12); GL's compute support is
        // partial. WGPU_BACKEND overrides.
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        wgpu::Instance::new(desc)
    })
}

fn raw_adapters() -> &'static Vec<wgpu::Adapter> {
    static ADAPTERS: OnceLock<Vec<wgpu::Adapter>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let mut v = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::all()));
        // Compute needs a real compute-capable backend; GL adapters lack storage buffers in
        // compute on many drivers, so Vulkan/Metal/DX12 come first, in a stable order.
        v.sort_by_key(|a| {
            let i = a.get_info();
            (
                i.backend == wgpu::Backend::Gl,
                i.device_type == wgpu::DeviceType::Cpu,
                i.name.clone(),
            )
        });
        v
    })
}

/// Every adapter wgpu sees, in the order `wgpu:N` indexes them.
pub fn adapters() -> Vec<AdapterSummary> {
    raw_adapters()
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let info = a.get_info();
            let l = a.limits();
            let f = a.features();
            AdapterSummary {
                index: i as u32,
                name: info.name,
                backend: format!("{:?}", info.backend),
                device_type: format!("{:?}", info.device_type),
                driver: format!("{} {}", info.driver, info.driver_info)
                    .trim()
                    .to_string(),
                max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
                max_buffer_size: l.max_buffer_size,
                max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
                max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
                timestamp_queries: f.contains(wgpu::Features::TIMESTAMP_QUERY),
                shader_f16: f.contains(wgpu::Features::SHADER_F16),
                subgroups: f.contains(wgpu::Features::SUBGROUP),
            }
        })
        .collect()
}

/// Resolves an adapter by index (`"1"`) or by a case-insensitive part of its name
/// (`"lavapipe"`, `"nvidia"`).
pub fn resolve_adapter(spec: &str) -> Result<u32> {
    let list = adapters();
    if let Ok(i) = spec.parse::<u32>() {
        return Ok(i);
    }
    let needle = spec.to_lowercase();
    list.iter()
        .find(|a| a.name.to_lowercase().contains(&needle))
        .map(|a| a.index)
        .ok_or_else(|| Error::BackendUnavailable {
            backend: format!("wgpu:{spec}"),
            reason: format!(
                "no adapter name contains `{spec}`; adapters: [{}]",
                list.iter()
                    .map(|a| a.name.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// One adapter's device, queue, caches and memory accounting.
pub struct Context {
    /// The `N` of `wgpu:N`.
    pub index: u32,
    /// The logical device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// The limits the device was created with.
    pub limits: wgpu::Limits,
    /// The features the device was created with.
    pub features: wgpu::Features,
    /// The adapter's info.
    pub info: wgpu::AdapterInfo,
    pub(crate) memory: &'static MemoryTracker,
    pub(crate) pool: crate::device::BufferPool<wgpu::Buffer>,
    pub(crate) pipelines: Mutex<HashMap<PipelineKey, Arc<super::state::Pipeline>>>,
    /// Whether pipelines use the prelude's subgroup reductions (see `set_subgroups`).
    subgroups: std::sync::atomic::AtomicBool,
    /// The in-degree from which segment_softmax gives a row a workgroup (see `long_row`).
    long_row: std::sync::atomic::AtomicU32,
    /// Errors wgpu reported outside any error scope, taken by the next check.
    pub(crate) uncaptured: Arc<Mutex<Vec<String>>>,
    /// Test cap on the bytes of one chunked binding (0: none); see `set_chunk_cap`.
    pub(crate) chunk_cap: std::sync::atomic::AtomicU64,
    /// Blocking host waits so far (see [`crate::Device::host_waits`]).
    pub(crate) host_waits: std::sync::atomic::AtomicU64,
    /// Queue submissions so far (see [`crate::Device::submits`]).
    pub(crate) submits: std::sync::atomic::AtomicU64,
    /// The open recording (see `recorder.rs`).
    pub(crate) recorder: Mutex<super::state::Recorder>,
    /// The parameter ring: one uniform slot per recorded dispatch.
    pub(crate) ring: wgpu::Buffer,
    /// Bind groups by (layout, bindings); shared with the pool, which clears it on a trim.
    pub(crate) bind_groups: Arc<Mutex<super::state::BindGroupCache>>,
    /// Mappable readback buffers by size class, reused across reads.
    pub(crate) staging: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
}

/// A pipeline: shader stem, entry point, and the prelude variant it was built with.
pub(crate) type PipelineKey = (
    &'static str,
    &'static str,
    crate::device::wgpu_shader::Reductions,
);

/// A mappable readback buffer of size class `class`.
pub(crate) struct Staging {
    pub(crate) buffer: wgpu::Buffer,
    class: u64,
}

/// Readback buffers larger than this are freed after use instead of kept.
const STAGING_KEEP: u64 = 16 << 20;

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wgpu:{} ({}, {:?})",
            self.index, self.info.name, self.info.backend
        )
    }
}

/// The context of adapter `index`, created on first use.
pub fn context(index: u32) -> Result<Arc<Context>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<u32, Arc<Context>>>> = OnceLock::new();
    let map = CONTEXTS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = map.get(&index) {
        return Ok(c.clone());
    }
    let ctx = Arc::new(create(index)?);
    map.insert(index, ctx.clone());
    Ok(ctx)
}

fn unavailable(index: u32, reason: impl Into<String>) -> Error {
    Error::BackendUnavailable {
        backend: format!("wgpu:{index}"),
        reason: reason.into(),
    }
}

/// The warning for a software adapter (lavapipe, llvmpipe, SwiftShader, WARP: wgpu
/// reports them as [`wgpu::DeviceType::Cpu`]), printed once per process when the first
/// context on one is created; `None` for a hardware adapter.
pub fn software_warning(index: u32, info: &wgpu::AdapterInfo) -> Option<String> {
    (info.device_type == wgpu::DeviceType::Cpu).then(|| {
        format!(
            "warning: wgpu:{index} ({}) is a software adapter: it emulates a GPU on the CPU and \
             is far slower than a GPU (and than --device cpu); `espalier devices` lists the \
             adapters",
            info.name
        )
    })
}

/// The in-degree from which rows are long on a hardware adapter (CUDA gives every row a
/// warp).
pub(crate) const LONG_ROW: u32 = 64;

/// [`Context::long_row`] at creation: `ESPALIER_WGPU_LONG_ROWS` (an in-degree, or `off`)
/// when set; otherwise [`LONG_ROW`] on a hardware adapter, and never on a software one,
/// where the workgroup path was slower at every threshold tried (docs/BENCHMARKS.md).
pub(crate) fn long_row_default(info: &wgpu::AdapterInfo) -> Result<u32> {
    match std::env::var("ESPALIER_WGPU_LONG_ROWS") {
        Ok(v) if v == "off" => Ok(u32::MAX),
        Ok(v) => v.parse().map_err(|_| {
            Error::invalid(format!(
                "ESPALIER_WGPU_LONG_ROWS={v}: expected an in-degree (a u32) or `off`"
            ))
        }),
        Err(_) if info.device_type == wgpu::DeviceType::Cpu => Ok(u32::MAX),
        Err(_) => Ok(LONG_ROW),
    }
}

fn create(index: u32) -> Result<Context> {
    let list = raw_adapters();
    if list.is_empty() {
        return Err(unavailable(
            index,
            "no adapter found (no Vulkan, Metal or DX12 driver; on Linux install mesa-vulkan-drivers for lavapipe)",
        ));
    }
    let adapter = list.get(index as usize).ok_or_else(|| {
        unavailable(
            index,
            format!("only {} adapter(s); see `espalier devices`", list.len()),
        )
    })?;
    let info = adapter.get_info();
    if let Some(w) = software_warning(index, &info) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| eprintln!("{w}"));
    }
    let limits = adapter.limits();
    let wanted =
        wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    let features = adapter.features() & wanted;
    // ESPALIER_WGPU_SUBGROUPS=0 keeps the shared-memory reductions on an adapter with
    // subgroups (to compare them, or to step around a driver's subgroup bug).
    let subgroups = features.contains(wgpu::Features::SUBGROUP)
        && std::env::var("ESPALIER_WGPU_SUBGROUPS").map_or(true, |v| v != "0");
    let long_row = long_row_default(&info)?;
    let desc = wgpu::DeviceDescriptor {
        label: Some("espalier"),
        required_features: features,
        required_limits: limits.clone(),
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc))
        .map_err(|e| unavailable(index, format!("{}: request_device failed: {e}", info.name)))?;
    let uncaptured = Arc::new(Mutex::new(Vec::new()));
    let sink = uncaptured.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        sink.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e.to_string());
    }));
    let memory: &'static MemoryTracker =
        Box::leak(Box::new(MemoryTracker::new(Device::Wgpu(index))));
    let ring = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("params ring"),
        size: super::state::RING_BYTES,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let bind_groups = Arc::new(Mutex::new(super::state::BindGroupCache::new()));
    let pool = crate::device::BufferPool::new(memory);
    let cache = bind_groups.clone();
    // A cached bind group keeps its buffers alive: freeing the pool's buffers must drop them.
    pool.on_trim(Box::new(move || {
        cache.lock().unwrap_or_else(|e| e.into_inner()).clear()
    }));
    Ok(Context {
        index,
        device,
        queue,
        limits,
        features,
        info,
        memory,
        pool,
        pipelines: Mutex::new(HashMap::new()),
        subgroups: subgroups.into(),
        long_row: long_row.into(),
        uncaptured,
        chunk_cap: std::sync::atomic::AtomicU64::new(0),
        host_waits: 0.into(),
        submits: 0.into(),
        recorder: Mutex::new(Default::default()),
        ring,
        bind_groups,
        staging: Mutex::new(HashMap::new()),
    })
}

impl Context {
    /// The memory tracker of this adapter.
    pub fn memory(&self) -> &'static MemoryTracker {
        self.memory
    }

    /// The largest single buffer the device allocates, in bytes (`max_buffer_size`).
    pub fn max_buffer_size(&self) -> u64 {
        self.limits.max_buffer_size
    }

    /// Runs `f` inside validation and out-of-memory error scopes; any error wgpu reports
    /// (in the scopes or uncaptured) becomes [`Error::Backend`] naming `what`.
    pub fn checked<R>(&self, what: &str, f: impl FnOnce() -> R) -> Result<R> {
        self.checked_alloc(what, None, f)
    }

    /// [`Context::checked`] for `f` creating a buffer of `bytes`: wgpu's out-of-memory
    /// error becomes [`Error::OutOfMemory`] (with the budget, or the adapter's largest
    /// buffer size if none is set, as its budget), so that the pool trims and retries.
    pub(crate) fn checked_alloc<R>(
        &self,
        what: &str,
        bytes: Option<u64>,
        f: impl FnOnce() -> R,
    ) -> Result<R> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        // Popping a scope waits for no GPU work: it is not a host wait.
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        if let (None, Some(_), Some(requested)) = (&v, &o, bytes) {
            let s = self.memory.stats();
            return Err(Error::OutOfMemory {
                device: Device::Wgpu(self.index).to_string(),
                requested,
                live: s.live,
                budget: s.budget.unwrap_or(self.limits.max_buffer_size),
            });
        }
        if let Some(e) = v.or(o) {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!("{what}: {e}"),
            });
        }
        let mut late = self.uncaptured.lock().unwrap_or_else(|p| p.into_inner());
        if !late.is_empty() {
            let msg = late.drain(..).collect::<Vec<_>>().join("; ");
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!("{what}: {msg}"),
            });
        }
        Ok(r)
    }

    /// Submits the open recording and waits for all submitted work (a host wait).
    pub fn sync(&self) -> Result<()> {
        self.submit()?;
        self.wait(None)
    }

    /// Frees every pooled buffer that no tensor holds (and the kept readback buffers);
    /// returns the bytes of device buffers freed.
    pub fn trim_pool(&self) -> u64 {
        self.staging
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.pool.trim()
    }

    /// A mappable readback buffer of at least `size` bytes, kept from an earlier read or
    /// created.
    pub(crate) fn staging(&self, size: u64) -> Result<Staging> {
        let class = crate::device::size_class(size);
        let kept = self
            .staging
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&class)
            .and_then(Vec::pop);
        let buffer = match kept {
            Some(b) => b,
            None => self.checked_alloc("readback buffer", Some(class), || {
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("readback"),
                    size: class,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })?,
        };
        Ok(Staging { buffer, class })
    }

    /// Returns a readback buffer (unmapped) for later reads.
    pub(crate) fn put_staging(&self, s: Staging) {
        if s.class <= STAGING_KEEP {
            self.staging
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(s.class)
                .or_default()
                .push(s.buffer);
        }
    }

    /// Whether pipelines built from now on use the prelude's subgroup reductions: the
    /// adapter has `Features::SUBGROUP`, `ESPALIER_WGPU_SUBGROUPS` is not `0`, and
    /// [`Context::set_subgroups`] has not turned them off.
    pub fn subgroups(&self) -> bool {
        self.subgroups.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Chooses the reductions of the pipelines used from now on (each variant's pipelines
    /// are cached apart): `false` forces the shared-memory fallback, as on an adapter
    /// without subgroups; `true` is an error on an adapter without `Features::SUBGROUP`.
    /// Results agree within float tolerance: tests use it to run both variants.
    pub fn set_subgroups(&self, on: bool) -> Result<()> {
        if on && !self.features.contains(wgpu::Features::SUBGROUP) {
            return Err(Error::BackendUnavailable {
                backend: format!("wgpu:{}", self.index),
                reason: format!("{} has no subgroup operations", self.info.name),
            });
        }
        self.subgroups
            .store(on, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The in-degree from which segment_softmax gives a dst row a 64-thread workgroup per
    /// head (reduced by the prelude's `wg_max64` / `wg_sum64`) instead of one invocation
    /// looping over its edges; `u32::MAX`: never. By default 64 on a hardware adapter
    /// and never on a software one (lavapipe), or `ESPALIER_WGPU_LONG_ROWS` (an in-degree,
    /// or `off`) when set.
    pub fn long_row(&self) -> u32 {
        self.long_row.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets [`Context::long_row`] for the launches from now on (both paths agree within
    /// float tolerance: tests use it to run the workgroup path on any adapter).
    pub fn set_long_row(&self, degree: u32) {
        self.long_row
            .store(degree, std::sync::atomic::Ordering::Relaxed);
    }

    /// Pipelines built so far with the prelude's `variant` of the reductions.
    pub fn pipelines_built(&self, variant: crate::device::wgpu_shader::Reductions) -> usize {
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|k| k.2 == variant)
            .count()
    }

    /// Blocking host waits on this adapter so far (see [`crate::Device::host_waits`]).
    pub fn host_waits(&self) -> u64 {
        self.host_waits.load(std::sync::atomic::Ordering::Relaxed)
    }
}
