//! `shaders/binary.wgsl` behind [`BinaryKernels`]: a thread per value, `b` following `a`
//! through the broadcast so that each chunk binds the values of `b` it reads.

use std::sync::Arc;

use crate::device::kernels::binary::{BinaryKernels, BinaryShape};
use crate::device::wgpu::{BinaryParams, Context, Follow, Kernel, WgpuBuffer};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/binary.wgsl");
const KERNEL: Kernel = Kernel {
    stem: "binary",
    source: SHADER,
    entry: "binary_f32",
};
const ADD_ASSIGN: Kernel = Kernel {
    stem: "binary",
    source: SHADER,
    entry: "add_assign_f32",
};

impl BinaryKernels for Context {
    fn binary(
        self: &Arc<Self>,
        _op: &'static str,
        s: BinaryShape,
        a: &WgpuBuffer,
        b: &WgpuBuffer,
        out: &WgpuBuffer,
    ) -> Result<()> {
        let params = BinaryParams {
            cols: s.cols as u32,
            op: s.op,
            bcast: s.bcast,
            ..Default::default()
        };
        // b follows a through the broadcast: each range binds the values it reads.
        let follow = match s.bcast {
            0 => Follow::Same,
            1 => Follow::Row(s.cols),
            2 => Follow::Col(s.cols),
            _ => Follow::Scalar,
        };
        let same = [(1, a), (3, out)];
        self.launch_followed(&KERNEL, params, &same, Some((2, b, follow)), s.n)
    }

    fn add_assign(self: &Arc<Self>, dst: &WgpuBuffer, src: &WgpuBuffer, n: usize) -> Result<()> {
        let params = BinaryParams::default();
        self.launch_chunked(&ADD_ASSIGN, params, &[(4, src), (5, dst)], &[], n as u64)
    }
}
