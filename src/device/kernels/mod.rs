//! The kernel traits of the ops: what each op asks of a GPU backend.
//!
//! `kernels/<op>.rs` (the stem of `src/ops/<op>.rs`) defines the op's trait, one method
//! per kernel launch (or per step the backends do differently), with neutral parameters:
//! plain numbers, the backend's buffers ([`GpuDevice::Buffer`](super::gpu::GpuDevice)) and
//! the small structs defined beside the trait. Each GPU backend implements it in its own
//! folder, `device/<backend>/kernels/<op>.rs`, where parameters are marshalled (wgpu: the
//! `#[repr(C)]` structs of `device/wgpu/params.rs` over binding windows; CUDA: the
//! argument structs of `device/cuda/args.rs`, checked against the `.cu` signatures). The
//! op's orchestration in `src/ops/<op>.rs` is written once, generic over
//! `D: GpuDevice + GpuTensors + <Op>Kernels`, and reached through `ops/gpu.rs`'s `on_gpu!`.
//!
//! This folder sits below `src/ops/` and imports nothing from it.

pub mod adam;
pub mod argmax;
pub mod assign;
pub mod binary;
pub mod concat;
pub mod cross_entropy;
pub mod dropout;
pub mod index_select;
pub mod log_softmax;
pub mod lstm_aggregate;
pub mod lstm_cell;
pub mod matmul;
pub mod reduce;
pub mod segment_max;
pub mod segment_softmax;
pub mod segment_sum;
pub mod segment_weighted_sum;
pub mod sgd;
pub mod slice;
pub mod unary;
pub mod widen;
