//! `shaders/adam.wgsl` behind [`AdamKernels`]: a thread per value, in chunks that fit one
//! binding.

use std::sync::Arc;

use crate::device::kernels::adam::{AdamKernels, AdamStep};
use crate::device::wgpu::{AdamParams, Context, Kernel, WgpuBuffer};
use crate::error::Result;

const KERNEL: Kernel = Kernel {
    stem: "adam",
    source: include_str!("../../../../shaders/adam.wgsl"),
    entry: "adam_f32",
};

impl AdamKernels for Context {
    fn adam(
        self: &Arc<Self>,
        p: &WgpuBuffer,
        g: &WgpuBuffer,
        m: &WgpuBuffer,
        v: &WgpuBuffer,
        n: usize,
        h: AdamStep,
    ) -> Result<()> {
        // The same f64 -> f32 roundings as the CPU kernel's `T::from_f64`.
        let t = h.step as i32;
        let bits = |x: f64| (x as f32).to_bits();
        let params = AdamParams {
            lr: bits(h.lr),
            b1: bits(h.beta1),
            b2: bits(h.beta2),
            eps: bits(h.eps),
            wd: bits(h.weight_decay),
            bc1: bits(1.0 - h.beta1.powi(t)),
            bc2: bits(1.0 - h.beta2.powi(t)),
            shrink: bits(1.0 - h.lr * h.weight_decay),
            decoupled: h.decoupled as u32,
            ..Default::default()
        };
        let binds = [(1, p), (2, g), (3, m), (4, v)];
        self.launch_chunked(&KERNEL, params, &binds, &[], n as u64)
    }
}
