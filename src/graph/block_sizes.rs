//! The sizes of a block (node, edge and degree counts): all the memory estimator and the
//! partitioners read of a micro-batch, from a built block or without building it
//! ([`crate::graph::Slicer::sizes`]).

use crate::graph::{degree_histogram, Block};

/// Sizes of one block: what the memory estimator reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BlockSizes {
    /// Source nodes.
    pub num_src: usize,
    /// Destination nodes.
    pub num_dst: usize,
    /// Edges.
    pub num_edges: usize,
    /// `degree_hist[d]`: dst nodes with in-degree `d` (as [`degree_histogram`]).
    pub degree_hist: Vec<usize>,
    /// Dst nodes with a self-loop among their in-edges (GAT's
    /// [`Block::with_self_loops`] adds one edge for each of the others).
    pub self_loops: usize,
}

impl BlockSizes {
    /// The sizes of a built block.
    pub fn of(block: &Block) -> BlockSizes {
        BlockSizes {
            num_src: block.num_src,
            num_dst: block.num_dst,
            num_edges: block.num_edges(),
            degree_hist: degree_histogram(block),
            self_loops: (0..block.num_dst)
                .filter(|&d| block.neighbors(d).contains(&(d as u32)))
                .count(),
        }
    }

    /// Adds `o`'s counts to these, field by field (the degree histograms bin by bin):
    /// the sizes of two disjoint sets of dst nodes and sources together.
    pub fn add(&mut self, o: &BlockSizes) {
        self.num_src += o.num_src;
        self.num_dst += o.num_dst;
        self.num_edges += o.num_edges;
        self.self_loops += o.self_loops;
        if self.degree_hist.len() < o.degree_hist.len() {
            self.degree_hist.resize(o.degree_hist.len(), 0);
        }
        for (a, b) in self.degree_hist.iter_mut().zip(&o.degree_hist) {
            *a += b;
        }
    }
}
