//! Op parity of the dense ops: every op's forward and backward on the device against the
//! CPU, one record per op with the worst error over all its cases (sizes, broadcasts,
//! shapes, edge values). The harness is `parity.rs`; the graph ops are `ops_graph.rs`.

use super::compare::{Comparison, Tol};
use super::parity::OpCheck;
use super::zoo::{rand_away_f32, rand_f32, rand_idx};
use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops;
use crate::tensor::{DType, Tensor};

/// Runs the dense ops' records (the graph ops' are in `ops_graph.rs`).
pub fn run(ctx: &mut Ctx<'_>) {
    dense(ctx);
}

/// Lengths every elementwise op is tried at.
fn sizes(full: bool) -> &'static [usize] {
    if full {
        &[1, 63, 257, 4097]
    } else {
        &[1, 257, 4097]
    }
}

/// Edge values of elementwise ops: large finite, ±inf, ±0, and NaN when `nan`.
fn specials(nan: bool) -> Result<Tensor> {
    let mut v = vec![
        -100.0,
        -30.0,
        -1.0,
        -0.0,
        0.0,
        1.0,
        30.0,
        100.0,
        3e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    if nan {
        v.push(f32::NAN);
    }
    let n = v.len();
    Tensor::from_f32(v, &[n], Device::Cpu)
}

/// Every pair of NaN, ±inf, ±0, ±1 and 3e38 (whose sum and product overflow), as two
/// vectors of the same length.
fn special_pairs() -> Result<(Tensor, Tensor)> {
    let v = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        3e38,
    ];
    let a: Vec<f32> = v.iter().flat_map(|&x| v.iter().map(move |_| x)).collect();
    let b: Vec<f32> = v.iter().flat_map(|_| v.iter().copied()).collect();
    let n = a.len();
    Ok((
        Tensor::from_f32(a, &[n], Device::Cpu)?,
        Tensor::from_f32(b, &[n], Device::Cpu)?,
    ))
}

/// Values in (0.5, 1.5]: inputs of `log`.
fn positive(shape: &[usize], seed: u64) -> Result<Tensor> {
    let v = rand_away_f32(shape, seed)?.to_vec_f32()?;
    Tensor::from_f32(v.iter().map(|x| x.abs()).collect(), shape, Device::Cpu)
}

type Binary = fn(&Tensor, &Tensor) -> Result<Tensor>;
type Unary = fn(&Tensor) -> Result<Tensor>;

fn dense(ctx: &mut Ctx<'_>) {
    let full = ctx.full();
    let binaries: [(&str, Binary); 4] = [
        ("add", ops::add),
        ("sub", ops::sub),
        ("mul", ops::mul),
        ("div", ops::div),
    ];
    for (name, f) in binaries {
        ctx.op(name, |c| {
            for &n in sizes(full) {
                let rows = n.div_ceil(16);
                let a = rand_f32(&[rows, 16], n as u64)?;
                let cases = [
                    ("same", rand_away_f32(&[rows, 16], 1)?),
                    ("row", rand_away_f32(&[16], 2)?),
                    ("col", rand_away_f32(&[rows, 1], 3)?),
                    ("scalar", rand_away_f32(&[1], 4)?),
                ];
                for (bc, b) in cases {
                    let label = format!("{rows}x16, {bc} broadcast");
                    c.parity(&label, &|x| f(&x[0], &x[1]), &[a.clone(), b], Tol::F32)?;
                }
            }
            // Every pair of edge values: IEEE 754 defines each result (inf - inf and
            // 0 · inf are NaN, 1 / 0 is inf, NaN propagates).
            let (a, b) = special_pairs()?;
            c.forward(
                "NaN, ±inf, ±0 pairs",
                &[a, b],
                |x| f(&x[0], &x[1]),
                Tol::F32,
            )?;
            if full {
                // 65,536 workgroups of 256 threads plus one element: the grid must go 2-D.
                let n = 65_536 * 256 + 1;
                let (a, b) = (rand_f32(&[n], 5)?, rand_f32(&[n], 6)?);
                c.forward(
                    &format!("{n} values"),
                    &[a, b],
                    |x| f(&x[0], &x[1]),
                    Tol::F32,
                )?;
            }
            Ok(())
        });
    }
    let unaries: [(&str, Unary); 10] = [
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
    for (name, f) in unaries {
        ctx.op(name, |c| {
            for &n in sizes(full) {
                let x = if name == "log" {
                    positive(&[n], n as u64)?
                } else {
                    // Scaled so that tanh and sigmoid reach their flat tails too.
                    ops::mul_scalar(&rand_away_f32(&[n], n as u64)?, 6.0)?
                };
                c.parity(&format!("{n} values"), &|x| f(&x[0]), &[x], Tol::F32)?;
            }
            // Edge values: saturated tails, overflow, ±inf, ±0 and NaN (not for the
            // rectifiers, whose NaN goes through a max or a comparison: the CPU's
            // `max(NaN, 0)` is 0, a shader's is the platform's choice).
            let nan = !matches!(name, "relu" | "leaky_relu" | "elu");
            let x = specials(nan)?;
            c.forward("±100, ±inf, ±0, NaN", &[x], |x| f(&x[0]), Tol::F32)?;
            Ok(())
        });
    }
    ctx.op("matmul", |c| matmul_cases(c, full));
    reductions(ctx, full);
    rows(ctx, full);
    ctx.op("dropout", |c| {
        for (i, s) in [[1usize, 1], [63, 257], [4097, 17]].iter().enumerate() {
            let x = rand_f32(s, 130 + i as u64)?;
            let ids = rand_idx(s[0], u32::MAX, 140 + i as u64)?;
            for p in [0.1, 0.5] {
                let key = ops::dropout_key(7, i as u64, 1);
                let label = format!("{}x{} p={p}", s[0], s[1]);
                // The masks are the CPU's bit for bit, with row ids and without.
                c.forward(
                    &format!("{label} mask"),
                    std::slice::from_ref(&x),
                    |x| ops::dropout(&x[0], p, key, None),
                    Tol::EXACT,
                )?;
                c.forward(
                    &format!("{label} mask by row id"),
                    &[x.clone(), ids.clone()],
                    |x| ops::dropout(&x[0], p, key, Some(&x[1])),
                    Tol::EXACT,
                )?;
            }
            c.parity(
                &format!("{}x{} backward", s[0], s[1]),
                &|x| ops::dropout(&x[0], 0.3, 11, Some(&x[1])),
                &[x, ids],
                Tol::F32,
            )?;
        }
        Ok(())
    });
    ctx.op("concat", |c| {
        let rows = [
            rand_f32(&[1, 63], 150)?,
            rand_f32(&[63, 63], 151)?,
            rand_f32(&[257, 63], 152)?,
        ];
        let f = |x: &[Tensor]| ops::concat(&[&x[0], &x[1], &x[2]], 0);
        c.parity("dim 0", &f, &rows, Tol::EXACT)?;
        let cols = [
            rand_f32(&[257, 1], 153)?,
            rand_f32(&[257, 63], 154)?,
            rand_f32(&[257, 5], 155)?,
        ];
        let f = |x: &[Tensor]| ops::concat(&[&x[0], &x[1], &x[2]], 1);
        c.parity("dim 1", &f, &cols, Tol::EXACT)?;
        let idx = ops::reshape(&rand_idx(257 * 3, 1000, 157)?, &[257, 3])?;
        for dim in [0, 1] {
            let f = move |x: &[Tensor]| ops::concat(&[&x[0], &x[0]], dim);
            c.forward(
                &format!("u32 dim {dim}"),
                std::slice::from_ref(&idx),
                f,
                Tol::EXACT,
            )?;
        }
        Ok(())
    });
    ctx.op("slice", |c| {
        let x = rand_f32(&[257, 63], 156)?;
        for (dim, start, len) in [(0, 5, 100), (0, 256, 1), (1, 3, 60), (1, 62, 1)] {
            c.parity(
                &format!("dim {dim} {start}+{len}"),
                &move |x| ops::slice(&x[0], dim, start, len),
                std::slice::from_ref(&x),
                Tol::EXACT,
            )?;
        }
        Ok(())
    });
    for kind in ["sgd", "momentum", "adam", "adamw"] {
        ctx.op(&format!("{kind} update"), |c| {
            for n in [1, 4097] {
                let want = optimize(Device::Cpu, n, 5, kind)?;
                let got = optimize(c.dev, n, 5, kind)?;
                c.add(
                    &format!("{n} parameters, 5 steps"),
                    Comparison::of(&want, &got, Tol::F32),
                );
            }
            Ok(())
        });
    }
    ctx.op("assign, fill", |c| {
        let src = rand_f32(&[257], 180)?;
        let dst = Tensor::zeros(&[257], DType::F32, c.dev)?;
        ops::assign(&dst, &src.clone().to_device(c.dev)?)?;
        c.add(
            "assign",
            Comparison::of(&src.to_vec_f32()?, &dst.to_vec_f32()?, Tol::EXACT),
        );
        for (n, v) in [(4097, 2.5), (63, 0.0)] {
            let f = Tensor::full(&[n], v, DType::F32, c.dev)?.to_vec_f32()?;
            c.add(
                &format!("fill {n} with {v}"),
                Comparison::of(&vec![v as f32; n], &f, Tol::EXACT),
            );
        }
        let u = Tensor::full(&[65], 7.0, DType::U32, c.dev)?.to_vec_u32()?;
        c.add("fill u32", Comparison::of_u32(&[7; 65], &u));
        Ok(())
    });
    ctx.op("widen f16, bf16", |c| {
        let v = rand_f32(&[4097, 3], 190)?.to_vec_f32()?;
        let mut specials = vec![0.0, -0.0, f32::INFINITY, -f32::INFINITY, 65504.0, 6e-8];
        specials.extend_from_slice(&v[..v.len() - specials.len()]);
        let h: Vec<half::f16> = specials.iter().map(|&x| half::f16::from_f32(x)).collect();
        let b: Vec<half::bf16> = specials.iter().map(|&x| half::bf16::from_f32(x)).collect();
        let th = Tensor::from_f16(h, &[4097, 3], Device::Cpu)?;
        let tb = Tensor::from_bf16(b, &[4097, 3], Device::Cpu)?;
        c.forward("f16", &[th], |x| ops::widen(&x[0]), Tol::EXACT)?;
        c.forward("bf16", &[tb], |x| ops::widen(&x[0]), Tol::EXACT)?;
        Ok(())
    });
}

fn matmul_cases(c: &mut OpCheck, full: bool) -> Result<()> {
    let mut shapes = vec![(1, 1, 1), (63, 257, 5), (257, 63, 129), (130, 1, 3)];
    if full {
        shapes.extend([(1, 63, 257), (64, 64, 64), (1000, 300, 47)]);
    }
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a_shape = if ta { [k, m] } else { [m, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            let a = rand_f32(&a_shape, 10 + i as u64)?;
            let b = rand_f32(&b_shape, 20 + i as u64)?;
            c.parity(
                &format!("{m}x{k}x{n} ta={ta} tb={tb}"),
                &move |x| ops::matmul(&x[0], &x[1], ta, tb),
                &[a, b],
                Tol::F32,
            )?;
        }
    }
    // The first rows of `a` times `b`, read in place (a SAGE layer's self term): the
    // rows kept, none, and all of them.
    for (i, &(m, rows, k, n)) in [(257, 63, 65, 5), (63, 0, 4, 3), (5, 5, 1, 1)]
        .iter()
        .enumerate()
    {
        let a = rand_f32(&[m, k], 35 + i as u64)?;
        let b = rand_f32(&[k, n], 38 + i as u64)?;
        c.parity(
            &format!("rows {rows} of {m}x{k} times {k}x{n}"),
            &move |x| ops::matmul_rows(&x[0], rows, &x[1]),
            &[a, b],
            Tol::F32,
        )?;
    }
    if full {
        // 65,536 tiles of 64 rows: the row blocks fold into the grid's z dimension.
        let m = 64 * 65_535 + 1;
        let (a, b) = (rand_f32(&[m, 1], 30)?, rand_f32(&[1, 2], 31)?);
        let f = |x: &[Tensor]| ops::matmul(&x[0], &x[1], false, false);
        c.forward(&format!("{m}x1x2"), &[a, b], f, Tol::F32)?;
    }
    Ok(())
}

fn reductions(ctx: &mut Ctx<'_>, full: bool) {
    let mut shapes = vec![[1usize, 1], [63, 257], [4097, 3], [3, 4097], [0, 5], [5, 0]];
    if full {
        shapes.extend([[257, 63], [1, 70_000], [5000, 2]]);
    }
    type Reduce = fn(&Tensor) -> Result<Tensor>;
    let cases: [(&str, Reduce); 5] = [
        ("sum_dim 0", |x| ops::sum_dim(x, 0)),
        ("sum_dim 1", |x| ops::sum_dim(x, 1)),
        ("mean_dim 0", |x| ops::mean_dim(x, 0)),
        ("sum_all", ops::sum_all),
        ("mean_all", ops::mean_all),
    ];
    for (name, f) in cases {
        ctx.op(name, |c| {
            for (i, s) in shapes.iter().enumerate() {
                if name.starts_with("mean") && s.contains(&0) {
                    continue; // the mean of nothing is not defined
                }
                let x = rand_f32(s, 40 + i as u64)?;
                c.parity(&format!("{}x{}", s[0], s[1]), &|x| f(&x[0]), &[x], Tol::F32)?;
            }
            Ok(())
        });
    }
    ctx.op("expand_dim", |c| {
        for &n in sizes(full) {
            let v = rand_f32(&[n], 50)?;
            let one = std::slice::from_ref(&v);
            c.parity(
                &format!("{n} to rows"),
                &|x| ops::expand_dim(&x[0], 0, 7),
                one,
                Tol::F32,
            )?;
            c.parity(
                &format!("{n} to columns"),
                &|x| ops::expand_dim(&x[0], 1, 5),
                one,
                Tol::F32,
            )?;
        }
        Ok(())
    });
}

/// Row-wise ops: log-softmax, cross-entropy, argmax, with their edge values.
fn rows(ctx: &mut Ctx<'_>, full: bool) {
    ctx.op("log_softmax", |c| {
        let mut shapes = vec![[1usize, 1], [63, 257], [4097, 5]];
        if full {
            shapes.extend([[257, 10], [2, 1000]]);
        }
        for (i, s) in shapes.iter().enumerate() {
            let x = ops::mul_scalar(&rand_f32(s, 70 + i as u64)?, 8.0)?;
            let f = |x: &[Tensor]| ops::log_softmax(&x[0]);
            c.parity(&format!("{}x{}", s[0], s[1]), &f, &[x], Tol::F32)?;
        }
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        #[rustfmt::skip]
        let v = vec![
            1000., 1001., 999.,  // huge logits
            -inf, 0., 1.,        // a -inf logit
            -inf, -inf, -inf,    // nothing but -inf
            1., nan, 2.,         // NaN propagates
            inf, 0., 1.,         // +inf
        ];
        let x = Tensor::from_f32(v, &[5, 3], Device::Cpu)?;
        c.forward(
            "±inf, NaN, huge logits",
            &[x],
            |x| ops::log_softmax(&x[0]),
            Tol::F32,
        )
    });
    ctx.op("cross_entropy", |c| {
        let mut shapes = vec![(1, 1), (63, 257), (4097, 7)];
        if full {
            shapes.push((257, 10));
        }
        for (i, &(n, k)) in shapes.iter().enumerate() {
            let x = ops::mul_scalar(&rand_f32(&[n, k], 80 + i as u64)?, 5.0)?;
            let y = rand_idx(n, k as u32, 90 + i as u64)?;
            let w = positive(&[n], 100 + i as u64)?;
            let f = |x: &[Tensor]| ops::cross_entropy(&x[0], &x[1], None);
            c.parity(&format!("{n}x{k}"), &f, &[x.clone(), y.clone()], Tol::F32)?;
            let f = |x: &[Tensor]| ops::cross_entropy(&x[0], &x[1], Some(&x[2]));
            c.parity(&format!("{n}x{k} weighted"), &f, &[x, y, w], Tol::F32)?;
        }
        let x = Tensor::from_f32(vec![1000., 1000., 999., 0.], &[2, 2], Device::Cpu)?;
        let y = Tensor::from_u32(vec![0, 1], &[2], Device::Cpu)?;
        let f = |x: &[Tensor]| ops::cross_entropy(&x[0], &x[1], None);
        c.parity("huge logits", &f, &[x, y], Tol::F32)
    });
    let dev = ctx.dev;
    ctx.check("cross_entropy bad label is an error", || {
        let x = rand_f32(&[300, 4], 110)?.to_device(dev)?;
        let mut labels: Vec<u32> = (0..300).map(|i| i % 4).collect();
        labels[257] = 4;
        labels[299] = 1_000_000;
        let y = Tensor::from_u32(labels, &[300], dev)?;
        Ok(match ops::cross_entropy(&x, &y, None) {
            Err(Error::InvalidArgument(msg)) => {
                let ok = msg.contains("row 257") && msg.contains("label 4");
                Outcome::verdict(ok, format!("the device says: {msg}"))
            }
            Err(e) => Outcome::verdict(false, format!("another error than expected: {e}")),
            Ok(_) => Outcome::verdict(false, "label 4 of 4 classes was accepted"),
        })
    });
    ctx.op("argmax_rows", |c| {
        let mut v: Vec<f32> = rand_f32(&[4097, 10], 120)?
            .to_vec_f32()?
            .iter()
            .map(|x| (x * 3.0).round()) // few distinct values: many ties
            .collect();
        v[57] = f32::NAN;
        v[58] = f32::NAN;
        let cases = [
            ("ties, NaN", Tensor::from_f32(v, &[4097, 10], Device::Cpu)?),
            ("1x1", rand_f32(&[1, 1], 121)?),
            ("63x257", rand_f32(&[63, 257], 122)?),
            (
                "-inf rows",
                Tensor::from_f32(vec![f32::NEG_INFINITY; 6], &[2, 3], Device::Cpu)?,
            ),
        ];
        for (label, x) in cases {
            c.forward(label, &[x], |x| ops::argmax_rows(&x[0]), Tol::EXACT)?;
        }
        Ok(())
    });
}

/// `steps` optimizer updates from the same parameters and gradients on `dev`: the
/// parameters, then the optimizer's state.
fn optimize(dev: Device, n: usize, steps: usize, kind: &str) -> Result<Vec<f32>> {
    let p = rand_f32(&[n], 160)?.to_device(dev)?;
    let state = (0..2)
        .map(|_| Tensor::zeros(&[n], DType::F32, dev))
        .collect::<Result<Vec<_>>>()?;
    for t in 1..=steps {
        let g = rand_f32(&[n], 170 + t as u64)?.to_device(dev)?;
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
                ops::sgd_update(&p, &g, vel, h)?;
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
                ops::adam_update(&p, &g, &state[0], &state[1], h)?;
            }
        }
    }
    let mut out = p.to_vec_f32()?;
    for s in &state {
        out.extend(s.to_vec_f32()?);
    }
    Ok(out)
}
