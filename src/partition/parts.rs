//! What every micro-batch partitioner shares: argument checks, turning a label per seed into
//! K seed lists, and repairing empty parts.
//!
//! A partition of a batch is `Vec<Vec<u32>>`: K disjoint, non-empty lists of global seed
//! ids that together cover the batch. Within a list, seeds keep their batch order; lists are
//! numbered by their first seed's batch position, so the same labels give the same lists
//! whatever numbering the partitioner used internally.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::graph::Block;
use crate::partition::search::{smallest_fitting, Found};

/// Checks `k` against the seeds: `1 <= k <= seeds.len()`.
pub fn check_k(who: &str, num_seeds: usize, k: usize) -> Result<()> {
    if k == 0 {
        return Err(Error::invalid(format!("{who}: K must be at least 1")));
    }
    if k > num_seeds {
        return Err(Error::invalid(format!(
            "{who}: K = {k} micro-batches for {num_seeds} seeds (every micro-batch needs a seed)"
        )));
    }
    Ok(())
}

/// Checks that `seeds` are the output block's dst nodes (same order) and `k` fits them.
/// `blocks` run from the input layer to the output layer and chain (the src nodes of
/// `blocks[l + 1]` are the dst nodes of `blocks[l]`).
pub fn check_batch(who: &str, seeds: &[u32], blocks: &[Arc<Block>], k: usize) -> Result<()> {
    let last = blocks
        .last()
        .ok_or_else(|| Error::invalid(format!("{who}: no blocks")))?;
    if last.dst_nodes() != seeds {
        return Err(Error::invalid(format!(
            "{who}: the {} seeds are not the output block's {} dst nodes in order",
            seeds.len(),
            last.num_dst
        )));
    }
    for (l, pair) in blocks.windows(2).enumerate() {
        if pair[0].num_dst != pair[1].num_src {
            return Err(Error::invalid(format!(
                "{who}: block {l} has {} dst nodes but block {} has {} src nodes",
                pair[0].num_dst,
                l + 1,
                pair[1].num_src
            )));
        }
    }
    check_k(who, seeds.len(), k)
}

/// Checks that `seeds` holds no duplicate.
pub fn check_distinct(who: &str, seeds: &[u32]) -> Result<()> {
    let mut sorted = seeds.to_vec();
    sorted.sort_unstable();
    match sorted.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(Error::invalid(format!(
            "{who}: seed {} appears twice",
            w[0]
        ))),
        None => Ok(()),
    }
}

/// Makes every label in `0..k` used: while a label is unused, the largest part (lowest
/// label on ties) gives it the last `min(len / 2, n / k)` (at least one) of its members in
/// batch order. Needs `labels.len() >= k`; labels must be below `k`.
pub fn fill_empty(labels: &mut [u32], k: usize) {
    let n = labels.len();
    if k == 0 || n < k {
        return;
    }
    let mut sizes = vec![0usize; k];
    for &l in labels.iter() {
        sizes[l as usize] += 1;
    }
    while let Some(empty) = sizes.iter().position(|&s| s == 0) {
        let mut big = 0;
        for (j, &s) in sizes.iter().enumerate() {
            if s > sizes[big] {
                big = j;
            }
        }
        let big_len = sizes[big];
        let take = (big_len / 2).min(n / k).max(1);
        let mut moved = 0;
        for l in labels.iter_mut().rev() {
            if moved == take {
                break;
            }
            if *l as usize == big {
                *l = empty as u32;
                moved += 1;
            }
        }
        sizes[big] -= moved;
        sizes[empty] += moved;
    }
}

/// Seed lists from one label per seed (labels below `k`, every label used): list `j` holds
/// the seeds of the `j`-th label in order of first appearance, in batch order.
pub fn groups(seeds: &[u32], labels: &[u32], k: usize) -> Vec<Vec<u32>> {
    let mut rank = vec![u32::MAX; k];
    let mut next = 0u32;
    let mut out: Vec<Vec<u32>> = Vec::with_capacity(k);
    for (&s, &l) in seeds.iter().zip(labels) {
        let r = &mut rank[l as usize];
        if *r == u32::MAX {
            *r = next;
            next += 1;
            out.push(Vec::new());
        }
        out[*r as usize].push(s);
    }
    out
}

/// [`fill_empty`] then [`groups`]: K non-empty seed lists from labels that may leave parts
/// empty.
pub fn groups_filled(seeds: &[u32], labels: &mut [u32], k: usize) -> Vec<Vec<u32>> {
    fill_empty(labels, k);
    groups(seeds, labels, k)
}

/// The outcome of a memory-aware partitioner: the seed lists and each one's estimate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// K seed lists (K = `parts.len()`).
    pub parts: Vec<Vec<u32>>,
    /// The estimator's peak bytes of each list.
    pub peak_bytes: Vec<u64>,
}

/// The smallest K from `max(1, ceil(estimate(all seeds) / budget))` up to `max_k` (and the
/// seed count) such that every list of `partition(K)` fits `budget` under `estimate`
/// ([`smallest_fitting`]: doubling, then bisection). Errors when `budget` is 0 or no K up
/// to the limit fits.
pub fn fit_budget(
    who: &str,
    seeds: &[u32],
    budget: u64,
    max_k: usize,
    estimate: &dyn Fn(&[u32]) -> u64,
    partition: &mut dyn FnMut(usize) -> Result<Vec<Vec<u32>>>,
) -> Result<MemoryPlan> {
    if budget == 0 {
        return Err(Error::invalid(format!(
            "{who}: the memory budget is 0 bytes"
        )));
    }
    let limit = max_k.min(seeds.len());
    if limit == 0 {
        return Err(Error::invalid(format!("{who}: no seeds to partition")));
    }
    let whole = estimate(seeds);
    let start = whole.div_ceil(budget).clamp(1, limit as u64) as usize;
    let found = smallest_fitting(start, limit, |k| {
        let parts = partition(k)?;
        let peak_bytes: Vec<u64> = parts.iter().map(|p| estimate(p)).collect();
        let fits = peak_bytes.iter().all(|&b| b <= budget);
        Ok((MemoryPlan { parts, peak_bytes }, fits))
    })?;
    match found {
        Found::Fits { value, .. } => Ok(value),
        Found::NoneFits { value } => Err(Error::invalid(format!(
            "{who}: no K in {start}..={limit} fits the budget of {budget} bytes \
             (the largest micro-batch at K = {limit} needs {} bytes)",
            value.peak_bytes.iter().copied().max().unwrap_or(0)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_parts_are_filled_from_the_largest() {
        let mut labels = vec![0, 0, 0, 0, 0, 0, 1, 0];
        fill_empty(&mut labels, 4);
        let mut sizes = [0; 4];
        for &l in &labels {
            sizes[l as usize] += 1;
        }
        assert!(sizes.iter().all(|&s| s > 0), "{labels:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 8);
    }

    #[test]
    fn groups_are_numbered_by_first_seed() {
        let g = groups(&[10, 11, 12, 13], &[2, 0, 2, 1], 3);
        assert_eq!(g, vec![vec![10, 12], vec![11], vec![13]]);
    }

    #[test]
    fn k_is_checked() {
        assert!(check_k("t", 3, 0).is_err());
        assert!(check_k("t", 3, 4).is_err());
        assert!(check_k("t", 3, 3).is_ok());
        assert!(check_distinct("t", &[1, 2, 1]).is_err());
    }

    #[test]
    fn budget_search_finds_the_smallest_k_that_fits() {
        let seeds: Vec<u32> = (0..10).collect();
        let estimate = |s: &[u32]| 100 * s.len() as u64;
        let mut split = |k: usize| -> Result<Vec<Vec<u32>>> {
            let mut labels: Vec<u32> = (0..10).map(|i| (i * k / 10) as u32).collect();
            Ok(groups_filled(&seeds, &mut labels, k))
        };
        let plan = fit_budget("t", &seeds, 250, 10, &estimate, &mut split).unwrap();
        assert_eq!(plan.parts.len(), 5);
        assert!(plan.peak_bytes.iter().all(|&b| b <= 250));
        assert!(fit_budget("t", &seeds, 50, 10, &estimate, &mut split).is_err());
        assert!(fit_budget("t", &seeds, 0, 10, &estimate, &mut split).is_err());
    }
}
