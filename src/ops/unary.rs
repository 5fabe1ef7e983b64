//! Elementwise unary ops: `out = f(x)`.
//!
//! | op | f(x) | f'(x), written with what backward saves |
//! |---|---|---|
//! | neg | -x | -1 |
//! | relu | max(x, 0) | 1 if y > 0 else 0 |
//! | leaky_relu(α) | x if x > 0 else αx | 1 if y > 0 else α (α > 0) |
//! | elu(α) | x if x > 0 else α(eˣ - 1) | 1 if y > 0 else y + α |
//! | sigmoid | 1 / (1 + e⁻ˣ) | y(1 - y) |
//! | tanh | tanh x | 1 - y² |
//! | exp | eˣ | y |
//! | log | ln x | 1 / x |
//! | add_scalar(c) | x + c | 1 |
//! | mul_scalar(c) | c·x | c |
//!
//! Backward is `x̄ = ȳ · f'` in one kernel; every rule but `log` reads the output `y` (which
//! the next op usually keeps anyway), so no extra activation is saved.

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuData, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::unary::UnaryKernels;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::meta::{Replay, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{map_from_fn, update_from};
use crate::tensor::{Storage, Tensor};

/// Which unary op, with its parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// -x.
    Neg,
    /// max(x, 0).
    Relu,
    /// x for x > 0, slope * x otherwise.
    LeakyRelu(f64),
    /// x for x > 0, alpha * (e^x - 1) otherwise.
    Elu(f64),
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// tanh(x).
    Tanh,
    /// e^x.
    Exp,
    /// ln(x).
    Log,
    /// x + c.
    AddScalar(f64),
    /// c * x.
    MulScalar(f64),
}

impl UnaryOp {
    /// The op's name in errors and the autograd graph.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Relu => "relu",
            UnaryOp::LeakyRelu(_) => "leaky_relu",
            UnaryOp::Elu(_) => "elu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::AddScalar(_) => "add_scalar",
            UnaryOp::MulScalar(_) => "mul_scalar",
        }
    }

    /// The scalar parameter (0 where there is none), as shaders receive it.
    pub fn param(self) -> f64 {
        match self {
            UnaryOp::LeakyRelu(p)
            | UnaryOp::Elu(p)
            | UnaryOp::AddScalar(p)
            | UnaryOp::MulScalar(p) => p,
            _ => 0.0,
        }
    }

    /// The op's number in `shaders/unary.wgsl` and `kernels/unary.cu`.
    fn code(self) -> u32 {
        match self {
            UnaryOp::Neg => 0,
            UnaryOp::Relu => 1,
            UnaryOp::LeakyRelu(_) => 2,
            UnaryOp::Elu(_) => 3,
            UnaryOp::Sigmoid => 4,
            UnaryOp::Tanh => 5,
            UnaryOp::Exp => 6,
            UnaryOp::Log => 7,
            UnaryOp::AddScalar(_) => 8,
            UnaryOp::MulScalar(_) => 9,
        }
    }

    /// True if the backward rule reads the input rather than the output.
    fn saves_input(self) -> bool {
        matches!(self, UnaryOp::Log)
    }

    /// Inlined into each of `by_op!`'s arms, where `self` is a constant, so that the match
    /// folds away (left to the compiler, it was a call per value).
    #[inline(always)]
    fn forward<T: Float>(self, x: T) -> T {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Relu => x.max(T::ZERO),
            UnaryOp::LeakyRelu(a) => {
                if x > T::ZERO {
                    x
                } else {
                    T::from_f64(a) * x
                }
            }
            UnaryOp::Elu(a) => {
                if x > T::ZERO {
                    x
                } else {
                    T::from_f64(a) * (x.exp() - T::ONE)
                }
            }
            // Stable for large |x|: never exponentiates a positive number.
            UnaryOp::Sigmoid => x.sigmoid(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::AddScalar(c) => x + T::from_f64(c),
            UnaryOp::MulScalar(c) => x * T::from_f64(c),
        }
    }

    /// f' from the saved value `s` (the output y, or the input x for `log`).
    /// Inlined as [`Self::forward`] is.
    #[inline(always)]
    fn derivative<T: Float>(self, s: T) -> T {
        match self {
            UnaryOp::Neg => -T::ONE,
            UnaryOp::Relu => {
                if s > T::ZERO {
                    T::ONE
                } else {
                    T::ZERO
                }
            }
            UnaryOp::LeakyRelu(a) => {
                if s > T::ZERO {
                    T::ONE
                } else {
                    T::from_f64(a)
                }
            }
            UnaryOp::Elu(a) => {
                if s > T::ZERO {
                    T::ONE
                } else {
                    s + T::from_f64(a)
                }
            }
            UnaryOp::Sigmoid => s * (T::ONE - s),
            UnaryOp::Tanh => T::ONE - s * s,
            UnaryOp::Exp => s,
            UnaryOp::Log => T::ONE / s,
            UnaryOp::AddScalar(_) => T::ONE,
            UnaryOp::MulScalar(c) => T::from_f64(c),
        }
    }
}

/// Applies `op` elementwise.
pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let name = op.name();
    x.expect_float(name)?;
    if let UnaryOp::LeakyRelu(a) = op {
        if a <= 0.0 {
            return Err(Error::invalid(format!(
                "leaky_relu: slope {a} must be positive"
            )));
        }
    }
    let out = match &*x.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(name, &b.data, v => cpu_forward(op, v)?);
            cpu_output(buf, x.shape().to_vec(), x)
        }
        s => on_gpu!(s, |D, b| {
            let out = D::context_of(b).alloc(D::bytes(b))?;
            let code = (op.code(), op.param() as f32);
            D::context_of(b).unary(name, code, b, &out, x.numel())?;
            D::output(out, x.shape().to_vec(), x)
        }),
    };
    let saved = if op.saves_input() {
        x.detach()
    } else {
        out.detach()
    };
    Ok(record(name, out, &[x], move |g| {
        Ok(vec![Some(unary_backward(op, g, &saved)?)])
    }))
}

/// Runs `$body` with `$o` bound to `op` in an arm of its own, so that inside `$body` the
/// op's variant is a constant: `forward`/`derivative` fold to one formula and an
/// elementwise loop over slices vectorises (a match per element kept it scalar).
macro_rules! by_op {
    ($op:expr, $o:ident => $body:expr) => {
        match $op {
            UnaryOp::Neg => {
                let $o = UnaryOp::Neg;
                $body
            }
            UnaryOp::Relu => {
                let $o = UnaryOp::Relu;
                $body
            }
            UnaryOp::LeakyRelu(a) => {
                let $o = UnaryOp::LeakyRelu(a);
                $body
            }
            UnaryOp::Elu(a) => {
                let $o = UnaryOp::Elu(a);
                $body
            }
            UnaryOp::Sigmoid => {
                let $o = UnaryOp::Sigmoid;
                $body
            }
            UnaryOp::Tanh => {
                let $o = UnaryOp::Tanh;
                $body
            }
            UnaryOp::Exp => {
                let $o = UnaryOp::Exp;
                $body
            }
            UnaryOp::Log => {
                let $o = UnaryOp::Log;
                $body
            }
            UnaryOp::AddScalar(c) => {
                let $o = UnaryOp::AddScalar(c);
                $body
            }
            UnaryOp::MulScalar(c) => {
                let $o = UnaryOp::MulScalar(c);
                $body
            }
        }
    };
}

/// The op is matched once per chunk, inside the chunk's task: there `o` is a constant of
/// each arm and the loop vectorises; an op captured by the task and matched per value
/// (through rayon, the compiler could not see it constant) ran as a jump per value.
fn cpu_forward<T: Float + CpuElem + Default>(op: UnaryOp, x: &[T]) -> Result<CpuBuffer> {
    map_from_fn(x.len(), move |start, out: &mut [T]| {
        by_op!(op, o => {
            for (y, &v) in out.iter_mut().zip(&x[start..]) {
                *y = o.forward(v);
            }
        })
    })
}

/// `ḡ · f'(saved)`: the fused backward kernel of every unary op; on the CPU written over
/// `ḡ` where nothing else holds it ([`cpu_backward_in_place`]).
fn unary_backward(op: UnaryOp, g: &Tensor, saved: &Tensor) -> Result<Tensor> {
    g.same_device(saved, op.name())?;
    if let Some(t) = cpu_backward_in_place(op, g, saved)? {
        return Ok(t);
    }
    match (&*g.storage(), &*saved.storage()) {
        (Storage::Cpu(gb), Storage::Cpu(sb)) => {
            let buf = float_cpu2!(op.name(), &gb.data, &sb.data, (g, s) => cpu_backward(op, g, s)?);
            Ok(cpu_output(buf, g.shape().to_vec(), g))
        }
        (gs, ss) => on_gpu!(
            (gs, ss),
            |D, (gb, sb)| {
                let out = D::context_of(gb).alloc(D::bytes(gb))?;
                let code = (op.code(), op.param() as f32);
                D::context_of(gb).unary_backward(op.name(), code, gb, sb, &out, g.numel())?;
                Ok(D::output(out, g.shape().to_vec(), g))
            },
            else Err(Error::DeviceMismatch {
                op: op.name(),
                lhs: g.device().to_string(),
                rhs: saved.device().to_string(),
            })
        ),
    }
}

/// `ḡ · f'(saved)` written over `ḡ` on the CPU when nothing else holds `ḡ` (autograd
/// hands a rule the gradient it alone holds, unless the gradient is shared, as `add`'s
/// rule shares its own with both inputs): the input's gradient is `ḡ`'s buffer, with the
/// bits of [`cpu_backward`] and no new buffer of its size. `None` (nothing done) on a GPU
/// or where `ḡ` is held elsewhere. Its meta arm takes the same decision
/// ([`meta_unary`]).
fn cpu_backward_in_place(op: UnaryOp, g: &Tensor, saved: &Tensor) -> Result<Option<Tensor>> {
    let owned = g.storage_is_unique() && g.is_sole_handle();
    if g.device() != Device::Cpu || !owned || g.shares_storage(saved) {
        return Ok(None);
    }
    let s = saved.storage();
    let mut gs = g.storage_mut();
    let (Storage::Cpu(gb), Storage::Cpu(sb)) = (&mut *gs, &*s) else {
        return Ok(None);
    };
    match (&mut gb.data, &sb.data) {
        (CpuData::F32(g), CpuData::F32(s)) => update_from(g, s, |ys, ss| {
            by_op!(op, o => {
                for (y, &sv) in ys.iter_mut().zip(ss) {
                    *y *= o.derivative(sv);
                }
            })
        }),
        (CpuData::F64(g), CpuData::F64(s)) => update_from(g, s, |ys, ss| {
            by_op!(op, o => {
                for (y, &sv) in ys.iter_mut().zip(ss) {
                    *y *= o.derivative(sv);
                }
            })
        }),
        _ => return Ok(None),
    }
    drop(gs);
    Ok(Some(g.clone()))
}

fn cpu_backward<T: Float + CpuElem + Default>(op: UnaryOp, g: &[T], s: &[T]) -> Result<CpuBuffer> {
    // Matched per chunk, as in `cpu_forward`.
    map_from_fn(g.len(), move |start, out: &mut [T]| {
        by_op!(op, o => {
            for ((y, &gv), &sv) in out.iter_mut().zip(&g[start..]).zip(&s[start..]) {
                *y = gv * o.derivative(sv);
            }
        })
    })
}

/// `-x`.
pub fn neg(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Neg, x)
}
/// `max(x, 0)`.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Relu, x)
}
/// `x` if positive, else `slope · x` (slope > 0).
pub fn leaky_relu(x: &Tensor, slope: f64) -> Result<Tensor> {
    unary(UnaryOp::LeakyRelu(slope), x)
}
/// `x` if positive, else `alpha (eˣ - 1)`.
pub fn elu(x: &Tensor, alpha: f64) -> Result<Tensor> {
    unary(UnaryOp::Elu(alpha), x)
}
/// Logistic sigmoid.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Sigmoid, x)
}
/// Hyperbolic tangent.
pub fn tanh(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Tanh, x)
}
/// `eˣ`.
pub fn exp(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Exp, x)
}
/// Natural logarithm.
pub fn log(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Log, x)
}
/// `x + c`.
pub fn add_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    unary(UnaryOp::AddScalar(c), x)
}
/// `c · x`.
pub fn mul_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    unary(UnaryOp::MulScalar(c), x)
}

/// Meta arm of the unary ops a layer calls, [`relu`], [`leaky_relu`] and [`mul_scalar`]
/// ([`crate::meta`]): `[r, c]`; keeps its output; its rule writes over the incoming
/// gradient on the CPU where nothing else holds it, as `cpu_backward_in_place` does
/// ([`Replay::over_gradient`]), else allocates `[r, c]`.
pub fn meta_unary(r: &mut Replay, x: &Val) -> Val {
    let out = r.alloc(x.rows, x.cols);
    let saved = vec![r.share(out)];
    r.unary(x, out, (x.rows, x.cols), saved, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ops::test_values::values_over;

    fn values(n: usize, salt: u32) -> Vec<f32> {
        values_over(n, salt, 250.0, 2.0)
    }

    #[test]
    fn a_backward_over_a_gradient_nothing_else_holds_is_in_place_with_the_same_bits() {
        // Past PAR_MIN, so that both paths run in parallel chunks.
        let (r, c) = (300, 200);
        for op in [UnaryOp::Relu, UnaryOp::Elu(0.5), UnaryOp::Tanh] {
            let saved = Tensor::from_f32(values(r * c, 1), &[r, c], Device::Cpu).unwrap();
            let g = Tensor::from_f32(values(r * c, 2), &[r, c], Device::Cpu).unwrap();
            let other = g.clone();
            let fresh = unary_backward(op, &g, &saved).unwrap();
            assert!(
                !fresh.shares_storage(&g),
                "{op:?}: a held gradient is not written"
            );
            drop(other);
            let in_place = unary_backward(op, &g, &saved).unwrap();
            assert!(in_place.shares_storage(&g), "{op:?}");
            let bits = |t: &Tensor| {
                let v = t.to_vec_f32().unwrap();
                v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            };
            assert_eq!(bits(&fresh), bits(&in_place), "{op:?}");
        }
    }
}
