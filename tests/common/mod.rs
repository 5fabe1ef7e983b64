//! Shared test helpers: random tensors and the GPU devices to compare with the CPU.
#![allow(dead_code)]

use std::sync::Arc;

use espalier::graph::Block;
use espalier::{Device, Result, Tensor};

pub mod emu;

/// Uniform values in [-1, 1) as an f32 CPU tensor.
pub fn rand_f32(shape: &[usize], seed: u64) -> Tensor {
    espalier::check::zoo::rand_f32(shape, seed).unwrap()
}

/// Values in ±[0.5, 1.5): bounded away from zero (divisors, logs of |x|, kinks).
pub fn rand_away_f32(shape: &[usize], seed: u64) -> Tensor {
    espalier::check::zoo::rand_away_f32(shape, seed).unwrap()
}

/// Integer values in [-2, 2] as an f32 CPU tensor: every sum of them is exact whatever its
/// order, so ops that split a sum differently agree bit for bit.
pub fn rand_ints(shape: &[usize], seed: u64) -> Tensor {
    espalier::check::zoo::rand_ints(shape, seed).unwrap()
}

/// Random u32 indices below `n`.
pub fn rand_idx(len: usize, n: u32, seed: u64) -> Tensor {
    espalier::check::zoo::rand_idx(len, n, seed).unwrap()
}

/// Whether `REQUIRE_GPU` (its value `policy`) makes a missing `backend` ("wgpu" or
/// "cuda") a failure: `1`, `true`, `yes` or `all` require every GPU backend, `wgpu` or
/// `cuda` (or a comma-separated list) only those; unset, empty or `0` none.
pub fn backend_required(policy: Option<&str>, backend: &str) -> bool {
    let Some(p) = policy.map(str::trim) else {
        return false;
    };
    match p.to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" => false,
        "1" | "true" | "yes" | "all" => true,
        list => list.split(',').any(|b| b.trim() == backend),
    }
}

/// Prints why a test skips `backend`, or, when `REQUIRE_GPU` requires that backend,
/// fails the test with the same reason: on a machine that should have the GPU, a skip
/// would hide a broken driver or build.
pub fn skip_backend(backend: &str, why: impl std::fmt::Display) {
    skip_backend_with(std::env::var("REQUIRE_GPU").ok().as_deref(), backend, why)
}

/// [`skip_backend`] with the `REQUIRE_GPU` value given.
pub fn skip_backend_with(policy: Option<&str>, backend: &str, why: impl std::fmt::Display) {
    if backend_required(policy, backend) {
        panic!(
            "REQUIRE_GPU={}: {backend} is required but unavailable: {why}",
            policy.unwrap_or_default()
        );
    }
    println!("skipping {backend}: {why}");
}

/// Whether the tests may use GPU `backend`: `TEST_GPUS` (a comma-separated list, e.g.
/// `cuda`) limits them to those backends, so that a run on one backend (the emulated CUDA
/// device in CI) does not run the others again. Unset: every backend.
pub fn backend_selected(backend: &str) -> bool {
    match std::env::var("TEST_GPUS") {
        Ok(list) if !list.trim().is_empty() => list.split(',').any(|b| b.trim() == backend),
        _ => true,
    }
}

/// `dev` if its backend is selected ([`backend_selected`]) and present; else `None`, after
/// printing why it is skipped (a failure under `REQUIRE_GPU` for a missing backend, see
/// [`skip_backend`]).
pub fn gpu_device(dev: Device) -> Option<Device> {
    let backend = dev.backend();
    if !backend_selected(backend) {
        println!("skipping {backend}: TEST_GPUS does not name it");
        return None;
    }
    match dev.memory() {
        Ok(_) => Some(dev),
        Err(e) => {
            skip_backend(backend, e);
            None
        }
    }
}

/// The non-CPU devices present; prints why each absent backend is skipped (a failure
/// under `REQUIRE_GPU`, see [`skip_backend`]).
pub fn gpu_devices() -> Vec<Device> {
    [Device::Wgpu(0), Device::Cuda(0)]
        .into_iter()
        .filter_map(gpu_device)
        .collect()
}

/// The CUDA device among [`gpu_devices`], if any.
pub fn cuda_device() -> Option<Device> {
    gpu_device(Device::Cuda(0))
}

/// The wgpu devices among [`gpu_devices`]: the binding cap of the split tests is a wgpu
/// concept.
pub fn wgpu_devices() -> Vec<Device> {
    gpu_devices()
        .into_iter()
        .filter(|d| matches!(d, Device::Wgpu(_)))
        .collect()
}

/// Caps every storage binding of `dev`'s wgpu context at `bytes` until dropped, so that
/// every op splits its work as past the adapter's limit; dropping lifts the cap, also when
/// a check panics. The cap is shared by the threads of a test binary: one test per binary
/// sets it.
pub struct BindingCap(std::sync::Arc<espalier::device::wgpu::Context>);

impl BindingCap {
    pub fn new(dev: Device, bytes: u64) -> BindingCap {
        let Device::Wgpu(i) = dev else {
            panic!("a binding cap needs a wgpu device, not {dev}");
        };
        let ctx = espalier::device::wgpu::context(i).unwrap();
        ctx.set_chunk_cap(Some(bytes));
        BindingCap(ctx)
    }
}

impl Drop for BindingCap {
    fn drop(&mut self) {
        self.0.set_chunk_cap(None);
    }
}

/// Runs `f` forward and backward on every wgpu device with every binding capped at `cap`
/// bytes, and again without the cap: split and unsplit results must be bit-identical when
/// `exact` (the op keeps its order of additions), within tolerance otherwise, and match the
/// CPU within tolerance. The cap is lifted on return.
pub fn split_parity(name: &str, f: &Op, inputs: &[Tensor], cap: u64, exact: bool) {
    let (out, grads) = run(f, inputs, Device::Cpu);
    for dev in wgpu_devices() {
        let split = {
            let _cap = BindingCap::new(dev, cap);
            run(f, inputs, dev)
        };
        let whole = run(f, inputs, dev);
        let tol = if exact { (0.0, 0.0) } else { (RTOL, ATOL) };
        let pairs = std::iter::once((&whole.0, &split.0)).chain(
            whole
                .1
                .iter()
                .zip(&split.1)
                .filter_map(|(a, b)| a.as_ref().zip(b.as_ref())),
        );
        for (i, (a, b)) in pairs.enumerate() {
            assert_close(
                &format!("{name} split vs whole (output {i}) on {dev}"),
                a,
                b,
                tol.0,
                tol.1,
            );
        }
        assert_close(
            &format!("{name} forward on {dev}"),
            &out,
            &split.0,
            RTOL,
            ATOL,
        );
        for (i, (a, b)) in grads.iter().zip(&split.1).enumerate() {
            match (a, b) {
                (Some(a), Some(b)) => {
                    assert_close(&format!("{name} grad {i} on {dev}"), a, b, RTOL, ATOL)
                }
                (None, None) => {}
                _ => panic!("{name}: gradient {i} present on one backend only ({dev})"),
            }
        }
    }
}

/// Asserts |a - b| <= atol + rtol·|a| elementwise, naming the first differing index.
pub fn assert_close(what: &str, expected: &[f32], got: &[f32], rtol: f32, atol: f32) {
    assert_eq!(expected.len(), got.len(), "{what}: lengths differ");
    for (i, (&e, &g)) in expected.iter().zip(got).enumerate() {
        let ok = (e - g).abs() <= atol + rtol * e.abs() || (e.is_nan() && g.is_nan());
        assert!(
            ok,
            "{what}: first difference at index {i}: cpu {e} vs device {g} (of {} values)",
            expected.len()
        );
    }
}

/// Asserts that two f32 vectors are bit-identical (NaN included).
pub fn assert_bits(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!(
            "{what}: first difference at {i}: cpu {} vs device {}",
            a[i], b[i]
        );
    }
}

/// `|a - b| <= rel · max|b|` elementwise: relative to the tensor's magnitude, the
/// tolerance of sums taken in another order (micro-batches, chunks).
pub fn assert_close_scaled(what: &str, a: &[f32], b: &[f32], rel: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = b
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= rel * scale,
            "{what}: element {i}: {x} vs {y} (scale {scale})"
        );
    }
}

/// Every parameter's gradient of `model`, in parameter order (each must have one).
pub fn grads(model: &impl espalier::nn::Module) -> Vec<Vec<f32>> {
    model
        .parameters()
        .iter()
        .map(|p| p.grad().unwrap().to_vec_f32().unwrap())
        .collect()
}

pub const RTOL: f32 = 1e-4;
pub const ATOL: f32 = 1e-5;

pub type Op = dyn Fn(&[Tensor]) -> Result<Tensor>;

/// Runs `f` on `inputs` moved to `device`; returns the output and each float input's
/// gradient (the same run `espalier check` compares).
pub fn run(f: &Op, inputs: &[Tensor], device: Device) -> (Vec<f32>, Vec<Option<Vec<f32>>>) {
    espalier::check::parity::run_op(f, inputs, device).unwrap()
}

/// Compares `f` on every GPU backend with the CPU.
pub fn parity(name: &str, f: &Op, inputs: &[Tensor]) {
    parity_on(name, f, inputs, &gpu_devices());
}

/// Compares `f` on each of `devices` with the CPU, forward and every input's gradient.
pub fn parity_on(name: &str, f: &Op, inputs: &[Tensor], devices: &[Device]) {
    let (out, grads) = run(f, inputs, Device::Cpu);
    for &dev in devices {
        let (o, g) = run(f, inputs, dev);
        assert_close(&format!("{name} forward on {dev}"), &out, &o, RTOL, ATOL);
        for (i, (a, b)) in grads.iter().zip(&g).enumerate() {
            match (a, b) {
                (Some(a), Some(b)) => {
                    assert_close(&format!("{name} grad {i} on {dev}"), a, b, RTOL, ATOL)
                }
                (None, None) => {}
                _ => panic!("{name}: gradient {i} present on one backend only ({dev})"),
            }
        }
    }
}

/// `data/NAME` in the repository, or `None` after printing why the caller skips. The
/// repository's root is the manifest folder of the library's tests and the parent of the
/// command line's (cli/), which share this module.
pub fn repo_data(name: &str) -> Option<std::path::PathBuf> {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest
        .ancestors()
        .find(|d| d.join("Cargo.lock").exists())
        .unwrap_or(manifest);
    let p = root.join("data").join(name);
    if p.exists() {
        Some(p)
    } else {
        println!("skipped: {} not found", p.display());
        None
    }
}

/// A small block with an empty row and duplicates: dst 0 <- {1, 3, 0}, dst 1 <- {},
/// dst 2 <- {4, 4, 2, 1, 3}; six src rows.
pub fn small_block() -> Arc<Block> {
    Arc::new(
        Block::new(
            6,
            vec![0, 3, 3, 8],
            vec![1, 3, 0, 4, 4, 2, 1, 3],
            vec![10, 11, 12, 13, 14, 15],
        )
        .unwrap(),
    )
}

/// A model of `kind` and `shape`, with its kind's settings: SAGE's aggregator `aggr`,
/// GAT's `gat` (GCN reads neither).
pub fn model(
    kind: espalier::nn::ModelKind,
    aggr: espalier::nn::Aggregator,
    gat: espalier::nn::GatConfig,
    shape: espalier::nn::ModelShape,
) -> espalier::nn::ModelConfig {
    use espalier::nn::{GcnConfig, KindConfig, ModelConfig, ModelKind, SageConfig};
    let settings: Arc<dyn KindConfig> = match kind {
        ModelKind::Sage => Arc::new(SageConfig { aggr }),
        ModelKind::Gcn => Arc::new(GcnConfig),
        ModelKind::Gat => Arc::new(gat),
    };
    ModelConfig::with_settings(shape, settings)
}
