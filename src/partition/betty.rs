//! Betty: METIS on the redundancy-embedded graph (REG) of the output block.
//!
//! Two seeds that share sampled sources in the output block need those sources (and their
//! whole sub-trees below) twice when they land in different micro-batches. The REG joins
//! two seeds by an edge weighted by the number of sources they share, `AᵀA` with
//! `A[s][d] = 1` when source `s` feeds dst `d` (distinct sources; with
//! [`BettyOptions::self_inputs`], also `A[d][d] = 1`: a seed is its own input one layer
//! down, because dst nodes are a prefix of the src nodes). Self-loops and non-seed nodes are
//! dropped, and METIS k-way cuts it **with the weights passed** (DGL's METIS wrapper, which
//! the original code used, drops them).
//!
//! Only the seed x seed part is built, source by source: each source emits the pairs of
//! the seeds it feeds, in parallel over ranges of sources, and one parallel sort of the
//! pairs groups them into rows (a pair seen `w` times is an edge of weight `w`). The
//! sources and their consumers are read in order, so the build is not bound by cache
//! misses, and it gives the same graph for any thread count.
//!
//! **Hub bound.** A source consumed by `d` seeds makes `d (d - 1) / 2` pairs. A source with
//! `d > hub_degree` (`D_max`) is a *hub*: its consumers are put on a ring in a seeded
//! random order and each joins only its `hub_ring` nearest neighbours on each side, so a hub
//! costs `d * hub_ring` pairs, not `d² / 2`. A REG row then has at most
//! `(fanout + 1) * max(D_max, 2 * hub_ring)` entries and the build does
//! `O(Σ_s min(d_s, D_max) * d_s + hub_ring * Σ_hubs d_s)` work. `hub_degree = usize::MAX`
//! disables the bound (exact `AᵀA`).
//!
//! On the samples measured, the bound does not cost quality; it helps. The REG is the clique expansion of a
//! hypergraph whose hyperedges are the sources, and a source spread over `p` micro-batches
//! costs `p - 1` copies, while its clique charges METIS for every cut pair (up to `d² / 4`),
//! so widely shared sources dominate the exact REG's cut. Measured on email-enron and
//! products-like samples (`docs/PARTITIONING.md`), `16 / 2` gives 0.6-5% lower redundancy
//! than the exact `AᵀA` with 3-4x fewer REG entries, and the default `4 / 1` 2-5% lower
//! with 7-9x fewer (at products-like scale 1, 3.6 M entries against 16 / 2's 8.0 M: half
//! of METIS's input, with equal or lower redundancy and the same balance).
//!
//! **Balanced in memory.** METIS balances vertex weights; with
//! [`BettyOptions::memory_weights`] (default) a seed weighs the square root of its sampled
//! tree's size ([`tree_weights`]), not 1, so the parts' peaks are even, not their seed
//! counts.
//!
//! **Memory-aware loop** ([`betty_memory_aware`]): the REG is built once; K starts at
//! `ceil(estimate(batch) / budget)` and rises by one until the largest micro-batch's
//! estimate fits the budget.

use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::{Block, Csr};
use crate::partition::kway::MetisGraph;
use crate::partition::parts::{self, MemoryPlan};
use crate::rng::mix64;

/// Tuning of the REG build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BettyOptions {
    /// `D_max`: a source consumed by more seeds is a hub (ring-connected). At least
    /// `2 * hub_ring`; `usize::MAX` builds the exact `AᵀA`.
    pub hub_degree: usize,
    /// Ring neighbours on each side of a hub's consumer (at least 1).
    pub hub_ring: usize,
    /// Count a seed as a source of itself (`A + I`), see the module docs.
    pub self_inputs: bool,
    /// Weigh each seed in METIS's balance by [`tree_weights`] instead of 1, so parts
    /// balance memory rather than seed counts.
    pub memory_weights: bool,
    /// METIS's refinement iterations per uncoarsening level (`None`: METIS's 10). One
    /// pass does most of the work: at products-like scale 1 it cut METIS's CPU time on
    /// the REG by about a fifth, with redundancy and balance within the run-to-run
    /// spread (`docs/PARTITIONING.md`).
    pub metis_niter: Option<usize>,
    /// Largest K the memory-aware loop tries.
    pub max_k: usize,
}

impl Default for BettyOptions {
    fn default() -> Self {
        BettyOptions {
            hub_degree: 4,
            hub_ring: 1,
            self_inputs: true,
            memory_weights: true,
            metis_niter: Some(1),
            max_k: 4096,
        }
    }
}

impl BettyOptions {
    /// The exact `AᵀA` (no hub bound).
    pub fn exact() -> Self {
        BettyOptions {
            hub_degree: usize::MAX,
            ..Self::default()
        }
    }

    fn check(&self) -> Result<()> {
        if self.hub_ring == 0 || self.hub_degree < 2 * self.hub_ring {
            return Err(Error::invalid(format!(
                "betty: hub_ring = {} must be at least 1 and hub_degree = {} at least twice it",
                self.hub_ring, self.hub_degree
            )));
        }
        Ok(())
    }
}

/// Consumers of each source of the output block: the dst nodes it feeds (distinct,
/// increasing), plus itself when it is a dst and `self_inputs` is set.
struct Consumers {
    ptr: Vec<usize>,
    dst: Vec<u32>,
}

impl Consumers {
    fn new(block: &Block, self_inputs: bool) -> Consumers {
        let mut ptr = Vec::with_capacity(block.num_src + 1);
        let mut dst = Vec::with_capacity(block.num_edges() + block.num_dst);
        ptr.push(0);
        for s in 0..block.num_src {
            let start = dst.len();
            let fed = &block.t_dst[block.t_indptr[s] as usize..block.t_indptr[s + 1] as usize];
            // `t_dst` is non-decreasing (edges are grouped by dst), so dedup is local.
            for &d in fed {
                if dst.len() == start || dst[dst.len() - 1] != d {
                    dst.push(d);
                }
            }
            if self_inputs && s < block.num_dst {
                let me = s as u32;
                if let Err(at) = dst[start..].binary_search(&me) {
                    dst.insert(start + at, me);
                }
            }
            ptr.push(dst.len());
        }
        Consumers { ptr, dst }
    }

    fn of(&self, s: u32) -> &[u32] {
        &self.dst[self.ptr[s as usize]..self.ptr[s as usize + 1]]
    }
}

/// Sources per task of the pair emission.
const SOURCE_CHUNK: usize = 4096;

/// The REG of the output block (`blocks.last()`): node `i` is its dst `i` (the batch's
/// `i`-th seed), edge weight = shared sources (see the module docs). `seed` fixes the hub
/// rings. Deterministic for any rayon thread count.
///
/// Built source by source: each source emits the ordered pairs `(a, b)`, `a != b`, of the
/// consumers it joins (all pairs, or a hub's ring neighbours), as `a << 32 | b`; the keys
/// are sorted and a run of equal keys is one entry weighing its length. The sources and
/// their consumer lists are read front to back, where building row by row looked each
/// row's sources up at random (a cache miss per source).
pub fn redundancy_graph(
    blocks: &[Arc<Block>],
    seed: u64,
    opts: &BettyOptions,
) -> Result<MetisGraph> {
    opts.check()?;
    let block = blocks
        .last()
        .ok_or_else(|| Error::invalid("betty: no blocks"))?;
    let n = block.num_dst;
    if n >= i32::MAX as usize {
        return Err(Error::invalid(format!(
            "METIS: {n} nodes do not fit 32-bit indices"
        )));
    }
    let consumers = Consumers::new(block, opts.self_inputs);
    let pieces: Vec<Vec<u64>> = (0..block.num_src.div_ceil(SOURCE_CHUNK))
        .into_par_iter()
        .map(|c| {
            let mut keys = Vec::new();
            let mut order = Vec::new();
            let end = ((c + 1) * SOURCE_CHUNK).min(block.num_src);
            for s in (c * SOURCE_CHUNK..end).map(|s| s as u32) {
                let cons = consumers.of(s);
                if cons.len() <= opts.hub_degree {
                    for &a in cons {
                        let row = (a as u64) << 32;
                        keys.extend(cons.iter().filter(|&&b| b != a).map(|&b| row | b as u64));
                    }
                    continue;
                }
                // A hub: its consumers on a ring sorted by a seeded hash of (hub,
                // consumer), each joined to the next `hub_ring` (both directions, so also
                // to the previous `hub_ring`; the ring holds more than `2 * hub_ring`).
                let hub = mix64(seed ^ mix64(s as u64));
                order.clear();
                order.extend_from_slice(cons);
                order.sort_unstable_by_key(|&d| (mix64(hub ^ d as u64), d));
                let d = order.len();
                for p in 0..d {
                    for j in 1..=opts.hub_ring {
                        let (a, b) = (order[p] as u64, order[(p + j) % d] as u64);
                        keys.push(a << 32 | b);
                        keys.push(b << 32 | a);
                    }
                }
            }
            keys
        })
        .collect();
    let mut keys = pieces.concat();
    drop(pieces);
    keys.par_sort_unstable();
    let mut xadj = Vec::with_capacity(n + 1);
    let mut adjncy = Vec::with_capacity(keys.len());
    let mut adjwgt = Vec::with_capacity(keys.len());
    xadj.push(0i32);
    let mut at = 0;
    for row in 0..n as u64 {
        while at < keys.len() && keys[at] >> 32 == row {
            let key = keys[at];
            let run = keys[at..].iter().take_while(|&&k| k == key).count();
            adjncy.push(key as u32 as i32);
            adjwgt.push(run.min(i32::MAX as usize) as i32);
            at += run;
        }
        if adjncy.len() > i32::MAX as usize {
            return Err(Error::invalid(format!(
                "METIS: {n} nodes and {} adjacency entries do not fit 32-bit indices",
                adjncy.len()
            )));
        }
        xadj.push(adjncy.len() as i32);
    }
    Ok(MetisGraph {
        xadj,
        adjncy,
        adjwgt: Some(adjwgt),
        vwgt: None,
    })
}

/// Betty's partition of one batch into `k` micro-batches: METIS k-way on the weighted REG;
/// empty parts are refilled from the largest. `graph` is not needed (the REG comes from the
/// sampled blocks) and is taken for a uniform signature.
pub fn betty(
    seeds: &[u32],
    blocks: &[Arc<Block>],
    _graph: &Csr,
    k: usize,
    seed: u64,
    opts: &BettyOptions,
) -> Result<Vec<Vec<u32>>> {
    parts::check_batch("betty", seeds, blocks, k)?;
    let reg = weighted_reg(blocks, seed, opts)?;
    let mut labels = reg.part_kway_refined(k, seed, opts.metis_niter)?;
    Ok(parts::groups_filled(seeds, &mut labels, k))
}

/// The REG, with [`tree_weights`] as vertex weights when `opts.memory_weights`.
fn weighted_reg(blocks: &[Arc<Block>], seed: u64, opts: &BettyOptions) -> Result<MetisGraph> {
    let mut reg = redundancy_graph(blocks, seed, opts)?;
    if opts.memory_weights {
        reg.vwgt = Some(tree_weights(blocks));
    }
    Ok(reg)
}

/// Each seed's METIS weight: `10 * sqrt(t)`, with `t` its sampled tree size (an input node
/// counts 1, a dst row of block `l` 1 plus the counts of its sources one layer down: the
/// nodes and edges its micro-batch would hold if it shared nothing). The square root
/// because a large tree shares much of itself with its part: on email-enron, products-like
/// 0.01, as-like and road-like 0.02 (K = 8), `t` itself left the largest/smallest
/// estimated peak at 1.76 on email-enron, `sqrt(t)` at 1.03-1.16 everywhere, unit weights
/// (seed counts) at 1.07-2.05 (`docs/PARTITIONING.md`).
pub fn tree_weights(blocks: &[Arc<Block>]) -> Vec<i32> {
    let mut below: Vec<u64> = Vec::new();
    for (l, b) in blocks.iter().enumerate() {
        below = (0..b.num_dst)
            .into_par_iter()
            .map(|r| {
                1 + b
                    .neighbors(r)
                    .iter()
                    .map(|&s| if l == 0 { 1 } else { below[s as usize] })
                    .sum::<u64>()
            })
            .collect();
    }
    below
        .iter()
        .map(|&w| ((10.0 * (w as f64).sqrt()).round() as u64).clamp(1, i32::MAX as u64) as i32)
        .collect()
}

/// Betty's memory-aware loop: the smallest K (from `ceil(estimate(batch) / budget)` up, at
/// most `opts.max_k`) whose largest micro-batch's `estimate` (peak bytes of a seed list)
/// fits `budget`. The REG is built once and cut again for each K.
pub fn betty_memory_aware(
    seeds: &[u32],
    blocks: &[Arc<Block>],
    _graph: &Csr,
    seed: u64,
    budget: u64,
    estimate: &dyn Fn(&[u32]) -> u64,
    opts: &BettyOptions,
) -> Result<MemoryPlan> {
    parts::check_batch("betty", seeds, blocks, 1)?;
    let reg = weighted_reg(blocks, seed, opts)?;
    let mut cut = |k: usize| {
        let mut labels = reg.part_kway_refined(k, seed, opts.metis_niter)?;
        Ok(parts::groups_filled(seeds, &mut labels, k))
    };
    parts::fit_budget("betty", seeds, budget, opts.max_k, estimate, &mut cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3 seeds over 3 extra sources: 0 <- {3, 4}, 1 <- {3, 4, 0}, 2 <- {5, 5}.
    fn block() -> Vec<Arc<Block>> {
        let b = Block::new(
            6,
            vec![0, 2, 5, 7],
            vec![3, 4, 3, 4, 0, 5, 5],
            vec![10, 11, 12, 13, 14, 15],
        )
        .unwrap();
        vec![Arc::new(b)]
    }

    fn weights(g: &MetisGraph) -> Vec<Vec<(i32, i32)>> {
        let w = g.adjwgt.as_ref().unwrap();
        g.xadj
            .windows(2)
            .map(|r| {
                (r[0] as usize..r[1] as usize)
                    .map(|e| (g.adjncy[e], w[e]))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn shared_sources_weigh_the_edges() {
        let b = block();
        let plain = BettyOptions {
            self_inputs: false,
            ..BettyOptions::exact()
        };
        let g = redundancy_graph(&b, 0, &plain).unwrap();
        assert_eq!(weights(&g), vec![vec![(1, 2)], vec![(0, 2)], vec![]]);
        // With self inputs, 1 also needs 0, which 0 needs too: one more shared source.
        let g = redundancy_graph(&b, 0, &BettyOptions::exact()).unwrap();
        assert_eq!(weights(&g), vec![vec![(1, 3)], vec![(0, 3)], vec![]]);
    }

    #[test]
    fn tree_weights_grow_with_the_sampled_tree() {
        // One block: trees of 1 + 2, 1 + 3 and 1 + 2 nodes and edges.
        assert_eq!(tree_weights(&block()), vec![17, 20, 17]);
        // Two layers: a seed's sources weigh their own trees.
        let lower = Block::new(
            6,
            vec![0, 1, 1, 3, 3, 4, 4],
            vec![1, 2, 3, 4],
            vec![10, 11, 12, 13, 14, 15],
        )
        .unwrap();
        let both = vec![Arc::new(lower), block()[0].clone()];
        // Rows below: 2, 1, 3, 1, 2, 1; seed 0 <- {3, 4}: 1 + 1 + 2 = 4.
        assert_eq!(tree_weights(&both)[0], 20);
    }

    #[test]
    fn options_are_checked() {
        let bad = BettyOptions {
            hub_degree: 3,
            hub_ring: 2,
            ..BettyOptions::default()
        };
        assert!(redundancy_graph(&block(), 0, &bad).is_err());
    }
}

/// Betty behind the [`Partitioner`](crate::partition::Partitioner) trait (default options).
#[derive(Debug, Default)]
pub struct BettyPartitioner {
    /// How the redundancy-embedded graph is built (hub handling, self inputs).
    pub opts: BettyOptions,
}

impl crate::partition::Partitioner for BettyPartitioner {
    fn name(&self) -> &str {
        "betty"
    }

    fn partition(
        &mut self,
        batch: &crate::partition::Batch<'_>,
        k: usize,
    ) -> Result<Vec<Vec<u32>>> {
        betty(
            batch.seeds,
            batch.blocks(),
            batch.graph,
            k,
            batch.seed,
            &self.opts,
        )
    }
}
