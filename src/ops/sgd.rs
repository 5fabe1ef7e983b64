//! In-place SGD update (PyTorch's rule, no dampening, no Nesterov):
//! `g ← ḡ + λ·p`; with momentum μ: `b ← μ·b + g` (b = g on the first step), `g ← b`;
//! then `p ← p − η·g`. Not recorded by autograd.

use rayon::prelude::*;

use crate::device::cpu::CpuElem;
use crate::device::gpu::GpuDevice;
use crate::device::kernels::sgd::SgdKernels;
pub use crate::device::kernels::sgd::SgdStep;
use crate::error::{Error, Result};
use crate::float::{Float, PAR_MIN};
use crate::ops::gpu::GpuTensors;
use crate::tensor::{Storage, Tensor};

/// Updates `param` in place from `grad`, with the momentum buffer `velocity` when μ > 0.
pub fn sgd_update(
    param: &Tensor,
    grad: &Tensor,
    velocity: Option<&Tensor>,
    h: SgdStep,
) -> Result<()> {
    super::check_update("sgd_update", param, &[Some(grad), velocity])?;
    let g = grad.storage();
    let mut p = param.storage_mut();
    let mut vel = velocity.map(|v| v.storage_mut());
    match (&mut *p, &*g) {
        (Storage::Cpu(p), Storage::Cpu(g)) => {
            let v = match vel.as_deref_mut() {
                Some(Storage::Cpu(b)) => Some(&mut b.data),
                Some(_) => return Err(mismatch(param, velocity)),
                None => None,
            };
            use crate::device::cpu::CpuData as D;
            match (&mut p.data, &g.data, v) {
                (D::F32(p), D::F32(g), None) => cpu(p, g, None, h),
                (D::F32(p), D::F32(g), Some(D::F32(v))) => cpu(p, g, Some(v), h),
                (D::F64(p), D::F64(g), None) => cpu(p, g, None, h),
                (D::F64(p), D::F64(g), Some(D::F64(v))) => cpu(p, g, Some(v), h),
                _ => {
                    return Err(Error::invalid(
                        "sgd_update: parameter, gradient and state dtypes differ",
                    ))
                }
            }
        }
        (ps, gs) => on_gpu!(
            (ps, gs),
            |D, (p, g)| {
                let v = match vel.as_deref() {
                    Some(s) => Some(D::buffer(s, "sgd_update").map_err(|_| mismatch(param, velocity))?),
                    None => None,
                };
                D::context_of(p).sgd(p, g, v, param.numel(), h)?
            },
            else return Err(mismatch(param, Some(grad)))
        ),
    }
    Ok(())
}

fn mismatch(param: &Tensor, other: Option<&Tensor>) -> Error {
    Error::DeviceMismatch {
        op: "sgd_update",
        lhs: param.device(),
        rhs: other.map_or(param.device(), Tensor::device),
    }
}

fn cpu<T: Float + CpuElem>(p: &mut [T], g: &[T], v: Option<&mut [T]>, h: SgdStep) {
    let (lr, mu, wd) = (
        T::from_f64(h.lr),
        T::from_f64(h.momentum),
        T::from_f64(h.weight_decay),
    );
    let first = h.first;
    let step = |(i, p): (usize, &mut T), v: Option<&mut T>| {
        let mut d = g[i] + wd * *p;
        if let Some(b) = v {
            *b = if first { d } else { mu * *b + d };
            d = *b;
        }
        *p -= lr * d;
    };
    match v {
        Some(v) if p.len() >= PAR_MIN => p
            .par_iter_mut()
            .enumerate()
            .zip(v.par_iter_mut())
            .for_each(|(x, b)| step(x, Some(b))),
        Some(v) => p
            .iter_mut()
            .enumerate()
            .zip(v.iter_mut())
            .for_each(|(x, b)| step(x, Some(b))),
        None if p.len() >= PAR_MIN => p.par_iter_mut().enumerate().for_each(|x| step(x, None)),
        None => p.iter_mut().enumerate().for_each(|x| step(x, None)),
    }
}
