//! In-place copy: `dst ← src` (same shape and dtype), for restoring parameters from a
//! checkpoint. Not recorded by autograd.
//!
//! On the GPUs the copy is a buffer-to-buffer copy on the queue or stream;
//! `shaders/assign.wgsl` and `kernels/assign.cu` hold the fill kernel that `Tensor::full`
//! uses for non-zero values ([`fill`], [`fill_cuda`]).

use crate::device::cpu::CpuData;
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::AssignParams;
use crate::device::wgpu::{Context, Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};

const FILL: Kernel = Kernel {
    stem: "assign",
    source: include_str!("../../shaders/assign.wgsl"),
    entry: "fill_u32",
};
const FILL_CUDA: cuda::Kernel = crate::cuda_kernel!("assign", "fill_u32");

/// Overwrites `dst`'s values with `src`'s.
pub fn assign(dst: &Tensor, src: &Tensor) -> Result<()> {
    super::check_update("assign", dst, &[Some(src)])?;
    let s = src.storage();
    let mut d = dst.storage_mut();
    match (&mut *d, &*s) {
        (Storage::Cpu(d), Storage::Cpu(s)) => match (&mut d.data, &s.data) {
            (CpuData::F32(d), CpuData::F32(s)) => d.copy_from_slice(s),
            (CpuData::F64(d), CpuData::F64(s)) => d.copy_from_slice(s),
            _ => return Err(Error::invalid("assign: dtypes differ")),
        },
        (Storage::Wgpu(d), Storage::Wgpu(s)) => {
            d.ctx().copy(s, 0, d, 0, (dst.numel() * 4) as u64)?;
        }
        (Storage::Cuda(d), Storage::Cuda(s)) => d.copy_from(s, dst.bytes() as u64)?,
        _ => {
            return Err(Error::DeviceMismatch {
                op: "assign",
                lhs: dst.device(),
                rhs: src.device(),
            })
        }
    }
    Ok(())
}

/// A buffer of `n` 4-byte values, each the 32-bit `word` (zeros are cleared, not filled).
pub(crate) fn fill(ctx: &std::sync::Arc<Context>, n: usize, word: u32) -> Result<WgpuBuffer> {
    let bytes = (n * 4) as u64;
    if word == 0 {
        return WgpuBuffer::zeros(ctx, bytes);
    }
    let out = WgpuBuffer::new(ctx, bytes)?;
    let params = AssignParams {
        word,
        ..Default::default()
    };
    ctx.launch_chunked(&FILL, params, &[(1, &out)], &[], n as u64)?;
    Ok(out)
}

/// A CUDA buffer of `n` 4-byte values, each the 32-bit `word`.
pub(crate) fn fill_cuda(
    ctx: &std::sync::Arc<cuda::Context>,
    n: usize,
    word: u32,
) -> Result<CudaBuffer> {
    let bytes = (n * 4) as u64;
    if word == 0 {
        return CudaBuffer::zeros(ctx, bytes);
    }
    let out = CudaBuffer::new(ctx, bytes)?;
    let count = crate::ops::rows::u32_count("full", "the tensor", n)?;
    ctx.launch_1d(
        &FILL_CUDA,
        n as u64,
        &[Arg::Buf(&out), Arg::U32(word), Arg::U32(count)],
    )?;
    Ok(out)
}
