//! The prelude's workgroup reductions (`wg_max64`, `wg_sum64` in `shaders/prelude.wgsl`) in
//! both variants on every wgpu adapter: the shared-memory fallback forced, then subgroup
//! operations where the adapter has them, each against the CPU, forward and backward,
//! through the ops that call them (log_softmax, cross_entropy; sum_dim / sum_all over long
//! rows, whose wg_sum256 has one variant, as a control; segment_softmax, whose long rows
//! take a workgroup each, on rows of 0 to 1,500 edges). One test: the variant is a switch
//! of the adapter's context, which the threads of this binary share.

mod common;

use std::sync::Arc;

use common::{assert_close, parity_on, rand_f32, rand_idx, ATOL, RTOL};
use espalier::device::wgpu::{context, Context};
use espalier::device::wgpu_shader::Reductions;
use espalier::graph::Block;
use espalier::{ops, Device, Tensor};

/// Puts the context's choices (subgroups, long rows) back when the test ends, also on a
/// failed check.
struct Restore(std::sync::Arc<Context>, bool, u32);

impl Drop for Restore {
    fn drop(&mut self) {
        self.0.set_subgroups(self.1).unwrap();
        self.0.set_long_row(self.2);
    }
}

/// `want` and `got` agree: NaN where the other is NaN, infinities equal, the rest close.
fn same_specials(tag: &str, want: &[f32], got: &[f32]) {
    assert_eq!(want.len(), got.len(), "{tag}: lengths differ");
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
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

/// A block whose dst rows have `degrees` in-edges from 2,000 src rows (duplicates
/// included).
fn rows_of(degrees: &[usize]) -> Arc<Block> {
    let num_src = 2000;
    let mut indptr = vec![0u32];
    let mut indices = Vec::new();
    for (d, &k) in degrees.iter().enumerate() {
        indices.extend((0..k).map(|i| ((d * 7 + i * 13) % num_src) as u32));
        indptr.push(indices.len() as u32);
    }
    Arc::new(Block::new(num_src, indptr, indices, (0..num_src as u32).collect()).unwrap())
}

/// segment_softmax forward and backward on rows of 0 to 1,500 edges (one invocation per
/// row below 64 edges, a workgroup per row from 64: the test sets that threshold), 1 and
/// 3 heads; then NaN and infinities in short and long rows.
fn softmax_cases(tag: &str, dev: Device) {
    let b = rows_of(&[0, 1, 5, 63, 64, 65, 1000, 1500, 2]);
    for heads in [1, 3] {
        let e = b.num_edges();
        let x = ops::mul_scalar(&rand_f32(&[e, heads], 110 + heads as u64), 6.0).unwrap();
        let g = rand_f32(&[e, heads], 120 + heads as u64);
        let y = ops::segment_softmax(&x, &b).unwrap();
        let dx = ops::segment_softmax_backward(&y, &g, &b).unwrap();
        let on = |t: &Tensor| t.clone().to_device(dev).unwrap();
        let y2 = ops::segment_softmax(&on(&x), &b).unwrap();
        let dx2 = ops::segment_softmax_backward(&on(&y), &on(&g), &b).unwrap();
        for (what, want, got) in [("forward", &y, &y2), ("backward", &dx, &dx2)] {
            assert_close(
                &format!("{tag} segment_softmax {what} H={heads}"),
                &want.to_vec_f32().unwrap(),
                &got.to_vec_f32().unwrap(),
                RTOL,
                ATOL,
            );
        }
    }
    // Long rows (100 edges): huge finite scores, a NaN, a +inf, nothing but -inf, -inf
    // beside finite scores; then short rows (3 edges) alike.
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let specials: [&dyn Fn(usize) -> f32; 5] = [
        &|i| 1000.0 + i as f32,
        &|i| if i == 37 { nan } else { i as f32 },
        &|i| if i == 2 { inf } else { 0.5 },
        &|_| -inf,
        &|i| if i % 2 == 0 { -inf } else { i as f32 / 10.0 },
    ];
    for len in [100, 3] {
        let b = rows_of(&[len; 5]);
        let v: Vec<f32> = specials.iter().flat_map(|f| (0..len).map(f)).collect();
        let x = Tensor::from_f32(v, &[5 * len, 1], Device::Cpu).unwrap();
        let want = ops::segment_softmax(&x, &b).unwrap().to_vec_f32().unwrap();
        let got = ops::segment_softmax(&x.clone().to_device(dev).unwrap(), &b)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        same_specials(
            &format!("{tag} segment_softmax specials, rows of {len}"),
            &want,
            &got,
        );
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
    same_specials(tag, &want, &got);
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
    softmax_cases(tag, dev);
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
        let _restore = Restore(ctx.clone(), ctx.subgroups(), ctx.long_row());
        // segment_softmax's long rows take a workgroup each from 64 edges, as on a GPU
        // (a software adapter keeps them on one invocation by default).
        ctx.set_long_row(64);
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
        // log_softmax (both entries), cross_entropy's rows and segment_softmax's long rows
        // (both entries).
        assert!(
            ctx.pipelines_built(Reductions::Subgroup) >= before + 5,
            "the subgroup variant was not built"
        );
    }
}
