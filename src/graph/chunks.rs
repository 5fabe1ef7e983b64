//! Full-graph training's chunks (HongTu, SIGMOD'24): which nodes each layer computes, and
//! their split into chunks of destination nodes, each with **all** its in-edges.
//!
//! With `L` layers and the target nodes `T` (the training nodes, or those evaluated), the
//! output layer computes `nodes[L-1] = T`, and layer `l` computes the nodes the next layer
//! reads: `nodes[l] = nodes[l+1] ∪ in-neighbours(nodes[l+1])`, the same sets as the full
//! neighbourhood sample of `T` (`--fanouts=-1,...`). Each layer's nodes, in increasing id
//! order, are cut into contiguous chunks of about equal cost `Σ (1 + in-degree)` (nodes
//! plus edges: what a chunk's aggregation reads). A chunk's block is the full-neighbour
//! block of its dst nodes ([`crate::graph::sample_blocks`] with fanout `-1`), so every
//! aggregation, GAT's softmax included, completes inside one chunk, and its outputs equal
//! the unchunked layer's rows for those nodes.

use std::ops::Range;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::{sample_blocks, Block, BlockSizes, Csr};

/// Every layer's nodes and their chunks.
#[derive(Clone, Debug)]
pub struct ChunkPlan {
    /// `nodes[l]`: the nodes layer `l` computes (global ids, increasing).
    pub nodes: Vec<Vec<u32>>,
    /// `chunks[l]`: ranges of `nodes[l]`, in order, covering it.
    pub chunks: Vec<Vec<Range<usize>>>,
}

impl ChunkPlan {
    /// The nodes of each of `layers` layers for the targets `targets` (any order,
    /// distinct), each layer cut into `chunks` chunks (fewer where a layer has fewer
    /// nodes).
    pub fn new(graph: &Csr, targets: &[u32], layers: usize, chunks: usize) -> Result<Self> {
        let nodes = layer_nodes(graph, targets, layers)?;
        let mut plan = ChunkPlan {
            nodes,
            chunks: Vec::new(),
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
    /// input), for every chunk of every layer.
    pub fn sizes(&self, graph: &Csr) -> Vec<Vec<BlockSizes>> {
        (0..self.layers())
            .map(|l| {
                (0..self.chunks[l].len())
                    .into_par_iter()
                    .map(|c| chunk_sizes(graph, self.dst(l, c)))
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

/// [`BlockSizes`] of the full-neighbour block of `dst`.
pub fn chunk_sizes(graph: &Csr, dst: &[u32]) -> BlockSizes {
    let mut src: std::collections::HashSet<u32> = dst.iter().copied().collect();
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
        src.extend(nb.iter().copied());
    }
    BlockSizes {
        num_src: src.len(),
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
        let sizes = plan.sizes(&g);
        for (l, layer) in sizes.iter().enumerate() {
            for (c, s) in layer.iter().enumerate() {
                let b = plan.block(&g, l, c).unwrap();
                assert_eq!(*s, BlockSizes::of(&b), "layer {l} chunk {c}");
                assert_eq!(b.dst_nodes(), plan.dst(l, c));
            }
        }
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
