//! `kernels/adam.cu` behind [`AdamKernels`]: a thread per value (grid-stride).

use std::sync::Arc;

use crate::device::cuda::args::AdamArgs;
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::adam::{AdamKernels, AdamStep};
use crate::error::Result;

impl AdamKernels for Context {
    fn adam(
        self: &Arc<Self>,
        p: &CudaBuffer,
        g: &CudaBuffer,
        m: &CudaBuffer,
        v: &CudaBuffer,
        n: usize,
        h: AdamStep,
    ) -> Result<()> {
        // The same f64 -> f32 roundings as the CPU kernel's `T::from_f64`.
        let t = h.step as i32;
        let f = |x: f64| x as f32;
        let n = u32_count("adam_update", "the parameter", n)?;
        let args = AdamArgs {
            param: p.into(),
            grad: g.into(),
            m1: m.into(),
            m2: v.into(),
            lr: f(h.lr),
            b1: f(h.beta1),
            b2: f(h.beta2),
            eps: f(h.eps),
            wd: f(h.weight_decay),
            bc1: f(1.0 - h.beta1.powi(t)),
            bc2: f(1.0 - h.beta2.powi(t)),
            shrink: f(1.0 - h.lr * h.weight_decay),
            decoupled: h.decoupled as u32,
            n,
        };
        self.launch_args_1d(&args, n as u64)
    }
}
