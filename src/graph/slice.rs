//! Micro-batch blocks sliced from a full batch's blocks, without re-sampling.
//!
//! Given the full batch's blocks (input layer first) and a subset of its seeds, the
//! micro-batch's output block has the subset as dst nodes (in the given order) and keeps
//! every in-edge of each, in the same order; its src nodes are the dst nodes followed by
//! new sources in order of first appearance (dst order, then edge order), as the sampler
//! builds them. Each lower layer's dst nodes are the upper layer's src nodes, with the
//! in-edges copied from the full block's rows of those nodes.
//!
//! Every dst node of a micro-batch therefore sees exactly the in-edges, in exactly the
//! order, that it sees in the full batch, so a layer computes the same rows for it (GCN
//! reads graph degrees and dropout masks are keyed by global node ids, so nothing depends on
//! which other nodes share the micro-batch).
//!
//! No global-id map is needed below the output layer: the full blocks' dst nodes are a
//! prefix of their src nodes, and block `l`'s dst list is block `l + 1`'s src list, so a
//! micro-batch node is carried from layer to layer as its **row in the full block**. Only
//! the seeds are looked up, once per full batch, through a hash map. Relabelling uses a
//! marker array over the full block's sources, reset after each layer by walking only the
//! entries it touched and recycled between calls, so a small micro-batch of a large batch
//! costs time in proportion to its own size.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::slice_masks::{Footprints, LISTS_PER_WALK};
use crate::graph::{Block, BlockSizes};

const UNMARKED: u32 = u32::MAX;
/// [`Slicer::sizes`] walks a layer as a bitmap from one row per 64 full-block rows on.
const DENSE_ROWS_PER_WORD: usize = 1;
/// Dst rows per parallel task when copying edges.
const CHUNK: usize = 1024;

fn add_degree(hist: &mut Vec<usize>, d: usize) {
    if hist.len() <= d {
        hist.resize(d + 1, 0);
    }
    hist[d] += 1;
}

/// Slices micro-batches out of one full batch.
#[derive(Debug)]
pub struct Slicer {
    blocks: Vec<Arc<Block>>,
    /// Global id of each seed -> its row in the output block.
    seed_row: HashMap<u32, u32>,
    /// Marker arrays (one `u32` per full-block source), all `UNMARKED`, for reuse.
    scratch: Mutex<Vec<Vec<u32>>>,
}

impl Slicer {
    /// A slicer over the full batch's blocks (input layer first). Checks that they chain:
    /// block `l`'s dst nodes are block `l + 1`'s src nodes, in the same order.
    pub fn new(blocks: &[Arc<Block>]) -> Result<Slicer> {
        let last = blocks
            .last()
            .ok_or_else(|| Error::invalid("slice: no blocks"))?;
        for (l, w) in blocks.windows(2).enumerate() {
            if w[0].dst_nodes() != w[1].src_nodes.as_slice() {
                return Err(Error::invalid(format!(
                    "slice: block {l}'s dst nodes are not block {}'s src nodes",
                    l + 1
                )));
            }
        }
        let mut seed_row = HashMap::with_capacity(last.num_dst);
        for (i, &v) in last.dst_nodes().iter().enumerate() {
            if seed_row.insert(v, i as u32).is_some() {
                return Err(Error::invalid(format!("slice: node {v} is a seed twice")));
            }
        }
        Ok(Slicer {
            blocks: blocks.to_vec(),
            seed_row,
            scratch: Mutex::new(Vec::new()),
        })
    }

    /// The full blocks.
    pub fn blocks(&self) -> &[Arc<Block>] {
        &self.blocks
    }

    /// The output-block rows of `seeds`; errors on a node that is not a seed of the batch
    /// and on a repeated one.
    pub fn seed_rows(&self, seeds: &[u32]) -> Result<Vec<u32>> {
        let rows = seeds
            .iter()
            .map(|v| {
                self.seed_row.get(v).copied().ok_or_else(|| {
                    Error::invalid(format!("slice: node {v} is not a seed of the batch"))
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        let mut seen = vec![false; self.seed_row.len()];
        for (&r, &v) in rows.iter().zip(seeds) {
            if std::mem::replace(&mut seen[r as usize], true) {
                return Err(Error::invalid(format!(
                    "slice: seed {v} appears twice in one micro-batch"
                )));
            }
        }
        Ok(rows)
    }

    /// The micro-batch blocks of `seeds` (a non-empty subset of the batch's seeds), input
    /// layer first.
    pub fn slice(&self, seeds: &[u32]) -> Result<Vec<Block>> {
        let mut rows = self.seed_rows(seeds)?;
        let mut out = Vec::with_capacity(self.blocks.len());
        for full in self.blocks.iter().rev() {
            let (block, src_rows) =
                self.with_marker(full.num_src, |marker| slice_layer(full, &rows, marker))?;
            out.push(block);
            rows = src_rows;
        }
        out.reverse();
        Ok(out)
    }

    /// The sizes [`Slicer::slice`] would give, without building the blocks (no edge copy,
    /// no transposed CSR): what the memory estimator and partitioners read.
    ///
    /// Sizes do not depend on the order of the nodes, so once a layer holds at least one
    /// row per 64 full-block rows it is walked as a bitmap instead, in increasing row order
    /// (the full block's rows are read front to back, and the sources seen are bits: 1/32
    /// of the marker's memory, so they stay in cache); smaller layers keep the marker walk,
    /// whose cost follows the micro-batch's own size.
    pub fn sizes(&self, seeds: &[u32]) -> Result<Vec<BlockSizes>> {
        self.sizes_with(seeds, DENSE_ROWS_PER_WORD)
    }

    /// [`Slicer::sizes`], walking a layer as a bitmap once it holds at least one row per
    /// `64 / dense` full-block rows.
    fn sizes_with(&self, seeds: &[u32], dense: usize) -> Result<Vec<BlockSizes>> {
        let mut rows = Rows::List(self.seed_rows(seeds)?);
        let mut out = Vec::with_capacity(self.blocks.len());
        for full in self.blocks.iter().rev() {
            if let Rows::List(list) = &rows {
                if list.len() * dense >= full.num_src.div_ceil(64) {
                    rows = Rows::Bits(Bitmap::of(full.num_src, list));
                }
            }
            let (sizes, src_rows) = match rows {
                Rows::List(list) => {
                    let (sizes, src) = self
                        .with_marker(full.num_src, |marker| Ok(layer_sizes(full, &list, marker)))?;
                    (sizes, Rows::List(src))
                }
                Rows::Bits(bits) => {
                    let (sizes, src) = dense_layer_sizes(full, &bits);
                    (sizes, Rows::Bits(src))
                }
            };
            out.push(sizes);
            rows = src_rows;
        }
        out.reverse();
        Ok(out)
    }

    /// [`Slicer::sizes`] of every list in `lists` (equal to it, list by list). Lists that
    /// together hold at least a quarter of the batch's seeds are sized by [`Footprints`],
    /// one walk of the full blocks per [`LISTS_PER_WALK`] lists; fewer seeds, or one list,
    /// are walked list by list in parallel, each over its own footprint only.
    pub fn sizes_all<S: AsRef<[u32]> + Sync>(&self, lists: &[S]) -> Result<Vec<Vec<BlockSizes>>> {
        let seeds: usize = lists.iter().map(|s| s.as_ref().len()).sum();
        if lists.len() < 2 || seeds * 4 < self.seed_row.len() {
            return lists.par_iter().map(|s| self.sizes(s.as_ref())).collect();
        }
        let mut out = Vec::with_capacity(lists.len());
        for group in lists.chunks(LISTS_PER_WALK) {
            out.extend(self.footprints(group)?.sizes());
        }
        Ok(out)
    }

    /// Which of `lists` (seed lists, each without repeats) reach each node of the full
    /// blocks, from one walk: the sizes of each list, and of any union of them, without
    /// walking again. Memory: one bit per list per node of every layer, rounded up to
    /// 64 lists.
    pub fn footprints<S: AsRef<[u32]> + Sync>(&self, lists: &[S]) -> Result<Footprints> {
        let rows = lists
            .par_iter()
            .map(|s| self.seed_rows(s.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Footprints::walk(&self.blocks, &rows))
    }

    /// The sizes of the full batch's blocks.
    pub fn full_sizes(&self) -> Vec<BlockSizes> {
        self.blocks.iter().map(|b| BlockSizes::of(b)).collect()
    }

    /// Runs `f` with an all-`UNMARKED` marker of at least `n` entries; `f` must leave it so.
    fn with_marker<R>(&self, n: usize, f: impl FnOnce(&mut [u32]) -> Result<R>) -> Result<R> {
        let mut marker = self
            .scratch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default();
        if marker.len() < n {
            marker.resize(n, UNMARKED);
        }
        let r = f(&mut marker[..n]);
        self.scratch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(marker);
        r
    }
}

/// Relabelling state of one layer: full-block source rows in order of first appearance,
/// the dst rows first, with their local ids in `marker`.
struct Relabel<'m> {
    marker: &'m mut [u32],
    src: Vec<u32>,
}

impl<'m> Relabel<'m> {
    fn new(rows: &[u32], marker: &'m mut [u32]) -> Self {
        for (i, &r) in rows.iter().enumerate() {
            marker[r as usize] = i as u32;
        }
        Relabel {
            marker,
            src: rows.to_vec(),
        }
    }

    /// The local id of full-block source `u`, given a new one on first sight.
    #[inline]
    fn local(&mut self, u: u32) -> u32 {
        let m = &mut self.marker[u as usize];
        if *m == UNMARKED {
            *m = self.src.len() as u32;
            self.src.push(u);
        }
        *m
    }

    /// Leaves the marker all `UNMARKED`; returns the source rows.
    fn finish(self) -> Vec<u32> {
        for &u in &self.src {
            self.marker[u as usize] = UNMARKED;
        }
        self.src
    }
}

/// One micro-batch block with dst rows `rows` of `full`, and its src nodes as full rows.
fn slice_layer(full: &Block, rows: &[u32], marker: &mut [u32]) -> Result<(Block, Vec<u32>)> {
    // Offsets in parallel, then a prefix sum.
    let degrees: Vec<u32> = rows
        .par_iter()
        .map(|&r| full.indptr[r as usize + 1] - full.indptr[r as usize])
        .collect();
    let mut indptr = Vec::with_capacity(rows.len() + 1);
    indptr.push(0u32);
    let mut total = 0u64;
    for &d in &degrees {
        total += d as u64;
        if total > u32::MAX as u64 {
            return Err(Error::invalid(
                "slice: a micro-batch layer with 2^32 edges or more",
            ));
        }
        indptr.push(total as u32);
    }
    drop(degrees);
    // Full-block source rows of every edge, copied in parallel (each task owns CHUNK rows
    // and the contiguous run of edges they hold), then relabelled in one ordered pass.
    let mut indices = vec![0u32; total as usize];
    let mut slices = Vec::with_capacity(rows.len().div_ceil(CHUNK));
    let mut rest: &mut [u32] = &mut indices;
    for c in (0..rows.len()).step_by(CHUNK) {
        let end = (c + CHUNK).min(rows.len());
        let (head, tail) = rest.split_at_mut((indptr[end] - indptr[c]) as usize);
        slices.push(head);
        rest = tail;
    }
    slices
        .into_par_iter()
        .zip(rows.par_chunks(CHUNK))
        .for_each(|(out, chunk)| {
            let mut at = 0;
            for &r in chunk {
                let nbrs = full.neighbors(r as usize);
                out[at..at + nbrs.len()].copy_from_slice(nbrs);
                at += nbrs.len();
            }
        });
    let mut relabel = Relabel::new(rows, marker);
    for u in indices.iter_mut() {
        *u = relabel.local(*u);
    }
    let src_rows = relabel.finish();
    let src_nodes: Vec<u32> = src_rows
        .par_iter()
        .map(|&u| full.src_nodes[u as usize])
        .collect();
    let block = Block::new(src_nodes.len(), indptr, indices, src_nodes)?;
    Ok((block, src_rows))
}

/// A layer's rows in the full block: a list (any order), or a bitmap.
enum Rows {
    List(Vec<u32>),
    Bits(Bitmap),
}

/// A set of full-block rows, one bit each.
struct Bitmap(Vec<u64>);

impl Bitmap {
    fn of(n: usize, rows: &[u32]) -> Bitmap {
        let mut b = Bitmap(vec![0; n.div_ceil(64)]);
        for &r in rows {
            b.0[r as usize / 64] |= 1 << (r % 64);
        }
        b
    }

    /// The rows, in increasing order.
    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    (w * 64) as u32 + b
                })
            })
        })
    }

    fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// [`layer_sizes`] of the rows in `rows`, walked in increasing order; the sources as a
/// bitmap (the dst rows included: they are a prefix of the sources).
fn dense_layer_sizes(full: &Block, rows: &Bitmap) -> (BlockSizes, Bitmap) {
    let mut src = Bitmap(rows.0.clone());
    src.0.resize(full.num_src.div_ceil(64), 0);
    let mut degree_hist = Vec::new();
    let (mut num_dst, mut num_edges, mut self_loops) = (0, 0, 0);
    for r in rows.iter() {
        let nbrs = full.neighbors(r as usize);
        add_degree(&mut degree_hist, nbrs.len());
        num_dst += 1;
        num_edges += nbrs.len();
        let mut has_loop = false;
        for &u in nbrs {
            has_loop |= u == r;
            src.0[u as usize / 64] |= 1 << (u % 64);
        }
        self_loops += usize::from(has_loop);
    }
    let sizes = BlockSizes {
        num_src: src.count(),
        num_dst,
        num_edges,
        degree_hist,
        self_loops,
    };
    (sizes, src)
}

fn layer_sizes(full: &Block, rows: &[u32], marker: &mut [u32]) -> (BlockSizes, Vec<u32>) {
    let mut degree_hist = Vec::new();
    for &r in rows {
        add_degree(&mut degree_hist, full.degree(r as usize));
    }
    let mut relabel = Relabel::new(rows, marker);
    let (mut num_edges, mut self_loops) = (0, 0);
    for (d, &r) in rows.iter().enumerate() {
        let nbrs = full.neighbors(r as usize);
        num_edges += nbrs.len();
        let mut has_loop = false;
        for &u in nbrs {
            has_loop |= relabel.local(u) as usize == d;
        }
        self_loops += usize::from(has_loop);
    }
    let src = relabel.finish();
    let sizes = BlockSizes {
        num_src: src.len(),
        num_dst: rows.len(),
        num_edges,
        degree_hist,
        self_loops,
    };
    (sizes, src)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{sample_blocks, Csr};

    fn graph() -> Csr {
        // A small graph with repeated neighbourhoods, a self-loop and a duplicate edge.
        let src = [1, 2, 3, 0, 2, 4, 5, 0, 1, 5, 3, 3, 4, 0, 2];
        let dst = [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5];
        Csr::from_edges(6, &src, &dst).unwrap()
    }

    #[test]
    fn all_seeds_in_order_give_the_full_blocks() {
        let g = graph();
        let blocks: Vec<Arc<Block>> = sample_blocks(&g, &[4, 1, 0], &[2, 2], 3)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let s = Slicer::new(&blocks).unwrap();
        let micro = s.slice(&[4, 1, 0]).unwrap();
        for (m, f) in micro.iter().zip(&blocks) {
            assert_eq!(m, f.as_ref());
        }
        let sizes = s.sizes(&[4, 1, 0]).unwrap();
        assert_eq!(sizes, s.full_sizes());
    }

    #[test]
    fn a_subset_keeps_every_in_edge_in_order() {
        let g = graph();
        let blocks: Vec<Arc<Block>> = sample_blocks(&g, &[0, 2, 4, 5], &[-1, -1], 0)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let s = Slicer::new(&blocks).unwrap();
        let micro = s.slice(&[5, 2]).unwrap();
        assert_eq!(micro[1].dst_nodes(), &[5, 2]);
        for (m, f) in micro.iter().zip(&blocks) {
            let frow: HashMap<u32, usize> = f
                .dst_nodes()
                .iter()
                .enumerate()
                .map(|(i, &v)| (v, i))
                .collect();
            for d in 0..m.num_dst {
                let v = m.src_nodes[d];
                let fd = frow[&v];
                let mine: Vec<u32> = m
                    .neighbors(d)
                    .iter()
                    .map(|&u| m.src_nodes[u as usize])
                    .collect();
                let theirs: Vec<u32> = f
                    .neighbors(fd)
                    .iter()
                    .map(|&u| f.src_nodes[u as usize])
                    .collect();
                assert_eq!(mine, theirs, "node {v}");
            }
        }
        // The lower layer's dst nodes are the upper layer's src nodes.
        assert_eq!(micro[0].dst_nodes(), micro[1].src_nodes.as_slice());
        let sizes = s.sizes(&[5, 2]).unwrap();
        let built: Vec<BlockSizes> = micro.iter().map(BlockSizes::of).collect();
        assert_eq!(sizes, built);
    }

    #[test]
    fn bitmap_and_marker_walks_give_the_same_sizes() {
        // A batch large enough for both walks: 200 nodes, each reading 5 others and itself.
        let n = 200u32;
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for v in 0..n {
            for j in [0, 1, 7, 31, 64, 99] {
                src.push((v * 13 + j * 17) % n);
                dst.push(v);
            }
        }
        let g = Csr::from_edges(n as usize, &src, &dst).unwrap();
        let seeds: Vec<u32> = (0..n).step_by(3).collect();
        let blocks: Vec<Arc<Block>> = sample_blocks(&g, &seeds, &[3, 4], 5)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let s = Slicer::new(&blocks).unwrap();
        for take in [1, 2, 9, seeds.len()] {
            let part: Vec<u32> = seeds.iter().rev().step_by(2).take(take).copied().collect();
            let built: Vec<BlockSizes> =
                s.slice(&part).unwrap().iter().map(BlockSizes::of).collect();
            // Marker walk only, bitmap walk from the top layer on, and the default.
            assert_eq!(
                s.sizes_with(&part, 0).unwrap(),
                built,
                "{take} seeds, marker"
            );
            assert_eq!(
                s.sizes_with(&part, 64).unwrap(),
                built,
                "{take} seeds, bitmap"
            );
            assert_eq!(s.sizes(&part).unwrap(), built, "{take} seeds");
        }
    }

    #[test]
    fn sizes_of_many_lists_and_of_their_unions_equal_each_sized_alone() {
        // 2,000 nodes reading 6 others (one repeated), every fifth node itself too.
        let n = 2000u32;
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for v in 0..n {
            for j in [0, 1, 7, 31, 64, 64, 99] {
                src.push((v * 13 + j * 17) % n);
                dst.push(v);
            }
            if v % 5 == 0 {
                src.push(v);
                dst.push(v);
            }
        }
        let g = Csr::from_edges(n as usize, &src, &dst).unwrap();
        let seeds: Vec<u32> = (0..n).step_by(2).collect();
        let blocks: Vec<Arc<Block>> = sample_blocks(&g, &seeds, &[3, -1, 4], 5)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let s = Slicer::new(&blocks).unwrap();
        // Disjoint lists: 8 (one mask word), 70 (two), 300 (two walks); then overlapping
        // lists, one of them empty.
        let dealt = |k: usize| -> Vec<Vec<u32>> {
            (0..k)
                .map(|c| seeds.iter().copied().skip(c).step_by(k).collect())
                .collect()
        };
        let mut overlapping = vec![seeds.clone(), seeds[..300].to_vec(), Vec::new()];
        overlapping.push(seeds.iter().rev().step_by(3).copied().collect());
        for lists in [dealt(8), dealt(70), dealt(300), overlapping] {
            let alone: Vec<Vec<BlockSizes>> = lists.iter().map(|l| s.sizes(l).unwrap()).collect();
            assert_eq!(s.sizes_all(&lists).unwrap(), alone, "{} lists", lists.len());
        }
        // One walk of 300 lists (masks of 5 words).
        let lists = dealt(300);
        let alone: Vec<Vec<BlockSizes>> = lists.iter().map(|l| s.sizes(l).unwrap()).collect();
        assert_eq!(s.footprints(&lists).unwrap().sizes(), alone);
        // Unions of the 70 lists (one list in no group), against their seeds sized alone.
        let lists = dealt(70);
        let f = s.footprints(&lists).unwrap();
        let mut groups: Vec<Vec<usize>> = vec![vec![0, 69, 3], (4..40).collect(), vec![], vec![41]];
        // Groups sharing lists, and more than 64 groups.
        groups.extend((0..70).map(|i| vec![i, (i + 1) % 70]));
        for (g, sizes) in groups.iter().zip(f.union_sizes(&groups).unwrap()) {
            let seeds: Vec<u32> = g.iter().flat_map(|&i| lists[i].iter().copied()).collect();
            assert_eq!(sizes, s.sizes(&seeds).unwrap(), "group {g:?}");
        }
        assert!(
            f.union_sizes(&[vec![70]]).is_err(),
            "a list past those walked"
        );
        let mut repeated = dealt(4);
        let again = repeated[2][0];
        repeated[2].push(again);
        assert!(s.sizes_all(&repeated).is_err());
    }

    #[test]
    fn unknown_and_repeated_seeds_are_errors() {
        let g = graph();
        let blocks: Vec<Arc<Block>> = sample_blocks(&g, &[0, 2], &[-1], 0)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let s = Slicer::new(&blocks).unwrap();
        assert!(s.slice(&[3]).is_err());
        assert!(s.slice(&[2, 2]).is_err());
        assert!(Slicer::new(&[]).is_err());
    }
}
