//! Graphs: storage, loaders, synthetic generators, sampling, blocks and degree buckets.

pub mod csr;

pub use csr::Csr;
