//! Explicit bind-group layouts read from the shaders themselves.
//!
//! Every entry point gets a layout listing exactly the bindings it uses (as wgpu's automatic
//! layout would), with the parameter block at binding 0 as a uniform with a dynamic offset
//! into the context's parameter ring, and each storage buffer read-only unless the entry
//! writes it. naga's analysis of the module says which globals an entry reads or writes, so
//! the layout cannot disagree with the shader.

use crate::device::wgpu_shader::Reductions;
use crate::error::{Error, Result};

/// Bytes of the parameter block every dispatch binds: room for 64 words (the largest
/// `Params` struct has fewer than 32).
pub const PARAM_BYTES: u64 = 256;

/// The layout entries of `entry` in the WGSL `source` of `shaders/<stem>.wgsl` (validated
/// here, with the prelude of `variant` appended: see [`crate::device::wgpu_shader`]).
pub fn entries(
    stem: &str,
    source: &str,
    entry: &str,
    variant: Reductions,
) -> Result<Vec<wgpu::BindGroupLayoutEntry>> {
    let fail = |msg: String| Error::Backend {
        backend: "wgpu",
        msg: format!("shaders/{stem}.wgsl: {msg}"),
    };
    let (module, info) = crate::device::wgpu_shader::module_variant(stem, source, variant)?;
    let index = module
        .entry_points
        .iter()
        .position(|e| e.name == entry)
        .ok_or_else(|| fail(format!("no entry point `{entry}`")))?;
    let uses = info.get_entry_point(index);
    let mut out = Vec::new();
    for (handle, global) in module.global_variables.iter() {
        let used = uses[handle];
        let Some(binding) = &global.binding else {
            continue;
        };
        if used.is_empty() {
            continue;
        }
        if binding.group != 0 {
            return Err(fail(format!(
                "`{entry}` uses group {}: only group 0 is bound",
                binding.group
            )));
        }
        let ty = match global.space {
            naga::AddressSpace::Uniform => {
                if binding.binding != 0 {
                    return Err(fail(format!(
                        "uniform at binding {}: parameters are binding 0",
                        binding.binding
                    )));
                }
                wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: true,
                    min_binding_size: wgpu::BufferSize::new(PARAM_BYTES),
                }
            }
            naga::AddressSpace::Storage { access } => wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: !access.contains(naga::StorageAccess::STORE),
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            other => {
                return Err(fail(format!(
                    "binding {} is in address space {other:?}: only uniform and storage buffers are bound",
                    binding.binding
                )))
            }
        };
        out.push(wgpu::BindGroupLayoutEntry {
            binding: binding.binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty,
            count: None,
        });
    }
    out.sort_by_key(|e| e.binding);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHADER: &str = "
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> unused_here: array<f32>;
@compute @workgroup_size(64)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>) {
    if gid.x < p.n { y[gid.x] = x[gid.x]; }
}
@compute @workgroup_size(64)
fn clear(@builtin(global_invocation_id) gid: vec3<u32>) {
    unused_here[gid.x] = 0.0;
}
";

    fn storage_read_only(e: &wgpu::BindGroupLayoutEntry) -> Option<bool> {
        match e.ty {
            wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                ..
            } => Some(read_only),
            _ => None,
        }
    }

    #[test]
    fn an_entry_lists_only_the_bindings_it_uses_with_their_access() {
        let e = entries("t", SHADER, "copy", Reductions::Shared).unwrap();
        assert_eq!(
            e.iter().map(|e| e.binding).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(matches!(
            e[0].ty,
            wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: true,
                ..
            }
        ));
        assert_eq!(storage_read_only(&e[1]), Some(true));
        assert_eq!(storage_read_only(&e[2]), Some(false));
        let c = entries("t", SHADER, "clear", Reductions::Shared).unwrap();
        assert_eq!(c.iter().map(|e| e.binding).collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn a_missing_entry_point_is_an_error_naming_it() {
        let e = entries("t", SHADER, "nope", Reductions::Shared)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope") && e.contains("shaders/t.wgsl"), "{e}");
    }
}
