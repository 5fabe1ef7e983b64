//! Buffalo: degree-bucket scheduling balanced on estimated memory.
//!
//! The output block's dst nodes (the seeds) are grouped by in-degree ([`Buckets`]). After
//! fanout sampling the bucket whose degree equals the fanout holds the long tail (bucket
//! explosion); it is split into micro-buckets of `ceil(|bucket| / (K * pieces_per_part))`
//! seeds, so there are enough small items to balance. Items (buckets, micro-buckets and the
//! zero-degree seeds) are sorted by their estimated peak bytes, largest first, and each goes
//! to the group whose current estimate is lowest (an empty group first): longest processing
//! time first. A group's estimate is the estimator run on the group's **whole** seed list,
//! so inputs shared by two buckets of one group are counted once (measured by the
//! estimator, not a fitted overlap constant). [`buffalo_memory_aware`] raises K until every
//! group fits a budget.
//!
//! Buffalo balances memory; it does not look for shared inputs when it forms a micro-bucket
//! (a bucket's seeds are cut in dst order), so its redundancy is close to a random
//! partition's.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::graph::{Block, Buckets, Csr};
use crate::partition::parts::{self, MemoryPlan};

/// Buffalo's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuffaloOptions {
    /// The output layer's fanout (the explosion bucket's degree); `None` takes the output
    /// block's largest in-degree.
    pub fanout: Option<usize>,
    /// Micro-buckets per micro-batch the explosion bucket is cut into (at least 1).
    pub pieces_per_part: usize,
    /// Largest K the memory-aware loop tries.
    pub max_k: usize,
}

impl Default for BuffaloOptions {
    fn default() -> Self {
        BuffaloOptions {
            fanout: None,
            pieces_per_part: 4,
            max_k: 4096,
        }
    }
}

/// Buffalo's `k` micro-batches of one batch. `estimate` gives a seed list's peak bytes.
/// `graph` and `seed` are not read (the schedule is deterministic); they keep the
/// partitioners' common signature.
pub fn buffalo(
    seeds: &[u32],
    blocks: &[Arc<Block>],
    _graph: &Csr,
    k: usize,
    _seed: u64,
    estimate: &dyn Fn(&[u32]) -> u64,
    opts: &BuffaloOptions,
) -> Result<Vec<Vec<u32>>> {
    parts::check_batch("buffalo", seeds, blocks, k)?;
    if opts.pieces_per_part == 0 {
        return Err(Error::invalid(
            "buffalo: pieces_per_part must be at least 1",
        ));
    }
    let out = &blocks[blocks.len() - 1];
    let fanout = opts
        .fanout
        .unwrap_or_else(|| (0..out.num_dst).map(|d| out.degree(d)).max().unwrap_or(0));
    let buckets = Buckets::new(out, Some(fanout));
    let tail: usize = buckets.explosion().map(|b| b.dst.len()).sum();
    let piece = tail.div_ceil(k * opts.pieces_per_part).max(1);
    let split = buckets.split_explosion(piece)?;

    // Items: local dst lists.
    let mut items: Vec<Vec<u32>> = split.buckets.into_iter().map(|b| b.dst).collect();
    if !split.zero_degree.is_empty() {
        items.push(split.zero_degree);
    }
    // Every group needs an item: halve the largest until there are k.
    while items.len() < k {
        let (big, _) = items
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)))
            .ok_or_else(|| Error::invalid("buffalo: no seeds"))?;
        let half = items[big].len() / 2;
        if half == 0 {
            break;
        }
        let rest = items[big].split_off(half);
        items.push(rest);
    }

    let global = |local: &[u32]| -> Vec<u32> { local.iter().map(|&d| seeds[d as usize]).collect() };
    let mut order: Vec<(u64, u32, usize)> = items
        .iter()
        .enumerate()
        .map(|(i, it)| (estimate(&global(it)), it[0], i))
        .collect();
    // Largest estimate first; ties by first dst, so the schedule is deterministic.
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));

    let mut groups: Vec<Vec<u32>> = vec![Vec::new(); k];
    let mut loads = vec![0u64; k];
    for &(_, _, i) in &order {
        let g = (0..k)
            .min_by_key(|&g| (!groups[g].is_empty(), loads[g], g))
            .unwrap_or(0);
        groups[g].extend_from_slice(&items[i]);
        loads[g] = estimate(&global(&groups[g]));
    }
    let mut labels = vec![0u32; seeds.len()];
    for (g, members) in groups.iter().enumerate() {
        for &d in members {
            labels[d as usize] = g as u32;
        }
    }
    Ok(parts::groups_filled(seeds, &mut labels, k))
}

/// Buffalo with a budget: the smallest K (from `ceil(estimate(batch) / budget)` up, at
/// most `opts.max_k`) whose every group's estimate fits `budget`.
pub fn buffalo_memory_aware(
    seeds: &[u32],
    blocks: &[Arc<Block>],
    graph: &Csr,
    seed: u64,
    budget: u64,
    estimate: &dyn Fn(&[u32]) -> u64,
    opts: &BuffaloOptions,
) -> Result<MemoryPlan> {
    parts::check_batch("buffalo", seeds, blocks, 1)?;
    let mut cut = |k: usize| buffalo(seeds, blocks, graph, k, seed, estimate, opts);
    parts::fit_budget("buffalo", seeds, budget, opts.max_k, estimate, &mut cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_balance_the_estimate() {
        // 8 seeds of degree 2 (the fanout) over 16 sources, and 2 of degree 1.
        let mut indptr = vec![0u32];
        let mut indices = Vec::new();
        for d in 0..10u32 {
            let deg = if d < 8 { 2 } else { 1 };
            for j in 0..deg {
                indices.push(10 + (2 * d + j) % 16);
            }
            indptr.push(indices.len() as u32);
        }
        let src_nodes: Vec<u32> = (100..126).collect();
        let b = Arc::new(Block::new(26, indptr, indices, src_nodes.clone()).unwrap());
        let seeds = src_nodes[..10].to_vec();
        let est = |s: &[u32]| 10 * s.len() as u64;
        let g = Csr::default();
        let p = buffalo(&seeds, &[b], &g, 3, 0, &est, &BuffaloOptions::default()).unwrap();
        let sizes: Vec<usize> = p.iter().map(Vec::len).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 10);
        assert!(sizes.iter().all(|&s| (3..=4).contains(&s)), "{sizes:?}");
    }
}

/// Buffalo behind the [`Partitioner`](crate::partition::Partitioner) trait: group memory
/// comes from the trainer's memory estimator on each group's sliced blocks.
#[derive(Debug, Default)]
pub struct BuffaloPartitioner {
    /// Bucket splitting and the largest K tried.
    pub opts: BuffaloOptions,
}

impl crate::partition::Partitioner for BuffaloPartitioner {
    fn name(&self) -> &str {
        "buffalo"
    }

    fn partition(
        &mut self,
        batch: &crate::partition::Batch<'_>,
        k: usize,
    ) -> Result<Vec<Vec<u32>>> {
        let estimate = |seeds: &[u32]| batch.estimate(seeds);
        buffalo(
            batch.seeds,
            batch.blocks(),
            batch.graph,
            k,
            batch.seed,
            &estimate,
            &self.opts,
        )
    }
}
