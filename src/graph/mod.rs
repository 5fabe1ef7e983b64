
pub mod block;
pub mod csr;
pub mod sample;

pub use block::Block;
pub use csr::Csr;
pub use sample::{full_blocks, sample_blocks, Sampler};
