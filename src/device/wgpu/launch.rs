//! Compiling and dispatching WGSL kernels.
//!
//! Every shader follows one binding convention: `@group(0) @binding(0)` is a uniform
//! block of 32-bit parameter words (f32 parameters travel as their bits); the storage
//! buffers are passed with their binding numbers, and exactly those the entry point uses
//! (pipelines take the automatic layout, which lists only the bindings an entry reads or
//! writes). Entry points of one shader that need different access to a buffer use
//! different binding numbers. One-dimensional launches cover `n` invocations with workgroups of [`WG`]
//! threads on a 2-D grid, so more than 65,535 workgroups is never a problem: a shader
//! computes its linear index as `gid.x + gid.y * nwg.x * WG` and checks it against `n`.

use std::sync::Arc;

use crate::device::wgpu::{Context, WgpuBuffer};
use crate::error::{Error, Result};

/// Threads per workgroup of 1-D kernels.
pub const WG: u32 = 256;

/// A WGSL entry point: its file stem, its source and its function name.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub stem: &'static str,
    pub source: &'static str,
    pub entry: &'static str,
}

impl Context {
    fn pipeline(&self, k: &Kernel) -> Result<Arc<wgpu::ComputePipeline>> {
        let key = (k.stem, k.entry);
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        // Validate with naga first: its messages name the line, and an invalid module
        // never reaches the driver.
        crate::device::wgpu_shader::validate(k.stem, k.source)?;
        let p = self.checked(&format!("pipeline {}::{}", k.stem, k.entry), || {
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(k.stem),
                    source: wgpu::ShaderSource::Wgsl(k.source.into()),
                });
            self.device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(k.entry),
                    layout: None,
                    module: &module,
                    entry_point: Some(k.entry),
                    compilation_options: Default::default(),
                    cache: None,
                })
        })?;
        let p = Arc::new(p);
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, p.clone());
        Ok(p)
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

    /// Runs `k` over `n` invocations (1-D, see the module docs).
    pub fn launch(
        &self,
        k: &Kernel,
        params: &[u32],
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
    pub fn launch_grid(
        &self,
        k: &Kernel,
        params: &[u32],
        buffers: &[(u32, &WgpuBuffer)],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let pipeline = self.pipeline(k)?;
        let mut words = params.to_vec();
        words.resize(params.len().div_ceil(4).max(1) * 4, 0);
        self.checked(&format!("dispatch {}::{}", k.stem, k.entry), || {
            use wgpu::util::DeviceExt;
            let uniform = self
                .device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("params"),
                    contents: bytemuck::cast_slice(&words),
                    usage: wgpu::BufferUsages::UNIFORM,
                });
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: uniform.as_entire_binding(),
            }];
            for &(binding, b) in buffers {
                let size = wgpu::BufferSize::new(b.len.div_ceil(4).max(1) * 4);
                entries.push(wgpu::BindGroupEntry {
                    binding,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: b.raw(),
                        offset: 0,
                        size,
                    }),
                });
            }
            let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(k.entry),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            let mut enc = self.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(grid.0, grid.1, grid.2);
            }
            self.queue.submit([enc.finish()]);
        })
    }
}
