//! Op parity of the dense ops: every op's forward and backward on the device against the
//! CPU, one record per op with the worst error over all its cases (sizes, broadcasts,
//! shapes, edge values). The harness is `parity.rs`, the cases `cases.rs` (shared with the
//! parity tests); the graph ops are `ops_graph.rs`.

use super::cases::{self, Case};
use super::compare::{Comparison, Tol};
use super::parity::OpCheck;
use super::zoo::rand_f32;
use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops;
use crate::tensor::{DType, Tensor};

/// Runs the dense ops' records (the graph ops' are in `ops_graph.rs`), in the order
/// `espalier check` reports them.
pub fn run(ctx: &mut Ctx<'_>) {
    let full = ctx.full();
    binaries(ctx, full);
    unaries(ctx, full);
    ctx.op("matmul", |c| matmul(c, full));
    reductions(ctx, full);
    rows(ctx, full);
    dropout(ctx);
    concat_slice(ctx);
    optimizers(ctx);
    assign_fill(ctx);
    widen(ctx);
}

/// Forward and backward of each case against the CPU within `tol`.
fn parity_all(c: &mut OpCheck, cases: Vec<Case>, tol: Tol) -> Result<()> {
    for case in cases {
        c.parity(&case.label, &*case.op, &case.inputs, tol)?;
    }
    Ok(())
}

/// add, sub, mul, div: every broadcast at every size, every pair of edge values, and
/// (`full`) a grid past one dimension.
fn binaries(ctx: &mut Ctx<'_>, full: bool) {
    for (name, f) in cases::binaries() {
        ctx.op(name, |c| {
            for &n in cases::sizes(full) {
                for (label, [a, b]) in cases::broadcasts(n)? {
                    c.parity(&label, &|x| f(&x[0], &x[1]), &[a, b], Tol::F32)?;
                }
            }
            // Every pair of edge values: IEEE 754 defines each result (inf - inf and
            // 0 · inf are NaN, 1 / 0 is inf, NaN propagates).
            let (a, b) = cases::special_pairs()?;
            c.forward(
                "NaN, ±inf, ±0 pairs",
                &[a, b],
                |x| f(&x[0], &x[1]),
                Tol::F32,
            )?;
            if full {
                let [a, b] = cases::past_one_grid_dimension()?;
                c.forward(
                    &format!("{} values", a.numel()),
                    &[a, b],
                    |x| f(&x[0], &x[1]),
                    Tol::F32,
                )?;
            }
            Ok(())
        });
    }
}

/// The elementwise ops of one tensor at every size and at their edge values.
fn unaries(ctx: &mut Ctx<'_>, full: bool) {
    for (name, f) in cases::unaries() {
        ctx.op(name, |c| {
            for &n in cases::sizes(full) {
                let x = cases::unary_input(name, n)?;
                c.parity(&format!("{n} values"), &|x| f(&x[0]), &[x], Tol::F32)?;
            }
            // Edge values: saturated tails, overflow, ±inf, ±0 and NaN (not for the
            // rectifiers, whose NaN goes through a max or a comparison: the CPU's
            // `max(NaN, 0)` is 0, a shader's is the platform's choice).
            let nan = !matches!(name, "relu" | "leaky_relu" | "elu");
            let x = cases::specials(nan)?;
            c.forward("±100, ±inf, ±0, NaN", &[x], |x| f(&x[0]), Tol::F32)?;
            Ok(())
        });
    }
}

/// Dropout masks bit for bit (with and without row ids) and its backward.
fn dropout(ctx: &mut Ctx<'_>) {
    ctx.op("dropout", |c| {
        for case in cases::dropout_inputs()? {
            let (s, x, ids) = (case.shape, case.x, case.ids);
            for p in [0.1, 0.5] {
                let key = ops::dropout_key(7, case.index, 1);
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
}

/// concat along both dims (f32 with backward, u32 forward) and slice.
fn concat_slice(ctx: &mut Ctx<'_>) {
    ctx.op("concat", |c| {
        parity_all(c, cases::concat()?, Tol::EXACT)?;
        let idx = cases::u32_matrix()?;
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
        parity_all(c, cases::slices(&cases::SLICES)?, Tol::EXACT)
    });
}

/// Five steps of each optimizer against the CPU's.
fn optimizers(ctx: &mut Ctx<'_>) {
    for kind in cases::OPTIMIZERS {
        ctx.op(&format!("{kind} update"), |c| {
            for n in [1, 4097] {
                let want = cases::optimize(Device::Cpu, n, 5, kind)?;
                let got = cases::optimize(c.dev, n, 5, kind)?;
                c.add(
                    &format!("{n} parameters, 5 steps"),
                    Comparison::of(&want, &got, Tol::F32),
                );
            }
            Ok(())
        });
    }
}

/// assign copies, fill writes its value (f32 and u32).
fn assign_fill(ctx: &mut Ctx<'_>) {
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
}

/// f16 and bf16 widen to f32 bit for bit, edge values included.
fn widen(ctx: &mut Ctx<'_>) {
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

/// matmul at every shape and transpose, the leading rows of `a`, and (`full`) a grid past
/// one dimension.
fn matmul(c: &mut OpCheck, full: bool) -> Result<()> {
    parity_all(c, cases::matmul(full)?, Tol::F32)?;
    parity_all(c, cases::matmul_rows()?, Tol::F32)?;
    if full {
        let [a, b] = cases::matmul_tall()?;
        let f = |x: &[Tensor]| ops::matmul(&x[0], &x[1], false, false);
        c.forward(&format!("{}x1x2", a.shape()[0]), &[a, b], f, Tol::F32)?;
    }
    Ok(())
}

fn reductions(ctx: &mut Ctx<'_>, full: bool) {
    for (name, f) in cases::reductions() {
        ctx.op(name, |c| {
            for (label, x) in cases::reduction_inputs(full)? {
                if name.starts_with("mean") && x.numel() == 0 {
                    continue; // the mean of nothing is not defined
                }
                c.parity(&label, &|x| f(&x[0]), &[x], Tol::F32)?;
            }
            Ok(())
        });
    }
    ctx.op("expand_dim", |c| {
        for &n in cases::sizes(full) {
            parity_all(c, cases::expand(n)?, Tol::F32)?;
        }
        Ok(())
    });
}

/// Row-wise ops: log-softmax, cross-entropy, argmax, with their edge values.
fn rows(ctx: &mut Ctx<'_>, full: bool) {
    ctx.op("log_softmax", |c| {
        parity_all(c, cases::log_softmax(full)?, Tol::F32)?;
        c.forward(
            "±inf, NaN, huge logits",
            &[cases::log_softmax_edges()?],
            |x| ops::log_softmax(&x[0]),
            Tol::F32,
        )
    });
    ctx.op("cross_entropy", |c| {
        parity_all(c, cases::cross_entropy(full)?, Tol::F32)?;
        parity_all(c, vec![cases::cross_entropy_huge_logits()?], Tol::F32)
    });
    let dev = ctx.dev;
    ctx.check("cross_entropy bad label is an error", || {
        let (x, y) = cases::bad_labels()?;
        Ok(
            match ops::cross_entropy(&x.to_device(dev)?, &y.to_device(dev)?, None) {
                Err(Error::InvalidArgument(msg)) => {
                    let ok = msg.contains("row 257") && msg.contains("label 4");
                    Outcome::verdict(ok, format!("the device says: {msg}"))
                }
                Err(e) => Outcome::verdict(false, format!("another error than expected: {e}")),
                Ok(_) => Outcome::verdict(false, "label 4 of 4 classes was accepted"),
            },
        )
    });
    ctx.op("argmax_rows", |c| {
        for (label, x) in cases::argmax_rows()? {
            c.forward(label, &[x], |x| ops::argmax_rows(&x[0]), Tol::EXACT)?;
        }
        Ok(())
    });
}
