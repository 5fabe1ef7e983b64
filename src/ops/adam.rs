//! In-place Adam / AdamW update (PyTorch's rules).
//!
//! Adam (L2): `g ← ḡ + λ·p`. AdamW (decoupled): `p ← p·(1 − η·λ)` and `g ← ḡ`. Then
//! `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`, `m̂ = m/(1−β₁ᵗ)`, `v̂ = v/(1−β₂ᵗ)`,
//! `p ← p − η·m̂/(√v̂ + ε)`. Not recorded by autograd.

use rayon::prelude::*;

use crate::device::cpu::CpuElem;
use crate::device::gpu::GpuDevice;
use crate::device::kernels::adam::AdamKernels;
pub use crate::device::kernels::adam::AdamStep;
use crate::error::{Error, Result};
use crate::float::{Float, PAR_MIN};
use crate::tensor::{Storage, Tensor};

/// Updates `param`, and the moments `m`, `v`, in place from `grad`.
pub fn adam_update(
    param: &Tensor,
    grad: &Tensor,
    m: &Tensor,
    v: &Tensor,
    h: AdamStep,
) -> Result<()> {
    super::check_update("adam_update", param, &[Some(grad), Some(m), Some(v)])?;
    if h.step == 0 {
        return Err(Error::invalid("adam_update: the step count starts at 1"));
    }
    let g = grad.storage();
    let mut p = param.storage_mut();
    let mut ms = m.storage_mut();
    let mut vs = v.storage_mut();
    match (&mut *p, &*g, &mut *ms, &mut *vs) {
        (Storage::Cpu(p), Storage::Cpu(g), Storage::Cpu(m), Storage::Cpu(v)) => {
            use crate::device::cpu::CpuData as D;
            match (&mut p.data, &g.data, &mut m.data, &mut v.data) {
                (D::F32(p), D::F32(g), D::F32(m), D::F32(v)) => cpu(p, g, m, v, h),
                (D::F64(p), D::F64(g), D::F64(m), D::F64(v)) => cpu(p, g, m, v, h),
                _ => {
                    return Err(Error::invalid(
                        "adam_update: parameter, gradient and state dtypes differ",
                    ))
                }
            }
        }
        (ps, gs, ms, vs) => on_gpu!(
            (ps, gs, ms, vs),
            |D, (p, g, m, v)| D::context_of(p).adam(p, g, m, v, param.numel(), h)?,
            else {
                // check_update put every operand on one device, so this is unreachable in
                // practice; report it as the mismatch it would be.
                return Err(Error::DeviceMismatch {
                    op: "adam_update",
                    lhs: param.device(),
                    rhs: grad.device(),
                });
            }
        ),
    }
    Ok(())
}

fn cpu<T: Float + CpuElem>(p: &mut [T], g: &[T], m: &mut [T], v: &mut [T], h: AdamStep) {
    let t = h.step as i32;
    let c = |x: f64| T::from_f64(x);
    let (b1, b2, eps, wd) = (c(h.beta1), c(h.beta2), c(h.eps), c(h.weight_decay));
    let bc1 = c(1.0 - h.beta1.powi(t));
    let bc2 = c(1.0 - h.beta2.powi(t));
    let lr = c(h.lr);
    let shrink = c(1.0 - h.lr * h.weight_decay);
    // One loop per chunk with the decay mode hoisted out of it, so that each loop
    // vectorises (the same operations per element as before, so the same bits).
    let chunk = |p: &mut [T], g: &[T], m: &mut [T], v: &mut [T]| {
        let update = |p: &mut T, g: T, m: &mut T, v: &mut T| {
            *m = b1 * *m + (T::ONE - b1) * g;
            *v = b2 * *v + (T::ONE - b2) * g * g;
            let mhat = *m / bc1;
            let vhat = *v / bc2;
            *p -= lr * mhat / (vhat.sqrt() + eps);
        };
        let all = p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut());
        if h.decoupled {
            for (((p, &g), m), v) in all {
                *p *= shrink;
                update(p, g, m, v);
            }
        } else {
            for (((p, &g), m), v) in all {
                let g = g + wd * *p;
                update(p, g, m, v);
            }
        }
    };
    if p.len() >= PAR_MIN {
        const CHUNK: usize = 1 << 14;
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK))
            .for_each(|(((p, g), m), v)| chunk(p, g, m, v));
    } else {
        chunk(p, g, m, v);
    }
}
