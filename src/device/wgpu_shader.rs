//! WGSL validation with naga, usable without any GPU: every shader is checked by a unit
//! test, and the wgpu backend validates a module before handing it to the driver.
//!
//! Every `shaders/<op>.wgsl` is compiled with `shaders/prelude.wgsl` **appended** (shared
//! helpers: the grid index, NaN tests, `nan_max`, the LSTM gate functions, workgroup row
//! reductions, and the segment kernels' row groups: their ids, row, row offsets and tile
//! test), so a shader's line numbers in naga's reports are those of its own file.
//!
//! The prelude's workgroup reductions come in two [`Reductions`] variants, sections of the
//! file between `// @variant <name>` lines (and `// @variant end`): shared memory alone,
//! and subgroup operations. [`prelude`] keeps one section and blanks the other's lines (so
//! line numbers agree); a pipeline is built with the subgroup variant when its adapter has
//! `Features::SUBGROUP` and the shader calls a reduction ([`calls_reductions`]).
//!
//! Validation uses no optional capability ([`naga::valid::Capabilities::empty`]), not
//! everything naga knows, except [`naga::valid::Capabilities::SUBGROUP`] for the subgroup
//! variant: a shader that needs a feature some adapters lack (64-bit integers, f16
//! arithmetic, subgroups outside the variant, ...) fails here, on any machine, rather than
//! on the first AMD, Intel or Apple GPU it meets. [`EntryNeeds`] reports what each entry
//! point asks of the adapter's limits, which tests compare with WebGPU's default limits.

use crate::error::{Error, Result};

/// The helpers appended to every shader, both variants' sections included (see the
/// module docs; [`prelude`] gives one variant's text).
pub const PRELUDE: &str = include_str!("../../shaders/prelude.wgsl");

/// How the prelude's workgroup reductions (`wg_max64`, `wg_sum64`, `wg_sum256`) combine
/// their threads' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reductions {
    /// A tree in workgroup memory: every adapter.
    Shared,
    /// Subgroup operations, then one pass over workgroup memory: adapters with
    /// `wgpu::Features::SUBGROUP`.
    Subgroup,
}

impl Reductions {
    /// Both variants.
    pub const ALL: [Reductions; 2] = [Reductions::Shared, Reductions::Subgroup];

    /// The name of the variant's section in the prelude.
    pub fn name(self) -> &'static str {
        match self {
            Reductions::Shared => "shared",
            Reductions::Subgroup => "subgroup",
        }
    }

    /// The optional capabilities the variant's shaders are validated with.
    pub fn capabilities(self) -> naga::valid::Capabilities {
        match self {
            Reductions::Shared => naga::valid::Capabilities::empty(),
            Reductions::Subgroup => naga::valid::Capabilities::SUBGROUP,
        }
    }
}

/// The prelude with the section of `variant` kept and the other variants' lines (and the
/// `// @variant` lines) blanked, so that both variants have the same line numbers.
pub fn prelude(variant: Reductions) -> String {
    let mut keep = true;
    let mut out = String::with_capacity(PRELUDE.len());
    for line in PRELUDE.lines() {
        if let Some(name) = line.trim().strip_prefix("// @variant ") {
            keep = name == "end" || name == variant.name();
        } else if keep {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The functions the variant sections of the prelude define (each section defines the
/// same ones).
fn variant_functions() -> Vec<&'static str> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in PRELUDE.lines() {
        if let Some(name) = line.trim().strip_prefix("// @variant ") {
            inside = name == Reductions::Shared.name();
        } else if let Some(rest) = line.strip_prefix("fn ").filter(|_| inside) {
            out.extend(rest.split('(').next());
        }
    }
    out
}

/// Whether `source` calls a reduction of the prelude's variant sections: only such a
/// shader is built in the subgroup variant (the others have no use for it).
pub fn calls_reductions(source: &str) -> bool {
    variant_functions()
        .iter()
        .any(|f| source.contains(&format!("{f}(")))
}

/// `source` with the prelude of `variant` appended: what the backend compiles.
pub fn with_prelude(source: &str, variant: Reductions) -> String {
    format!("{source}\n{}", prelude(variant))
}

/// Parses and validates `source` (a shader file without the prelude, which is appended
/// here, in `variant`) with no optional capability but the variant's; errors name
/// `shaders/<stem>.wgsl` and the variant, and carry naga's report.
pub fn module_variant(
    stem: &str,
    source: &str,
    variant: Reductions,
) -> Result<(naga::Module, naga::valid::ModuleInfo)> {
    let full = with_prelude(source, variant);
    let fail = |msg: String| Error::Backend {
        backend: "wgpu",
        msg: format!(
            "shaders/{stem}.wgsl (with shaders/prelude.wgsl appended, {} reductions): {msg}",
            variant.name()
        ),
    };
    let module = naga::front::wgsl::parse_str(&full).map_err(|e| fail(e.emit_to_string(&full)))?;
    let info =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), variant.capabilities())
            .validate(&module)
            .map_err(|e| fail(e.emit_to_string(&full)))?;
    Ok((module, info))
}

/// [`module_variant`] in the shared-memory variant, which every adapter runs.
pub fn module(stem: &str, source: &str) -> Result<(naga::Module, naga::valid::ModuleInfo)> {
    module_variant(stem, source, Reductions::Shared)
}

/// Parses and validates a shader in both variants (see [`module_variant`]).
pub fn validate(stem: &str, source: &str) -> Result<()> {
    for variant in Reductions::ALL {
        module_variant(stem, source, variant)?;
    }
    Ok(())
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
