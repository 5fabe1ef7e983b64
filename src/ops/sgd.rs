//! In-place SGD update (PyTorch's rule, no dampening, no Nesterov):
//! `g ← ḡ + λ·p`; with momentum μ: `b ← μ·b + g` (b = g on the first step), `g ← b`;
//! then `p ← p − η·g`. Not recorded by autograd.

use rayon::prelude::*;

use crate::device::cpu::CpuElem;
use crate::device::cuda::{self, Arg};
use crate::device::wgpu::Kernel;
use crate::device::wgpu::SgdParams;
use crate::error::{Error, Result};
use crate::float::{Float, PAR_MIN};
use crate::ops::rows::u32_count;
use crate::tensor::{Storage, Tensor};

const SHADER: &str = include_str!("../../shaders/sgd.wgsl");
const PLAIN: Kernel = Kernel {
    stem: "sgd",
    source: SHADER,
    entry: "sgd_f32",
};
const MOMENTUM: Kernel = Kernel {
    stem: "sgd",
    source: SHADER,
    entry: "sgd_momentum_f32",
};
const PLAIN_CUDA: cuda::Kernel = crate::cuda_kernel!("sgd", "sgd_f32");
const MOMENTUM_CUDA: cuda::Kernel = crate::cuda_kernel!("sgd", "sgd_momentum_f32");

/// Hyper-parameters of one SGD step.
#[derive(Clone, Copy, Debug)]
pub struct SgdStep {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: plain SGD).
    pub momentum: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// True on the first step, when the momentum buffer is set to the gradient.
    pub first: bool,
}

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
        (Storage::Wgpu(p), Storage::Wgpu(g)) => {
            let bits = |x: f64| (x as f32).to_bits();
            let params = SgdParams {
                lr: bits(h.lr),
                mu: bits(h.momentum),
                wd: bits(h.weight_decay),
                first: h.first as u32,
                ..Default::default()
            };
            let n = param.numel() as u64;
            match vel.as_deref_mut() {
                Some(Storage::Wgpu(v)) => {
                    p.ctx()
                        .launch_chunked(&MOMENTUM, params, &[(1, p), (2, g), (3, v)], &[], n)?
                }
                Some(_) => return Err(mismatch(param, velocity)),
                None => p
                    .ctx()
                    .launch_chunked(&PLAIN, params, &[(1, p), (2, g)], &[], n)?,
            }
        }
        (Storage::Cuda(p), Storage::Cuda(g)) => {
            // The same f64 -> f32 roundings as the CPU kernel's `T::from_f64`.
            let f = |x: f64| Arg::F32(x as f32);
            let n = u32_count("sgd_update", "the parameter", param.numel())?;
            let ctx = p.ctx();
            match vel.as_deref_mut() {
                Some(Storage::Cuda(v)) => {
                    let args = [
                        Arg::Buf(p),
                        Arg::Buf(g),
                        Arg::Buf(v),
                        f(h.lr),
                        f(h.momentum),
                        f(h.weight_decay),
                        Arg::U32(h.first as u32),
                        Arg::U32(n),
                    ];
                    ctx.launch_1d(&MOMENTUM_CUDA, n as u64, &args)?;
                }
                Some(_) => return Err(mismatch(param, velocity)),
                None => {
                    let args = [
                        Arg::Buf(p),
                        Arg::Buf(g),
                        f(h.lr),
                        f(h.weight_decay),
                        Arg::U32(n),
                    ];
                    ctx.launch_1d(&PLAIN_CUDA, n as u64, &args)?;
                }
            }
        }
        _ => return Err(mismatch(param, Some(grad))),
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
