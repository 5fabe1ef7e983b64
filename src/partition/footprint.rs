//! How much of the full batch a micro-batch needs: a counting walk down the full blocks.
//!
//! A micro-batch keeps every full-batch in-edge of its dst nodes at every layer. Starting
//! from its seeds (dst nodes of the output block), the walk marks the seeds and their
//! sources in the output block; those are the dst nodes of the block below (the src nodes
//! of `blocks[l + 1]` are the dst nodes of `blocks[l]`, same order, so a local id carries
//! over), and so on down to the input layer. The marked src nodes of `blocks[0]` are the
//! micro-batch's **input nodes**. Marks are generation stamps (one `u32` per src node per
//! block), so a walk costs only the edges it visits.
//!
//! **Redundancy** of a partition = `Σ_k |input nodes_k| / |input nodes of the batch|`
//! (1 for K = 1; the extra features a micro-batch run gathers and transfers).

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::graph::Block;

/// A micro-batch's size at every layer, input layer first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Src nodes the micro-batch needs in `blocks[l]` (`src_nodes[0]` = input nodes).
    pub src_nodes: Vec<usize>,
    /// Dst nodes of the micro-batch in `blocks[l]` (the last entry = its seeds).
    pub dst_nodes: Vec<usize>,
    /// Edges of the micro-batch in `blocks[l]`.
    pub edges: Vec<usize>,
}

impl Footprint {
    /// Input nodes (src nodes of the input layer).
    pub fn input_nodes(&self) -> usize {
        self.src_nodes.first().copied().unwrap_or(0)
    }
}

/// Reusable counting walk over one batch's blocks (scratch kept between calls).
#[derive(Debug)]
pub struct InputCounter {
    blocks: Vec<Arc<Block>>,
    /// Local dst index in the output block of each global seed id.
    seed_index: HashMap<u32, u32>,
    /// Per block: generation stamp of each src node.
    stamps: Vec<Vec<u32>>,
    generation: u32,
    /// Scratch lists of the current and next layer's local ids.
    current: Vec<u32>,
    next: Vec<u32>,
}

impl InputCounter {
    /// A counter over `blocks` (input layer first). Errors when there are no blocks or the
    /// blocks do not chain.
    pub fn new(blocks: &[Arc<Block>]) -> Result<InputCounter> {
        let last = blocks
            .last()
            .ok_or_else(|| Error::invalid("input_nodes: no blocks"))?;
        for (l, pair) in blocks.windows(2).enumerate() {
            if pair[0].num_dst != pair[1].num_src {
                return Err(Error::invalid(format!(
                    "input_nodes: block {l} has {} dst nodes but block {} has {} src nodes",
                    pair[0].num_dst,
                    l + 1,
                    pair[1].num_src
                )));
            }
        }
        let seed_index = last
            .dst_nodes()
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i as u32))
            .collect();
        Ok(InputCounter {
            blocks: blocks.to_vec(),
            seed_index,
            stamps: blocks.iter().map(|b| vec![0u32; b.num_src]).collect(),
            generation: 0,
            current: Vec::new(),
            next: Vec::new(),
        })
    }

    /// The full batch's input nodes.
    pub fn batch_input_nodes(&self) -> usize {
        self.blocks[0].num_src
    }

    /// The micro-batch of the global seed ids `seeds`. Errors on a seed that is not a dst
    /// node of the output block; a seed listed twice counts once.
    pub fn footprint(&mut self, seeds: &[u32]) -> Result<Footprint> {
        let locals = seeds
            .iter()
            .map(|v| {
                self.seed_index.get(v).copied().ok_or_else(|| {
                    Error::invalid(format!("input_nodes: node {v} is not a seed of the batch"))
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        self.footprint_local(&locals)
    }

    /// [`InputCounter::footprint`] of local dst indices of the output block. Errors on an
    /// index at or above the output block's `num_dst`.
    pub fn footprint_local(&mut self, dst: &[u32]) -> Result<Footprint> {
        let layers = self.blocks.len();
        let num_dst = self.blocks[layers - 1].num_dst;
        if let Some(&bad) = dst.iter().find(|&&d| d as usize >= num_dst) {
            return Err(Error::invalid(format!(
                "input_nodes: local seed {bad} out of range for {num_dst} seeds"
            )));
        }
        let mut fp = Footprint {
            src_nodes: vec![0; layers],
            dst_nodes: vec![0; layers],
            edges: vec![0; layers],
        };
        self.bump_generation();
        let g = self.generation;
        self.current.clear();
        let top = &mut self.stamps[layers - 1];
        for &d in dst {
            if top[d as usize] != g {
                top[d as usize] = g;
                self.current.push(d);
            }
        }
        for l in (0..layers).rev() {
            let block = &self.blocks[l];
            let stamp = &mut self.stamps[l];
            // `current` holds this block's dst nodes, already stamped (they are src nodes
            // of the same block: dst is a prefix of src).
            self.next.clear();
            self.next.extend_from_slice(&self.current);
            let mut edges = 0;
            for &d in &self.current {
                let nbrs = block.neighbors(d as usize);
                edges += nbrs.len();
                for &s in nbrs {
                    if stamp[s as usize] != g {
                        stamp[s as usize] = g;
                        self.next.push(s);
                    }
                }
            }
            fp.dst_nodes[l] = self.current.len();
            fp.src_nodes[l] = self.next.len();
            fp.edges[l] = edges;
            if l > 0 {
                let below = &mut self.stamps[l - 1];
                for &s in &self.next {
                    below[s as usize] = g;
                }
            }
            std::mem::swap(&mut self.current, &mut self.next);
        }
        Ok(fp)
    }

    fn bump_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            for s in &mut self.stamps {
                s.fill(0);
            }
            self.generation = 1;
        }
    }
}

/// Input nodes of the micro-batch whose seeds are `seeds_k` (global ids, dst nodes of the
/// output block). For repeated calls, keep an [`InputCounter`].
pub fn input_nodes(blocks: &[Arc<Block>], seeds_k: &[u32]) -> Result<usize> {
    Ok(InputCounter::new(blocks)?.footprint(seeds_k)?.input_nodes())
}

/// Quality of a partition of one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionStats {
    /// `Σ_k input nodes_k / batch input nodes`.
    pub redundancy: f64,
    /// Largest part's seed count over the mean seed count.
    pub seeds_balance: f64,
    /// Largest part's input nodes over the mean input nodes.
    pub inputs_balance: f64,
    /// Input nodes of each part.
    pub input_nodes: Vec<usize>,
}

/// Redundancy and balance of `parts` (seed lists) of the batch `blocks`.
pub fn partition_stats(blocks: &[Arc<Block>], parts: &[Vec<u32>]) -> Result<PartitionStats> {
    let mut counter = InputCounter::new(blocks)?;
    let input_nodes = parts
        .iter()
        .map(|p| counter.footprint(p).map(|f| f.input_nodes()))
        .collect::<Result<Vec<usize>>>()?;
    let total: usize = input_nodes.iter().sum();
    let batch = counter.batch_input_nodes().max(1);
    let ratio = |xs: &mut dyn Iterator<Item = usize>| {
        let v: Vec<usize> = xs.collect();
        let mean = v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
        let max = v.iter().copied().max().unwrap_or(0) as f64;
        if mean > 0.0 {
            max / mean
        } else {
            1.0
        }
    };
    Ok(PartitionStats {
        redundancy: total as f64 / batch as f64,
        seeds_balance: ratio(&mut parts.iter().map(|p| p.len())),
        inputs_balance: ratio(&mut input_nodes.iter().copied()),
        input_nodes,
    })
}

/// Redundancy of `parts`: see [`partition_stats`].
pub fn redundancy(blocks: &[Arc<Block>], parts: &[Vec<u32>]) -> Result<f64> {
    partition_stats(blocks, parts).map(|s| s.redundancy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output block: seeds 0, 1 <- sources {2}, {2, 3}; input block: dst 0..4 over
    /// sources 4, 5 (0 <- 4, 3 <- 5).
    fn blocks() -> Vec<Arc<Block>> {
        let top = Block::new(4, vec![0, 1, 3], vec![2, 2, 3], vec![10, 11, 12, 13]).unwrap();
        let bottom = Block::new(
            6,
            vec![0, 1, 1, 1, 2],
            vec![4, 5],
            vec![10, 11, 12, 13, 14, 15],
        )
        .unwrap();
        vec![Arc::new(bottom), Arc::new(top)]
    }

    #[test]
    fn walk_counts_every_layer() {
        let b = blocks();
        let mut c = InputCounter::new(&b).unwrap();
        let f = c.footprint(&[10]).unwrap();
        assert_eq!(f.dst_nodes, vec![2, 1]);
        assert_eq!(f.src_nodes, vec![3, 2]);
        assert_eq!(f.edges, vec![1, 1]);
        let f = c.footprint(&[11]).unwrap();
        assert_eq!(f.src_nodes, vec![4, 3]);
        assert_eq!(input_nodes(&b, &[10, 11]).unwrap(), 6);
        assert!(c.footprint(&[99]).is_err());
        let r = redundancy(&b, &[vec![10], vec![11]]).unwrap();
        assert!((r - 7.0 / 6.0).abs() < 1e-12);
    }
}
