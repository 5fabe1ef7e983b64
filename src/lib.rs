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

// The `espalier::` paths of the command line's files (src/cli/) name this crate.
extern crate self as espalier;

pub mod admission;
pub mod atomic;
pub mod autograd;
pub mod bytes;
pub mod check;
pub mod checksum;
/// The command line's flags and commands: the binary (src/main.rs) runs them, and other
/// front ends (the Python package in python/) fill the same flag types, so that they share
/// their defaults, checks and messages.
#[allow(missing_docs)]
pub mod cli;
pub mod device;
pub mod dist;
pub mod error;
pub mod float;
pub mod gradcheck;
pub mod graph;
pub mod nn;
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
