//! Graphs: storage, loaders, synthetic generators, sampling, blocks and degree buckets.

pub mod block;
pub mod csr;
pub mod dataset;
pub mod io;
pub mod synth;

pub use block::Block;
pub use csr::Csr;
pub use dataset::{Dataset, LoadOptions, Split};
