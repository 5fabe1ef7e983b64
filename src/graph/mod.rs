//! Graphs: storage, loaders, synthetic generators, sampling, blocks and degree buckets.

pub mod block;
pub mod bucket;
pub mod csr;
pub mod dataset;
pub mod io;
pub mod sample;
pub mod synth;

pub use block::Block;
pub use bucket::{degree_histogram, Bucket, Buckets};
pub use csr::Csr;
pub use dataset::{Dataset, LoadOptions, Split};
pub use sample::{full_blocks, sample_blocks, Sampler};
