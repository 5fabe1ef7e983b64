//! `range`: the seeds sorted by node id, cut into K contiguous chunks of equal size (±1),
//! as the PyG peer's `--partition range` does. It groups nearby ids, which helps only
//! where ids carry locality (e.g. a graph stored in a locality-preserving order).

use crate::error::Result;
use crate::partition::{split_even, Batch, Partitioner};

/// See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct RangePartitioner;

impl Partitioner for RangePartitioner {
    fn name(&self) -> &str {
        "range"
    }

    fn partition(&mut self, batch: &Batch<'_>, k: usize) -> Result<Vec<Vec<u32>>> {
        let mut sorted = batch.seeds.to_vec();
        sorted.sort_unstable();
        Ok(split_even(&sorted, k))
    }
}
