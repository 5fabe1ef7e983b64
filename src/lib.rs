//! # espalier
//!
//! Trains graph neural networks in **micro-batches**: a batch that does not fit the GPU is
//! split into K micro-batches whose accumulated gradients equal the full batch's. This
//! crate holds the tensor and autograd core, the backends (CPU reference, wgpu, CUDA), the
//! graph machinery (storage, loaders, sampling, blocks), the models and the trainer.

#![warn(missing_docs)]
// rustdoc works out the auto traits of public types through wgpu-core's nested types
// (the wgpu context holds an open compute pass); the default limit of 128 overflows there.
#![recursion_limit = "256"]

pub mod admission;
pub mod atomic;
pub mod autograd;
pub mod bytes;
pub mod check;
pub mod checksum;
pub mod device;
pub mod dist;
pub mod error;
pub mod float;
pub mod gradcheck;
pub mod graph;
pub mod meta;
pub mod nn;
// With no GPU backend built (`--no-default-features`), the ops' GPU halves, written once
// for every backend (`src/ops/gpu.rs`), are not instantiated.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(unused))]
pub mod ops;
pub mod partition;
pub mod prefetch;
pub mod rng;
pub mod tensor;
pub mod train;
pub mod work;

pub use device::Device;
pub use error::{Error, Result};
pub use tensor::{DType, Tensor};
