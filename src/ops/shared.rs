//! What every op file shares: the dispatch on a CPU operand's float type
//! (`float_cpu!`, `float_cpu2!`), the wrapping of a CPU result as a tensor
//! ([`cpu_output`]) and the checks of an in-place update ([`check_update`]).
//! `ops/mod.rs` declares this module first, so that the macros are in scope in every op.

/// Dispatches on the float type of one CPU operand; `$call` is generic in the slice type.
macro_rules! float_cpu {
    ($op:expr, $data:expr, $x:ident => $call:expr) => {
        match $data {
            $crate::device::cpu::CpuData::F32($x) => $call,
            $crate::device::cpu::CpuData::F64($x) => $call,
            other => {
                return Err($crate::error::Error::DType {
                    op: $op,
                    expected: "f32",
                    got: other.dtype_name(),
                })
            }
        }
    };
}

/// Dispatches on the float type of two CPU operands of the same type.
macro_rules! float_cpu2 {
    ($op:expr, $a:expr, $b:expr, ($x:ident, $y:ident) => $call:expr) => {
        match ($a, $b) {
            ($crate::device::cpu::CpuData::F32($x), $crate::device::cpu::CpuData::F32($y)) => $call,
            ($crate::device::cpu::CpuData::F64($x), $crate::device::cpu::CpuData::F64($y)) => $call,
            _ => {
                return Err($crate::error::Error::invalid(format!(
                    "{}: operands must both be f32 (or both f64 on the CPU)",
                    $op
                )))
            }
        }
    };
}

use crate::device::cpu::CpuBuffer;
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};

/// Wraps an op's CPU result as a tensor shaped `shape`, placed and typed like `like`.
pub(crate) fn cpu_output(buf: CpuBuffer, shape: Vec<usize>, like: &Tensor) -> Tensor {
    Tensor::from_storage(Storage::Cpu(buf), shape, like.dtype(), like.device())
}

/// Checks an in-place update: every operand float, on `param`'s device, of its shape, and
/// none sharing `param`'s storage (the update holds their locks at once).
pub(crate) fn check_update(
    op: &'static str,
    param: &Tensor,
    others: &[Option<&Tensor>],
) -> Result<()> {
    param.expect_float(op)?;
    for t in others.iter().flatten() {
        param.same_device(t, op)?;
        if t.dtype() != param.dtype() {
            return Err(Error::DType {
                op,
                expected: param.dtype().name(),
                got: t.dtype().name(),
            });
        }
        if t.shape() != param.shape() {
            return Err(Error::shape(
                op,
                format!("parameter {:?} but operand {:?}", param.shape(), t.shape()),
            ));
        }
    }
    let all: Vec<&Tensor> = std::iter::once(param)
        .chain(others.iter().flatten().copied())
        .collect();
    for (i, a) in all.iter().enumerate() {
        if all[i + 1..].iter().any(|b| a.shares_storage(b)) {
            return Err(Error::invalid(format!("{op}: two operands share storage")));
        }
    }
    Ok(())
}
