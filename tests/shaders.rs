//! Every `shaders/*.wgsl` parses and validates with naga (the prelude appended, no optional
//! capability, or only subgroups in the prelude's subgroup variant) and fits the limits
//! every WebGPU adapter guarantees: no GPU needed.

use espalier::device::wgpu_shader::{self, Reductions, PRELUDE};

/// `(stem, source)` of every shader but the prelude.
fn shaders() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        if stem != "prelude" {
            out.push((stem, std::fs::read_to_string(&path).unwrap()));
        }
    }
    assert!(!out.is_empty(), "no shaders found in {dir}");
    out
}

#[test]
fn every_shader_validates_with_the_prelude_in_both_variants() {
    for (stem, source) in shaders() {
        // Shared: no optional capability; subgroup: only Capabilities::SUBGROUP.
        if let Err(e) = wgpu_shader::validate(&stem, &source) {
            panic!("{e}");
        }
    }
}

#[test]
fn the_prelude_alone_is_a_valid_module_without_bindings_in_each_variant() {
    for variant in Reductions::ALL {
        let text = wgpu_shader::prelude(variant);
        assert_eq!(text.lines().count(), PRELUDE.lines().count(), "{variant:?}");
        let module = naga::front::wgsl::parse_str(&text).unwrap();
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), variant.capabilities())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{variant:?}: {e:?}"));
        assert!(
            module
                .global_variables
                .iter()
                .all(|(_, g)| g.binding.is_none()),
            "the prelude must not bind resources: every entry's layout would change"
        );
    }
}

#[test]
fn only_the_subgroup_variant_uses_subgroups_and_both_define_the_same_reductions() {
    let shared = wgpu_shader::prelude(Reductions::Shared);
    let subgroup = wgpu_shader::prelude(Reductions::Subgroup);
    let code = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        !code(&shared).contains("subgroup"),
        "the fallback must run anywhere"
    );
    assert!(subgroup.contains("subgroupAdd("));
    // Where the adapter lacks subgroups (no capability), the subgroup variant is refused.
    let module = naga::front::wgsl::parse_str(&subgroup).unwrap();
    assert!(naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty()
    )
    .validate(&module)
    .is_err());
    let defined = |text: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("fn wg_"))
            .map(|l| l.split('(').next().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(defined(&shared), vec!["max64", "sum256", "sum64"]);
    // wg_sum256 is outside the variant sections: the shader that calls it alone is not
    // built in the subgroup variant.
    assert_eq!(defined(&shared), defined(&subgroup));
    assert!(wgpu_shader::calls_reductions(include_str!(
        "../shaders/log_softmax.wgsl"
    )));
    assert!(!wgpu_shader::calls_reductions(include_str!(
        "../shaders/reduce.wgsl"
    )));
    assert!(!wgpu_shader::calls_reductions(include_str!(
        "../shaders/binary.wgsl"
    )));
}

#[test]
fn no_shader_redefines_a_prelude_helper() {
    // The raw prelude: both variants' helpers.
    let helpers: Vec<String> = PRELUDE
        .lines()
        .filter_map(|l| l.strip_prefix("fn "))
        .map(|l| l.split('(').next().unwrap().to_string())
        .collect();
    assert!(helpers.contains(&"nan_max".to_string()), "{helpers:?}");
    for (stem, source) in shaders() {
        for h in &helpers {
            assert!(
                !source.contains(&format!("fn {h}(")),
                "shaders/{stem}.wgsl defines `{h}`, which shaders/prelude.wgsl provides"
            );
        }
    }
}

#[test]
fn every_entry_point_fits_webgpus_default_limits() {
    // What every WebGPU adapter offers (AMD, Intel, Apple, NVIDIA alike): a shader within
    // these runs anywhere wgpu does without asking for more.
    let limits = wgpu::Limits::default();
    let mut entries = 0;
    for (stem, source) in shaders() {
        for needs in wgpu_shader::entry_needs(&stem, &source).unwrap() {
            let over = needs.exceeded(&limits);
            assert!(
                over.is_empty(),
                "shaders/{stem}.wgsl {}: {over:?}",
                needs.entry
            );
            entries += 1;
        }
    }
    assert!(entries > 30, "{entries} entry points");
}

#[test]
fn entry_needs_count_only_what_each_entry_uses() {
    let src = "
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
var<workgroup> tile: array<f32, 128>;
@compute @workgroup_size(64)
fn one(@builtin(local_invocation_index) t: u32) { b[t] = a[t]; }
@compute @workgroup_size(8, 4)
fn two(@builtin(local_invocation_index) t: u32) {
    tile[t] = 1.0;
    workgroupBarrier();
    b[t] = tile[t] + wg_sum64(t, 1.0);
}
";
    let needs = wgpu_shader::entry_needs("t", src).unwrap();
    assert_eq!(needs.len(), 2);
    assert_eq!((needs[0].storage_buffers, needs[0].workgroup_bytes), (2, 0));
    // `two` uses `tile` (512 bytes) and, through the prelude's reduction, `wg64` (256).
    assert_eq!(
        (needs[1].storage_buffers, needs[1].workgroup_bytes),
        (1, 768)
    );
    assert_eq!(
        (needs[1].invocations, needs[1].workgroup_size),
        (32, [8, 4, 1])
    );
    let tight = wgpu::Limits {
        max_compute_workgroup_storage_size: 512,
        ..wgpu::Limits::default()
    };
    assert_eq!(
        needs[1].exceeded(&tight),
        vec!["max_compute_workgroup_storage_size: needs 768, limit 512".to_string()]
    );
}

#[test]
fn an_invalid_shader_is_reported_with_its_name() {
    let err = wgpu_shader::validate("broken", "fn main( {").unwrap_err();
    assert!(err.to_string().contains("shaders/broken.wgsl"), "{err}");
}

#[test]
fn a_shader_needing_an_optional_capability_is_refused() {
    // 64-bit integers are a capability some adapters lack.
    let err = wgpu_shader::validate("wide", "fn f(a: i64) -> i64 { return a + 1li; }")
        .unwrap_err()
        .to_string();
    assert!(err.contains("shaders/wide.wgsl"), "{err}");
}
