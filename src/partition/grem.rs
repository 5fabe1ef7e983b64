//! GREM, Armada's streaming min-edge-cut partitioner (our reading of it).
//!
//! The graph is only read as a stream of edges in chunks (rows of the in-edge CSR, about
//! `chunk_edges` edges per chunk), front to back, so it could come from disk; GREM's own
//! state is 17 bytes per node plus one chunk's touched list ([`grem_working_bytes`]). K parts come from recursive bisection, one level at a
//! time: at every level all groups still to split are bisected in the same streaming
//! passes (a group of `k` parts splits into `ceil(k/2)` and `floor(k/2)` parts, with sizes
//! proportional), so a level costs `passes` scans of the edges and there are
//! `ceil(log2 K)` levels.
//!
//! Within a pass, each edge `u -> v` (both ends in the same group) is seen once:
//!
//! - **Place.** When row `v` streams, `v`'s counters gain the sides of its placed
//!   in-neighbours, and `v` (taken off its side first if it has one: re-streaming) goes to
//!   the side maximising the LDG score `count[side] * (1 - size[side] / cap[side])`, where
//!   `cap = target * (1 + imbalance)` (a full side is never chosen; with no placed
//!   neighbour, the side with most room relative to its target wins). Each in-neighbour's
//!   counters then gain `v`'s side, so out-edges are seen too, and the input need not be
//!   symmetric.
//! - **Refine.** At the end of a chunk, every node the chunk touched as a source is
//!   re-evaluated: an unplaced one is placed, a placed one moves when more of its observed
//!   neighbours sit on the other side and that side has room. Later passes (counters
//!   reset) re-stream the edges with every node placed, so each node is re-decided as it
//!   reappears.
//!
//! After a level, a side with fewer nodes than the parts it must still produce takes nodes
//! from the other side, so every one of the K parts is non-empty when the graph has at
//! least K nodes. Deterministic: single-threaded, ties broken by a hash of `seed`.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::graph::{Block, Csr};
use crate::partition::kway::seed_induced;
use crate::partition::parts;
use crate::rng::mix64;

const UNPLACED: u8 = 2;

/// GREM's knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GremOptions {
    /// Edges per streamed chunk (a row longer than this is a chunk of its own).
    pub chunk_edges: usize,
    /// Allowed excess of the largest part over `nodes / K` (0.03 = 3%), spread over the
    /// bisection levels: each level allows `(1 + imbalance)^(1 / levels) - 1`.
    pub imbalance: f64,
    /// Streaming passes per bisection level: the first places, every pass refines.
    pub passes: usize,
    /// Tie-breaking seed.
    pub seed: u64,
}

impl Default for GremOptions {
    fn default() -> Self {
        GremOptions {
            chunk_edges: 1 << 16,
            imbalance: 0.03,
            passes: 8,
            seed: 0,
        }
    }
}

/// Bytes of GREM's working state for `num_nodes` nodes and `k` parts: per node a group
/// (4), a side (1), two counters (8) and a chunk stamp (4); per part a few words; one
/// chunk's touched list (distinct nodes, at most one per edge and per row).
pub fn grem_working_bytes(num_nodes: usize, k: usize, opts: &GremOptions) -> usize {
    17 * num_nodes + 40 * k + 4 * (2 * opts.chunk_edges).min(num_nodes)
}

/// State of one bisection level.
struct Level<'a> {
    /// First final label of each node's group.
    lo: &'a [u32],
    /// Parts still to make from the group starting at each label (0 if no group starts).
    kof: &'a [u32],
    /// Side of each node in its group's bisection.
    side: Vec<u8>,
    /// Observed neighbours of each node on side 0 and side 1, this pass.
    count: Vec<[u32; 2]>,
    /// Nodes on each side, per group (indexed by `lo`).
    size: Vec<[u64; 2]>,
    /// Capacity of each side, per group.
    cap: Vec<[u64; 2]>,
    /// Target of each side, per group.
    target: Vec<[f64; 2]>,
    seed: u64,
}

impl Level<'_> {
    fn splits(&self, v: u32) -> bool {
        self.kof[self.lo[v as usize] as usize] >= 2
    }

    fn same_group(&self, u: u32, v: u32) -> bool {
        self.lo[u as usize] == self.lo[v as usize]
    }

    /// The best side for `v` by LDG score; never a full side.
    fn best_side(&self, v: u32) -> u8 {
        let g = self.lo[v as usize] as usize;
        let c = self.count[v as usize];
        let room = |s: usize| self.size[g][s] < self.cap[g][s];
        let fill = |s: usize| self.size[g][s] as f64 / self.target[g][s].max(1e-9);
        let score = |s: usize| c[s] as f64 * (1.0 - self.size[g][s] as f64 / self.cap[g][s] as f64);
        match (room(0), room(1)) {
            (true, false) => return 0,
            (false, true) => return 1,
            _ => {}
        }
        let (s0, s1) = (score(0), score(1));
        if s0 > s1 {
            0
        } else if s1 > s0 {
            1
        } else if fill(0) < fill(1) {
            0
        } else if fill(1) < fill(0) {
            1
        } else {
            (mix64(self.seed ^ v as u64) & 1) as u8
        }
    }

    fn place(&mut self, v: u32, s: u8) {
        let g = self.lo[v as usize] as usize;
        let old = self.side[v as usize];
        if old != UNPLACED {
            self.size[g][old as usize] -= 1;
        }
        self.side[v as usize] = s;
        self.size[g][s as usize] += 1;
    }

    /// Places an unplaced `v`, or moves a placed one whose observed neighbours lean to the
    /// other side (when that side has room).
    fn decide(&mut self, v: u32) {
        let cur = self.side[v as usize];
        if cur == UNPLACED {
            let s = self.best_side(v);
            self.place(v, s);
            return;
        }
        let g = self.lo[v as usize] as usize;
        let other = 1 - cur;
        let c = self.count[v as usize];
        if c[other as usize] > c[cur as usize]
            && self.size[g][other as usize] < self.cap[g][other as usize]
        {
            self.place(v, other);
        }
    }
}

/// GREM's K-way partition of `graph` (read as undirected): one label in `0..k` per node,
/// every label used. Errors when `k` is 0 or exceeds the nodes, or on bad options.
pub fn grem_partition(graph: &Csr, k: usize, opts: &GremOptions) -> Result<Vec<u32>> {
    parts::check_k("grem", graph.num_nodes, k)?;
    if opts.chunk_edges == 0
        || opts.passes == 0
        || !opts.imbalance.is_finite()
        || opts.imbalance < 0.0
    {
        return Err(Error::invalid(format!(
            "grem: chunk_edges ({}) and passes ({}) must be at least 1 and imbalance ({}) finite and at least 0",
            opts.chunk_edges, opts.passes, opts.imbalance
        )));
    }
    if graph.indptr.len() != graph.num_nodes + 1
        || graph.indptr.last().copied() != Some(graph.indices.len() as u64)
        || graph.indices.iter().any(|&u| u as usize >= graph.num_nodes)
    {
        return Err(Error::invalid("grem: malformed graph"));
    }
    let n = graph.num_nodes;
    if n > u32::MAX as usize - 1 || k > u32::MAX as usize {
        return Err(Error::invalid(
            "grem: too many nodes or parts for u32 labels",
        ));
    }
    let mut lo = vec![0u32; n];
    let mut kof = vec![0u32; k];
    kof[0] = k as u32;
    let levels = (k as f64).log2().ceil().max(1.0);
    let per_level = (1.0 + opts.imbalance).powf(1.0 / levels) - 1.0;
    while kof.iter().any(|&x| x >= 2) {
        bisect_level(graph, &mut lo, &mut kof, per_level, opts);
    }
    Ok(lo)
}

/// Splits every group of two or more parts in two.
fn bisect_level(graph: &Csr, lo: &mut [u32], kof: &mut [u32], imbalance: f64, opts: &GremOptions) {
    let n = graph.num_nodes;
    let k = kof.len();
    let mut members = vec![0u64; k];
    for &l in lo.iter() {
        members[l as usize] += 1;
    }
    let mut cap = vec![[0u64; 2]; k];
    let mut target = vec![[0f64; 2]; k];
    for g in 0..k {
        let kg = kof[g] as u64;
        if kg >= 2 {
            let k0 = kg.div_ceil(2);
            let t0 = members[g] as f64 * k0 as f64 / kg as f64;
            let t1 = members[g] as f64 - t0;
            target[g] = [t0, t1];
            let c = |t: f64, parts: u64| ((t * (1.0 + imbalance)).ceil() as u64).max(parts);
            cap[g] = [c(t0, k0), c(t1, kg - k0)];
        }
    }
    let mut level = Level {
        lo,
        kof,
        side: vec![UNPLACED; n],
        count: vec![[0; 2]; n],
        size: vec![[0; 2]; k],
        cap,
        target,
        seed: opts.seed,
    };
    let mut touched = Touched {
        list: Vec::new(),
        stamp: vec![0; n],
        chunk: 0,
    };
    for _pass in 0..opts.passes {
        level.count.iter_mut().for_each(|c| *c = [0, 0]);
        let mut v = 0usize;
        while v < n {
            // One chunk: whole rows, about `chunk_edges` edges.
            let start = graph.indptr[v];
            touched.next_chunk();
            while v < n && (graph.indptr[v] - start) < opts.chunk_edges as u64 {
                stream_row(graph, &mut level, v as u32, &mut touched);
                v += 1;
            }
            for &x in &touched.list {
                level.decide(x);
            }
        }
    }
    // Nodes no edge reached (isolated in their group), then the minimum sizes.
    for v in 0..n as u32 {
        if level.splits(v) && level.side[v as usize] == UNPLACED {
            let s = level.best_side(v);
            level.place(v, s);
        }
    }
    let Level { side, size, .. } = level;
    finish_level(lo, kof, &side, &size);
}

/// The nodes one chunk touched, in order of first touch (a chunk stamp per node).
struct Touched {
    list: Vec<u32>,
    stamp: Vec<u32>,
    chunk: u32,
}

impl Touched {
    fn next_chunk(&mut self) {
        self.list.clear();
        self.chunk = self.chunk.wrapping_add(1);
        if self.chunk == 0 {
            self.stamp.fill(0);
            self.chunk = 1;
        }
    }

    fn push(&mut self, v: u32) {
        if self.stamp[v as usize] != self.chunk {
            self.stamp[v as usize] = self.chunk;
            self.list.push(v);
        }
    }
}

/// Streams row `v`: count, place `v`, tell its in-neighbours `v`'s side.
fn stream_row(graph: &Csr, level: &mut Level, v: u32, touched: &mut Touched) {
    if !level.splits(v) {
        return;
    }
    let row = graph.neighbors(v);
    for &u in row {
        if u != v && level.same_group(u, v) {
            let su = level.side[u as usize];
            if su != UNPLACED {
                level.count[v as usize][su as usize] += 1;
            }
        }
    }
    let cur = level.side[v as usize];
    if cur != UNPLACED {
        // Restream: v competes again for a side, as if unplaced.
        let g = level.lo[v as usize] as usize;
        level.size[g][cur as usize] -= 1;
        level.side[v as usize] = UNPLACED;
    }
    let s = level.best_side(v);
    level.place(v, s);
    let sv = level.side[v as usize] as usize;
    for &u in row {
        if u != v && level.same_group(u, v) {
            level.count[u as usize][sv] += 1;
            touched.push(u);
        }
    }
}

/// Turns sides into groups; a side short of nodes for its parts borrows from the other.
fn finish_level(lo: &mut [u32], kof: &mut [u32], side: &[u8], size: &[[u64; 2]]) {
    let k = kof.len();
    let mut size = size.to_vec();
    let mut side = side.to_vec();
    for g in 0..k {
        let kg = kof[g];
        if kg < 2 {
            continue;
        }
        let k0 = kg.div_ceil(2) as u64;
        let need = [k0, kg as u64 - k0];
        for s in 0..2usize {
            let mut v = 0;
            while size[g][s] < need[s] && v < lo.len() {
                if lo[v] as usize == g && side[v] as usize == 1 - s && size[g][1 - s] > need[1 - s]
                {
                    side[v] = s as u8;
                    size[g][s] += 1;
                    size[g][1 - s] -= 1;
                }
                v += 1;
            }
        }
    }
    for (v, l) in lo.iter_mut().enumerate() {
        let g = *l as usize;
        let kg = kof[g];
        if kg >= 2 && side[v] == 1 {
            *l += kg.div_ceil(2);
        }
    }
    let before = kof.to_vec();
    for (g, &kg) in before.iter().enumerate() {
        if kg >= 2 {
            let k0 = kg.div_ceil(2);
            kof[g] = k0;
            kof[g + k0 as usize] = kg - k0;
        }
    }
}

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

    #[test]
    fn every_part_is_used_and_balanced() {
        // A ring of 100 nodes.
        let src: Vec<u32> = (0..100).collect();
        let dst: Vec<u32> = (0..100).map(|v| (v + 1) % 100).collect();
        let g = Csr::from_edges(100, &src, &dst).unwrap();
        for k in [1usize, 2, 3, 7, 8] {
            let labels = grem_partition(&g, k, &GremOptions::default()).unwrap();
            let mut sizes = vec![0usize; k];
            for &l in &labels {
                sizes[l as usize] += 1;
            }
            assert!(sizes.iter().all(|&s| s > 0), "k = {k}: {sizes:?}");
            let max = *sizes.iter().max().unwrap() as f64;
            assert!(max <= 100.0 / k as f64 * 1.2 + 1.0, "k = {k}: {sizes:?}");
        }
        let two = grem_partition(&g, 2, &GremOptions::default()).unwrap();
        assert!(edge_cut(&g, &two).unwrap() <= 10);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let g = Csr::from_edges(3, &[0, 1], &[1, 2]).unwrap();
        assert!(grem_partition(&g, 0, &GremOptions::default()).is_err());
        assert!(grem_partition(&g, 4, &GremOptions::default()).is_err());
        let bad = GremOptions {
            passes: 0,
            ..GremOptions::default()
        };
        assert!(grem_partition(&g, 2, &bad).is_err());
        assert_eq!(
            grem_partition(&g, 3, &GremOptions::default())
                .unwrap()
                .len(),
            3
        );
    }
}

/// GREM behind the [`Partitioner`](crate::partition::Partitioner) trait, on the batch's
/// seed-induced graph.
#[derive(Debug, Default)]
pub struct GremPartitioner {
    /// Chunk size, passes, balance and seed of the stream.
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
