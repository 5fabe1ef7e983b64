//! `kernels/sgd.cu` behind [`SgdKernels`]: a thread per value (grid-stride).

use std::sync::Arc;

use crate::device::cuda::args::{SgdArgs, SgdMomentumArgs};
use crate::device::cuda::{Context, CudaBuffer};
use crate::device::gpu::u32_count;
use crate::device::kernels::sgd::{SgdKernels, SgdStep};
use crate::error::Result;

impl SgdKernels for Context {
    fn sgd(
        self: &Arc<Self>,
        p: &CudaBuffer,
        g: &CudaBuffer,
        v: Option<&CudaBuffer>,
        n: usize,
        h: SgdStep,
    ) -> Result<()> {
        // The same f64 -> f32 roundings as the CPU kernel's `T::from_f64`.
        let f = |x: f64| x as f32;
        let n = u32_count("sgd_update", "the parameter", n)?;
        match v {
            Some(v) => {
                let args = SgdMomentumArgs {
                    param: p.into(),
                    grad: g.into(),
                    velocity: v.into(),
                    lr: f(h.lr),
                    mu: f(h.momentum),
                    wd: f(h.weight_decay),
                    first: h.first as u32,
                    n,
                };
                self.launch_args_1d(&args, n as u64)
            }
            None => {
                let args = SgdArgs {
                    param: p.into(),
                    grad: g.into(),
                    lr: f(h.lr),
                    wd: f(h.weight_decay),
                    n,
                };
                self.launch_args_1d(&args, n as u64)
            }
        }
    }
}
