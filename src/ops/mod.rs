//! Ops: one file per op, each with its maths, its device dispatch, its CPU kernel (generic
//! over f32/f64), its backward rule and, for the ops a layer calls, its meta arm
//! (`meta_<op>`: its allocations on [`crate::meta`]'s symbolic buffers, for the memory
//! estimator). Adding an op means one file here, one line below,
//! one `shaders/<op>.wgsl`, one `kernels/<op>.cu` and one row in the parity tests.

// What every op file shares (the CPU float dispatch macros, the CPU output wrapper, the
// in-place update check): first, so that its macros are in scope in the files below.
#[macro_use]
mod shared;
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
#[cfg(test)]
pub(crate) mod test_values;
mod unary;
mod widen;

pub(crate) use shared::{check_update, cpu_output};

/// `dst += src` in place (gradient accumulation, autograd's; not recorded).
pub use crate::autograd::add_assign;
pub use adam::{adam_update, AdamStep};
pub use argmax::{argmax_rows, meta_argmax_rows};
pub use assign::assign;
pub use binary::{add, div, meta_add, meta_mul, mul, sub, Broadcast};
pub use concat::concat;
pub use cross_entropy::{cross_entropy, meta_cross_entropy};
pub use dropout::{dropout, dropout_key, meta_dropout};
pub use index_select::{index_select, meta_index_select, meta_scatter_add, scatter_add};
pub use log_softmax::log_softmax;
pub use lstm_aggregate::{
    lstm_aggregate, meta_lstm_aggregate, meta_lstm_buckets, LstmPlan, PlanBucket,
};
pub use lstm_cell::{lstm_cell, lstm_cell_backward, lstm_cell_forward};
pub use lstm_pack::lstm_packs;
pub use matmul::{matmul, matmul_rows, meta_matmul, meta_matmul_rows};
pub use reduce::{expand_dim, mean_all, mean_dim, meta_sum_rows, sum_all, sum_dim};
pub use reshape::{meta_reshape, reshape};
pub use segment_max::{meta_segment_max, segment_max};
pub use segment_softmax::{meta_segment_softmax, segment_softmax, segment_softmax_backward};
pub use segment_sum::{
    meta_segment_sum, meta_segment_sum_transposed, segment_mean, segment_sum,
    segment_sum_transposed,
};
pub use segment_weighted_sum::{
    meta_segment_weighted_sum, segment_weighted_sum, segment_weighted_sum_backward,
};
pub use sgd::{sgd_update, SgdStep};
pub use slice::{meta_pad_rows, meta_slice_rows, slice};
pub use unary::{
    add_scalar, elu, exp, leaky_relu, log, meta_unary, mul_scalar, neg, relu, sigmoid, tanh, unary,
    UnaryOp,
};
pub use widen::widen;
