//! Compiling and dispatching WGSL kernels.
//!
//! Every shader follows one binding convention: `@group(0) @binding(0)` is a uniform
//! block of 32-bit parameter words (f32 parameters travel as their bits); the storage
//! buffers are passed with their binding numbers, and exactly those the entry point uses
//! (the layout lists only the bindings an entry reads or writes). Entry points of one shader that need different access to a buffer use
//! different binding numbers. One-dimensional launches cover `n` invocations with workgroups of [`WG`]
//! threads on a 2-D grid, so more than 65,535 workgroups is never a problem: a shader
//! computes its linear index as `gid.x + gid.y * nwg.x * WG` and checks it against `n`.
//!
//! A storage binding may not exceed the adapter's `max_storage_buffer_binding_size` (128 MiB
//! on many adapters): every dispatch checks this and fails with a message naming the
//! binding. Elementwise kernels go through [`Context::launch_chunked`], which binds
//! aligned sub-ranges and launches once per chunk, so they have no such limit; ops that
//! split large operands their own way bind windows of their buffers (ranges of rows, CSR
//! edge ranges, tiles of a gathered operand) with the helpers of `split.rs`
//! ([`Context::split`], [`Context::window`], [`Context::launch_windows`]), sized by
//! [`Context::chunk_bytes`].
//!
//! The parameter block is a slot of the context's uniform ring, bound with a dynamic offset
//! (`layout.rs`, `recorder.rs`); unset trailing words read as 0, so an entry may leave a
//! shader's trailing words unset. Pipelines use explicit layouts read from the shader by
//! naga, bind groups are cached per (layout, bindings), and dispatches are recorded, not
//! submitted one by one.

use std::sync::Arc;

use crate::device::wgpu::params::Params;
use crate::device::wgpu::state::Pipeline;
use crate::device::wgpu::{Context, WgpuBuffer};
use crate::device::wgpu_shader::{self, Reductions};
use crate::error::{Error, Result};

/// Threads per workgroup of 1-D kernels.
pub const WG: u32 = 256;

/// A WGSL entry point: its file stem, its source and its function name.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// File stem: `shaders/<stem>.wgsl`.
    pub stem: &'static str,
    /// WGSL source.
    pub source: &'static str,
    /// Entry point name.
    pub entry: &'static str,
}

/// Cached bind groups past which the cache starts over.
const BIND_GROUPS_CAP: usize = 8192;

impl Context {
    fn pipeline(&self, k: &Kernel) -> Result<Arc<Pipeline>> {
        let variant = if self.subgroups() && wgpu_shader::calls_reductions(k.source) {
            Reductions::Subgroup
        } else {
            Reductions::Shared
        };
        let key = (k.stem, k.entry, variant);
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        // naga validates the module first (in `entries`): its messages name the line, and
        // an invalid module never reaches the driver.
        let entries = super::layout::entries(k.stem, k.source, k.entry, variant)?;
        let params = entries.first().is_some_and(|e| e.binding == 0);
        let p = self.checked(&format!("pipeline {}::{}", k.stem, k.entry), || {
            let layout = self
                .device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(k.entry),
                    entries: &entries,
                });
            let pipeline_layout =
                self.device
                    .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: Some(k.entry),
                        bind_group_layouts: &[Some(&layout)],
                        immediate_size: 0,
                    });
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(k.stem),
                    source: wgpu::ShaderSource::Wgsl(
                        wgpu_shader::with_prelude(k.source, variant).into(),
                    ),
                });
            let pipeline = self
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(k.entry),
                    layout: Some(&pipeline_layout),
                    module: &module,
                    entry_point: Some(k.entry),
                    compilation_options: Default::default(),
                    cache: None,
                });
            Pipeline {
                pipeline,
                layout,
                params,
            }
        })?;
        let p = Arc::new(p);
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, p.clone());
        Ok(p)
    }

    /// The bind group of `binds` (and the parameter ring, when the entry reads it) for
    /// pipeline `p`, from the cache or created.
    fn bind_group(&self, k: &Kernel, p: &Pipeline, binds: &[Binding]) -> Result<wgpu::BindGroup> {
        let key = (
            p.layout.clone(),
            binds
                .iter()
                .map(|b| (b.slot, b.buffer.raw().clone(), b.offset, b.size.max(4)))
                .collect::<Vec<_>>(),
        );
        let mut cache = self.bind_groups.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = cache.get(&key) {
            return Ok(g.clone());
        }
        let mut entries = Vec::with_capacity(binds.len() + 1);
        if p.params {
            entries.push(wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &self.ring,
                    offset: 0,
                    size: wgpu::BufferSize::new(super::layout::PARAM_BYTES),
                }),
            });
        }
        for (slot, buffer, offset, size) in &key.1 {
            entries.push(wgpu::BindGroupEntry {
                binding: *slot,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: *offset,
                    // An empty tensor still binds one word: bindings cannot be empty.
                    size: wgpu::BufferSize::new(*size),
                }),
            });
        }
        let g = self.checked(&format!("bind group {}::{}", k.stem, k.entry), || {
            self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(k.entry),
                layout: &p.layout,
                entries: &entries,
            })
        })?;
        if cache.len() >= BIND_GROUPS_CAP {
            cache.clear();
        }
        cache.insert(key, g.clone());
        Ok(g)
    }

    /// The 2-D grid of workgroups covering `n` invocations of [`WG`] threads.
    pub fn grid(&self, n: u64) -> Result<(u32, u32, u32)> {
        let groups = n.div_ceil(WG as u64).max(1);
        let max = self.limits.max_compute_workgroups_per_dimension as u64;
        let x = groups.min(max);
        let y = groups.div_ceil(x);
        if y > max {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!("{n} invocations exceed the dispatch grid"),
            });
        }
        Ok((x as u32, y as u32, 1))
    }

    /// The threads per output row of the row-group kernels (`row_group` in
    /// `shaders/prelude.wgsl`, 64-thread workgroups) for rows of `cols` columns: the
    /// smallest power of two covering them, at most 64; and the grid covering `rows` rows.
    pub fn row_groups(&self, rows: usize, cols: usize) -> Result<(u32, (u32, u32, u32))> {
        let lanes = cols.next_power_of_two().clamp(1, 64) as u64;
        let groups = (rows as u64 * lanes).div_ceil(64);
        Ok((lanes as u32, self.grid(groups * WG as u64)?))
    }

    /// Runs `k` over `n` invocations (1-D, see the module docs).
    pub fn launch<P: Params>(
        &self,
        k: &Kernel,
        params: &P,
        buffers: &[(u32, &WgpuBuffer)],
        n: u64,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let grid = self.grid(n)?;
        self.launch_grid(k, params, buffers, grid)
    }

    /// Runs `k` on an explicit grid of workgroups.
    pub fn launch_grid<P: Params>(
        &self,
        k: &Kernel,
        params: &P,
        buffers: &[(u32, &WgpuBuffer)],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let whole: Vec<Binding> = buffers.iter().map(|&(s, b)| Binding::whole(s, b)).collect();
        self.dispatch(k, params, &whole, grid)
    }

    /// Runs the elementwise kernel `k` over `n` elements in chunks whose bindings fit the
    /// adapter's `max_storage_buffer_binding_size`. Every buffer in `chunked` holds one
    /// 4-byte value per element and is bound to the chunk's range (the offset a multiple of
    /// `min_storage_buffer_offset_alignment`); those in `whole` are bound entirely. The
    /// shader's parameters start with `n, base`, set here per chunk: it indexes the chunked
    /// buffers with its local index `i < n` and computes coordinates (row, column,
    /// broadcast index) from the global index `base + i`.
    pub fn launch_chunked<P: Params>(
        &self,
        k: &Kernel,
        params: P,
        chunked: &[(u32, &WgpuBuffer)],
        whole: &[(u32, &WgpuBuffer)],
        n: u64,
    ) -> Result<()> {
        if n > u32::MAX as u64 {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!(
                    "{}::{}: {n} elements do not fit u32 indices",
                    k.stem, k.entry
                ),
            });
        }
        let step = self.chunk_elems();
        let mut base = 0u64;
        while base < n {
            let len = step.min(n - base);
            let mut words = params;
            super::params::set_prefix(&mut words, &["n", "base"], &[len as u32, base as u32])?;
            let mut binds: Vec<Binding> = chunked
                .iter()
                .map(|&(slot, buffer)| Binding {
                    slot,
                    buffer,
                    offset: base * 4,
                    size: len * 4,
                })
                .collect();
            binds.extend(whole.iter().map(|&(s, b)| Binding::whole(s, b)));
            let grid = self.grid(len)?;
            self.dispatch(k, &words, &binds, grid)?;
            base += len;
        }
        Ok(())
    }

    /// Elements of 4 bytes per chunk of [`Context::launch_chunked`]: the largest multiple of
    /// the offset alignment that fits the binding limit (or the test cap, when lower), and
    /// below 2³² so that global indices fit a u32.
    fn chunk_elems(&self) -> u64 {
        let align = (self.limits.min_storage_buffer_offset_alignment as u64).max(4) / 4;
        let elems = (self.chunk_bytes() / 4).min(u32::MAX as u64 / 2);
        (elems / align * align).max(align)
    }

    /// The bytes an op that splits its work may bind at once: the adapter's
    /// `max_storage_buffer_binding_size`, or the test cap of [`Context::set_chunk_cap`] when
    /// lower.
    pub fn chunk_bytes(&self) -> u64 {
        let limit = self.limits.max_storage_buffer_binding_size;
        match self.chunk_cap.load(std::sync::atomic::Ordering::Relaxed) {
            0 => limit,
            cap => limit.min(cap),
        }
    }

    /// Runs `k` on an explicit grid with storage bindings given as byte ranges
    /// `(binding, buffer, offset, size)`; offsets must be multiples of the adapter's
    /// `min_storage_buffer_offset_alignment`. For ops that split large operands themselves.
    pub fn launch_ranges<P: Params>(
        &self,
        k: &Kernel,
        params: &P,
        ranges: &[(u32, &WgpuBuffer, u64, u64)],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let binds: Vec<Binding> = ranges
            .iter()
            .map(|&(slot, buffer, offset, size)| Binding {
                slot,
                buffer,
                offset,
                size,
            })
            .collect();
        self.dispatch(k, params, &binds, grid)
    }

    /// Caps the bytes any storage binding may cover below the adapter's limit (`None` lifts
    /// the cap): every op then splits its work as it would past the real limit, and a
    /// dispatch binding more is an error. Results do not change: tests use it to run the
    /// split paths on small tensors.
    pub fn set_chunk_cap(&self, bytes: Option<u64>) {
        self.chunk_cap
            .store(bytes.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    }

    /// Copies `size` bytes between buffers on the queue (offsets and size multiples of 4).
    pub fn copy(
        &self,
        src: &WgpuBuffer,
        src_offset: u64,
        dst: &WgpuBuffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        self.record_copy(src.raw(), src_offset, dst.raw(), dst_offset, size);
        Ok(())
    }

    /// Records one dispatch of `k` with `binds` into the open recording (see
    /// `recorder.rs`; nothing is submitted here). A binding past
    /// [`Context::chunk_bytes`] is an error naming it: past the adapter's limit the driver
    /// would reject it, and past a test cap it shows an op that does not split.
    pub(super) fn dispatch<P: Params>(
        &self,
        k: &Kernel,
        params: &P,
        binds: &[Binding],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let limit = self.chunk_bytes();
        if let Some(b) = binds.iter().find(|b| b.size > limit) {
            let what = if limit < self.limits.max_storage_buffer_binding_size {
                "the test cap on bindings"
            } else {
                "the adapter's max_storage_buffer_binding_size"
            };
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!(
                    "{}::{}: binding {} covers {} bytes, past {what} of {limit} bytes",
                    k.stem, k.entry, b.slot, b.size
                ),
            });
        }
        if P::STEM != k.stem {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!(
                    "{}::{}: given the parameters of shaders/{}.wgsl",
                    k.stem,
                    k.entry,
                    P::STEM
                ),
            });
        }
        let params = super::params::words(params);
        if params.len() as u64 * 4 > super::layout::PARAM_BYTES {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!(
                    "{}::{}: {} parameter words pass the {}-byte parameter block",
                    k.stem,
                    k.entry,
                    params.len(),
                    super::layout::PARAM_BYTES
                ),
            });
        }
        let pipeline = self.pipeline(k)?;
        let bind = self.bind_group(k, &pipeline, binds)?;
        // Unset trailing words of the slot read as 0: a shader's Params struct may declare
        // words that one of its entries leaves unset.
        self.record_dispatch(
            k.entry,
            &pipeline.pipeline,
            &bind,
            pipeline.params.then_some(params),
            grid,
        )
    }
}

/// A storage binding of one dispatch: a byte range of a buffer.
pub(super) struct Binding<'a> {
    pub(super) slot: u32,
    pub(super) buffer: &'a WgpuBuffer,
    pub(super) offset: u64,
    pub(super) size: u64,
}

impl<'a> Binding<'a> {
    /// The whole of `buffer`'s used bytes (rounded up to a word).
    fn whole(slot: u32, buffer: &'a WgpuBuffer) -> Self {
        Binding {
            slot,
            buffer,
            offset: 0,
            size: buffer.len.div_ceil(4) * 4,
        }
    }
}
