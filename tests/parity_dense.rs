//! Parity of the dense ops: every op, forward and backward, on every available GPU backend
//! against the CPU backend, at awkward sizes and edge values. A missing backend is skipped
//! with a printed reason. The cases are `espalier check`'s (`espalier::check::cases`, its
//! full level); the same ops with storage bindings capped are `parity_chunked.rs`.
//!
//! Each case is a function of some input tensors; float inputs become leaves. The output is
//! reduced with fixed random weights to a scalar whose backward gives every input gradient,
//! then outputs and gradients are compared with a relative plus absolute tolerance.

mod common;

use common::{assert_bits, assert_close, gpu_devices, parity, rand_f32, rand_idx, ATOL, RTOL};
use espalier::check::cases::{self, optimize, Case};
use espalier::{ops, DType, Device, Error, Tensor};

/// Asserts the parity of every case, labelled `what` and the case's label.
fn assert_cases(what: &str, cases: Vec<Case>) {
    for case in cases {
        parity(&format!("{what} {}", case.label), &*case.op, &case.inputs);
    }
}

#[test]
fn binary_ops_all_broadcasts() {
    for &n in cases::sizes(true) {
        for (label, inputs) in cases::broadcasts(n).unwrap() {
            for (name, f) in cases::binaries() {
                parity(
                    &format!("{name} {label}"),
                    &move |x| f(&x[0], &x[1]),
                    &inputs,
                );
            }
        }
    }
}

#[test]
fn one_dispatch_over_65535_workgroups() {
    // 65,536 workgroups of 256 threads plus one element: the grid must go 2-D.
    let [a, b] = cases::past_one_grid_dimension().unwrap();
    let n = a.numel();
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

#[test]
fn unary_ops_forward_and_fused_backward() {
    for &n in cases::sizes(true) {
        for (name, f) in cases::unaries() {
            let x = cases::unary_input(name, n).unwrap();
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
fn matmul_shapes_transposes_and_leading_rows() {
    assert_cases("matmul", cases::matmul(true).unwrap());
    assert_cases("matmul_rows", cases::matmul_rows().unwrap());
}

#[test]
fn matmul_with_more_row_tiles_than_one_grid_dimension() {
    // 65,536 tiles of 64 rows: the row blocks fold into the grid's z dimension.
    let [a, b] = cases::matmul_tall().unwrap();
    let m = a.shape()[0];
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
    // Short and long rows, tall and wide matrices: one pass and several; empty extents
    // sum to zeros (their mean is not defined).
    for (label, x) in cases::reduction_inputs(true).unwrap() {
        for (name, f) in cases::reductions() {
            if name.starts_with("mean") && x.numel() == 0 {
                continue;
            }
            let inputs = std::slice::from_ref(&x);
            parity(&format!("{name}/{label}"), &move |x| f(&x[0]), inputs);
        }
    }
    for &n in cases::sizes(true) {
        assert_cases("expand_dim", cases::expand(n).unwrap());
    }
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
    assert_cases("log_softmax", cases::log_softmax(true).unwrap());
}

#[test]
fn log_softmax_and_cross_entropy_edge_values() {
    let x = cases::log_softmax_edges().unwrap();
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
    assert_cases(
        "cross_entropy",
        vec![cases::cross_entropy_huge_logits().unwrap()],
    );
}

#[test]
fn cross_entropy_with_and_without_weights() {
    assert_cases("cross_entropy", cases::cross_entropy(true).unwrap());
}

#[test]
fn cross_entropy_bad_label_is_an_error_on_the_device() {
    for dev in gpu_devices() {
        let (x, y) = cases::bad_labels().unwrap();
        let (x, y) = (x.to_device(dev).unwrap(), y.to_device(dev).unwrap());
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
    for (label, x) in cases::argmax_rows().unwrap() {
        let want = ops::argmax_rows(&x).unwrap().to_vec_u32().unwrap();
        for dev in gpu_devices() {
            let got = ops::argmax_rows(&x.clone().to_device(dev).unwrap())
                .unwrap()
                .to_vec_u32()
                .unwrap();
            assert_eq!(want, got, "argmax_rows {label} on {dev}");
        }
    }
}

#[test]
fn dropout_masks_are_bit_identical() {
    for case in cases::dropout_inputs().unwrap() {
        let ([r, c], x, ids) = (case.shape, case.x, case.ids);
        for p in [0.1, 0.5] {
            let key = ops::dropout_key(7, case.index, 1);
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
    assert_cases("concat", cases::concat().unwrap());
    // Within, from the start, to the end, of one row or column.
    let ranges = [
        (0, 5, 100),
        (0, 0, 257),
        (0, 256, 1),
        (1, 3, 60),
        (1, 0, 1),
        (1, 62, 1),
    ];
    assert_cases("slice", cases::slices(&ranges).unwrap());
    // u32 tensors move as words too.
    let idx = cases::u32_matrix().unwrap();
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

#[test]
fn optimizer_updates_over_several_steps() {
    for kind in cases::OPTIMIZERS {
        for n in [1, 4097] {
            let want = optimize(Device::Cpu, n, 5, kind).unwrap();
            for dev in gpu_devices() {
                let got = optimize(dev, n, 5, kind).unwrap();
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
