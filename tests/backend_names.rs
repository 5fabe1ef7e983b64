//! A GPU backend is named only in its own folder and at the seam (issue 34): the files of
//! `src/` that name a backend's storage or device variant (`Storage::Wgpu`,
//! `Device::Cuda`, ...) outside `src/device/`, the ops' one dispatch point
//! (`src/ops/gpu.rs`), the tensor's storage type (`src/tensor.rs`) and the places where a
//! backend is inherent (`src/dist/nccl.rs`, the `devices` listing in `cli/src/devices.rs`)
//! are at most [`MAX_OTHER`]. An op, the trainer or the estimator that matches on a
//! backend again fails this test; name the backend through a `Device` method or the seam
//! instead.

use std::path::{Path, PathBuf};

/// Files outside the allowed places that still name a backend variant: `src/dist/mod.rs`
/// (NCCL is CUDA's: which ranks share a GPU and whether NCCL loads).
const MAX_OTHER: usize = 1;

/// Where naming a backend is the point.
const ALLOWED: &[&str] = &[
    "device/",
    "ops/gpu.rs",
    "tensor.rs",
    "dist/nccl.rs",
    "cli/devices.rs",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The variants of `pub enum Storage` in `src/tensor.rs` other than `Cpu`: the GPU
/// backends, so that a new one is counted without editing this test.
fn gpu_variants(src: &Path) -> Vec<String> {
    let tensor = std::fs::read_to_string(src.join("tensor.rs")).unwrap();
    let body = tensor.split("pub enum Storage {").nth(1).unwrap();
    let body = &body[..body.find('}').unwrap()];
    let variants: Vec<String> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.contains('('))
        .map(|l| l[..l.find('(').unwrap()].to_string())
        .filter(|v| v != "Cpu")
        .collect();
    assert!(variants.len() >= 2, "no GPU variants found: {variants:?}");
    variants
}

/// The lines of `text` without `//` comments (a doc may name a variant).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn backend_variants_are_named_only_in_the_backends_and_the_seam() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let variants = gpu_variants(&src);
    // The library's files, then the command line's (cli/src/, as `cli/<file>`).
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut cli_files = Vec::new();
    rust_files(&root.join("cli/src"), &mut cli_files);
    let mut others = Vec::new();
    for path in files.into_iter().chain(cli_files) {
        let rel = match path.strip_prefix(&src) {
            Ok(rel) => rel.to_path_buf(),
            Err(_) => Path::new("cli").join(path.strip_prefix(root.join("cli/src")).unwrap()),
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if ALLOWED.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        let text = code(&std::fs::read_to_string(&path).unwrap());
        let named: Vec<String> = variants
            .iter()
            .flat_map(|v| [format!("Storage::{v}"), format!("Device::{v}")])
            .filter(|p| text.contains(p.as_str()))
            .collect();
        if !named.is_empty() {
            let shown = path.strip_prefix(root).unwrap().display();
            others.push(format!("{shown}: {}", named.join(", ")));
        }
    }
    assert!(
        others.len() <= MAX_OTHER,
        "{} files outside the backends and the seam name a backend (at most {MAX_OTHER}):\n{}",
        others.len(),
        others.join("\n")
    );
}
