//! GREM, Armada's streaming min-edge-cut partitioner (our reading of it): greedy streaming
//! placement whose earlier assignments keep being refined as the stream goes on.
//!
//! **The stream.** The graph's edges are read grouped by destination row (the layout of a
//! CSR file on disk) in *blocks* of about `block_edges` edges (at most [`BLOCK_ROWS`]
//! rows). A pass reads every block once, the blocks in an order shuffled afresh per pass
//! from `seed` and the rows of a block in a seeded stride order, so the stream carries
//! none of the node numbering's locality. Only one row is looked at a time: the working
//! set is one label per node (a byte for K < 255), the part sizes, a counter per part and
//! the block order ([`grem_working_bytes`]); the edges themselves could come from disk.
//!
//! **Placement (pass 1).** When row `v` streams, `v` counts its neighbours per part (those
//! placed so far) and goes directly to one of the K parts (no recursive bisection) by the
//! greedy score `count[p] * (1 - size[p] / cap)` (LDG's), never into a part at
//! `cap = ceil(nodes / K * (1 + imbalance))`; with no placed neighbour, the smallest part
//! wins (ties by a hash of `seed` and `v`).
//!
//! **Refinement (every later pass, `passes - 1` of them).** Each node is re-decided when
//! its row streams again, now with every neighbour placed: it leaves its part and takes
//! the best-scoring part with room; a tie keeps it where it was. Assignments made early
//! in the first pass, with few placed neighbours, are the ones this corrects. (Tried and
//! dropped, on products-like and email-enron: refinement by neighbour count alone, which
//! stalls once parts reach the cap, and Fennel's additive size penalty; both cut 6 to 12
//! points more than LDG's score.)
//!
//! Parts left empty (possible only on tiny or edgeless graphs) take nodes from the largest
//! part ([`parts::fill_empty`]). A node's choice reads its row only: pass a symmetric
//! graph (as `grem_seeds` and `espalier partition --graph-only` do) for an undirected
//! cut. Deterministic: single-threaded, every random choice seeded.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::graph::{Block, Csr};
use crate::partition::kway::seed_induced;
use crate::partition::parts;
use crate::rng::{mix64, Rng};

const UNPLACED: u32 = u32::MAX;

/// Most rows in one streamed block (so sparse regions are shuffled too).
pub const BLOCK_ROWS: usize = 256;

/// Up to this many parts a row's counts are gathered by scanning every part.
const SCAN_PARTS: usize = 64;

/// Primes above [`BLOCK_ROWS`]: strides that visit a block's rows in a shuffled order.
const STEPS: [usize; 8] = [257, 263, 269, 271, 277, 281, 283, 293];

/// GREM's knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GremOptions {
    /// Edges per streamed block (a row longer than this is a block of its own).
    pub block_edges: usize,
    /// Allowed excess of the largest part over `nodes / K` (0.03 = 3%, METIS's default).
    pub imbalance: f64,
    /// Streaming passes: the first places every node, each later one refines.
    pub passes: usize,
    /// Seed of the stream order and of tie-breaking.
    pub seed: u64,
    /// A refinement pass that moves fewer than this fraction of the nodes ends the stream
    /// early (0: every pass runs).
    pub settle: f64,
}

impl Default for GremOptions {
    fn default() -> Self {
        GremOptions {
            block_edges: 4096,
            imbalance: 0.03,
            passes: 3,
            seed: 0,
            settle: 0.0,
        }
    }
}

/// First row of each block, then `num_nodes`.
fn block_starts(graph: &Csr, block_edges: usize) -> Vec<usize> {
    let mut starts = vec![0];
    let mut first = 0usize;
    for v in 0..graph.num_nodes {
        let edges = graph.indptr[v + 1] - graph.indptr[first];
        if edges >= block_edges as u64 || v + 1 - first >= BLOCK_ROWS {
            starts.push(v + 1);
            first = v + 1;
        }
    }
    if *starts.last().unwrap_or(&0) != graph.num_nodes {
        starts.push(graph.num_nodes);
    }
    starts
}

/// Bytes of GREM's working state on `graph` with `k` parts: a label per node while
/// streaming (1 byte for K < 255, 2 for K < 65,535, else 4) and the returned `u32` labels
/// (4), per part a size, a counter and a slot in the list of counted parts (24), and the
/// block starts and block order (16 per block). The graph itself is the stream, not
/// counted.
pub fn grem_working_bytes(graph: &Csr, k: usize, opts: &GremOptions) -> usize {
    let blocks = block_starts(graph, opts.block_edges.max(1)).len();
    let label = if k < u8::MAX as usize {
        1
    } else if k < u16::MAX as usize {
        2
    } else {
        4
    };
    (label + 4) * graph.num_nodes + 24 * (k + 1) + 16 * blocks
}

/// The per-pass state: labels, node weights (unit if none), part sizes, and one row's
/// part counters.
struct Stream<'w, L> {
    labels: Vec<L>,
    weights: Option<&'w [u32]>,
    size: Vec<u64>,
    cap: u64,
    count: Vec<u32>,
    counted: Vec<u32>,
    seed: u64,
}

impl<L: Label> Stream<'_, L> {
    fn weight(&self, v: u32) -> u64 {
        self.weights.map_or(1, |w| w[v as usize] as u64)
    }

    /// Re-decides `v` from its row: counts its placed neighbours per part, takes `v` out of
    /// its part, and puts it in the best part with room (its own part on a tie). True when
    /// `v` changed part (or was placed).
    fn decide(&mut self, v: u32, row: &[u32]) -> bool {
        let k = self.size.len();
        if k <= SCAN_PARTS {
            // Few parts: count without branching on first sight, then list the parts seen.
            // `count[k]` collects the unplaced neighbours.
            for &u in row {
                self.count[self.labels[u as usize].raw().min(k)] += 1;
            }
            // A self-loop is no neighbour.
            let own = self.labels[v as usize].raw().min(k);
            self.count[own] -= row.iter().filter(|&&u| u == v).count() as u32;
            self.count[k] = 0;
            self.counted
                .extend((0..k as u32).filter(|&p| self.count[p as usize] > 0));
        } else {
            for &u in row {
                let p = self.labels[u as usize].get();
                if u != v && p != UNPLACED {
                    if self.count[p as usize] == 0 {
                        self.counted.push(p);
                    }
                    self.count[p as usize] += 1;
                }
            }
        }
        let cur = self.labels[v as usize].get();
        let w = self.weight(v);
        if cur != UNPLACED {
            self.size[cur as usize] -= w;
        }
        let cap = self.cap as f64;
        let mut best = UNPLACED;
        let mut best_score = 0.0f64;
        for &p in &self.counted {
            let s = self.size[p as usize];
            if s + w > self.cap {
                continue;
            }
            let score = self.count[p as usize] as f64 * (1.0 - s as f64 / cap);
            let better = score > best_score || (score == best_score && p == cur);
            if better {
                best = p;
                best_score = score;
            }
        }
        for &p in &self.counted {
            self.count[p as usize] = 0;
        }
        self.counted.clear();
        if best == UNPLACED {
            best = if cur != UNPLACED && self.size[cur as usize] + w <= self.cap {
                cur
            } else {
                self.smallest(v)
            };
        }
        self.labels[v as usize] = L::new(best);
        self.size[best as usize] += w;
        best != cur
    }

    /// The smallest part, ties broken by a hash of the seed and `v`.
    fn smallest(&self, v: u32) -> u32 {
        let k = self.size.len();
        let start = (mix64(self.seed ^ v as u64) % k as u64) as usize;
        let mut best = start;
        for i in 1..k {
            let p = (start + i) % k;
            if self.size[p] < self.size[best] {
                best = p;
            }
        }
        best as u32
    }
}

/// GREM's K-way partition of `graph`: one label in `0..k` per node, every label used.
/// Errors when `k` is 0 or exceeds the nodes, or on bad options or a malformed graph.
pub fn grem_partition(graph: &Csr, k: usize, opts: &GremOptions) -> Result<Vec<u32>> {
    grem_partition_weighted(graph, None, k, opts)
}

/// [`grem_partition`] with a weight per node: a part's size is the sum of its nodes'
/// weights, and the cap is `ceil(total / K * (1 + imbalance))` (unit weights: the same
/// partition as [`grem_partition`]). A node too heavy for any part with room goes to the
/// lightest. Errors as [`grem_partition`] does, and when `weights` does not hold one
/// weight per node.
pub fn grem_partition_weighted(
    graph: &Csr,
    weights: Option<&[u32]>,
    k: usize,
    opts: &GremOptions,
) -> Result<Vec<u32>> {
    parts::check_k("grem", graph.num_nodes, k)?;
    if let Some(w) = weights {
        if w.len() != graph.num_nodes {
            return Err(Error::invalid(format!(
                "grem: {} node weights for {} nodes",
                w.len(),
                graph.num_nodes
            )));
        }
    }
    if opts.block_edges == 0
        || opts.passes == 0
        || !opts.imbalance.is_finite()
        || opts.imbalance < 0.0
        || !opts.settle.is_finite()
        || opts.settle < 0.0
    {
        return Err(Error::invalid(format!(
            "grem: block_edges ({}) and passes ({}) must be at least 1, imbalance ({}) and settle ({}) finite and at least 0",
            opts.block_edges, opts.passes, opts.imbalance, opts.settle
        )));
    }
    if graph.indptr.len() != graph.num_nodes + 1
        || graph.indptr.last().copied() != Some(graph.indices.len() as u64)
        || graph.indices.iter().any(|&u| u as usize >= graph.num_nodes)
    {
        return Err(Error::invalid("grem: malformed graph"));
    }
    let n = graph.num_nodes;
    if n >= u32::MAX as usize || k >= u32::MAX as usize {
        return Err(Error::invalid(
            "grem: too many nodes or parts for u32 labels",
        ));
    }
    let mut labels = if k < u8::MAX as usize {
        stream::<u8>(graph, weights, k, opts)
    } else if k < u16::MAX as usize {
        stream::<u16>(graph, weights, k, opts)
    } else {
        stream::<u32>(graph, weights, k, opts)
    };
    parts::fill_empty(&mut labels, k);
    Ok(labels)
}

/// The passes over the stream, with labels of type `L` (one byte per node for K < 255).
fn stream<L: Label>(
    graph: &Csr,
    weights: Option<&[u32]>,
    k: usize,
    opts: &GremOptions,
) -> Vec<u32> {
    let n = graph.num_nodes;
    let starts = block_starts(graph, opts.block_edges);
    let mut order: Vec<u32> = (0..starts.len() as u32 - 1).collect();
    let total = weights.map_or(n as u64, |w| w.iter().map(|&x| x as u64).sum());
    let cap = ((total as f64 / k as f64) * (1.0 + opts.imbalance)).ceil() as u64;
    let mut s = Stream {
        labels: vec![L::NONE; n],
        weights,
        size: vec![0; k],
        cap: cap.max(total.div_ceil(k as u64)),
        count: vec![0; k + 1],
        counted: Vec::with_capacity(k),
        seed: opts.seed,
    };
    for pass in 0..opts.passes {
        let mut moved = 0usize;
        let mut rng = Rng::fork(opts.seed, pass as u64);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for &b in &order {
            let (lo, len) = (
                starts[b as usize],
                starts[b as usize + 1] - starts[b as usize],
            );
            // The block's rows in a seeded order: `offset + j * step (mod len)` visits each
            // once, as the prime `step` exceeds BLOCK_ROWS >= len.
            let h = mix64(opts.seed ^ mix64(((pass as u64) << 32) | b as u64));
            let step = STEPS[(h >> 32) as usize % STEPS.len()];
            let mut at = (h as u32 as usize) % len;
            for _ in 0..len {
                let v = (lo + at) as u32;
                moved += usize::from(s.decide(v, graph.neighbors(v)));
                at = (at + step) % len;
            }
        }
        if pass > 0 && (moved as f64) < opts.settle * n as f64 {
            break;
        }
    }
    s.labels.iter().map(|l| l.get()).collect()
}

/// A node's part as stored during the stream; `NONE` (the type's largest value) is
/// unplaced.
trait Label: Copy {
    const NONE: Self;
    /// The part, or [`UNPLACED`] for `NONE`.
    fn get(self) -> u32;
    /// Part `p` (below `NONE`).
    fn new(p: u32) -> Self;
    /// The stored value: the part, or a value at least K for `NONE`.
    fn raw(self) -> usize;
}

macro_rules! label {
    ($t:ty) => {
        impl Label for $t {
            const NONE: Self = <$t>::MAX;
            fn get(self) -> u32 {
                if self == Self::NONE {
                    UNPLACED
                } else {
                    self as u32
                }
            }
            fn new(p: u32) -> Self {
                p as $t
            }
            fn raw(self) -> usize {
                self as usize
            }
        }
    };
}
label!(u8);
label!(u16);
label!(u32);

/// GREM as a micro-batch partitioner: the seed-induced subgraph of `graph` (undirected),
/// cut `k` ways; `seed` replaces `opts.seed`.
pub fn grem_seeds(
    seeds: &[u32],
    blocks: &[Arc<Block>],
    graph: &Csr,
    k: usize,
    seed: u64,
    opts: &GremOptions,
) -> Result<Vec<Vec<u32>>> {
    parts::check_batch("grem", seeds, blocks, k)?;
    let sub = seed_induced(graph, seeds)?;
    let opts = GremOptions { seed, ..*opts };
    let mut labels = grem_partition(&sub, k, &opts)?;
    Ok(parts::groups_filled(seeds, &mut labels, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::kway::edge_cut;

    fn ring(n: u32) -> Csr {
        let src: Vec<u32> = (0..n).collect();
        let dst: Vec<u32> = (0..n).map(|v| (v + 1) % n).collect();
        Csr::from_edges(n as usize, &src, &dst)
            .unwrap()
            .symmetrize()
    }

    #[test]
    fn every_part_is_used_and_within_the_cap() {
        let g = ring(100);
        for k in [1usize, 2, 3, 7, 8] {
            let labels = grem_partition(&g, k, &GremOptions::default()).unwrap();
            let mut sizes = vec![0usize; k];
            for &l in &labels {
                sizes[l as usize] += 1;
            }
            assert!(sizes.iter().all(|&s| s > 0), "k = {k}: {sizes:?}");
            let cap = (100.0 / k as f64 * 1.03).ceil() as usize;
            assert!(sizes.iter().all(|&s| s <= cap), "k = {k}: {sizes:?}");
        }
    }

    #[test]
    fn weighted_parts_stay_within_the_weight_cap() {
        let g = ring(200);
        // Unit weights are the unweighted partition.
        let ones = vec![1u32; 200];
        let o = GremOptions::default();
        assert_eq!(
            grem_partition_weighted(&g, Some(&ones), 4, &o).unwrap(),
            grem_partition(&g, 4, &o).unwrap()
        );
        // Every fifth node weighs 6: parts balance on weight, not on node count.
        let w: Vec<u32> = (0..200).map(|v| if v % 5 == 0 { 6 } else { 1 }).collect();
        let total: u32 = w.iter().sum();
        let labels = grem_partition_weighted(&g, Some(&w), 4, &o).unwrap();
        let mut sizes = [0u32; 4];
        for (v, &l) in labels.iter().enumerate() {
            sizes[l as usize] += w[v];
        }
        let cap = (total as f64 / 4.0 * 1.03).ceil() as u32;
        assert!(
            sizes.iter().all(|&s| s > 0 && s <= cap),
            "{sizes:?} cap {cap}"
        );
        assert!(grem_partition_weighted(&g, Some(&w[..10]), 4, &o).is_err());
    }

    #[test]
    fn refinement_passes_lower_the_cut_of_one_pass() {
        // Blocks of one row each, so a single pass places nodes in a shuffled order.
        let g = ring(400);
        let one = GremOptions {
            block_edges: 1,
            passes: 1,
            ..GremOptions::default()
        };
        let three = GremOptions { passes: 3, ..one };
        let cut = |o: &GremOptions| edge_cut(&g, &grem_partition(&g, 4, o).unwrap()).unwrap();
        assert!(cut(&three) < cut(&one), "{} vs {}", cut(&three), cut(&one));
    }

    #[test]
    fn settle_ends_the_stream_after_the_first_quiet_refinement_pass() {
        let g = ring(400);
        let opts = |passes, settle| GremOptions {
            block_edges: 1,
            passes,
            settle,
            ..GremOptions::default()
        };
        let labels = |o: &GremOptions| grem_partition(&g, 4, o).unwrap();
        // Every refinement pass moves fewer than all the nodes: with settle 1 the stream
        // ends after pass 2, whatever `passes` allows.
        assert_eq!(labels(&opts(8, 1.0)), labels(&opts(2, 0.0)));
        // Settle 0 never stops early: passes 3-8 still move nodes.
        assert_ne!(labels(&opts(8, 0.0)), labels(&opts(2, 0.0)));
    }

    #[test]
    fn bad_arguments_are_errors() {
        let g = Csr::from_edges(3, &[0, 1], &[1, 2]).unwrap();
        assert!(grem_partition(&g, 0, &GremOptions::default()).is_err());
        assert!(grem_partition(&g, 4, &GremOptions::default()).is_err());
        for bad in [
            GremOptions {
                passes: 0,
                ..GremOptions::default()
            },
            GremOptions {
                block_edges: 0,
                ..GremOptions::default()
            },
            GremOptions {
                imbalance: f64::NAN,
                ..GremOptions::default()
            },
            GremOptions {
                settle: -0.5,
                ..GremOptions::default()
            },
        ] {
            assert!(grem_partition(&g, 2, &bad).is_err());
        }
        assert_eq!(
            grem_partition(&g, 3, &GremOptions::default())
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn working_bytes_grow_with_nodes_not_edges() {
        let (sparse, dense) = (ring(1000), {
            let (mut src, mut dst) = (Vec::new(), Vec::new());
            for v in 0..1000u32 {
                for j in 1..20 {
                    src.push(v);
                    dst.push((v + j) % 1000);
                }
            }
            Csr::from_edges(1000, &src, &dst).unwrap().symmetrize()
        });
        let o = GremOptions::default();
        let (a, b) = (
            grem_working_bytes(&sparse, 8, &o),
            grem_working_bytes(&dense, 8, &o),
        );
        assert!(b < a + a / 2, "{a} vs {b}");
        assert!(b < 4 * dense.num_edges(), "{b}");
    }
}

/// GREM behind the [`Partitioner`](crate::partition::Partitioner) trait, on the batch's
/// seed-induced graph.
#[derive(Debug, Default)]
pub struct GremPartitioner {
    /// Block size, passes, balance and seed of the stream.
    pub opts: GremOptions,
}

impl crate::partition::Partitioner for GremPartitioner {
    fn name(&self) -> &str {
        "grem"
    }

    fn partition(
        &mut self,
        batch: &crate::partition::Batch<'_>,
        k: usize,
    ) -> Result<Vec<Vec<u32>>> {
        grem_seeds(
            batch.seeds,
            batch.blocks(),
            batch.graph,
            k,
            batch.seed,
            &self.opts,
        )
    }
}
