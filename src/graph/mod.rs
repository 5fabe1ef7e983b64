//! Graphs: storage, loaders, synthetic generators, sampling, blocks and degree buckets.

pub mod block;
pub mod bucket;
pub mod csr;
pub mod sample;

pub use block::Block;
pub use bucket::{degree_histogram, Bucket, Buckets};
pub use csr::Csr;
pub use sample::{full_blocks, sample_blocks, Sampler};
