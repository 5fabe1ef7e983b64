//! Ops: one file per op, each with its maths, its device dispatch, its CPU kernel (generic
//! over f32/f64) and its backward rule. Adding an op means one file here, one line below,
//! one `shaders/<op>.wgsl`, one `kernels/<op>.cu` and one row in the parity tests.

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

#[macro_use]
pub(crate) mod gpu;

mod adam;
mod argmax;
mod assign;
mod binary;
mod concat;
mod cross_entropy;
mod dropout;
mod index_select;
mod log_softmax;
mod lstm_aggregate;
mod lstm_cell;
mod lstm_pack;
mod matmul;
pub(crate) mod reduce;
mod reshape;
pub(crate) mod rows;
mod segment_max;
mod segment_softmax;
mod segment_sum;
mod segment_weighted_sum;
mod sgd;
pub(crate) mod slice;
mod unary;
mod widen;

/// `dst += src` in place (gradient accumulation, autograd's; not recorded).
pub use crate::autograd::add_assign;
pub use adam::{adam_update, AdamStep};
pub use argmax::argmax_rows;
pub use assign::assign;
pub use binary::{add, div, mul, sub, Broadcast};
pub use concat::concat;
pub use cross_entropy::cross_entropy;
pub use dropout::{dropout, dropout_key};
pub use index_select::{index_select, scatter_add};
pub use log_softmax::log_softmax;
pub use lstm_aggregate::{lstm_aggregate, LstmPlan, PlanBucket};
pub use lstm_cell::{lstm_cell, lstm_cell_backward, lstm_cell_forward};
pub use lstm_pack::lstm_packs;
pub use matmul::{matmul, matmul_rows};
pub use reduce::{expand_dim, mean_all, mean_dim, sum_all, sum_dim};
pub use reshape::reshape;
pub use segment_max::segment_max;
pub use segment_softmax::{segment_softmax, segment_softmax_backward};
pub use segment_sum::{segment_mean, segment_sum, segment_sum_transposed};
pub use segment_weighted_sum::{segment_weighted_sum, segment_weighted_sum_backward};
pub use sgd::{sgd_update, SgdStep};
pub use slice::slice;
pub use unary::{
    add_scalar, elu, exp, leaky_relu, log, mul_scalar, neg, relu, sigmoid, tanh, unary, UnaryOp,
};
pub use widen::widen;

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
