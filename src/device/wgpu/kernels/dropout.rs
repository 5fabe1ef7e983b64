//! `shaders/dropout.wgsl` behind [`DropoutKernels`]: a thread per value, the row ids
//! following the values through a column broadcast.

use std::sync::Arc;

use crate::device::kernels::dropout::{DropoutKernels, Mask};
use crate::device::wgpu::{Context, DropoutParams, Follow, Kernel, WgpuBuffer};
use crate::error::Result;

const SHADER: &str = include_str!("../../../../shaders/dropout.wgsl");
const BY_ROW: Kernel = Kernel {
    stem: "dropout",
    source: SHADER,
    entry: "dropout_f32",
};
const BY_ID: Kernel = Kernel {
    stem: "dropout",
    source: SHADER,
    entry: "dropout_ids_f32",
};

impl DropoutKernels for Context {
    fn dropout(
        self: &Arc<Self>,
        m: Mask,
        x: &WgpuBuffer,
        ids: Option<&WgpuBuffer>,
        out: &WgpuBuffer,
    ) -> Result<()> {
        let params = DropoutParams {
            c: m.c as u32,
            key: m.key,
            threshold: m.threshold.to_bits(),
            scale: m.scale.to_bits(),
            ..Default::default()
        };
        let same = [(1, x), (2, out)];
        let n = m.r * m.c;
        match ids {
            Some(ids) => {
                let follow = Some((3, ids, Follow::Col(m.c)));
                self.launch_followed(&BY_ID, params, &same, follow, n)
            }
            None => self.launch_followed(&BY_ROW, params, &same, None, n),
        }
    }
}
