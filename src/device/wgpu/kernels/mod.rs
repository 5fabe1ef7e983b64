//! The wgpu implementations of the ops' kernel traits (`src/device/kernels/`), one file per
//! op with the op's stem: each binds windows of the buffers and launches the op's
//! `shaders/<op>.wgsl` entry points.

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
mod matmul;
mod reduce;
mod segment_max;
mod segment_softmax;
mod segment_sum;
mod segment_weighted_sum;
mod sgd;
mod slice;
mod unary;
mod widen;
