//! Every `kernels/*.cu` compiles with NVRTC (prelude included) for the architectures the
//! engine targets: no GPU needed, only `libnvrtc`. Where NVRTC is missing the test prints
//! why it skipped. Also checks the one-stem-per-op layout across `src/ops`, `shaders` and
//! `kernels`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use espalier::device::cuda::nvrtc;

fn stems(dir: &str, ext: &str) -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(ext))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_kernel_compiles_with_nvrtc() {
    let Some((major, minor)) = nvrtc::version() else {
        common::skip_backend(
            "cuda",
            "the NVRTC compile check: no NVRTC library (libnvrtc.so.13 or .12) found",
        );
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let cus = stems("kernels", "cu");
    assert!(!cus.is_empty(), "no kernels in {}", dir.display());
    // Ampere (A100) and Hopper (H100, H200).
    for arch in [80, 90] {
        for stem in &cus {
            let body = std::fs::read_to_string(dir.join(format!("{stem}.cu"))).unwrap();
            let source = format!("{}{body}", nvrtc::PRELUDE);
            if let Err(log) = nvrtc::compile(&format!("{stem}.cu"), &source, arch) {
                panic!("kernels/{stem}.cu does not compile for sm_{arch} with NVRTC {major}.{minor}:\n{log}");
            }
        }
    }
    println!(
        "{} kernel files compile with NVRTC {major}.{minor} for sm_80 and sm_90",
        cus.len()
    );
}

#[test]
fn a_compile_error_carries_the_nvrtc_log() {
    if !nvrtc::available() {
        common::skip_backend("cuda", "no NVRTC library found");
        return;
    }
    let err = nvrtc::compile(
        "broken.cu",
        "extern \"C\" __global__ void f() { undefined_name; }",
        90,
    )
    .unwrap_err();
    assert!(
        err.contains("broken.cu") && err.contains("undefined_name"),
        "{err}"
    );
}

#[test]
fn ops_shaders_and_kernels_share_their_stems() {
    let cus = stems("kernels", "cu");
    let mut wgsl = stems("shaders", "wgsl");
    // The shared helpers of each backend: kernels/prelude.cuh and shaders/prelude.wgsl.
    assert!(wgsl.remove("prelude"), "shaders/prelude.wgsl is missing");
    assert!(stems("kernels", "cuh").contains("prelude"));
    let ops = stems("src/ops", "rs");
    for stem in &cus {
        assert!(
            wgsl.contains(stem),
            "kernels/{stem}.cu has no shaders/{stem}.wgsl"
        );
        assert!(
            ops.contains(stem),
            "kernels/{stem}.cu has no src/ops/{stem}.rs"
        );
    }
    for stem in &wgsl {
        assert!(
            cus.contains(stem),
            "shaders/{stem}.wgsl has no kernels/{stem}.cu"
        );
    }
}
