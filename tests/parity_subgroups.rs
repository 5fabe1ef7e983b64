//! The prelude's workgroup reductions (`wg_max64`, `wg_sum64` in `shaders/prelude.wgsl`) in
//! both variants on every wgpu adapter: the shared-memory fallback forced, then subgroup
//! operations where the adapter has them, each against the CPU, forward and backward,
//! through the ops that call them (log_softmax, cross_entropy; sum_dim / sum_all over long
//! rows, whose wg_sum256 has one variant, as a control). One test: the variant is a switch
//! of the adapter's context, which the threads of this binary share.

mod common;

use common::{parity_on, rand_f32, rand_idx, ATOL, RTOL};
use espalier::device::wgpu::{context, Context};
use espalier::device::wgpu_shader::Reductions;
use espalier::{ops, Device, Tensor};

/// Puts the context's choice back when the test ends, also on a failed check.
struct Restore(std::sync::Arc<Context>, bool);

impl Drop for Restore {
    fn drop(&mut self) {
        self.0.set_subgroups(self.1).unwrap();
    }
}

/// Rows with a huge logit, -inf, nothing but -inf, a NaN, +inf: NaN and infinities must
/// land where the CPU puts them.
fn edge_values(tag: &str, dev: Device) {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    #[rustfmt::skip]
    let v = vec![
        1000., 1001., 999.,
        -inf, 0., 1.,
        -inf, -inf, -inf,
        1., nan, 2.,
        inf, 0., 1.,
    ];
    let x = Tensor::from_f32(v, &[5, 3], Device::Cpu).unwrap();
    let want = ops::log_softmax(&x).unwrap().to_vec_f32().unwrap();
    let got = ops::log_softmax(&x.clone().to_device(dev).unwrap())
        .unwrap()
        .to_vec_f32()
        .unwrap();
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        if a.is_nan() || b.is_nan() {
            assert!(a.is_nan() && b.is_nan(), "{tag} at {i}: cpu {a} vs {b}");
        } else if a.is_infinite() || b.is_infinite() {
            assert_eq!(a, b, "{tag} at {i}");
        } else {
            assert!(
                (a - b).abs() <= ATOL + RTOL * a.abs(),
                "{tag} at {i}: {a} vs {b}"
            );
        }
    }
}

fn cases(tag: &str, dev: Device) {
    for (i, s) in [[1, 1], [63, 257], [4097, 5], [2, 1000]].iter().enumerate() {
        let x = ops::mul_scalar(&rand_f32(s, 70 + i as u64), 8.0).unwrap();
        parity_on(
            &format!("{tag} log_softmax {s:?}"),
            &|x| ops::log_softmax(&x[0]),
            &[x],
            &[dev],
        );
    }
    edge_values(&format!("{tag} log_softmax edge values"), dev);
    for (i, &(n, c)) in [(63, 257), (257, 10), (5, 1000)].iter().enumerate() {
        let x = ops::mul_scalar(&rand_f32(&[n, c], 80 + i as u64), 5.0).unwrap();
        let y = rand_idx(n, c as u32, 90 + i as u64);
        parity_on(
            &format!("{tag} cross_entropy {n}x{c}"),
            &|x| ops::cross_entropy(&x[0], &x[1], None),
            &[x, y],
            &[dev],
        );
    }
    // Rows longer than 32 columns take sum_rows_f32 (a 256-thread workgroup per 1,024
    // columns); sum_all of a large tensor repeats it over the block sums.
    for (i, s) in [[3, 5000], [300, 33], [1, 70_000]].iter().enumerate() {
        let x = rand_f32(s, 100 + i as u64);
        parity_on(
            &format!("{tag} sum_dim1 {s:?}"),
            &|x| ops::sum_dim(&x[0], 1),
            std::slice::from_ref(&x),
            &[dev],
        );
        parity_on(
            &format!("{tag} sum_all {s:?}"),
            &|x| ops::sum_all(&x[0]),
            &[x],
            &[dev],
        );
    }
}

#[test]
fn reductions_match_the_cpu_with_the_fallback_and_with_subgroups() {
    for dev in common::wgpu_devices() {
        let Device::Wgpu(index) = dev else {
            unreachable!("wgpu_devices gives wgpu devices")
        };
        let ctx = context(index).unwrap();
        let _restore = Restore(ctx.clone(), ctx.subgroups());
        let has = ctx.features.contains(wgpu::Features::SUBGROUP);
        ctx.set_subgroups(false).unwrap();
        assert!(!ctx.subgroups());
        let shared = ctx.pipelines_built(Reductions::Shared);
        cases("shared-memory reductions", dev);
        assert!(ctx.pipelines_built(Reductions::Shared) > shared);
        if !has {
            assert!(ctx.set_subgroups(true).is_err());
            println!(
                "skipping the subgroup variant on {dev}: {} has no Features::SUBGROUP",
                ctx.info.name
            );
            continue;
        }
        ctx.set_subgroups(true).unwrap();
        let before = ctx.pipelines_built(Reductions::Subgroup);
        cases("subgroup reductions", dev);
        // log_softmax (both entries) and cross_entropy's rows.
        assert!(
            ctx.pipelines_built(Reductions::Subgroup) >= before + 3,
            "the subgroup variant was not built"
        );
    }
}
