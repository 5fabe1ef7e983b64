//! Parity of the dense ops: every op, forward and backward, on every available GPU backend against the CPU
//! backend, at awkward sizes. A missing backend is skipped with a printed reason.
//!
//! Each case is a function of some input tensors; float inputs become leaves. The output is
//! reduced with fixed random weights to a scalar whose backward gives every input gradient,
//! then outputs and gradients are compared with a relative plus absolute tolerance.

mod common;

use common::{
    assert_close, gpu_devices, parity, rand_away_f32, rand_f32, rand_idx, rand_ints, split_parity,
    wgpu_devices, BindingCap, ATOL, RTOL,
};
use espalier::{ops, DType, Device, Error, Tensor};

/// The awkward lengths every elementwise op is tried at.
const SIZES: [usize; 4] = [1, 63, 257, 4097];

#[test]
fn binary_ops_all_broadcasts() {
    for &n in &SIZES {
        let rows = n.div_ceil(16);
        let a = rand_f32(&[rows, 16], n as u64);
        let cases = [
            ("same", rand_away_f32(&[rows, 16], 1)),
            ("row", rand_away_f32(&[16], 2)),
            ("col", rand_away_f32(&[rows, 1], 3)),
            ("scalar", rand_away_f32(&[1], 4)),
        ];
        for (bc, b) in &cases {
            let inputs = [a.clone(), b.clone()];
            parity(
                &format!("add/{bc}/{n}"),
                &|x| ops::add(&x[0], &x[1]),
                &inputs,
            );
            parity(
                &format!("sub/{bc}/{n}"),
                &|x| ops::sub(&x[0], &x[1]),
                &inputs,
            );
            parity(
                &format!("mul/{bc}/{n}"),
                &|x| ops::mul(&x[0], &x[1]),
                &inputs,
            );
            parity(
                &format!("div/{bc}/{n}"),
                &|x| ops::div(&x[0], &x[1]),
                &inputs,
            );
        }
    }
}

#[test]
fn one_dispatch_over_65535_workgroups() {
    // 65,536 workgroups of 256 threads plus one element: the grid must go 2-D.
    let n = 65_536 * 256 + 1;
    let a = rand_f32(&[n], 5);
    let b = rand_f32(&[n], 6);
    let expected = ops::add(&a, &b).unwrap().to_vec_f32().unwrap();
    for dev in gpu_devices() {
        let (x, y) = (
            a.clone().to_device(dev).unwrap(),
            b.clone().to_device(dev).unwrap(),
        );
        let got = ops::add(&x, &y).unwrap().to_vec_f32().unwrap();
        assert_close(
            &format!("add over {n} elements on {dev}"),
            &expected,
            &got,
            0.0,
            0.0,
        );
    }
}

#[test]
fn add_assign_in_place() {
    for dev in gpu_devices() {
        let a = rand_f32(&[257], 7);
        let b = rand_f32(&[257], 8);
        let expected = ops::add(&a, &b).unwrap().to_vec_f32().unwrap();
        let d = a.to_device(dev).unwrap();
        ops::add_assign(&d, &b.to_device(dev).unwrap()).unwrap();
        assert_close(
            &format!("add_assign on {dev}"),
            &expected,
            &d.to_vec_f32().unwrap(),
            0.0,
            0.0,
        );
    }
}

/// Values in (0.5, 1.5]: inputs of `log`.
fn positive(shape: &[usize], seed: u64) -> Tensor {
    let v = rand_away_f32(shape, seed).to_vec_f32().unwrap();
    Tensor::from_f32(v.iter().map(|x| x.abs()).collect(), shape, Device::Cpu).unwrap()
}

/// Asserts that two f32 vectors are bit-identical (NaN included).
fn assert_bits(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!(
            "{what}: first difference at {i}: cpu {} vs device {}",
            a[i], b[i]
        );
    }
}

#[test]
fn unary_ops_forward_and_fused_backward() {
    type F = fn(&Tensor) -> espalier::Result<Tensor>;
    let cases: [(&str, F); 10] = [
        ("neg", ops::neg),
        ("relu", ops::relu),
        ("leaky_relu", |x| ops::leaky_relu(x, 0.1)),
        ("elu", |x| ops::elu(x, 0.7)),
        ("sigmoid", ops::sigmoid),
        ("tanh", ops::tanh),
        ("exp", ops::exp),
        ("log", ops::log),
        ("add_scalar", |x| ops::add_scalar(x, 0.25)),
        ("mul_scalar", |x| ops::mul_scalar(x, -1.5)),
    ];
    for &n in &SIZES {
        for (name, f) in cases {
            let x = if name == "log" {
                positive(&[n], n as u64)
            } else {
                // Scaled so that tanh and sigmoid reach their flat tails too.
                ops::mul_scalar(&rand_away_f32(&[n], n as u64), 6.0).unwrap()
            };
            parity(&format!("{name}/{n}"), &move |x| f(&x[0]), &[x]);
        }
    }
}

#[test]
fn tanh_and_sigmoid_saturate_without_nan() {
    let x = Tensor::from_f32(vec![-100.0, -30.0, 0.0, 30.0, 100.0], &[5], Device::Cpu).unwrap();
    for dev in gpu_devices() {
        let xd = x.clone().to_device(dev).unwrap();
        for (name, f) in [
            ("tanh", ops::tanh as fn(&Tensor) -> espalier::Result<Tensor>),
            ("sigmoid", ops::sigmoid),
        ] {
            let want = f(&x).unwrap().to_vec_f32().unwrap();
            let got = f(&xd).unwrap().to_vec_f32().unwrap();
            // Subnormal results may flush to zero on a GPU: hence the absolute tolerance.
            assert!(got.iter().all(|v| !v.is_nan()), "{name} on {dev}: {got:?}");
            assert_close(&format!("{name} tails on {dev}"), &want, &got, 1e-6, ATOL);
        }
    }
}

#[test]
fn matmul_shapes_and_transposes() {
    let shapes = [
        (1, 1, 1),
        (63, 257, 5),
        (257, 63, 129),
        (1, 63, 257),
        (130, 1, 3),
        (64, 64, 64),
    ];
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a_shape = if ta { [k, m] } else { [m, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            let a = rand_f32(&a_shape, 10 + i as u64);
            let b = rand_f32(&b_shape, 20 + i as u64);
            parity(
                &format!("matmul {m}x{k}x{n} ta={ta} tb={tb}"),
                &move |x| ops::matmul(&x[0], &x[1], ta, tb),
                &[a, b],
            );
        }
    }
}

#[test]
fn matmul_with_more_row_tiles_than_one_grid_dimension() {
    // 65,536 tiles of 64 rows: the row blocks fold into the grid's z dimension.
    let m = 64 * 65_535 + 1;
    let a = rand_f32(&[m, 1], 30);
    let b = rand_f32(&[1, 2], 31);
    let want = ops::matmul(&a, &b, false, false)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    for dev in gpu_devices() {
        let (x, y) = (
            a.clone().to_device(dev).unwrap(),
            b.clone().to_device(dev).unwrap(),
        );
        let got = ops::matmul(&x, &y, false, false)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert_close(&format!("matmul {m}x1x2 on {dev}"), &want, &got, RTOL, ATOL);
    }
}

#[test]
fn reductions_and_expand() {
    // Short and long rows, tall and wide matrices: one pass and several.
    let shapes = [
        [1, 1],
        [63, 257],
        [257, 63],
        [4097, 3],
        [3, 4097],
        [1, 70_000],
        [5000, 2],
    ];
    for (i, s) in shapes.iter().enumerate() {
        let x = rand_f32(s, 40 + i as u64);
        let inputs = [x];
        let tag = format!("{}x{}", s[0], s[1]);
        parity(
            &format!("sum_dim0/{tag}"),
            &|x| ops::sum_dim(&x[0], 0),
            &inputs,
        );
        parity(
            &format!("sum_dim1/{tag}"),
            &|x| ops::sum_dim(&x[0], 1),
            &inputs,
        );
        parity(
            &format!("mean_dim0/{tag}"),
            &|x| ops::mean_dim(&x[0], 0),
            &inputs,
        );
        parity(&format!("sum_all/{tag}"), &|x| ops::sum_all(&x[0]), &inputs);
        parity(
            &format!("mean_all/{tag}"),
            &|x| ops::mean_all(&x[0]),
            &inputs,
        );
    }
    for &n in &SIZES {
        let v = rand_f32(&[n], 50);
        parity(
            &format!("expand0/{n}"),
            &|x| ops::expand_dim(&x[0], 0, 7),
            std::slice::from_ref(&v),
        );
        parity(
            &format!("expand1/{n}"),
            &|x| ops::expand_dim(&x[0], 1, 5),
            &[v],
        );
    }
    // Empty extents sum to zeros.
    parity(
        "sum_dim0/0x5",
        &|x| ops::sum_dim(&x[0], 0),
        &[rand_f32(&[0, 5], 1)],
    );
    parity(
        "sum_dim1/5x0",
        &|x| ops::sum_dim(&x[0], 1),
        &[rand_f32(&[5, 0], 1)],
    );
}

#[test]
fn reshape_views_share_storage_on_the_device() {
    let x = rand_f32(&[63, 4], 60);
    parity(
        "reshape",
        &|x| ops::sum_dim(&ops::reshape(&x[0], &[4, 63])?, 0),
        std::slice::from_ref(&x),
    );
    for dev in gpu_devices() {
        let d = x.clone().to_device(dev).unwrap();
        let r = ops::reshape(&d, &[252]).unwrap();
        assert!(r.shares_storage(&d));
        assert_eq!(r.to_vec_f32().unwrap(), x.to_vec_f32().unwrap());
    }
}

#[test]
fn log_softmax_rows() {
    for (i, s) in [[1, 1], [63, 257], [257, 10], [4097, 5], [2, 1000]]
        .iter()
        .enumerate()
    {
        let x = ops::mul_scalar(&rand_f32(s, 70 + i as u64), 8.0).unwrap();
        parity(
            &format!("log_softmax/{}x{}", s[0], s[1]),
            &|x| ops::log_softmax(&x[0]),
            &[x],
        );
    }
}

#[test]
fn log_softmax_and_cross_entropy_edge_values() {
    let inf = f32::INFINITY;
    let v = vec![
        1000.,
        1001.,
        999., // huge logits
        -inf,
        0.,
        1., // a -inf logit
        -inf,
        -inf,
        -inf, // nothing but -inf
        1.,
        f32::NAN,
        2., // NaN propagates
        inf,
        0.,
        1., // +inf
    ];
    let x = Tensor::from_f32(v, &[5, 3], Device::Cpu).unwrap();
    let want = ops::log_softmax(&x).unwrap().to_vec_f32().unwrap();
    for dev in gpu_devices() {
        let got = ops::log_softmax(&x.clone().to_device(dev).unwrap()).unwrap();
        // Infinities must match exactly; assert_close would compute inf - inf.
        let got = got.to_vec_f32().unwrap();
        for (i, (a, b)) in want.iter().zip(&got).enumerate() {
            if a.is_infinite() {
                assert_eq!(a, b, "log_softmax edges on {dev} at {i}");
            }
        }
        let finite = |v: &[f32]| -> Vec<f32> {
            v.iter()
                .map(|x| if x.is_infinite() { 0.0 } else { *x })
                .collect()
        };
        assert_close(
            &format!("log_softmax edges on {dev}"),
            &finite(&want),
            &finite(&got),
            RTOL,
            ATOL,
        );
    }
    let x = Tensor::from_f32(vec![1000., 1000., 999., 0.], &[2, 2], Device::Cpu).unwrap();
    let y = Tensor::from_u32(vec![0, 1], &[2], Device::Cpu).unwrap();
    parity(
        "cross_entropy huge logits",
        &|x| ops::cross_entropy(&x[0], &x[1], None),
        &[x, y],
    );
}

#[test]
fn cross_entropy_with_and_without_weights() {
    for (i, &(n, c)) in [(1, 1), (63, 257), (257, 10), (4097, 7)].iter().enumerate() {
        let x = ops::mul_scalar(&rand_f32(&[n, c], 80 + i as u64), 5.0).unwrap();
        let y = rand_idx(n, c as u32, 90 + i as u64);
        let w = positive(&[n], 100 + i as u64);
        parity(
            &format!("cross_entropy/{n}x{c}"),
            &|x| ops::cross_entropy(&x[0], &x[1], None),
            &[x.clone(), y.clone()],
        );
        parity(
            &format!("cross_entropy weighted/{n}x{c}"),
            &|x| ops::cross_entropy(&x[0], &x[1], Some(&x[2])),
            &[x, y, w],
        );
    }
}

#[test]
fn cross_entropy_bad_label_is_an_error_on_the_device() {
    for dev in gpu_devices() {
        let x = rand_f32(&[300, 4], 110).to_device(dev).unwrap();
        let mut labels: Vec<u32> = (0..300).map(|i| i % 4).collect();
        labels[257] = 4;
        labels[299] = 1_000_000;
        let y = Tensor::from_u32(labels, &[300], dev).unwrap();
        match ops::cross_entropy(&x, &y, None) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("row 257") && msg.contains("label 4"), "{msg}")
            }
            other => panic!("expected InvalidArgument on {dev}, got {other:?}"),
        }
    }
}

#[test]
fn argmax_rows_ties_and_nan() {
    let mut v: Vec<f32> = rand_f32(&[4097, 10], 120)
        .to_vec_f32()
        .unwrap()
        .iter()
        .map(|x| (x * 3.0).round()) // few distinct values: many ties
        .collect();
    v[5 * 10 + 7] = f32::NAN;
    v[5 * 10 + 8] = f32::NAN;
    let cases = [
        Tensor::from_f32(v, &[4097, 10], Device::Cpu).unwrap(),
        rand_f32(&[1, 1], 121),
        rand_f32(&[63, 257], 122),
        Tensor::from_f32(vec![f32::NEG_INFINITY; 6], &[2, 3], Device::Cpu).unwrap(),
    ];
    for x in &cases {
        let want = ops::argmax_rows(x).unwrap().to_vec_u32().unwrap();
        for dev in gpu_devices() {
            let got = ops::argmax_rows(&x.clone().to_device(dev).unwrap())
                .unwrap()
                .to_vec_u32()
                .unwrap();
            assert_eq!(want, got, "argmax_rows {:?} on {dev}", x.shape());
        }
    }
}

#[test]
fn dropout_masks_are_bit_identical() {
    for (i, s) in [[1, 1], [63, 257], [4097, 17]].iter().enumerate() {
        let (r, c) = (s[0], s[1]);
        let x = rand_f32(s, 130 + i as u64);
        let ids = rand_idx(r, u32::MAX, 140 + i as u64);
        for p in [0.1, 0.5] {
            let key = espalier::ops::dropout_key(7, i as u64, 1);
            let want = ops::dropout(&x, p, key, None)
                .unwrap()
                .to_vec_f32()
                .unwrap();
            let want_ids = ops::dropout(&x, p, key, Some(&ids))
                .unwrap()
                .to_vec_f32()
                .unwrap();
            for dev in gpu_devices() {
                let xd = x.clone().to_device(dev).unwrap();
                let idd = ids.clone().to_device(dev).unwrap();
                let got = ops::dropout(&xd, p, key, None).unwrap();
                assert_bits(
                    &format!("dropout {r}x{c} p={p} on {dev}"),
                    &want,
                    &got.to_vec_f32().unwrap(),
                );
                let got = ops::dropout(&xd, p, key, Some(&idd)).unwrap();
                assert_bits(
                    &format!("dropout with ids {r}x{c} p={p} on {dev}"),
                    &want_ids,
                    &got.to_vec_f32().unwrap(),
                );
            }
        }
        parity(
            &format!("dropout grad/{r}x{c}"),
            &|x| ops::dropout(&x[0], 0.3, 11, Some(&x[1])),
            &[x, ids],
        );
    }
}

#[test]
fn concat_and_slice_both_dims() {
    let rows = [
        rand_f32(&[1, 63], 150),
        rand_f32(&[63, 63], 151),
        rand_f32(&[257, 63], 152),
    ];
    parity(
        "concat dim 0",
        &|x| ops::concat(&[&x[0], &x[1], &x[2]], 0),
        &rows,
    );
    let cols = [
        rand_f32(&[257, 1], 153),
        rand_f32(&[257, 63], 154),
        rand_f32(&[257, 5], 155),
    ];
    parity(
        "concat dim 1",
        &|x| ops::concat(&[&x[0], &x[1], &x[2]], 1),
        &cols,
    );
    let x = rand_f32(&[257, 63], 156);
    for (dim, start, len) in [
        (0, 5, 100),
        (0, 0, 257),
        (0, 256, 1),
        (1, 3, 60),
        (1, 0, 1),
        (1, 62, 1),
    ] {
        parity(
            &format!("slice dim {dim} {start}+{len}"),
            &move |x| ops::slice(&x[0], dim, start, len),
            std::slice::from_ref(&x),
        );
    }
    // u32 tensors move as words too.
    let idx = common::rand_idx(257 * 3, 1000, 157);
    let idx = ops::reshape(&idx, &[257, 3]).unwrap();
    for dev in gpu_devices() {
        let d = idx.clone().to_device(dev).unwrap();
        for dim in [0, 1] {
            let want = ops::concat(&[&idx, &idx], dim)
                .unwrap()
                .to_vec_u32()
                .unwrap();
            let got = ops::concat(&[&d, &d], dim).unwrap().to_vec_u32().unwrap();
            assert_eq!(want, got, "u32 concat dim {dim} on {dev}");
            let want = ops::slice(&idx, dim, 1, 2).unwrap().to_vec_u32().unwrap();
            let got = ops::slice(&d, dim, 1, 2).unwrap().to_vec_u32().unwrap();
            assert_eq!(want, got, "u32 slice dim {dim} on {dev}");
        }
    }
}

/// Runs `steps` optimizer updates from the same parameters and gradients on `dev`.
fn optimize(dev: Device, n: usize, steps: usize, kind: &str) -> Vec<f32> {
    let p = rand_f32(&[n], 160).to_device(dev).unwrap();
    let state: Vec<Tensor> = (0..2)
        .map(|_| Tensor::zeros(&[n], DType::F32, dev).unwrap())
        .collect();
    for t in 1..=steps {
        let g = rand_f32(&[n], 170 + t as u64).to_device(dev).unwrap();
        match kind {
            "sgd" | "momentum" => {
                let momentum = if kind == "sgd" { 0.0 } else { 0.9 };
                let h = ops::SgdStep {
                    lr: 0.1,
                    momentum,
                    weight_decay: 0.01,
                    first: t == 1,
                };
                let vel = (momentum > 0.0).then_some(&state[0]);
                ops::sgd_update(&p, &g, vel, h).unwrap();
            }
            _ => {
                let h = ops::AdamStep {
                    lr: 0.01,
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: 1e-8,
                    weight_decay: 0.05,
                    decoupled: kind == "adamw",
                    step: t as u64,
                };
                ops::adam_update(&p, &g, &state[0], &state[1], h).unwrap();
            }
        }
    }
    let mut out = p.to_vec_f32().unwrap();
    for s in &state {
        out.extend(s.to_vec_f32().unwrap());
    }
    out
}

#[test]
fn optimizer_updates_over_several_steps() {
    for kind in ["sgd", "momentum", "adam", "adamw"] {
        for n in [1, 4097] {
            let want = optimize(Device::Cpu, n, 5, kind);
            for dev in gpu_devices() {
                let got = optimize(dev, n, 5, kind);
                assert_close(&format!("{kind}/{n} on {dev}"), &want, &got, RTOL, ATOL);
            }
        }
    }
}

#[test]
fn assign_and_full_on_the_device() {
    for dev in gpu_devices() {
        let src = rand_f32(&[257], 180);
        let dst = Tensor::zeros(&[257], DType::F32, dev).unwrap();
        ops::assign(&dst, &src.clone().to_device(dev).unwrap()).unwrap();
        assert_bits(
            "assign",
            &src.to_vec_f32().unwrap(),
            &dst.to_vec_f32().unwrap(),
        );
        let f = Tensor::full(&[4097], 2.5, DType::F32, dev).unwrap();
        assert!(f.to_vec_f32().unwrap().iter().all(|&v| v == 2.5));
        let z = Tensor::full(&[63], 0.0, DType::F32, dev).unwrap();
        assert!(z.to_vec_f32().unwrap().iter().all(|&v| v == 0.0));
        let u = Tensor::full(&[65], 7.0, DType::U32, dev).unwrap();
        assert_eq!(u.to_vec_u32().unwrap(), vec![7; 65]);
    }
}

#[test]
fn mixing_cpu_and_device_tensors_is_a_device_mismatch() {
    for dev in gpu_devices() {
        let c = rand_f32(&[4, 4], 190);
        let d = c.clone().to_device(dev).unwrap();
        let mismatch = |r: espalier::Result<Tensor>, what: &str| {
            assert!(
                matches!(r, Err(Error::DeviceMismatch { .. })),
                "{what}: expected DeviceMismatch, got {r:?}"
            )
        };
        mismatch(ops::add(&c, &d), "add");
        mismatch(ops::matmul(&d, &c, false, false), "matmul");
        mismatch(ops::concat(&[&d, &c], 0), "concat");
        let y = Tensor::from_u32(vec![0, 1, 2, 3], &[4], Device::Cpu).unwrap();
        mismatch(ops::cross_entropy(&d, &y, None), "cross_entropy");
        mismatch(ops::dropout(&d, 0.5, 1, Some(&y)), "dropout");
        let h = ops::SgdStep {
            lr: 0.1,
            momentum: 0.0,
            weight_decay: 0.0,
            first: true,
        };
        assert!(matches!(
            ops::sgd_update(&d, &c, None, h),
            Err(Error::DeviceMismatch { .. })
        ));
        assert!(matches!(
            ops::assign(&d, &c),
            Err(Error::DeviceMismatch { .. })
        ));
    }
}

/// Every dense op, forward and backward, with each storage binding capped at 1 MiB (so the
/// tensors below take three bindings or more, and some single rows more than one) against
/// the same op unsplit and the CPU. All capped checks of this binary live here: the cap is
/// shared by its threads.
#[test]
fn chunked_launches_match_unchunked() {
    let devs = wgpu_devices();
    if devs.is_empty() {
        common::skip_backend("wgpu", "split parity: no wgpu device");
        return;
    }
    const CAP: u64 = 1 << 20;
    let split =
        |name: &str, f: &common::Op, inputs: &[Tensor]| split_parity(name, f, inputs, CAP, true);
    let (r, c) = (4615, 130);
    let x = rand_away_f32(&[r, c], 200);
    let one = std::slice::from_ref(&x);
    split("chunked relu", &|x| ops::relu(&x[0]), one);
    split("chunked sigmoid", &|x| ops::sigmoid(&x[0]), one);
    let same = rand_away_f32(&[r, c], 201);
    let row = rand_away_f32(&[c], 202);
    let col = rand_away_f32(&[r, 1], 203);
    split(
        "chunked mul",
        &|x| ops::mul(&x[0], &x[1]),
        &[x.clone(), same],
    );
    split(
        "chunked add row",
        &|x| ops::add(&x[0], &x[1]),
        &[x.clone(), row],
    );
    split(
        "chunked div col",
        &|x| ops::div(&x[0], &x[1]),
        &[x.clone(), col],
    );
    // Broadcast operands themselves past the cap: a column of 300,000 rows, a row of
    // 300,000 columns (whose ranges then stay inside rows).
    let (tall_a, tall_col) = (
        rand_f32(&[300_000, 2], 219),
        rand_away_f32(&[300_000, 1], 220),
    );
    let (wide_a, wide_row) = (rand_f32(&[2, 300_000], 221), rand_away_f32(&[300_000], 222));
    split(
        "tall sub col",
        &|x| ops::sub(&x[0], &x[1]),
        &[tall_a.clone(), tall_col],
    );
    split(
        "wide div row",
        &|x| ops::div(&x[0], &x[1]),
        &[wide_a, wide_row],
    );

    // Reductions and their backward, expand_dim: tall, wide (single rows past the cap) and
    // both-ways-large matrices. Integer values keep the long sums exact, so the GPU's
    // order of additions and the CPU's agree.
    let xi = rand_ints(&[r, c], 205);
    let wide = rand_ints(&[3, 300_000], 210);
    let tall = rand_ints(&[300_000, 2], 211);
    for (tag, t) in [("x", &xi), ("wide", &wide), ("tall", &tall)] {
        let one = std::slice::from_ref(t);
        split(&format!("sum_dim0 {tag}"), &|x| ops::sum_dim(&x[0], 0), one);
        split(&format!("sum_dim1 {tag}"), &|x| ops::sum_dim(&x[0], 1), one);
        split(&format!("mean_all {tag}"), &|x| ops::mean_all(&x[0]), one);
    }
    let long = rand_f32(&[300_000], 212);
    let one = std::slice::from_ref(&long);
    split("expand0 long", &|x| ops::expand_dim(&x[0], 0, 2), one);
    split("expand1 long", &|x| ops::expand_dim(&x[0], 1, 3), one);

    // Row-wise ops: one workgroup per row, ranges of rows.
    let logits = ops::mul_scalar(&x, 4.0).unwrap();
    let one = std::slice::from_ref(&logits);
    split("chunked log_softmax", &|x| ops::log_softmax(&x[0]), one);
    let want = ops::argmax_rows(&logits).unwrap().to_vec_u32().unwrap();
    // The cross-entropy mean runs over ranges of 256-row groups: 300,000 rows take several.
    let (n, k) = (300_000, 2);
    let ce_x = ops::mul_scalar(&rand_f32(&[n, k], 213), 5.0).unwrap();
    let ce_y = rand_idx(n, k as u32, 214);
    let ce_w = positive(&[n], 215);
    let cases = [
        (
            "x",
            logits.clone(),
            rand_idx(r, c as u32, 216),
            positive(&[r], 217),
        ),
        ("tall", ce_x.clone(), ce_y, ce_w),
    ];
    for (tag, t, y, w) in cases {
        let inputs = [t, y, w];
        split(
            &format!("cross_entropy {tag}"),
            &|x| ops::cross_entropy(&x[0], &x[1], None),
            &inputs[..2],
        );
        split(
            &format!("cross_entropy weighted {tag}"),
            &|x| ops::cross_entropy(&x[0], &x[1], Some(&x[2])),
            &inputs,
        );
    }
    for dev in &devs {
        let _cap = BindingCap::new(*dev, CAP);
        let d = logits.clone().to_device(*dev).unwrap();
        let got = ops::argmax_rows(&d).unwrap().to_vec_u32().unwrap();
        assert_eq!(want, got, "chunked argmax_rows on {dev}");
        // A bad label past the first ranges is found and named.
        let mut labels = vec![0u32; n];
        labels[280_001] = 7;
        let y = Tensor::from_u32(labels, &[n], *dev).unwrap();
        match ops::cross_entropy(&ce_x.clone().to_device(*dev).unwrap(), &y, None) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(
                    msg.contains("row 280001") && msg.contains("label 7"),
                    "{msg}"
                )
            }
            other => panic!("expected InvalidArgument on {dev}, got {other:?}"),
        }
    }

    // Column slices and concatenation (and the slice's backward, which pads).
    let narrow = rand_f32(&[r, 7], 218);
    split(
        "chunked slice",
        &|x| ops::slice(&x[0], 1, 7, 100),
        one_of(&x),
    );
    split(
        "chunked slice one column",
        &|x| ops::slice(&x[0], 1, 129, 1),
        one_of(&x),
    );
    split(
        "chunked concat dim 1",
        &|x| ops::concat(&[&x[0], &x[1], &x[0]], 1),
        &[x.clone(), narrow],
    );

    // Dropout by row id, also with 300,000 ids (past the cap themselves).
    let ids = rand_idx(r, u32::MAX, 204);
    let tall_ids = rand_idx(300_000, u32::MAX, 223);
    for dev in &devs {
        let _cap = BindingCap::new(*dev, CAP);
        for (t, ids) in [(&x, &ids), (&tall_a, &tall_ids)] {
            let want = ops::dropout(t, 0.4, 5, Some(ids)).unwrap();
            let got = ops::dropout(
                &t.clone().to_device(*dev).unwrap(),
                0.4,
                5,
                Some(&ids.clone().to_device(*dev).unwrap()),
            )
            .unwrap();
            assert_bits(
                &format!("chunked dropout {:?} on {dev}", t.shape()),
                &want.to_vec_f32().unwrap(),
                &got.to_vec_f32().unwrap(),
            );
        }
        let f = Tensor::full(&[r, c], -3.0, DType::F32, *dev).unwrap();
        assert!(f.to_vec_f32().unwrap().iter().all(|&v| v == -3.0));
    }
    // matmul splits rows of A and C (A = X) or k (A = Xᵀ, the weight gradient), which
    // its backward also runs; the other layouts and sizes (both operands transposed, B past
    // the cap beside A = X, C past it beside A = Xᵀ) go through blocks copied apart.
    // Small integers keep every sum exact whatever the order, so the split results must
    // equal the CPU's exactly (a random k = 4615 sum differs by more than the parity
    // tolerance through rounding alone).
    let xi = rand_ints(&[r, c], 205);
    let cases = [
        ("rows", &xi, false, rand_ints(&[c, 20], 206), false),
        ("rows, tb", &xi, false, rand_ints(&[20, c], 207), true),
        ("k", &xi, true, rand_ints(&[r, 20], 208), false),
        ("ta, tb", &xi, true, rand_ints(&[20, r], 209), true),
        (
            "B past the cap",
            &xi,
            false,
            rand_ints(&[c, 3000], 224),
            false,
        ),
        (
            "B past the cap, tb",
            &xi,
            false,
            rand_ints(&[3000, c], 225),
            true,
        ),
    ];
    let wide_k = rand_ints(&[600, 700], 226);
    let cases_c = [(
        "C past the cap",
        &wide_k,
        true,
        rand_ints(&[600, 500], 227),
        false,
    )];
    for (what, a, ta, b, tb) in cases.iter().chain(&cases_c) {
        let want = ops::matmul(a, b, *ta, *tb).unwrap().to_vec_f32().unwrap();
        for dev in &devs {
            let _cap = BindingCap::new(*dev, CAP);
            let (ad, bd) = (
                (*a).clone().to_device(*dev).unwrap(),
                b.clone().to_device(*dev).unwrap(),
            );
            let got = ops::matmul(&ad, &bd, *ta, *tb)
                .unwrap()
                .to_vec_f32()
                .unwrap();
            assert_bits(&format!("chunked matmul ({what}) on {dev}"), &want, &got);
        }
    }
    let want = optimize(Device::Cpu, r * c, 2, "adam");
    for dev in &devs {
        let _cap = BindingCap::new(*dev, CAP);
        let got = optimize(*dev, r * c, 2, "adam");
        assert_close("chunked adam", &want, &got, RTOL, ATOL);
    }
}

fn one_of(t: &Tensor) -> &[Tensor] {
    std::slice::from_ref(t)
}

/// Three Adam steps of a small MLP classifier on `dev`: the losses, then every parameter.
fn train_mlp(dev: Device) -> Vec<f32> {
    use espalier::nn::module::{Activation, Module};
    use espalier::train::Optimizer;
    let mut rng = espalier::rng::Rng::new(3);
    let mlp = espalier::nn::Mlp::new(&[16, 32, 5], Activation::Relu, &mut rng, dev).unwrap();
    let mut opt = espalier::train::Adam::new(mlp.parameters(), 0.01, 0.0).unwrap();
    let x = rand_f32(&[257, 16], 210).to_device(dev).unwrap();
    let y = rand_idx(257, 5, 211).to_device(dev).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        opt.zero_grad();
        let h = ops::dropout(&mlp.forward(&x).unwrap(), 0.2, 9, None).unwrap();
        let loss = ops::cross_entropy(&h, &y, None).unwrap();
        loss.backward().unwrap();
        opt.step().unwrap();
        out.push(loss.item().unwrap() as f32);
    }
    for p in mlp.parameters() {
        out.extend(p.to_vec_f32().unwrap());
    }
    out
}

#[test]
fn mlp_training_steps_match_the_cpu() {
    let want = train_mlp(Device::Cpu);
    for dev in gpu_devices() {
        assert_close(
            &format!("mlp training on {dev}"),
            &want,
            &train_mlp(dev),
            RTOL,
            ATOL,
        );
    }
}
