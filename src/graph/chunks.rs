//! Full-graph training's chunks (HongTu, SIGMOD'24): which nodes each layer computes, and
//! their split into chunks of destination nodes, each with **all** its in-edges.
//!
//! With `L` layers and the target nodes `T` (the training nodes, or those evaluated), the
//! output layer computes `nodes[L-1] = T`, and layer `l` computes the nodes the next layer
//! reads: `nodes[l] = nodes[l+1] ∪ in-neighbours(nodes[l+1])`, the same sets as the full
//! neighbourhood sample of `T` (`--fanouts=-1,...`). Each layer's nodes, in increasing id
//! order or grouped by a partition of the graph (part by part, ids increasing inside a
//! part: a METIS or GREM renumbering, so that a chunk's nodes share neighbours), are cut
//! into contiguous chunks of about equal cost `Σ (1 + in-degree)` (nodes plus edges: what
//! a chunk's aggregation reads). A chunk's block is the full-neighbour
//! block of its dst nodes ([`crate::graph::sample_blocks`] with fanout `-1`), so every
//! aggregation, GAT's softmax included, completes inside one chunk, and its outputs equal
//! the unchunked layer's rows for those nodes.

use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::{sample_blocks, Block, BlockSizes, Csr};

/// The most chunks a layer may have for [`ChunkPlan::reorder_chunks`] to reorder them: its
/// pair counts take `8 · k²` bytes per worker (2 MiB at 512).
pub const REORDER_MAX_CHUNKS: usize = 512;

/// Every layer's nodes and their chunks.
#[derive(Clone, Debug)]
pub struct ChunkPlan {
    /// `nodes[l]`: the nodes layer `l` computes (global ids, increasing, or part by part
    /// when the plan has parts: see [`ChunkPlan::with_parts`]).
    pub nodes: Vec<Vec<u32>>,
    /// `chunks[l]`: disjoint ranges of `nodes[l]` covering it, in the order the chunks
    /// run: increasing, unless [`ChunkPlan::reorder_chunks`] reordered them.
    pub chunks: Vec<Vec<Range<usize>>>,
    /// `sizes[l][c]`: the sizes of chunk `c`'s block in layer `l` ([`ChunkPlan::sizes`]).
    sizes: Vec<Vec<BlockSizes>>,
    /// The partition that ordered the nodes, if any.
    parts: Option<Arc<[u32]>>,
}

impl ChunkPlan {
    /// The nodes of each of `layers` layers for the targets `targets` (any order,
    /// distinct), each layer cut into `chunks` chunks (fewer where a layer has fewer
    /// nodes).
    pub fn new(graph: &Csr, targets: &[u32], layers: usize, chunks: usize) -> Result<Self> {
        Self::with_parts(graph, targets, layers, chunks, None)
    }

    /// [`ChunkPlan::new`] with every layer's nodes ordered by `parts` (one label per graph
    /// node; ids increasing inside a part) before chunking, so that the nodes of a chunk
    /// come from few parts and share more of their neighbours.
    pub fn with_parts(
        graph: &Csr,
        targets: &[u32],
        layers: usize,
        chunks: usize,
        parts: Option<Arc<[u32]>>,
    ) -> Result<Self> {
        let mut nodes = layer_nodes(graph, targets, layers)?;
        if let Some(parts) = parts.as_deref() {
            if parts.len() != graph.num_nodes {
                return Err(Error::invalid(format!(
                    "full-graph node order: {} part labels for {} nodes",
                    parts.len(),
                    graph.num_nodes
                )));
            }
            for layer in &mut nodes {
                layer.par_sort_by_key(|&v| (parts[v as usize], v));
            }
        }
        let mut plan = ChunkPlan {
            nodes,
            chunks: Vec::new(),
            sizes: Vec::new(),
            parts,
        };
        plan.rechunk(graph, chunks)?;
        Ok(plan)
    }

    /// Cuts every layer into `chunks` chunks again (the nodes stay).
    pub fn rechunk(&mut self, graph: &Csr, chunks: usize) -> Result<()> {
        if chunks == 0 {
            return Err(Error::invalid("full-graph training needs at least 1 chunk"));
        }
        self.chunks = self.nodes.iter().map(|n| split(graph, n, chunks)).collect();
        self.sizes = self.measure(graph);
        Ok(())
    }

    /// HongTu's chunk reorganisation: reorders every layer's chunks (not their nodes) so
    /// that consecutive chunks share many source rows, which deduplicated transfers then
    /// take from the device instead of the host. Greedy: the first chunk stays first, and
    /// each next chunk is the one not yet placed that shares the most distinct sources
    /// with the chunk before it (the lowest index on ties); a layer keeps its order when
    /// the greedy one would not share more in all, or has more than
    /// [`REORDER_MAX_CHUNKS`] chunks (the pair counts grow with the square of the chunk
    /// count, which a budget's search can drive up to one chunk per node). The math does
    /// not change.
    pub fn reorder_chunks(&mut self, graph: &Csr) {
        for l in 0..self.layers() {
            let k = self.chunks[l].len();
            if k > REORDER_MAX_CHUNKS {
                continue;
            }
            let shared = self.pairwise_shared(graph, l);
            let order = greedy_path(&shared, k);
            let along =
                |o: &[usize]| -> u64 { o.windows(2).map(|w| shared[w[0] * k + w[1]]).sum() };
            if along(&order) <= along(&(0..k).collect::<Vec<_>>()) {
                continue;
            }
            self.chunks[l] = order.iter().map(|&c| self.chunks[l][c].clone()).collect();
            self.sizes[l] = order.iter().map(|&c| self.sizes[l][c].clone()).collect();
        }
    }

    /// `shared[a * C + b]`: the distinct sources chunks `a` and `b` of layer `l` share
    /// (`C` chunks; symmetric, 0 on the diagonal). Counted per source node over the chunks
    /// that read it, so its cost is that of listing every chunk's sources once plus the
    /// pairs of chunks each node is read by.
    fn pairwise_shared(&self, graph: &Csr, l: usize) -> Vec<u64> {
        let k = self.chunks[l].len();
        if k < 3 {
            // With two chunks or fewer every order has the same consecutive pairs.
            return vec![0; k * k];
        }
        let srcs: Vec<Vec<u32>> = (0..k)
            .into_par_iter()
            .map_init(
                || Marks::new(graph.num_nodes),
                |marks, c| {
                    marks.clear();
                    let mut out = Vec::new();
                    for_each_src(graph, self.dst(l, c), |u| {
                        if marks.insert(u) {
                            out.push(u);
                        }
                    });
                    out
                },
            )
            .collect();
        // Node -> the chunks reading it, in increasing chunk order (CSR).
        let n = graph.num_nodes;
        let mut ptr = vec![0usize; n + 1];
        for s in &srcs {
            for &u in s {
                ptr[u as usize + 1] += 1;
            }
        }
        for i in 0..n {
            ptr[i + 1] += ptr[i];
        }
        let mut fill = ptr.clone();
        let mut readers = vec![0u32; ptr[n]];
        for (c, s) in srcs.iter().enumerate() {
            for &u in s {
                readers[fill[u as usize]] = c as u32;
                fill[u as usize] += 1;
            }
        }
        drop(srcs);
        (0..n)
            .into_par_iter()
            .fold(
                || vec![0u64; k * k],
                |mut m, u| {
                    let r = &readers[ptr[u]..ptr[u + 1]];
                    for (i, &a) in r.iter().enumerate() {
                        for &b in &r[i + 1..] {
                            m[a as usize * k + b as usize] += 1;
                            m[b as usize * k + a as usize] += 1;
                        }
                    }
                    m
                },
            )
            .reduce(
                || vec![0u64; k * k],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                    a
                },
            )
    }

    /// The part labels that ordered every layer's nodes ([`ChunkPlan::with_parts`]).
    pub fn parts(&self) -> Option<&Arc<[u32]>> {
        self.parts.as_ref()
    }

    /// Splits chunk `c` of layer `l` in two of about equal cost, in its place (a chunk that
    /// ran out of memory). Errors when the chunk has a single node.
    pub fn split_chunk(&mut self, graph: &Csr, l: usize, c: usize) -> Result<()> {
        let r = self
            .chunks
            .get(l)
            .and_then(|layer| layer.get(c))
            .cloned()
            .ok_or_else(|| Error::invalid(format!("full-graph: no chunk {c} in layer {l}")))?;
        if r.len() < 2 {
            return Err(Error::invalid(format!(
                "full-graph: chunk {c} of layer {l} has a single node and cannot be split"
            )));
        }
        let halves = split(graph, &self.nodes[l][r.clone()], 2);
        let ranges: Vec<Range<usize>> = halves
            .into_iter()
            .map(|h| r.start + h.start..r.start + h.end)
            .collect();
        let sizes: Vec<BlockSizes> = ranges
            .iter()
            .map(|h| chunk_sizes(graph, &self.nodes[l][h.clone()]))
            .collect();
        self.chunks[l].splice(c..=c, ranges);
        self.sizes[l].splice(c..=c, sizes);
        Ok(())
    }

    /// Layers.
    pub fn layers(&self) -> usize {
        self.nodes.len()
    }

    /// The chunk count asked for: the largest count of any layer.
    pub fn num_chunks(&self) -> usize {
        self.chunks.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// The dst nodes of chunk `c` of layer `l`.
    pub fn dst(&self, l: usize, c: usize) -> &[u32] {
        &self.nodes[l][self.chunks[l][c].clone()]
    }

    /// The block of chunk `c` of layer `l`: its dst nodes with every in-edge.
    pub fn block(&self, graph: &Csr, l: usize, c: usize) -> Result<Block> {
        let mut blocks = sample_blocks(graph, self.dst(l, c), &[-1], 0)?;
        blocks
            .pop()
            .ok_or_else(|| Error::invalid("full-graph chunk: the sampler returned no block"))
    }

    /// The sizes of [`ChunkPlan::block`] without building it (the memory estimator's
    /// input), for every chunk of every layer: `sizes()[l][c]`.
    pub fn sizes(&self) -> &[Vec<BlockSizes>] {
        &self.sizes
    }

    /// `shared[l][c]`: the source nodes chunk `c` of layer `l` shares with chunk `c - 1`
    /// (0 for the first chunk): the rows deduplicated transfers take from the device.
    pub fn shared_with_previous(&self, graph: &Csr) -> Vec<Vec<usize>> {
        self.per_chunk(graph, |marks, l, c| match c {
            0 => 0,
            _ => shared_src(graph, self.dst(l, c - 1), self.dst(l, c), marks),
        })
    }

    fn measure(&self, graph: &Csr) -> Vec<Vec<BlockSizes>> {
        self.per_chunk(graph, |marks, l, c| {
            chunk_sizes_with(graph, self.dst(l, c), marks)
        })
    }

    /// `f(marks, l, c)` for every chunk `c` of every layer `l`, the chunks of a layer in
    /// parallel, each thread with its own node marks.
    fn per_chunk<T: Send>(
        &self,
        graph: &Csr,
        f: impl Fn(&mut Marks, usize, usize) -> T + Sync,
    ) -> Vec<Vec<T>> {
        (0..self.layers())
            .map(|l| {
                (0..self.chunks[l].len())
                    .into_par_iter()
                    .map_init(|| Marks::new(graph.num_nodes), |marks, c| f(marks, l, c))
                    .collect()
            })
            .collect()
    }
}

/// The nodes each layer computes (see the module docs), each set in increasing id order.
pub fn layer_nodes(graph: &Csr, targets: &[u32], layers: usize) -> Result<Vec<Vec<u32>>> {
    if layers == 0 {
        return Err(Error::invalid("full-graph training needs at least 1 layer"));
    }
    let n = graph.num_nodes;
    let mut seen = vec![false; n];
    for &t in targets {
        let slot = seen.get_mut(t as usize).ok_or_else(|| {
            Error::invalid(format!(
                "full-graph target node {t} out of range for {n} nodes"
            ))
        })?;
        if *slot {
            return Err(Error::invalid(format!(
                "full-graph target node {t} appears twice"
            )));
        }
        *slot = true;
    }
    let collect =
        |seen: &[bool]| -> Vec<u32> { (0..n as u32).filter(|&v| seen[v as usize]).collect() };
    let mut nodes = vec![collect(&seen)];
    for _ in 1..layers {
        let last = nodes.last().map(Vec::as_slice).unwrap_or_default();
        for &v in last {
            for &u in graph.neighbors(v) {
                seen[u as usize] = true;
            }
        }
        nodes.push(collect(&seen));
    }
    nodes.reverse();
    Ok(nodes)
}

/// Contiguous ranges of `nodes`, `chunks` of them (fewer if there are fewer nodes), of
/// about equal `Σ (1 + in-degree)`.
pub fn split(graph: &Csr, nodes: &[u32], chunks: usize) -> Vec<Range<usize>> {
    let chunks = chunks.min(nodes.len()).max(1);
    let cost = |v: u32| 1 + graph.neighbors(v).len() as u64;
    let total: u64 = nodes.iter().map(|&v| cost(v)).sum();
    let mut out = Vec::with_capacity(chunks);
    let (mut start, mut acc) = (0usize, 0u64);
    for (i, &v) in nodes.iter().enumerate() {
        acc += cost(v);
        let k = out.len() as u64 + 1;
        // Leave at least one node for each chunk still to come.
        let left = nodes.len() - (i + 1);
        let need = chunks - out.len() - 1;
        if out.len() + 1 < chunks && (acc * chunks as u64 >= k * total || left == need) {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < nodes.len() || out.is_empty() {
        out.push(start..nodes.len());
    }
    out
}

/// A path through `k` chunks that starts at chunk 0 and steps, each time, to the chunk not
/// yet visited that shares the most with the current one (`shared` as
/// [`ChunkPlan::pairwise_shared`]); the lowest index on ties.
fn greedy_path(shared: &[u64], k: usize) -> Vec<usize> {
    let mut order = Vec::with_capacity(k);
    let mut placed = vec![false; k];
    let mut cur = 0usize;
    for _ in 0..k {
        order.push(cur);
        placed[cur] = true;
        let row = &shared[cur * k..(cur + 1) * k];
        let next = (0..k)
            .filter(|&j| !placed[j])
            .max_by_key(|&j| (row[j], std::cmp::Reverse(j)));
        match next {
            Some(j) => cur = j,
            None => break,
        }
    }
    order
}

/// Every source node of the full-neighbour block of `dst` (its dst nodes and their
/// in-neighbours), with repeats.
fn for_each_src(graph: &Csr, dst: &[u32], mut f: impl FnMut(u32)) {
    for &v in dst {
        f(v);
        for &u in graph.neighbors(v) {
            f(u);
        }
    }
}

/// The distinct source nodes the full-neighbour blocks of `a` and `b` share.
fn shared_src(graph: &Csr, a: &[u32], b: &[u32], marks: &mut Marks) -> usize {
    if marks.stamp >= u32::MAX - 2 {
        // Two clears must not wrap (a wrap forgets every mark).
        marks.seen.fill(0);
        marks.stamp = 0;
    }
    marks.clear();
    for_each_src(graph, a, |u| {
        marks.insert(u);
    });
    // Marked with `a`'s stamp: in `a`'s sources and not counted yet; a counted node moves
    // to the next stamp.
    let in_a = marks.stamp;
    marks.clear();
    let mut shared = 0;
    for_each_src(graph, b, |u| {
        let slot = &mut marks.seen[u as usize];
        if *slot == in_a {
            shared += 1;
            *slot = marks.stamp;
        }
    });
    shared
}

/// [`BlockSizes`] of the full-neighbour block of `dst`.
pub fn chunk_sizes(graph: &Csr, dst: &[u32]) -> BlockSizes {
    chunk_sizes_with(graph, dst, &mut Marks::new(graph.num_nodes))
}

/// One mark per node, reset in O(1) by moving to a new stamp: counts a chunk's distinct
/// sources without a hash set (a chunk of a products-scale graph reads ~10⁸ edges).
struct Marks {
    stamp: u32,
    seen: Vec<u32>,
}

impl Marks {
    fn new(n: usize) -> Self {
        Marks {
            stamp: 0,
            seen: vec![0; n],
        }
    }

    /// Starts a new set.
    fn clear(&mut self) {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.seen.fill(0);
            self.stamp = 1;
        }
    }

    /// Marks `v`; true if it was not marked in this set yet.
    fn insert(&mut self, v: u32) -> bool {
        let slot = &mut self.seen[v as usize];
        let fresh = *slot != self.stamp;
        *slot = self.stamp;
        fresh
    }
}

fn chunk_sizes_with(graph: &Csr, dst: &[u32], marks: &mut Marks) -> BlockSizes {
    marks.clear();
    let mut num_src = 0usize;
    for &v in dst {
        num_src += usize::from(marks.insert(v));
    }
    let mut hist: Vec<usize> = Vec::new();
    let (mut edges, mut self_loops) = (0usize, 0usize);
    for &v in dst {
        let nb = graph.neighbors(v);
        edges += nb.len();
        if hist.len() <= nb.len() {
            hist.resize(nb.len() + 1, 0);
        }
        hist[nb.len()] += 1;
        if nb.contains(&v) {
            self_loops += 1;
        }
        for &u in nb {
            num_src += usize::from(marks.insert(u));
        }
    }
    BlockSizes {
        num_src,
        num_dst: dst.len(),
        num_edges: edges,
        degree_hist: hist,
        self_loops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::full_blocks;
    use crate::rng::Rng;

    /// A random graph with duplicate edges and self-loops, and a few isolated nodes.
    fn graph(n: u32, m: usize, seed: u64) -> Csr {
        let mut rng = Rng::new(seed);
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for _ in 0..m {
            src.push(rng.below(n as u64 - 3) as u32);
            dst.push(rng.below(n as u64 - 3) as u32);
        }
        src.extend([0, 5]);
        dst.extend([0, 5]);
        Csr::from_edges(n as usize, &src, &dst).unwrap()
    }

    #[test]
    fn layer_nodes_are_the_full_neighbourhood_samples_src_sets() {
        let g = graph(300, 900, 1);
        let targets = [17u32, 3, 250, 120, 5];
        for layers in 1..=3 {
            let nodes = layer_nodes(&g, &targets, layers).unwrap();
            let blocks = full_blocks(&g, &targets, layers).unwrap();
            for l in 0..layers {
                let mut want = blocks[l].dst_nodes().to_vec();
                want.sort_unstable();
                assert_eq!(nodes[l], want, "layer {l} of {layers}");
            }
        }
    }

    #[test]
    fn chunks_cover_each_layer_in_order_without_empty_ones() {
        let g = graph(300, 900, 2);
        let targets: Vec<u32> = (0..300).step_by(7).collect();
        for chunks in [1, 2, 3, 7, 40, 1000] {
            let plan = ChunkPlan::new(&g, &targets, 2, chunks).unwrap();
            for (l, ranges) in plan.chunks.iter().enumerate() {
                assert_eq!(ranges.len(), chunks.min(plan.nodes[l].len()));
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges.last().unwrap().end, plan.nodes[l].len());
                for w in ranges.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                assert!(ranges.iter().all(|r| !r.is_empty()));
            }
        }
    }

    #[test]
    fn chunk_sizes_equal_the_built_blocks_sizes() {
        let g = graph(200, 1200, 3);
        let targets: Vec<u32> = (0..200).step_by(3).collect();
        let plan = ChunkPlan::new(&g, &targets, 2, 5).unwrap();
        let sizes = plan.sizes();
        for (l, layer) in sizes.iter().enumerate() {
            for (c, s) in layer.iter().enumerate() {
                let b = plan.block(&g, l, c).unwrap();
                assert_eq!(*s, BlockSizes::of(&b), "layer {l} chunk {c}");
                assert_eq!(b.dst_nodes(), plan.dst(l, c));
            }
        }
    }

    #[test]
    fn parts_order_each_layer_part_by_part_over_the_same_nodes() {
        let g = graph(300, 900, 5);
        let targets: Vec<u32> = (0..300).step_by(4).collect();
        let parts: Vec<u32> = (0..300u32).map(|v| (v * 7) % 5).collect();
        let plain = ChunkPlan::new(&g, &targets, 2, 3).unwrap();
        let plan = ChunkPlan::with_parts(&g, &targets, 2, 3, Some(parts.clone().into())).unwrap();
        for (l, nodes) in plan.nodes.iter().enumerate() {
            let key: Vec<(u32, u32)> = nodes.iter().map(|&v| (parts[v as usize], v)).collect();
            assert!(
                key.windows(2).all(|w| w[0] < w[1]),
                "layer {l} not part by part"
            );
            let mut sorted = nodes.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, plain.nodes[l], "layer {l}");
        }
        assert!(ChunkPlan::with_parts(&g, &targets, 2, 3, Some(vec![0; 7].into())).is_err());
    }

    #[test]
    fn shared_with_previous_counts_the_distinct_sources_two_chunks_share() {
        let g = graph(300, 900, 6);
        let targets: Vec<u32> = (0..300).step_by(2).collect();
        let plan = ChunkPlan::new(&g, &targets, 2, 6).unwrap();
        let shared = plan.shared_with_previous(&g);
        for (l, layer) in shared.iter().enumerate() {
            assert_eq!(layer.len(), plan.chunks[l].len());
            assert_eq!(layer[0], 0);
            let src = |c: usize| -> std::collections::HashSet<u32> {
                let b = plan.block(&g, l, c).unwrap();
                b.src_nodes.iter().copied().collect()
            };
            for (c, &n) in layer.iter().enumerate().skip(1) {
                let want = src(c - 1).intersection(&src(c)).count();
                assert_eq!(n, want, "layer {l} chunk {c}");
            }
        }
    }

    /// Distinct sources of every chunk of layer `l`, by building the blocks.
    fn chunk_srcs(plan: &ChunkPlan, g: &Csr, l: usize) -> Vec<std::collections::HashSet<u32>> {
        (0..plan.chunks[l].len())
            .map(|c| {
                plan.block(g, l, c)
                    .unwrap()
                    .src_nodes
                    .iter()
                    .copied()
                    .collect()
            })
            .collect()
    }

    #[test]
    fn pairwise_shared_counts_the_sources_every_two_chunks_share() {
        let g = graph(400, 1600, 8);
        let targets: Vec<u32> = (0..400).step_by(2).collect();
        let plan = ChunkPlan::new(&g, &targets, 2, 7).unwrap();
        for l in 0..plan.layers() {
            let k = plan.chunks[l].len();
            let m = plan.pairwise_shared(&g, l);
            let srcs = chunk_srcs(&plan, &g, l);
            for a in 0..k {
                for b in 0..k {
                    let want = match a == b {
                        true => 0,
                        false => srcs[a].intersection(&srcs[b]).count() as u64,
                    };
                    assert_eq!(m[a * k + b], want, "layer {l} chunks {a}, {b}");
                }
            }
        }
    }

    #[test]
    fn reordered_chunks_keep_their_nodes_and_sizes_and_share_no_fewer_rows() {
        let g = graph(600, 2400, 9);
        let targets: Vec<u32> = (0..600).step_by(3).collect();
        // Nodes grouped by a scattered labelling, so that the id order is a poor one.
        let parts: Arc<[u32]> = (0..600u32).map(|v| (v * 7919) % 13).collect();
        let before = ChunkPlan::with_parts(&g, &targets, 2, 9, Some(parts)).unwrap();
        let mut after = before.clone();
        after.reorder_chunks(&g);
        let total = |p: &ChunkPlan| -> usize { p.shared_with_previous(&g).iter().flatten().sum() };
        assert!(total(&after) >= total(&before));
        let mut moved = false;
        for l in 0..before.layers() {
            assert_eq!(after.nodes[l], before.nodes[l]);
            assert_eq!(after.chunks[l][0], before.chunks[l][0]);
            let mut a = after.chunks[l].clone();
            moved |= a != before.chunks[l];
            a.sort_by_key(|r| r.start);
            assert_eq!(a, before.chunks[l], "the same ranges, reordered");
            for (c, s) in after.sizes()[l].iter().enumerate() {
                assert_eq!(*s, chunk_sizes(&g, after.dst(l, c)), "layer {l} chunk {c}");
            }
        }
        assert!(moved, "this plan's id order is not the greedy one");
    }

    #[test]
    fn the_greedy_path_steps_to_the_chunk_sharing_the_most() {
        // Chunk 0 shares most with 2, 2 with 3, 3 with 1.
        #[rustfmt::skip]
        let m = [
            0, 1, 5, 0,
            1, 0, 0, 4,
            5, 0, 0, 6,
            0, 4, 6, 0,
        ];
        assert_eq!(greedy_path(&m, 4), vec![0, 2, 3, 1]);
        assert_eq!(greedy_path(&[0], 1), vec![0]);
    }

    #[test]
    fn a_split_chunk_becomes_two_covering_its_nodes_with_their_sizes() {
        let g = graph(200, 1200, 7);
        let targets: Vec<u32> = (0..200).step_by(3).collect();
        let mut plan = ChunkPlan::new(&g, &targets, 2, 3).unwrap();
        let before = plan.chunks[1].clone();
        plan.split_chunk(&g, 1, 1).unwrap();
        let after = &plan.chunks[1];
        assert_eq!(after.len(), 4);
        assert_eq!(
            (after[0].clone(), after[3].clone()),
            (before[0].clone(), before[2].clone())
        );
        assert_eq!(after[1].start, before[1].start);
        assert_eq!(after[1].end, after[2].start);
        assert_eq!(after[2].end, before[1].end);
        assert!(after.iter().all(|r| !r.is_empty()));
        for c in 0..4 {
            let b = plan.block(&g, 1, c).unwrap();
            assert_eq!(plan.sizes()[1][c], BlockSizes::of(&b), "chunk {c}");
        }
        let one = ChunkPlan::new(&g, &[5], 1, 1).unwrap();
        assert!(one.clone().split_chunk(&g, 0, 0).is_err());
        assert!(one.clone().split_chunk(&g, 0, 1).is_err());
    }

    #[test]
    fn split_balances_nodes_plus_edges() {
        // A star: node 0 has 99 in-edges, the others none; two chunks put node 0 alone.
        let src: Vec<u32> = (1..100).collect();
        let dst = vec![0u32; 99];
        let g = Csr::from_edges(100, &src, &dst).unwrap();
        let nodes: Vec<u32> = (0..100).collect();
        assert_eq!(split(&g, &nodes, 2), vec![0..1, 1..100]);
    }

    #[test]
    fn bad_targets_are_errors() {
        let g = graph(50, 100, 4);
        assert!(layer_nodes(&g, &[3, 3], 2).is_err());
        assert!(layer_nodes(&g, &[50], 2).is_err());
        assert!(layer_nodes(&g, &[1], 0).is_err());
        assert!(ChunkPlan::new(&g, &[1], 2, 0).is_err());
    }
}
