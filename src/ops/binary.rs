//! Elementwise binary ops with broadcasting of the right operand.
//!
//! `out = a ∘ b` for ∘ in {+, -, ×, ÷}. `a` is `[rows, cols]` (or 1-D); `b` is either the
//! same shape, a row `[cols]`/`[1, cols]` repeated down the rows, a column `[rows, 1]`
//! repeated across the columns, or one value.
//!
//! Backward (ḡ = gradient of `out`, R = sum over the broadcast dimension down to `b`'s shape):
//! add: ā = ḡ, b̄ = R(ḡ); sub: ā = ḡ, b̄ = -R(ḡ); mul: ā = ḡ·b, b̄ = R(ḡ·a);
//! div: ā = ḡ/b, b̄ = -R(ḡ·a/b²).

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::binary::{BinaryKernels, BinaryShape};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::meta::{Replay, Val};
use crate::ops::gpu::GpuTensors;
use crate::ops::reduce::meta_reduce_to;
use crate::ops::rows::rows_from_fn;
use crate::ops::{cpu_output, neg, reshape, sum_all, sum_dim};
use crate::tensor::{Storage, Tensor};

/// Which binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add = 0,
    Sub = 1,
    Mul = 2,
    Div = 3,
}

impl BinaryOp {
    fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
        }
    }
}

/// How `b` is repeated to `a`'s shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broadcast {
    /// Same shape.
    None = 0,
    /// `b` is one row, repeated down the rows.
    Row = 1,
    /// `b` is one column, repeated across the columns.
    Col = 2,
    /// `b` is one value.
    Scalar = 3,
}

impl Broadcast {
    /// The broadcast taking `b` to `a`'s shape, or a shape error naming `op`.
    pub fn of(op: &'static str, a: &[usize], b: &[usize]) -> Result<Broadcast> {
        let numel = |s: &[usize]| s.iter().product::<usize>();
        if a == b {
            return Ok(Broadcast::None);
        }
        if numel(b) == 1 {
            return Ok(Broadcast::Scalar);
        }
        let (rows, cols) = match a {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            _ => return Err(Error::shape(op, format!("cannot broadcast {b:?} to {a:?}"))),
        };
        match b {
            [c] | [1, c] if *c == cols => Ok(Broadcast::Row),
            [r, 1] if *r == rows => Ok(Broadcast::Col),
            _ => Err(Error::shape(op, format!("cannot broadcast {b:?} to {a:?}"))),
        }
    }

    /// Index into `b` for element `i` of `a` with `cols` columns.
    #[inline]
    pub fn index(self, i: usize, cols: usize) -> usize {
        match self {
            Broadcast::None => i,
            Broadcast::Row => i % cols,
            Broadcast::Col => i / cols,
            Broadcast::Scalar => 0,
        }
    }
}

fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let name = op.name();
    a.same_device(b, name)?;
    a.expect_float(name)?;
    let bc = Broadcast::of(name, a.shape(), b.shape())?;
    let cols = a.shape().last().copied().unwrap_or(1).max(1);
    let out = match (&*a.storage(), &*b.storage()) {
        (Storage::Cpu(x), Storage::Cpu(y)) => {
            let buf =
                float_cpu2!(name, &x.data, &y.data, (x, y) => cpu_binary(op, x, y, bc, cols)?);
            cpu_output(buf, a.shape().to_vec(), a)
        }
        (xs, ys) => on_gpu!(
            (xs, ys),
            |D, (x, y)| {
                let ctx = D::context_of(x);
                let out = ctx.alloc(D::bytes(x))?;
                let shape = BinaryShape {
                    op: op as u32,
                    bcast: bc as u32,
                    cols,
                    n: a.numel(),
                };
                ctx.binary(name, shape, x, y, &out)?;
                D::output(out, a.shape().to_vec(), a)
            },
            else return Err(Error::DeviceMismatch {
                op: name,
                lhs: a.device().to_string(),
                rhs: b.device().to_string(),
            })
        ),
    };
    // Save only what the rule reads: add and sub read no values; mul reads the other
    // operand; div reads b for ā and both for b̄. A gradient nobody needs is not computed.
    let (need_a, need_b) = (a.requires_grad(), b.requires_grad());
    let reads_values = matches!(op, BinaryOp::Mul | BinaryOp::Div);
    let sa = (reads_values && need_b).then(|| a.detach());
    let sb = (reads_values && (need_a || op == BinaryOp::Div)).then(|| b.detach());
    let b_shape = b.shape().to_vec();
    Ok(record(name, out, &[a, b], move |g| {
        let saved = |t: &Option<Tensor>| {
            t.clone()
                .ok_or_else(|| Error::Autograd(format!("{name}: operand not saved")))
        };
        let ga = if !need_a {
            None
        } else {
            Some(match op {
                BinaryOp::Add | BinaryOp::Sub => g.clone(),
                BinaryOp::Mul => mul(g, &saved(&sb)?)?,
                BinaryOp::Div => div(g, &saved(&sb)?)?,
            })
        };
        let gb = if !need_b {
            None
        } else {
            let full = match op {
                BinaryOp::Add => g.clone(),
                BinaryOp::Sub => neg(g)?,
                BinaryOp::Mul => mul(g, &saved(&sa)?)?,
                BinaryOp::Div => {
                    let (sa, sb) = (saved(&sa)?, saved(&sb)?);
                    neg(&div(&mul(g, &sa)?, &mul(&sb, &sb)?)?)?
                }
            };
            Some(reduce_to(&full, bc, &b_shape)?)
        };
        Ok(vec![ga, gb])
    }))
}

/// Sums a gradient of `a`'s shape down to the shape `b` was broadcast from.
fn reduce_to(g: &Tensor, bc: Broadcast, shape: &[usize]) -> Result<Tensor> {
    match bc {
        Broadcast::None => Ok(g.clone()),
        Broadcast::Row => reshape(&sum_dim(g, 0)?, shape),
        Broadcast::Col => reshape(&sum_dim(g, 1)?, shape),
        Broadcast::Scalar => reshape(&sum_all(g)?, shape),
    }
}

fn cpu_binary<T: Float + CpuElem + Default>(
    op: BinaryOp,
    x: &[T],
    y: &[T],
    bc: Broadcast,
    cols: usize,
) -> Result<CpuBuffer> {
    // One loop per op, so each inner loop is a plain vectorisable zip (an op or broadcast
    // decided per element kept the compiler from vectorising anything).
    match op {
        BinaryOp::Add => cpu_rows(x, y, bc, cols, |a, b| a + b),
        BinaryOp::Sub => cpu_rows(x, y, bc, cols, |a, b| a - b),
        BinaryOp::Mul => cpu_rows(x, y, bc, cols, |a, b| a * b),
        BinaryOp::Div => cpu_rows(x, y, bc, cols, |a, b| a / b),
    }
}

/// `f(x, b)` row by row, `b` being `y` taken through the broadcast.
fn cpu_rows<T: Float + CpuElem + Default>(
    x: &[T],
    y: &[T],
    bc: Broadcast,
    cols: usize,
    f: impl Fn(T, T) -> T + Sync,
) -> Result<CpuBuffer> {
    let rows = x.len() / cols;
    rows_from_fn(rows, cols, x.len(), |i, out: &mut [T]| {
        let xr = &x[i * cols..(i + 1) * cols];
        let zip = |out: &mut [T], yr: &[T]| {
            for ((o, &a), &b) in out.iter_mut().zip(xr).zip(yr) {
                *o = f(a, b);
            }
        };
        match bc {
            Broadcast::None => zip(out, &y[i * cols..(i + 1) * cols]),
            Broadcast::Row => zip(out, &y[..cols]),
            Broadcast::Col | Broadcast::Scalar => {
                let b = y[bc.index(i * cols, cols)];
                for (o, &a) in out.iter_mut().zip(xr) {
                    *o = f(a, b);
                }
            }
        }
    })
}

/// `a + b` (b broadcast).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Add, a, b)
}

/// `a - b` (b broadcast).
pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Sub, a, b)
}

/// `a * b` elementwise (b broadcast).
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Mul, a, b)
}

/// `a / b` elementwise (b broadcast).
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Div, a, b)
}

/// Meta arm of [`add`]`(a, b)` ([`crate::meta`]), `b` the same shape or a bias row:
/// `[r, c]`; nothing kept; `ā` shares the gradient, `b̄` too or is `[c]`
/// ([`meta_reduce_to`]).
pub fn meta_add(r: &mut Replay, a: &Val, b: &Val) -> Val {
    let out = r.alloc(a.rows, a.cols);
    let (a2, b2) = (*a, *b);
    r.record(
        out,
        (a.rows, a.cols),
        &[a, b],
        vec![],
        Box::new(move |r, g| {
            let ga = a2.grad.then(|| r.share(g));
            let same = (a2.rows, a2.cols) == (b2.rows, b2.cols);
            let gb = b2.grad.then(|| match same {
                true => r.share(g),
                false => meta_reduce_to(r, a2.rows, (b2.rows, b2.cols)),
            });
            vec![ga, gb]
        }),
    )
}

/// Meta arm of [`mul`]`(a, b)`, `b` the same shape or a column: `[r, c]`; keeps `b` (and
/// `a` if `b` needs a gradient); its rule allocates `ā` `[r, c]`, then `b̄` (`[r, c]`,
/// summed down to a column).
pub fn meta_mul(r: &mut Replay, a: &Val, b: &Val) -> Val {
    let out = r.alloc(a.rows, a.cols);
    let mut saved = Vec::new();
    if b.grad {
        saved.push(r.share(a.buf));
    }
    if a.grad {
        saved.push(r.share(b.buf));
    }
    let (a2, b2) = (*a, *b);
    r.record(
        out,
        (a.rows, a.cols),
        &[a, b],
        saved,
        Box::new(move |r, _| {
            let ga = a2.grad.then(|| r.alloc(a2.rows, a2.cols));
            let gb = b2.grad.then(|| {
                let full = r.alloc(a2.rows, a2.cols);
                if (a2.rows, a2.cols) == (b2.rows, b2.cols) {
                    return full;
                }
                let red = meta_reduce_to(r, a2.rows, (b2.rows, b2.cols));
                r.release(full);
                red
            });
            vec![ga, gb]
        }),
    )
}
