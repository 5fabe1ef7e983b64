//! The op parity harness: an op run on the CPU and on the device from the same inputs,
//! forward and backward, and the comparison of everything it returns.
//!
//! A case is a function of some input tensors; float inputs become leaves. The output is
//! reduced with fixed random weights to a scalar whose backward gives every input gradient,
//! then the output and the gradients are compared with the op's tolerance.

use super::compare::{Comparison, Tol};
use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops;
use crate::rng::Rng;
use crate::tensor::{DType, Tensor};

/// An op under test: its inputs to its output.
pub type OpFn<'a> = dyn Fn(&[Tensor]) -> Result<Tensor> + 'a;

/// An op's output and each float input's gradient, as host vectors.
pub type Run = (Vec<f32>, Vec<Option<Vec<f32>>>);

/// Runs `f` on `inputs` moved to `device`, then backward from the output weighted by fixed
/// random values; returns the output and each float input's gradient.
pub fn run_op(f: &OpFn<'_>, inputs: &[Tensor], device: Device) -> Result<Run> {
    let leaves = inputs
        .iter()
        .map(|t| {
            let t = t.clone().to_device(device)?;
            Ok(if t.dtype() == DType::F32 {
                t.requires_grad_leaf()
            } else {
                t
            })
        })
        .collect::<Result<Vec<Tensor>>>()?;
    let out = f(&leaves)?;
    let mut rng = Rng::new(99);
    let w = Tensor::from_f32(
        (0..out.numel()).map(|_| rng.uniform() as f32).collect(),
        out.shape(),
        device,
    )?;
    if out.requires_grad() {
        ops::sum_all(&ops::mul(&out, &w)?)?.backward()?;
    }
    let grads = leaves
        .iter()
        .map(|l| l.grad().map(|g| g.to_vec_f32()).transpose())
        .collect::<Result<Vec<_>>>()?;
    Ok((out.to_vec_f32()?, grads))
}

/// Compares two runs: the output, then each gradient; a gradient present on one side only
/// is an error.
pub fn compare_runs(want: &Run, got: &Run, tol: Tol) -> Result<Comparison> {
    let mut c = Comparison::of(&want.0, &got.0, tol);
    for (i, (a, b)) in want.1.iter().zip(&got.1).enumerate() {
        match (a, b) {
            (Some(a), Some(b)) => c.merge(Comparison::of(a, b, tol)),
            (None, None) => {}
            _ => {
                return Err(Error::invalid(format!(
                    "the gradient of input {i} exists on one device only"
                )))
            }
        }
    }
    Ok(c)
}

/// The cases of one op on one device: the worst comparison over them and the first case
/// outside tolerance.
pub struct OpCheck {
    /// The device compared with the CPU.
    pub dev: Device,
    worst: Comparison,
    cases: usize,
    failed: Vec<String>,
}

impl OpCheck {
    /// No cases yet.
    pub fn new(dev: Device) -> OpCheck {
        OpCheck {
            dev,
            worst: Comparison::default(),
            cases: 0,
            failed: Vec::new(),
        }
    }

    /// Adds the comparison of case `label`.
    pub fn add(&mut self, label: &str, c: Comparison) {
        self.cases += 1;
        if !c.ok() {
            self.failed.push(format!("{label}: {}", c.describe()));
        }
        self.worst.merge(c);
    }

    /// Forward and backward of `f` on the device against the CPU.
    pub fn parity(&mut self, label: &str, f: &OpFn<'_>, inputs: &[Tensor], tol: Tol) -> Result<()> {
        let want = run_op(f, inputs, Device::Cpu)?;
        let got = run_op(f, inputs, self.dev)?;
        self.add(label, compare_runs(&want, &got, tol)?);
        Ok(())
    }

    /// `f` forward only, both sides, compared with `tol`.
    pub fn forward(
        &mut self,
        label: &str,
        inputs: &[Tensor],
        f: impl Fn(&[Tensor]) -> Result<Tensor>,
        tol: Tol,
    ) -> Result<()> {
        let want = f(inputs)?;
        let on = inputs
            .iter()
            .map(|t| t.clone().to_device(self.dev))
            .collect::<Result<Vec<_>>>()?;
        let got = f(&on)?;
        let c = match want.dtype() {
            DType::U32 => Comparison::of_u32(&want.to_vec_u32()?, &got.to_vec_u32()?),
            _ => Comparison::of(&want.to_vec_f32()?, &got.to_vec_f32()?, tol),
        };
        self.add(label, c);
        Ok(())
    }

    /// Compares a tensor computed on the CPU with one computed on the device.
    pub fn tensors(&mut self, label: &str, cpu: &Tensor, dev: &Tensor, tol: Tol) -> Result<()> {
        if cpu.shape() != dev.shape() {
            return Err(Error::invalid(format!(
                "{label}: shape {:?} on the cpu, {:?} on the device",
                cpu.shape(),
                dev.shape()
            )));
        }
        self.add(
            label,
            Comparison::of(&cpu.to_vec_f32()?, &dev.to_vec_f32()?, tol),
        );
        Ok(())
    }

    /// The record: pass when every case is within tolerance.
    pub fn outcome(self) -> Outcome {
        let ok = self.failed.is_empty();
        let detail = match self.failed.first() {
            None => format!("{} cases: {}", self.cases, self.worst.describe()),
            Some(first) => format!(
                "{} of {} cases outside tolerance; {first}",
                self.failed.len(),
                self.cases
            ),
        };
        let w = &self.worst;
        Outcome::verdict(ok, detail)
            .figure("cases", self.cases as f64)
            .figure("failed_cases", self.failed.len() as f64)
            .figure("values", w.len as f64)
            .figure("max_abs_err", w.max_abs)
            .figure("max_rel_err", w.max_rel)
            .figure("tolerance_used", w.tol_used)
    }
}

impl Ctx<'_> {
    /// One op's record: `cases` fills an [`OpCheck`] on this device.
    pub fn op(&mut self, name: &str, cases: impl FnOnce(&mut OpCheck) -> Result<()>) {
        let dev = self.dev;
        self.check(name, || {
            let mut c = OpCheck::new(dev);
            cases(&mut c)?;
            Ok(c.outcome())
        });
    }
}
