//! Parity of the dense ops: every op, forward and backward, on every available GPU backend against the CPU
//! backend, at awkward sizes. A missing backend is skipped with a printed reason.
//!
//! Each case is a function of some input tensors; float inputs become leaves. The output is
//! reduced with fixed random weights to a scalar whose backward gives every input gradient,
//! then outputs and gradients are compared with a relative plus absolute tolerance.

mod common;

use common::{assert_close, gpu_devices, parity, rand_away_f32, rand_f32};
use espalier::ops;

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
