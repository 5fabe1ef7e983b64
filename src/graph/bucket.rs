//! Degree buckets of a block (DGL / Buffalo).
//!
//! The dst nodes of a block are grouped by in-degree. Each bucket of degree `k` is one
//! dense `[nodes, k, features]` batch: the LSTM aggregator runs exactly `k` steps over it,
//! neighbours in edge order. After fanout sampling, the bucket whose degree equals the
//! fanout collects every node of degree at least the fanout: the long tail, or "bucket
//! explosion". Splitting it into micro-buckets bounds the size of one dense batch.

use crate::error::{Error, Result};
use crate::graph::Block;

/// The dst nodes of one in-degree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// In-degree shared by every node of the bucket (at least 1).
    pub degree: usize,
    /// Local dst ids, increasing.
    pub dst: Vec<u32>,
    /// The degree equals the fanout the block was sampled with.
    pub explosion: bool,
}

/// A block's dst nodes grouped by in-degree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buckets {
    /// Local dst ids with no in-edge, increasing (they aggregate nothing).
    pub zero_degree: Vec<u32>,
    /// Buckets in increasing degree; after a split, pieces of one degree are adjacent and
    /// in increasing dst order.
    pub buckets: Vec<Bucket>,
}

impl Buckets {
    /// Groups `block`'s dst nodes by in-degree. `fanout` is the fanout the block was sampled
    /// with (`None` for all neighbours); the bucket of that degree is flagged `explosion`.
    pub fn new(block: &Block, fanout: Option<usize>) -> Buckets {
        let hist = degree_histogram(block);
        // Slot of each degree in `buckets`; sized from the histogram so no vector regrows.
        let mut slot = vec![usize::MAX; hist.len()];
        let mut buckets = Vec::new();
        for (degree, &n) in hist.iter().enumerate().skip(1) {
            if n > 0 {
                slot[degree] = buckets.len();
                buckets.push(Bucket {
                    degree,
                    dst: Vec::with_capacity(n),
                    explosion: fanout == Some(degree),
                });
            }
        }
        let mut zero_degree = Vec::with_capacity(hist.first().copied().unwrap_or(0));
        for d in 0..block.num_dst {
            match block.degree(d) {
                0 => zero_degree.push(d as u32),
                k => buckets[slot[k]].dst.push(d as u32),
            }
        }
        Buckets {
            zero_degree,
            buckets,
        }
    }

    /// Splits every explosion bucket into pieces of at most `max_nodes` dst nodes; other
    /// buckets are kept whole. Errors when `max_nodes` is 0.
    pub fn split_explosion(&self, max_nodes: usize) -> Result<Buckets> {
        self.split_where(max_nodes, |b| b.explosion)
    }

    /// Splits every bucket into pieces of at most `max_nodes` dst nodes. Errors when
    /// `max_nodes` is 0.
    pub fn split(&self, max_nodes: usize) -> Result<Buckets> {
        self.split_where(max_nodes, |_| true)
    }

    fn split_where(&self, max_nodes: usize, cut: impl Fn(&Bucket) -> bool) -> Result<Buckets> {
        if max_nodes == 0 {
            return Err(Error::invalid("buckets: split size must be at least 1"));
        }
        let mut buckets = Vec::with_capacity(self.buckets.len());
        for b in &self.buckets {
            if cut(b) && b.dst.len() > max_nodes {
                buckets.extend(b.dst.chunks(max_nodes).map(|piece| Bucket {
                    degree: b.degree,
                    dst: piece.to_vec(),
                    explosion: b.explosion,
                }));
            } else {
                buckets.push(b.clone());
            }
        }
        Ok(Buckets {
            zero_degree: self.zero_degree.clone(),
            buckets,
        })
    }

    /// Number of dst nodes over all buckets and `zero_degree`.
    pub fn num_dst(&self) -> usize {
        self.zero_degree.len() + self.buckets.iter().map(|b| b.dst.len()).sum::<usize>()
    }

    /// The explosion buckets (one before a split, its pieces after).
    pub fn explosion(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter().filter(|b| b.explosion)
    }
}

impl Bucket {
    /// Number of edges the bucket aggregates (`nodes * degree`).
    pub fn num_edges(&self) -> usize {
        self.dst.len() * self.degree
    }

    /// The `[nodes * degree]` local src indices of the bucket's edges: row `i` holds the
    /// neighbours of `dst[i]` in edge order, ready to gather a `[nodes, degree, features]`
    /// batch. Errors when the bucket does not belong to `block` (a dst out of range, or of
    /// another degree).
    pub fn src_indices(&self, block: &Block) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(self.num_edges());
        for &d in &self.dst {
            let d = d as usize;
            if d >= block.num_dst || block.degree(d) != self.degree {
                return Err(Error::invalid(format!(
                    "bucket of degree {}: dst {d} is not a dst of degree {} in a block of {} dst nodes",
                    self.degree,
                    self.degree,
                    block.num_dst
                )));
            }
            out.extend_from_slice(block.neighbors(d));
        }
        Ok(out)
    }

    /// The positions in `block.indices` of the bucket's edges, in the order of
    /// [`Bucket::src_indices`] (to gather per-edge values such as attention scores).
    pub fn edge_positions(&self, block: &Block) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(self.num_edges());
        for &d in &self.dst {
            let d = d as usize;
            if d >= block.num_dst || block.degree(d) != self.degree {
                return Err(Error::invalid(format!(
                    "bucket of degree {}: dst {d} does not belong to this block",
                    self.degree
                )));
            }
            out.extend(block.indptr[d]..block.indptr[d + 1]);
        }
        Ok(out)
    }
}

/// `hist[k]` = number of dst nodes of in-degree `k`, for `k` up to the block's maximum
/// in-degree (empty for a block without dst nodes).
pub fn degree_histogram(block: &Block) -> Vec<usize> {
    let mut hist = Vec::new();
    for d in 0..block.num_dst {
        let k = block.degree(d);
        if k >= hist.len() {
            hist.resize(k + 1, 0);
        }
        hist[k] += 1;
    }
    hist
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dst degrees 2, 0, 1, 2, 3, 2 over 4 extra sources.
    fn block() -> Block {
        let indptr = vec![0, 2, 2, 3, 5, 8, 10];
        let indices = vec![6, 7, 8, 9, 0, 1, 2, 3, 6, 9];
        Block::new(10, indptr, indices, (100..110).collect()).unwrap()
    }

    #[test]
    fn buckets_group_by_degree() {
        let b = block();
        assert_eq!(degree_histogram(&b), vec![1, 1, 3, 1]);
        let bs = Buckets::new(&b, Some(2));
        assert_eq!(bs.zero_degree, vec![1]);
        let got: Vec<(usize, Vec<u32>, bool)> = bs
            .buckets
            .iter()
            .map(|x| (x.degree, x.dst.clone(), x.explosion))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, vec![2], false),
                (2, vec![0, 3, 5], true),
                (3, vec![4], false)
            ]
        );
        assert_eq!(bs.num_dst(), 6);
        assert_eq!(bs.explosion().count(), 1);
        assert_eq!(
            bs.buckets[1].src_indices(&b).unwrap(),
            vec![6, 7, 9, 0, 6, 9]
        );
        assert_eq!(
            bs.buckets[1].edge_positions(&b).unwrap(),
            vec![0, 1, 3, 4, 8, 9]
        );
    }

    #[test]
    fn split_bounds_piece_sizes() {
        let b = block();
        let bs = Buckets::new(&b, Some(2));
        let s = bs.split_explosion(2).unwrap();
        let sizes: Vec<(usize, usize)> =
            s.buckets.iter().map(|x| (x.degree, x.dst.len())).collect();
        assert_eq!(sizes, vec![(1, 1), (2, 2), (2, 1), (3, 1)]);
        assert_eq!(s.num_dst(), 6);
        assert_eq!(s.explosion().count(), 2);
        let all = bs.split(1).unwrap();
        assert!(all.buckets.iter().all(|x| x.dst.len() == 1));
        assert_eq!(all.buckets.len(), 5);
        assert!(bs.split(0).is_err());
        assert!(bs.split_explosion(0).is_err());
    }

    #[test]
    fn foreign_buckets_are_errors() {
        let b = block();
        let wrong_degree = Bucket {
            degree: 2,
            dst: vec![4],
            explosion: false,
        };
        assert!(wrong_degree.src_indices(&b).is_err());
        assert!(wrong_degree.edge_positions(&b).is_err());
        let out_of_range = Bucket {
            degree: 2,
            dst: vec![6],
            explosion: false,
        };
        assert!(out_of_range.src_indices(&b).is_err());
    }

    #[test]
    fn empty_block_has_no_buckets() {
        let b = Block::new(0, vec![0], vec![], vec![]).unwrap();
        let bs = Buckets::new(&b, None);
        assert!(bs.buckets.is_empty() && bs.zero_degree.is_empty());
        assert!(degree_histogram(&b).is_empty());
    }
}
