//! WGSL validation with naga, usable without any GPU: every shader is checked by a unit
//! test, and the wgpu backend validates a module before handing it to the driver.
//!
//! Every `shaders/<op>.wgsl` is compiled with `shaders/prelude.wgsl` **appended** (shared
//! helpers: the grid index, NaN tests, `nan_max`, the LSTM gate functions, workgroup row
//! reductions), so a shader's line numbers in naga's reports are those of its own file.
//!
//! Validation uses no optional capability ([`naga::valid::Capabilities::empty`]), not
//! everything naga knows: a shader that needs a feature some adapters lack (64-bit
//! integers, f16 arithmetic, subgroups, ...) fails here, on any machine, rather than on the
//! first AMD, Intel or Apple GPU it meets. [`EntryNeeds`] reports what each entry point
//! asks of the adapter's limits, which tests compare with WebGPU's default limits.

use crate::error::{Error, Result};

/// The helpers appended to every shader (see the module docs).
pub const PRELUDE: &str = include_str!("../../shaders/prelude.wgsl");

/// `source` with the prelude appended: what the backend compiles.
pub fn with_prelude(source: &str) -> String {
    format!("{source}\n{PRELUDE}")
}

/// Parses and validates `source` (a shader file without the prelude, which is appended
/// here) with no optional capability; errors name `shaders/<stem>.wgsl` and carry naga's
/// report.
pub fn module(stem: &str, source: &str) -> Result<(naga::Module, naga::valid::ModuleInfo)> {
    let full = with_prelude(source);
    let fail = |msg: String| Error::Backend {
        backend: "wgpu",
        msg: format!("shaders/{stem}.wgsl (with shaders/prelude.wgsl appended): {msg}"),
    };
    let module = naga::front::wgsl::parse_str(&full).map_err(|e| fail(e.emit_to_string(&full)))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .map_err(|e| fail(e.emit_to_string(&full)))?;
    Ok((module, info))
}

/// Parses and validates a shader (see [`module`]).
pub fn validate(stem: &str, source: &str) -> Result<()> {
    module(stem, source).map(|_| ())
}

/// What one entry point asks of an adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryNeeds {
    /// The entry point's name.
    pub entry: String,
    /// Storage buffers it binds (`max_storage_buffers_per_shader_stage`).
    pub storage_buffers: u32,
    /// Uniform buffers it binds (`max_uniform_buffers_per_shader_stage`).
    pub uniform_buffers: u32,
    /// Bytes of workgroup memory it uses (`max_compute_workgroup_storage_size`).
    pub workgroup_bytes: u32,
    /// Threads per workgroup (`max_compute_invocations_per_workgroup`).
    pub invocations: u32,
    /// Workgroup size per dimension (`max_compute_workgroup_size_x/y/z`).
    pub workgroup_size: [u32; 3],
}

impl EntryNeeds {
    /// The limits of `limits` this entry exceeds, named as wgpu names them (empty: it fits).
    pub fn exceeded(&self, limits: &wgpu::Limits) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, need: u32, limit: u32| {
            if need > limit {
                out.push(format!("{name}: needs {need}, limit {limit}"));
            }
        };
        check(
            "max_storage_buffers_per_shader_stage",
            self.storage_buffers,
            limits.max_storage_buffers_per_shader_stage,
        );
        check(
            "max_uniform_buffers_per_shader_stage",
            self.uniform_buffers,
            limits.max_uniform_buffers_per_shader_stage,
        );
        check(
            "max_compute_workgroup_storage_size",
            self.workgroup_bytes,
            limits.max_compute_workgroup_storage_size,
        );
        check(
            "max_compute_invocations_per_workgroup",
            self.invocations,
            limits.max_compute_invocations_per_workgroup,
        );
        let [x, y, z] = self.workgroup_size;
        check(
            "max_compute_workgroup_size_x",
            x,
            limits.max_compute_workgroup_size_x,
        );
        check(
            "max_compute_workgroup_size_y",
            y,
            limits.max_compute_workgroup_size_y,
        );
        check(
            "max_compute_workgroup_size_z",
            z,
            limits.max_compute_workgroup_size_z,
        );
        out
    }
}

/// What every entry point of a shader asks of an adapter: the globals each entry really
/// uses (naga's analysis), so a binding or workgroup array another entry of the same file
/// declares does not count against it.
pub fn entry_needs(stem: &str, source: &str) -> Result<Vec<EntryNeeds>> {
    let (module, info) = module(stem, source)?;
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .map_err(|e| Error::Backend {
            backend: "wgpu",
            msg: format!("shaders/{stem}.wgsl: layout: {e}"),
        })?;
    let mut out = Vec::new();
    for (i, ep) in module.entry_points.iter().enumerate() {
        let uses = info.get_entry_point(i);
        let mut needs = EntryNeeds {
            entry: ep.name.clone(),
            storage_buffers: 0,
            uniform_buffers: 0,
            workgroup_bytes: 0,
            invocations: ep.workgroup_size.iter().product(),
            workgroup_size: ep.workgroup_size,
        };
        for (handle, global) in module.global_variables.iter() {
            if uses[handle].is_empty() {
                continue;
            }
            match global.space {
                naga::AddressSpace::Storage { .. } => needs.storage_buffers += 1,
                naga::AddressSpace::Uniform => needs.uniform_buffers += 1,
                naga::AddressSpace::WorkGroup => needs.workgroup_bytes += layouter[global.ty].size,
                _ => {}
            }
        }
        out.push(needs);
    }
    Ok(out)
}
