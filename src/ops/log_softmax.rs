//! Row-wise log-softmax of a 2-D tensor, and the stable log-sum-exp it rests on.
//!
//! `y[i, j] = x[i, j] - lseᵢ`, `lseᵢ = mᵢ + ln Σₖ exp(x[i, k] - mᵢ)`, `mᵢ = maxₖ x[i, k]`.
//! Subtracting the row maximum keeps every exponent ≤ 0, so large logits cannot overflow;
//! the output is computed as `(x - m) - ln Σ…`, which keeps full precision for large logits.
//!
//! Backward (`softmax = exp(y)`): `x̄[i, j] = ḡ[i, j] - exp(y[i, j]) · Σₖ ḡ[i, k]`.
//! It reads only the output `y`, which is all that is saved.

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::log_softmax::LogSoftmaxKernels;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, rows_from_fn};
use crate::tensor::{Storage, Tensor};

/// `(m, ln Σ exp(row - m))` with `m` the row maximum, so that `lse = m + ln Σ exp(row - m)`.
/// Callers that need `x - lse` compute `(x - m) - ln Σ…`: the difference `x - m` is exact for
/// nearby values, whereas rounding `lse` itself would cost an ulp of `m` (6e-5 at 1000 in
/// f32). An empty row gives `m = -∞`; a row whose maximum is ±∞ or NaN gives `(m, 0)`.
pub(crate) fn max_and_log_sum<T: Float>(row: &[T]) -> (T, T) {
    let m = row.iter().fold(T::NEG_INFINITY, |m, &v| {
        // NaN wins, so that it propagates instead of being skipped.
        if v > m || v.partial_cmp(&v).is_none() {
            v
        } else {
            m
        }
    });
    if m.partial_cmp(&m).is_none() || m == T::NEG_INFINITY || m == -T::NEG_INFINITY {
        return (m, T::ZERO);
    }
    (m, row.iter().map(|&v| (v - m).exp()).sum::<T>().ln())
}

/// `ln Σ exp(row)`, stable (see [`max_and_log_sum`]).
#[cfg(test)]
pub(crate) fn logsumexp<T: Float>(row: &[T]) -> T {
    let (m, ls) = max_and_log_sum(row);
    m + ls
}

/// Log-softmax along each row of the 2-D `x`.
pub fn log_softmax(x: &Tensor) -> Result<Tensor> {
    const OP: &str = "log_softmax";
    x.expect_float(OP)?;
    let (r, c) = dims2(OP, "x", x)?;
    let out = match &*x.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => cpu_forward(v, r, c)?);
            cpu_output(buf, vec![r, c], x)
        }
        s => on_gpu!(s, |D, b| {
            let ctx = D::context_of(b);
            let out = ctx.alloc(D::bytes(b))?;
            if r > 0 && c > 0 {
                ctx.log_softmax(b, &out, r, c)?;
            }
            D::output(out, vec![r, c], x)
        }),
    };
    let y = out.detach();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(log_softmax_backward(g, &y)?)])
    }))
}

fn cpu_forward<T: Float + CpuElem>(x: &[T], r: usize, c: usize) -> Result<CpuBuffer> {
    rows_from_fn(r, c, 2 * r * c, |i, row: &mut [T]| {
        let xi = &x[i * c..(i + 1) * c];
        let (m, ls) = max_and_log_sum(xi);
        row.iter_mut().zip(xi).for_each(|(o, &v)| *o = (v - m) - ls);
    })
}

fn log_softmax_backward(g: &Tensor, y: &Tensor) -> Result<Tensor> {
    const OP: &str = "log_softmax_backward";
    let (r, c) = dims2(OP, "gradient", g)?;
    match (&*g.storage(), &*y.storage()) {
        (Storage::Cpu(gb), Storage::Cpu(yb)) => {
            let buf = float_cpu2!(OP, &gb.data, &yb.data, (g, y) => cpu_backward(g, y, r, c)?);
            Ok(cpu_output(buf, vec![r, c], g))
        }
        (gs, ys) => on_gpu!(
            (gs, ys),
            |D, (gb, yb)| {
                let ctx = D::context_of(gb);
                let out = ctx.alloc(D::bytes(gb))?;
                if r > 0 && c > 0 {
                    ctx.log_softmax_backward(gb, yb, &out, r, c)?;
                }
                Ok(D::output(out, vec![r, c], g))
            },
            else Err(Error::DeviceMismatch {
                op: OP,
                lhs: g.device(),
                rhs: y.device(),
            })
        ),
    }
}

fn cpu_backward<T: Float + CpuElem>(g: &[T], y: &[T], r: usize, c: usize) -> Result<CpuBuffer> {
    rows_from_fn(r, c, 3 * r * c, |i, row: &mut [T]| {
        let (gi, yi) = (&g[i * c..(i + 1) * c], &y[i * c..(i + 1) * c]);
        let total: T = gi.iter().copied().sum();
        for ((o, &gv), &yv) in row.iter_mut().zip(gi).zip(yi) {
            *o = gv - yv.exp() * total;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn rows_exponentiate_to_one_even_for_huge_logits() {
        let x =
            Tensor::from_f32(vec![1000., 1001., 999., -5., 0., 5.], &[2, 3], Device::Cpu).unwrap();
        let y = log_softmax(&x).unwrap().to_vec_f64().unwrap();
        for row in y.chunks(3) {
            assert!(row.iter().all(|v| v.is_finite()), "{row:?}");
            let total: f64 = row.iter().map(|v| v.exp()).sum();
            assert!((total - 1.0).abs() < 1e-5, "{total}");
        }
        // log_softmax is shift-invariant: row 0 equals log_softmax([1, 2, 0]).
        let e = [1f64.exp(), 2f64.exp(), 1.0];
        let s: f64 = e.iter().sum();
        assert!((y[1] - (e[1] / s).ln()).abs() < 1e-5);
    }

    #[test]
    fn logsumexp_edge_cases() {
        assert_eq!(logsumexp::<f64>(&[]), f64::NEG_INFINITY);
        assert_eq!(logsumexp(&[f64::NEG_INFINITY, 0.0]), 0.0);
        assert!(logsumexp(&[1.0, f64::NAN]).is_nan());
        assert_eq!(logsumexp(&[f64::INFINITY, 0.0]), f64::INFINITY);
    }
}
