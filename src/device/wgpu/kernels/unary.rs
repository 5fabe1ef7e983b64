//! `shaders/unary.wgsl` behind [`UnaryKernels`]: a thread per value, in chunks that fit
//! one binding.

use std::sync::Arc;

use crate::device::kernels::unary::UnaryKernels;
use crate::device::wgpu::{Context, Kernel, UnaryParams, WgpuBuffer};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/unary.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "unary",
    source: SHADER,
    entry: "unary_f32",
};
const BACKWARD: Kernel = Kernel {
    stem: "unary",
    source: SHADER,
    entry: "unary_backward_f32",
};

/// The shader's parameters: the op and its f32 parameter (`n, base` are set per chunk).
fn params((op, param): (u32, f32)) -> UnaryParams {
    UnaryParams {
        op,
        param: param.to_bits(),
        ..Default::default()
    }
}

impl UnaryKernels for Context {
    fn unary(
        self: &Arc<Self>,
        _op: &'static str,
        code: (u32, f32),
        x: &WgpuBuffer,
        out: &WgpuBuffer,
        n: usize,
    ) -> Result<()> {
        let binds = [(1, x), (2, out)];
        self.launch_chunked(&FORWARD, params(code), &binds, &[], n as u64)
    }

    fn unary_backward(
        self: &Arc<Self>,
        _op: &'static str,
        code: (u32, f32),
        g: &WgpuBuffer,
        s: &WgpuBuffer,
        out: &WgpuBuffer,
        n: usize,
    ) -> Result<()> {
        let binds = [(3, g), (4, s), (5, out)];
        self.launch_chunked(&BACKWARD, params(code), &binds, &[], n as u64)
    }
}
