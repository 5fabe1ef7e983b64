//! In-place copy: `dst ← src` (same shape and dtype), for restoring parameters from a
//! checkpoint. Not recorded by autograd.
//!
//! On the GPUs the copy is a buffer-to-buffer copy on the queue or stream;
//! `shaders/assign.wgsl` and `kernels/assign.cu` also hold the fill kernel that the device
//! buffers use for `Tensor::full` with a non-zero value
//! (`GpuDevice::fill`).

use crate::device::cpu::CpuData;
use crate::device::kernels::assign::AssignKernels;
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};

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
        (ds, ss) => on_gpu!(
            (ds, ss),
            |D, (d, s)| D::assign(d, s, dst.bytes() as u64)?,
            else return Err(Error::DeviceMismatch {
                op: "assign",
                lhs: dst.device(),
                rhs: src.device(),
            })
        ),
    }
    Ok(())
}
