//! `shaders/sgd.wgsl` behind [`SgdKernels`]: a thread per value, in chunks that fit one
//! binding.

use std::sync::Arc;

use crate::device::kernels::sgd::{SgdKernels, SgdStep};
use crate::device::wgpu::{Context, Kernel, SgdParams, WgpuBuffer};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/sgd.wgsl");
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
impl SgdKernels for Context {
    fn sgd(
        self: &Arc<Self>,
        p: &WgpuBuffer,
        g: &WgpuBuffer,
        v: Option<&WgpuBuffer>,
        n: usize,
        h: SgdStep,
    ) -> Result<()> {
        let bits = |x: f64| (x as f32).to_bits();
        let params = SgdParams {
            lr: bits(h.lr),
            mu: bits(h.momentum),
            wd: bits(h.weight_decay),
            first: h.first as u32,
            ..Default::default()
        };
        let n = n as u64;
        match v {
            Some(v) => self.launch_chunked(&MOMENTUM, params, &[(1, p), (2, g), (3, v)], &[], n),
            None => self.launch_chunked(&PLAIN, params, &[(1, p), (2, g)], &[], n),
        }
    }
}
