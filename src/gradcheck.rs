//! Gradient checks by central differences, in f64.
//!
//! [`check`] takes a function of some f64 input tensors, reduces its output to a scalar
//! with fixed pseudo-random weights (so every output element matters and errors cannot
//! cancel), computes the analytic gradient with [`Tensor::backward`], and compares it with
//! `(L(x + εeᵢ) - L(x - εeᵢ)) / 2ε` for every element of every input.

use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::ops::{mul, sum_all};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// Largest disagreement found by [`check`].
#[derive(Clone, Debug)]
pub struct Report {
    /// Largest `|analytic - numeric| / max(1, |numeric|)` over all elements.
    pub max_error: f64,
    /// Input, element, analytic and numeric values where it occurred.
    pub worst: (usize, usize, f64, f64),
}

/// Checks `f`'s gradient with respect to every input; errors if any element is off by more
/// than `tol` (relative to `max(1, |numeric|)`).
pub fn check(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    eps: f64,
    tol: f64,
) -> Result<Report> {
    let values: Vec<Vec<f64>> = inputs
        .iter()
        .map(|t| t.to_vec_f64())
        .collect::<Result<_>>()?;
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    let make = |vals: &[Vec<f64>], grad: bool| -> Result<Vec<Tensor>> {
        vals.iter()
            .zip(&shapes)
            .map(|(v, s)| {
                let t = Tensor::from_f64(v.clone(), s)?;
                Ok(if grad { t.requires_grad_leaf() } else { t })
            })
            .collect()
    };
    // Fixed weights over the output, drawn once.
    let out0 = no_grad(|| f(&make(&values, false)?))?;
    let mut rng = Rng::new(0x5eed);
    let weights = Tensor::from_f64(
        (0..out0.numel())
            .map(|_| rng.uniform() * 2.0 - 1.0)
            .collect(),
        out0.shape(),
    )?;
    let loss = |xs: &[Tensor]| -> Result<Tensor> { sum_all(&mul(&f(xs)?, &weights)?) };

    let leaves = make(&values, true)?;
    loss(&leaves)?.backward()?;
    let mut report = Report {
        max_error: 0.0,
        worst: (0, 0, 0.0, 0.0),
    };
    for (i, leaf) in leaves.iter().enumerate() {
        let analytic = match leaf.grad() {
            Some(g) => g.to_vec_f64()?,
            None => vec![0.0; leaf.numel()],
        };
        for j in 0..values[i].len() {
            let mut vals = values.clone();
            vals[i][j] += eps;
            let plus = no_grad(|| loss(&make(&vals, false)?))?.item()?;
            vals[i][j] -= 2.0 * eps;
            let minus = no_grad(|| loss(&make(&vals, false)?))?.item()?;
            let numeric = (plus - minus) / (2.0 * eps);
            let err = (analytic[j] - numeric).abs() / numeric.abs().max(1.0);
            if err > report.max_error || err.is_nan() {
                report.max_error = err;
                report.worst = (i, j, analytic[j], numeric);
            }
        }
    }
    if report.max_error > tol || report.max_error.is_nan() {
        let (i, j, a, n) = report.worst;
        return Err(Error::Autograd(format!(
            "gradient check failed: input {i} element {j}: analytic {a:.9e} vs numeric {n:.9e} (error {:.3e} > {tol:.1e})",
            report.max_error
        )));
    }
    Ok(report)
}
