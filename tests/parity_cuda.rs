//! What only the CUDA backend has (cuBLAS beside its fallback GEMM kernel, pinned staging
//! of large uploads, the start-up probe), and the half-precision feature path on every GPU
//! backend. Parity of the ops themselves is in the other `parity_*` files, which run on
//! every available GPU backend, CUDA included.

mod common;

use std::sync::Arc;

use common::{assert_close, gpu_devices, parity, rand_f32, ATOL, RTOL};
use espalier::graph::Block;
use espalier::rng::Rng;
use espalier::{ops, DType, Device, Error, Tensor};

/// The CUDA device, or `None` after printing why the caller skips.
fn cuda() -> Option<Device> {
    match Device::Cuda(0).memory() {
        Ok(_) => Some(Device::Cuda(0)),
        Err(e) => {
            common::skip_backend("cuda", e);
            None
        }
    }
}

#[test]
fn a_missing_cuda_backend_is_an_error_with_its_reason() {
    match Device::Cuda(0).memory() {
        Ok(_) => {
            let devs = espalier::device::cuda::devices().unwrap();
            assert!(!devs.is_empty());
            println!("CUDA present: {:?}", devs[0]);
        }
        Err(e) => {
            assert!(matches!(e, Error::BackendUnavailable { .. }), "{e}");
            assert!(!e.to_string().is_empty());
            // Every entry point reports it; none panics.
            let t = Tensor::from_f32(vec![1.0; 4], &[4], Device::Cuda(0));
            assert!(matches!(t, Err(Error::BackendUnavailable { .. })));
            let z = Tensor::zeros(&[4], DType::F32, Device::Cuda(0));
            assert!(matches!(z, Err(Error::BackendUnavailable { .. })));
            assert!(Device::Cuda(0).sync().is_err());
            assert!(espalier::device::cuda::devices().is_err());
        }
    }
}

#[test]
fn matmul_fallback_kernel_matches_the_cpu() {
    let Some(dev) = cuda() else { return };
    let ctx = espalier::device::cuda::context(0).unwrap();
    let shapes = [
        (1, 1, 1),
        (63, 257, 5),
        (257, 63, 129),
        (130, 1, 3),
        (200, 70, 300),
    ];
    for kernel in [true, false] {
        ctx.force_gemm_kernel(kernel);
        for (i, &(m, k, n)) in shapes.iter().enumerate() {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a_shape = if ta { [k, m] } else { [m, k] };
                let b_shape = if tb { [n, k] } else { [k, n] };
                let a = rand_f32(&a_shape, 40 + i as u64);
                let b = rand_f32(&b_shape, 50 + i as u64);
                let want = ops::matmul(&a, &b, ta, tb).unwrap().to_vec_f32().unwrap();
                let got = ops::matmul(
                    &a.to_device(dev).unwrap(),
                    &b.to_device(dev).unwrap(),
                    ta,
                    tb,
                )
                .unwrap()
                .to_vec_f32()
                .unwrap();
                let what = if kernel { "kernel" } else { "cuBLAS" };
                assert_close(
                    &format!("matmul ({what}) {m}x{k}x{n} ta={ta} tb={tb}"),
                    &want,
                    &got,
                    RTOL,
                    ATOL,
                );
            }
        }
    }
    ctx.force_gemm_kernel(false);
}

#[test]
fn large_uploads_round_trip_exactly_through_pinned_staging() {
    let Some(dev) = cuda() else { return };
    // Several whole 4 MiB staging chunks (both buffers in turn) and a tail, one chunk
    // exactly, and a small upload.
    for n in [(8 << 20) | 3, 1 << 20, 5] {
        let x = rand_f32(&[n], 60);
        let back = x.clone().to_device(dev).unwrap().to_vec_f32().unwrap();
        assert!(
            back == x.to_vec_f32().unwrap(),
            "{n} values changed in transit"
        );
    }
}

/// Values a feature matrix holds, as f16 and bf16, with an odd count.
fn halves(n: usize, seed: u64) -> (Vec<half::f16>, Vec<half::bf16>) {
    let v = rand_f32(&[n], seed).to_vec_f32().unwrap();
    (
        v.iter().map(|&x| half::f16::from_f32(x * 3.0)).collect(),
        v.iter().map(|&x| half::bf16::from_f32(x * 3e5)).collect(),
    )
}

#[test]
fn widen_matches_the_cpu_exactly_on_every_gpu() {
    // Odd counts leave half a word; the largest passes 65,535 workgroups of word pairs
    // and, widened, a 128 MiB storage binding.
    for n in [1, 63, 257, 4097, 2 * 65_536 * 256 + 3] {
        let (h, b) = halves(n, n as u64);
        let th = Tensor::from_f16(h, &[n], Device::Cpu).unwrap();
        let tb = Tensor::from_bf16(b, &[n], Device::Cpu).unwrap();
        let want_h = ops::widen(&th).unwrap().to_vec_f32().unwrap();
        let want_b = ops::widen(&tb).unwrap().to_vec_f32().unwrap();
        for dev in gpu_devices() {
            for (t, want, what) in [(&th, &want_h, "f16"), (&tb, &want_b, "bf16")] {
                let d = t.clone().to_device(dev).unwrap();
                assert_eq!(d.dtype(), t.dtype());
                // The half tensor itself survives the round trip.
                assert!(
                    d.to_vec_f32().unwrap() == *want,
                    "{what} {n} upload on {dev}"
                );
                let got = ops::widen(&d).unwrap();
                assert_eq!((got.dtype(), got.device()), (DType::F32, dev));
                assert!(
                    got.to_vec_f32().unwrap() == *want,
                    "widen {what} of {n} values on {dev} differs from the CPU"
                );
            }
        }
    }
}

#[test]
fn widen_of_every_f16_bit_pattern_matches_the_cpu_bit_for_bit() {
    // Zeros of both signs, subnormals, infinities and NaNs (the CPU's conversion makes a NaN
    // quiet): every one of the 65,536 values.
    let h: Vec<half::f16> = (0..=u16::MAX).map(half::f16::from_bits).collect();
    let t = Tensor::from_f16(h, &[65_536], Device::Cpu).unwrap();
    let bits = |t: &Tensor| -> Vec<u32> {
        let v = ops::widen(t).unwrap().to_vec_f32().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    };
    let want = bits(&t);
    for dev in gpu_devices() {
        let got = bits(&t.clone().to_device(dev).unwrap());
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{dev}: f16 bits {i:#06x} widen to {:#010x}, the CPU gives {:#010x}",
                got[i], want[i]
            );
        }
    }
}

/// A block of `num_dst` dst rows over `num_src` sources with power-law-ish in-degrees
/// (some rows empty, one hub of 300 edges), duplicates and self-loops included.
fn skewed_block(num_src: usize, num_dst: usize, seed: u64) -> Arc<Block> {
    let mut rng = Rng::new(seed);
    let mut indptr = vec![0u32];
    let mut indices = Vec::new();
    for d in 0..num_dst {
        let deg = if d == 1 {
            300
        } else {
            (rng.uniform().powi(3) * 40.0) as usize
        };
        for _ in 0..deg {
            indices.push(rng.below(num_src as u64) as u32);
        }
        indptr.push(indices.len() as u32);
    }
    let src = (0..num_src as u32).collect();
    Arc::new(Block::new(num_src, indptr, indices, src).unwrap())
}

#[test]
fn graph_kernels_at_vector_widths_match_the_cpu() {
    // Widths that are multiples of 4 take the CUDA kernels' float4 paths; 132 also makes
    // lanes stride past one warp's 128 values.
    let b = skewed_block(500, 200, 70);
    let e = b.num_edges();
    for f in [4, 64, 132] {
        let x = rand_f32(&[500, f], 71 + f as u64);
        let bb = b.clone();
        parity(
            &format!("segment_sum f={f}"),
            &move |t| ops::segment_sum(&t[0], &bb),
            std::slice::from_ref(&x),
        );
        let bb = b.clone();
        parity(
            &format!("segment_mean f={f}"),
            &move |t| ops::segment_mean(&t[0], &bb),
            std::slice::from_ref(&x),
        );
        let bb = b.clone();
        parity(
            &format!("segment_max f={f}"),
            &move |t| ops::segment_max(&t[0], &bb),
            std::slice::from_ref(&x),
        );
        // One attention weight per edge and head: f / 4 heads of 4 columns.
        let a = rand_f32(&[e, f / 4], 72 + f as u64);
        let bb = b.clone();
        parity(
            &format!("segment_weighted_sum f={f}"),
            &move |t| ops::segment_weighted_sum(&t[0], &t[1], &bb),
            &[x.clone(), a],
        );
    }
}
