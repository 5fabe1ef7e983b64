//! Graphs: storage, loaders, synthetic generators, sampling, blocks and degree buckets.

pub mod block;
pub mod csr;

pub use block::Block;
pub use csr::Csr;
