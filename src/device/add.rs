//! Element-wise addition of two float buffers of the same length on one device: in place
//! (`dst += src`) or into a new buffer (`a + b`). It is what gradient accumulation needs
//! (autograd's sums, a micro-batch's held gradients): the device layer owns it, as it
//! owns `fill`, so that autograd adds gradients without going through the ops, which
//! record autograd nodes. Not recorded by autograd.
//!
//! The GPU kernels are `add_assign_f32` and `binary_f32` (op add, no broadcast) of
//! `shaders/binary.wgsl` and `kernels/binary.cu`, the files of the `binary` op, which
//! computes the same `x + y` per element: a gradient summed here is bit-identical to one
//! summed by `ops::add`.

use rayon::prelude::*;

use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::device::cuda::args::{AddAssignArgs, BinaryArgs};
use crate::device::cuda::CudaBuffer;
use crate::device::wgpu::{BinaryParams, Follow, Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::float::{Float, PAR_MIN};

const SHADER: &str = include_str!("../../shaders/binary.wgsl");
const ADD: Kernel = Kernel {
    stem: "binary",
    source: SHADER,
    entry: "binary_f32",
};
const ADD_ASSIGN: Kernel = Kernel {
    stem: "binary",
    source: SHADER,
    entry: "add_assign_f32",
};

/// The error for operands that are not both f32 (or both f64) or differ in length.
fn operands(op: &str, a: &CpuData, b: &CpuData) -> Error {
    Error::invalid(format!(
        "{op}: operands must both be f32 (or both f64 on the CPU) of one length, got {} and {}",
        a.dtype_name(),
        b.dtype_name()
    ))
}

/// `d += s` on CPU values (f32 or f64, same length).
pub fn cpu_add_assign(d: &mut CpuData, s: &CpuData) -> Result<()> {
    fn go<T: Float + CpuElem>(d: &mut [T], s: &[T]) {
        if d.len() >= PAR_MIN {
            d.par_iter_mut()
                .zip(s.par_iter())
                .for_each(|(d, &s)| *d += s);
        } else {
            d.iter_mut().zip(s).for_each(|(d, &s)| *d += s);
        }
    }
    match (&mut *d, s) {
        (CpuData::F32(d), CpuData::F32(s)) if d.len() == s.len() => go(d, s),
        (CpuData::F64(d), CpuData::F64(s)) if d.len() == s.len() => go(d, s),
        (d, s) => return Err(operands("add_assign", d, s)),
    }
    Ok(())
}

/// `a + b` on CPU values (f32 or f64, same length), as a new counted buffer.
pub fn cpu_add(a: &CpuData, b: &CpuData) -> Result<CpuBuffer> {
    fn go<T: Float + CpuElem>(a: &[T], b: &[T]) -> Result<CpuBuffer> {
        cpu::from_fn(a.len(), |i| a[i] + b[i])
    }
    match (a, b) {
        (CpuData::F32(x), CpuData::F32(y)) if x.len() == y.len() => go(x, y),
        (CpuData::F64(x), CpuData::F64(y)) if x.len() == y.len() => go(x, y),
        _ => Err(operands("add", a, b)),
    }
}

/// `d += s` over the first `n` f32 values of two wgpu buffers.
pub fn wgpu_add_assign(d: &WgpuBuffer, s: &WgpuBuffer, n: usize) -> Result<()> {
    let params = BinaryParams::default();
    d.ctx()
        .launch_chunked(&ADD_ASSIGN, params, &[(4, s), (5, d)], &[], n as u64)
}

/// `a + b` over the first `n` f32 values of two wgpu buffers, as a new buffer.
pub fn wgpu_add(a: &WgpuBuffer, b: &WgpuBuffer, n: usize) -> Result<WgpuBuffer> {
    let out = WgpuBuffer::new(a.ctx(), a.len)?;
    // Op 0 (add), broadcast 0 (none): b is read element for element, as a is.
    let params = BinaryParams {
        cols: 1,
        ..Default::default()
    };
    let same = [(1, a), (3, &out)];
    a.ctx()
        .launch_followed(&ADD, params, &same, Some((2, b, Follow::Same)), n)?;
    Ok(out)
}

/// The element count `n` as the CUDA kernels' u32.
fn cuda_count(op: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        Error::invalid(format!(
            "{op}: {n} values do not fit the kernel's u32 count"
        ))
    })
}

/// `d += s` over the first `n` f32 values of two CUDA buffers.
pub fn cuda_add_assign(d: &CudaBuffer, s: &CudaBuffer, n: usize) -> Result<()> {
    let count = cuda_count("add_assign", n)?;
    let args = AddAssignArgs {
        src: s.into(),
        dst: d.into(),
        n: count,
    };
    d.ctx().launch_args_1d(&args, n as u64)
}

/// `a + b` over the first `n` f32 values of two CUDA buffers, as a new buffer.
pub fn cuda_add(a: &CudaBuffer, b: &CudaBuffer, n: usize) -> Result<CudaBuffer> {
    let count = cuda_count("add", n)?;
    let out = CudaBuffer::new(a.ctx(), a.len)?;
    // cols 1, op 0 (add), broadcast 0 (none).
    let args = BinaryArgs {
        a: a.into(),
        b: b.into(),
        out: (&out).into(),
        cols: 1,
        op: 0,
        bcast: 0,
        n: count,
    };
    a.ctx().launch_args_1d(&args, n as u64)?;
    Ok(out)
}
