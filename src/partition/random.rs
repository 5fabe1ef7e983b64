//! `random`: a fresh uniform permutation of the seeds every epoch, cut into K contiguous
//! chunks of equal size (±1), as the PyG peer's `--partition random` does.
//!
//! The permutation is drawn from `Rng::fork(seed, epoch)`, so it is reproducible and
//! independent of the thread count. Random micro-batches share many input nodes (high
//! redundancy) but are balanced in expectation.

use crate::error::Result;
use crate::partition::{split_even, Batch, Partitioner};
use crate::rng::{mix64, Rng};

/// See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct RandomPartitioner;

impl Partitioner for RandomPartitioner {
    fn name(&self) -> &str {
        "random"
    }

    fn partition(&mut self, batch: &Batch<'_>, k: usize) -> Result<Vec<Vec<u32>>> {
        let mut order = batch.seeds.to_vec();
        let mut rng = Rng::fork(batch.seed ^ 0x7061_7274, mix64(batch.epoch));
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        Ok(split_even(&order, k))
    }
}
