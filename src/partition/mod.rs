//! Partitioners: split one batch's seeds into K micro-batches.
//!
//! A [`Partitioner`] sees the whole batch (its seeds, the full blocks through a
//! [`Slicer`], the graph, the run's seed and epoch, and the memory estimator) and returns K
//! disjoint, non-empty seed lists that together cover the batch. The trainer then slices
//! each list's blocks out of the full batch ([`crate::graph::slice`]), so every partition
//! gives the same accumulated gradient; partitioners differ only in how many input nodes
//! the micro-batches repeat (redundancy), how even their memory is, and what they cost.
//!
//! One file per partitioner. `random`, `range` and `metis` are here; partitioners that
//! weigh redundancy or memory (Betty's redundancy-embedded graph, Cherry's
//! message-flow graph, Buffalo's bucket scheduler, GREM) fit the same trait: they read the
//! full blocks and sizes of candidate micro-batches from [`Batch::slicer`], memory from
//! [`Batch::estimator`], and may keep state between calls (`&mut self`), e.g. to partition
//! once and reuse the result every epoch.

pub mod betty;
pub mod buffalo;
pub mod buffalo_model;
pub mod cherry;
pub mod cherry_flow;
pub mod grem;
pub mod kway;
pub mod metis;
pub mod parts;
pub mod random;
pub mod range;
mod registry;
mod search;
pub mod stats;

use crate::error::{Error, Result};
use crate::graph::{Block, BlockSizes, Csr, Slicer};

pub use registry::{by_name, help, names, Entry, REGISTRY};
pub use search::{smallest_fitting, Found};
pub use stats::{MicroBatchStats, PartitionStats};

/// Everything a partitioner may read about one batch.
pub struct Batch<'a> {
    /// The batch's seeds, in the order of the output block's dst nodes.
    pub seeds: &'a [u32],
    /// The full batch's blocks, and sizes of any candidate micro-batch.
    pub slicer: &'a Slicer,
    /// The graph the batch was sampled from.
    pub graph: &'a Csr,
    /// The run's seed.
    pub seed: u64,
    /// The epoch (a partitioner may change its answer every epoch, or cache it).
    pub epoch: u64,
    /// Peak-memory estimates of candidate micro-batches, for memory-aware partitioners.
    pub estimator: Option<&'a dyn PeakModel>,
}

/// What a memory-aware partitioner asks of a micro-batch: its estimated peak activation
/// bytes. The trainer hands its memory estimator (`crate::train::MemoryEstimator`); the
/// partitioners know nothing of models.
pub trait PeakModel: Sync {
    /// Peak activation bytes of a micro-batch of block sizes `sizes` (input layer first)
    /// in a batch of `batch_seeds` seeds, without the readouts earlier micro-batches hold.
    fn activation_bytes(&self, sizes: &[BlockSizes], batch_seeds: usize) -> Result<u64>;
}

impl Batch<'_> {
    /// The full batch's blocks, input layer first.
    pub fn blocks(&self) -> &[std::sync::Arc<Block>] {
        self.slicer.blocks()
    }

    /// Estimated peak activation bytes of the micro-batch of `seeds`: the memory estimator's
    /// replay when the trainer supplies one, else the input-node and edge counts of its
    /// sliced blocks (proportional to memory for a fixed model). `u64::MAX` if the seeds
    /// are not part of the batch.
    pub fn estimate(&self, seeds: &[u32]) -> u64 {
        match self.slicer.sizes(seeds) {
            Ok(sizes) => self.bytes(&sizes),
            Err(_) => u64::MAX,
        }
    }

    /// [`Batch::estimate`] of a micro-batch of block sizes `sizes` (`u64::MAX` if the
    /// estimator rejects them), without the readouts that earlier micro-batches leave on a
    /// GPU: they depend on the order the micro-batches run in, not on the split.
    pub fn bytes(&self, sizes: &[BlockSizes]) -> u64 {
        match self.estimator {
            Some(e) => e
                .activation_bytes(sizes, self.seeds.len())
                .unwrap_or(u64::MAX),
            None => sizes.iter().map(|s| (s.num_src + s.num_edges) as u64).sum(),
        }
    }
}

/// Splits a batch's seeds into micro-batches.
pub trait Partitioner: Send {
    /// The name the CLI knows it by.
    fn name(&self) -> &str;

    /// `k` disjoint non-empty seed lists covering `batch.seeds`; called through
    /// [`partition`], which has checked `1 < k <= batch.seeds.len()`.
    fn partition(&mut self, batch: &Batch<'_>, k: usize) -> Result<Vec<Vec<u32>>>;

    /// A line about the last call worth reporting (e.g. a model's error), if any.
    fn note(&self) -> Option<String> {
        None
    }

    /// What [`Partitioner::partition`] would return for `seeds` of `graph` and `k` with the
    /// run's `seed`, when it can answer without reading the batch's sample (a cut made
    /// once and cached); `None` otherwise. A loader that samples every micro-batch from its
    /// own seeds then skips the full-batch sample.
    fn cached(&self, _seeds: &[u32], _graph: &Csr, _k: usize, _seed: u64) -> Option<Vec<Vec<u32>>> {
        None
    }
}

/// Checks that `k` micro-batches can be made of `num_seeds` seeds.
pub fn check_k(k: usize, num_seeds: usize) -> Result<()> {
    if k == 0 {
        return Err(Error::invalid(
            "the number of micro-batches must be at least 1",
        ));
    }
    if k > num_seeds {
        return Err(Error::invalid(format!(
            "{k} micro-batches for a batch of {num_seeds} seeds: every micro-batch needs at least one seed"
        )));
    }
    Ok(())
}

/// Runs `p` on `batch` and checks its answer. `k = 1` gives the seeds in their order
/// without asking the partitioner, so one micro-batch is exactly the full batch.
pub fn partition(p: &mut dyn Partitioner, batch: &Batch<'_>, k: usize) -> Result<Vec<Vec<u32>>> {
    check_k(k, batch.seeds.len())?;
    if k == 1 {
        return Ok(vec![batch.seeds.to_vec()]);
    }
    let parts = p.partition(batch, k)?;
    check_parts(p.name(), batch.seeds, k, &parts)?;
    Ok(parts)
}

/// Errors unless `parts` are `k` disjoint non-empty lists whose union is `seeds`.
pub fn check_parts(name: &str, seeds: &[u32], k: usize, parts: &[Vec<u32>]) -> Result<()> {
    let bad = |msg: String| Err(Error::invalid(format!("partitioner {name}: {msg}")));
    if parts.len() != k {
        return bad(format!("{} micro-batches instead of {k}", parts.len()));
    }
    if let Some(i) = parts.iter().position(Vec::is_empty) {
        return bad(format!("micro-batch {i} is empty"));
    }
    let total: usize = parts.iter().map(Vec::len).sum();
    if total != seeds.len() {
        return bad(format!(
            "{total} seeds over the micro-batches for {} in the batch",
            seeds.len()
        ));
    }
    let mut members: Vec<u32> = seeds.to_vec();
    members.sort_unstable();
    let mut got: Vec<u32> = parts.iter().flatten().copied().collect();
    got.sort_unstable();
    if members != got {
        return bad("the micro-batches are not a partition of the seeds".into());
    }
    Ok(())
}

/// `items` in `k` contiguous chunks whose sizes differ by at most one (the first
/// `len % k` chunks are the longer ones).
pub fn split_even(items: &[u32], k: usize) -> Vec<Vec<u32>> {
    let (q, r) = (items.len() / k.max(1), items.len() % k.max(1));
    let mut out = Vec::with_capacity(k);
    let mut at = 0;
    for i in 0..k {
        let len = q + usize::from(i < r);
        out.push(items[at..at + len].to_vec());
        at += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split_and_checks() {
        let s: Vec<u32> = (0..10).collect();
        let p = split_even(&s, 3);
        assert_eq!(p.iter().map(Vec::len).collect::<Vec<_>>(), [4, 3, 3]);
        assert!(check_parts("t", &s, 3, &p).is_ok());
        assert!(check_parts("t", &s, 4, &p).is_err());
        let mut dup = p.clone();
        dup[2][0] = 0;
        assert!(check_parts("t", &s, 3, &dup).is_err());
        assert!(check_k(0, 5).is_err());
        assert!(check_k(6, 5).is_err());
        assert!(check_k(5, 5).is_ok());
        assert!(by_name("nope").is_err());
    }
}
