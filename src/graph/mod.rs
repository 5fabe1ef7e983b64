//! Graphs: storage, loaders, synthetic generators, sampling, blocks and degree buckets.

pub mod block;
pub mod bucket;
pub mod csr;
pub mod dataset;
pub mod io;
pub mod sample;
pub mod slice;
pub mod synth;

pub use block::Block;
pub use bucket::{degree_histogram, Bucket, Buckets};
pub use csr::Csr;
pub use dataset::{Dataset, LoadOptions, Split};
pub use sample::{full_blocks, sample_blocks, Sampler};
pub use slice::{BlockSizes, Slicer};

/// Loads a dataset from a spec: `synthetic:PRESET[,scale=X][,seed=N]` generates one in
/// memory; anything else is a path to an OGB raw-layout folder or an edge-list file.
pub fn load(spec: &str, opts: &LoadOptions) -> crate::error::Result<Dataset> {
    match spec.strip_prefix("synthetic:") {
        Some(s) => synth::SynthSpec::parse(s)?.generate(),
        None => Dataset::load(spec, opts),
    }
}
