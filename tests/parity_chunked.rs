//! The dense ops with every storage binding of the wgpu device capped at 1 MiB, so that
//! the tensors below take three bindings or more and some single rows more than one: each
//! op, forward and backward, split against the same op unsplit and against the CPU. The
//! cap is shared by the threads of a test binary, so every capped check is one test, in
//! named steps, alone in this binary. Without a wgpu device it is skipped with a reason.

mod common;

use common::{
    assert_bits, assert_close, rand_away_f32, rand_f32, rand_idx, rand_ints, split_parity,
    wgpu_devices, BindingCap, ATOL, RTOL,
};
use espalier::check::cases::{optimize, positive};
use espalier::{ops, DType, Device, Error, Tensor};

/// The binding cap, in bytes.
const CAP: u64 = 1 << 20;
/// The rows and columns of the matrices past the cap.
const R: usize = 4615;
const C: usize = 130;

/// Every dense op, forward and backward, with each storage binding capped at 1 MiB (so the
/// tensors below take three bindings or more, and some single rows more than one) against
/// the same op unsplit and the CPU. The steps run in turn: the cap is
/// shared by the threads of this binary.
#[test]
fn chunked_launches_match_unchunked() {
    let devs = wgpu_devices();
    if devs.is_empty() {
        common::skip_backend("wgpu", "split parity: no wgpu device");
        return;
    }
    let x = rand_away_f32(&[R, C], 200);
    elementwise(&x);
    reductions_and_expand();
    row_ops(&devs, &x);
    slices_and_concat(&x);
    dropout_and_fill(&devs, &x);
    matmul_layouts(&devs);
    adam(&devs);
}

/// `f` split against whole and against the CPU, split results bit for bit.
fn split(name: &str, f: &common::Op, inputs: &[Tensor]) {
    split_parity(name, f, inputs, CAP, true);
}

fn one_of(t: &Tensor) -> &[Tensor] {
    std::slice::from_ref(t)
}

/// Elementwise ops and broadcasts, also of operands past the cap themselves.
fn elementwise(x: &Tensor) {
    let (r, c) = (R, C);
    let one = one_of(x);
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
}

fn reductions_and_expand() {
    let (r, c) = (R, C);
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
}

/// log_softmax, argmax_rows and cross_entropy over ranges of rows, and a bad label past
/// the first ranges.
fn row_ops(devs: &[Device], x: &Tensor) {
    let (r, c) = (R, C);
    // Row-wise ops: one workgroup per row, ranges of rows.
    let logits = ops::mul_scalar(x, 4.0).unwrap();
    let one = std::slice::from_ref(&logits);
    split("chunked log_softmax", &|x| ops::log_softmax(&x[0]), one);
    let want = ops::argmax_rows(&logits).unwrap().to_vec_u32().unwrap();
    // The cross-entropy mean runs over ranges of 256-row groups: 300,000 rows take several.
    let (n, k) = (300_000, 2);
    let ce_x = ops::mul_scalar(&rand_f32(&[n, k], 213), 5.0).unwrap();
    let ce_y = rand_idx(n, k as u32, 214);
    let ce_w = positive(&[n], 215).unwrap();
    let cases = [
        (
            "x",
            logits.clone(),
            rand_idx(r, c as u32, 216),
            positive(&[r], 217).unwrap(),
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
    for dev in devs {
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
}

/// Column slices and concatenation (and the slice's backward, which pads).
fn slices_and_concat(x: &Tensor) {
    let r = R;
    let narrow = rand_f32(&[r, 7], 218);
    split(
        "chunked slice",
        &|x| ops::slice(&x[0], 1, 7, 100),
        one_of(x),
    );
    split(
        "chunked slice one column",
        &|x| ops::slice(&x[0], 1, 129, 1),
        one_of(x),
    );
    split(
        "chunked concat dim 1",
        &|x| ops::concat(&[&x[0], &x[1], &x[0]], 1),
        &[x.clone(), narrow],
    );
}

/// Dropout by row id, also with 300,000 ids (past the cap themselves); a fill past it.
fn dropout_and_fill(devs: &[Device], x: &Tensor) {
    let (r, c) = (R, C);
    let tall_a = rand_f32(&[300_000, 2], 219);
    let ids = rand_idx(r, u32::MAX, 204);
    let tall_ids = rand_idx(300_000, u32::MAX, 223);
    for dev in devs {
        let _cap = BindingCap::new(*dev, CAP);
        for (t, ids) in [(x, &ids), (&tall_a, &tall_ids)] {
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
}

// matmul splits rows of A and C (A = X) or k (A = Xᵀ, the weight gradient), which
// its backward also runs; the other layouts and sizes (both operands transposed, B past
// the cap beside A = X, C past it beside A = Xᵀ) go through blocks copied apart.
// Small integers keep every sum exact whatever the order, so the split results must
// equal the CPU's exactly (a random k = 4615 sum differs by more than the parity
// tolerance through rounding alone).
fn matmul_layouts(devs: &[Device]) {
    let (r, c) = (R, C);
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
        for dev in devs {
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
}

/// Two Adam steps over R x C parameters.
fn adam(devs: &[Device]) {
    let want = optimize(Device::Cpu, R * C, 2, "adam").unwrap();
    for dev in devs {
        let _cap = BindingCap::new(*dev, CAP);
        let got = optimize(*dev, R * C, 2, "adam").unwrap();
        assert_close("chunked adam", &want, &got, RTOL, ATOL);
    }
}
