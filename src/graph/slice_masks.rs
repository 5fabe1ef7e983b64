//! Block sizes of many seed lists at once, and of unions of them: one walk of the full
//! blocks that carries, per node, the set of lists that reach it ([`Footprints`]).
//!
//! Sizing each list on its own walks every list's footprint, so n lists that together cover
//! the batch cost the batch's edges times their redundancy (the partitioners size dozens to
//! hundreds of pieces of one batch). Here every dst row of a full block holds a bitmask
//! of the lists whose micro-batch contains it; a layer's source masks are the OR of the
//! masks of the rows that read each source (and of the source's own row, a dst row is its
//! own source), pulled in parallel through the block's transposed CSR. So a layer costs
//! its full block's edges once per 64 lists, plus one step per (node, list) pair for the
//! counts. Once walked, the sizes of any union of the lists (a group of items, a cluster)
//! are counted from the kept masks without walking an edge. The counts are integers: the
//! sizes equal the list-by-list walk's exactly.

use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::{Block, BlockSizes};

/// Lists per walk in [`Slicer::sizes_all`](crate::graph::Slicer::sizes_all): masks of
/// this many bits per node (4 words).
pub(crate) const LISTS_PER_WALK: usize = 256;

/// Dst rows (or src nodes) per parallel task.
const TASK: usize = 4096;

/// Which lists reach each node of every layer of a batch's full blocks.
pub struct Footprints {
    blocks: Vec<Arc<Block>>,
    lists: usize,
    words: usize,
    /// `dst[l]`: the masks of block `l`'s dst rows (`words` per row); block `l`'s sources
    /// are block `l - 1`'s dst rows, and the input block's are `input_src`.
    dst: Vec<Vec<u64>>,
    input_src: Vec<u64>,
    /// Per block, a bit per dst row that reads itself.
    self_loops: Vec<Vec<u64>>,
}

impl Footprints {
    /// Walks `lists` (each of distinct output-block rows) down the full `blocks` (input
    /// layer first).
    pub(crate) fn walk(blocks: &[Arc<Block>], lists: &[Vec<u32>]) -> Footprints {
        let words = lists.len().div_ceil(64).max(1);
        let top = blocks.last().map_or(0, |b| b.num_dst);
        let mut rows = vec![0u64; top * words];
        for (c, list) in lists.iter().enumerate() {
            for &r in list {
                rows[r as usize * words + c / 64] |= 1 << (c % 64);
            }
        }
        let mut dst = vec![Vec::new(); blocks.len()];
        for l in (0..blocks.len()).rev() {
            let src = src_masks(&blocks[l], &rows, words);
            dst[l] = std::mem::replace(&mut rows, src);
        }
        let self_loops = blocks
            .par_iter()
            .map(|b| {
                let mut bits = vec![0u64; b.num_dst.div_ceil(64)];
                for r in 0..b.num_dst {
                    if b.neighbors(r).contains(&(r as u32)) {
                        bits[r / 64] |= 1 << (r % 64);
                    }
                }
                bits
            })
            .collect();
        Footprints {
            blocks: blocks.to_vec(),
            lists: lists.len(),
            words,
            dst,
            input_src: rows,
            self_loops,
        }
    }

    /// The lists walked.
    pub fn lists(&self) -> usize {
        self.lists
    }

    /// The sizes of every walked list, input layer first: each equal to
    /// [`Slicer::sizes`](crate::graph::Slicer::sizes) of the list alone.
    pub fn sizes(&self) -> Vec<Vec<BlockSizes>> {
        let each: Vec<[usize; 1]> = (0..self.lists).map(|i| [i]).collect();
        self.counted_groups(&each)
    }

    /// The sizes of each union of lists in `groups` (list indices; groups may share
    /// lists), input layer first: what [`Slicer::sizes`] gives for the seeds of the
    /// group's lists together.
    ///
    /// Errors on a list index past the lists walked.
    ///
    /// [`Slicer::sizes`]: crate::graph::Slicer::sizes
    pub fn union_sizes<G: AsRef<[usize]>>(&self, groups: &[G]) -> Result<Vec<Vec<BlockSizes>>> {
        let lists = self.lists;
        if let Some(i) = groups
            .iter()
            .flat_map(|g| g.as_ref().iter())
            .find(|&&i| i >= lists)
        {
            return Err(Error::invalid(format!(
                "footprints: list {i} in a group, but {lists} lists were walked"
            )));
        }
        Ok(self.counted_groups(groups))
    }

    /// [`Footprints::union_sizes`] of groups of valid list indices.
    fn counted_groups<G: AsRef<[usize]>>(&self, groups: &[G]) -> Vec<Vec<BlockSizes>> {
        let mut out = Vec::with_capacity(groups.len());
        for chunk in groups.chunks(64) {
            // Per list, the groups of this chunk that hold it.
            let mut member = vec![0u64; self.lists];
            for (g, lists) in chunk.iter().enumerate() {
                for &i in lists.as_ref() {
                    if let Some(m) = member.get_mut(i) {
                        *m |= 1 << g;
                    }
                }
            }
            out.extend(self.counted(&Grouping::new(&member, chunk.len(), self.words)));
        }
        out
    }

    /// Per group of `grouping` and layer, the sizes of the nodes the group's lists reach.
    fn counted(&self, grouping: &Grouping) -> Vec<Vec<BlockSizes>> {
        let mut layers: Vec<Vec<BlockSizes>> = (0..self.blocks.len())
            .map(|l| self.dst_counts(l, grouping))
            .collect();
        // Block `l`'s sources are block `l - 1`'s dst rows; the input block's are counted.
        for l in (1..layers.len()).rev() {
            let (below, above) = layers.split_at_mut(l);
            for (c, b) in above[0].iter_mut().zip(&below[l - 1]) {
                c.num_src = b.num_dst;
            }
        }
        if let Some(input) = layers.first_mut() {
            for (c, s) in input
                .iter_mut()
                .zip(self.src_counts(&self.input_src, grouping))
            {
                c.num_src = s.num_src;
            }
        }
        (0..grouping.n)
            .map(|g| layers.iter().map(|l| l[g].clone()).collect())
            .collect()
    }

    fn dst_counts(&self, l: usize, grouping: &Grouping) -> Vec<BlockSizes> {
        let (full, loops, w, n) = (&self.blocks[l], &self.self_loops[l], self.words, grouping.n);
        self.dst[l]
            .par_chunks(TASK * w)
            .enumerate()
            .map(|(t, chunk)| {
                let mut c = vec![BlockSizes::default(); n];
                for (i, m) in chunk.chunks_exact(w).enumerate() {
                    let r = t * TASK + i;
                    let (degree, has_loop) = (full.degree(r), (loops[r / 64] >> (r % 64)) & 1);
                    grouping.each(m, |g| add_dst(&mut c[g], degree, has_loop as usize));
                }
                c
            })
            .reduce(|| vec![BlockSizes::default(); n], merge_all)
    }

    fn src_counts(&self, src: &[u64], grouping: &Grouping) -> Vec<BlockSizes> {
        let (w, n) = (self.words, grouping.n);
        src.par_chunks(TASK * w)
            .map(|chunk| {
                let mut c = vec![BlockSizes::default(); n];
                for m in chunk.chunks_exact(w) {
                    grouping.each(m, |g| c[g].num_src += 1);
                }
                c
            })
            .reduce(|| vec![BlockSizes::default(); n], merge_all)
    }
}

/// How a node's list mask maps to the (at most 64) groups it counts in: per byte of the
/// mask and byte value, the mask of the groups its lists belong to, so a node costs one
/// lookup per non-zero byte and one step per group it counts in, each group once however
/// many of its lists reach the node.
struct Grouping {
    n: usize,
    table: Vec<u64>,
}

impl Grouping {
    /// `member[list]`: the groups that hold the list.
    fn new(member: &[u64], n: usize, words: usize) -> Grouping {
        let mut table = vec![0u64; words * 8 * 256];
        for (j, row) in table.chunks_exact_mut(256).enumerate() {
            for (b, cell) in row.iter_mut().enumerate() {
                for k in (0..8).filter(|k| b >> k & 1 == 1) {
                    *cell |= member.get(j * 8 + k).copied().unwrap_or(0);
                }
            }
        }
        Grouping { n, table }
    }

    /// Calls `f` once with each group whose lists `mask` holds.
    #[inline]
    fn each(&self, mask: &[u64], mut f: impl FnMut(usize)) {
        let mut groups = 0u64;
        for (w, &word) in mask.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let j = rest.trailing_zeros() as usize / 8;
                groups |= self.table[(w * 8 + j) * 256 + (word >> (8 * j) & 255) as usize];
                rest &= !(255u64 << (8 * j));
            }
        }
        while groups != 0 {
            f(groups.trailing_zeros() as usize);
            groups &= groups - 1;
        }
    }
}

/// The masks of `full`'s sources: each the OR of its own row's mask (a dst row is its own
/// first source) and the masks of the rows that read it.
fn src_masks(full: &Block, rows: &[u64], words: usize) -> Vec<u64> {
    match words {
        1 => src_masks_of::<1>(full, rows),
        2 => src_masks_of::<2>(full, rows),
        3 => src_masks_of::<3>(full, rows),
        4 => src_masks_of::<4>(full, rows),
        _ => {
            // Past 256 lists: 4 words at a time.
            let parts: Vec<Vec<u64>> = (0..words)
                .step_by(4)
                .map(|w0| {
                    let w = (words - w0).min(4);
                    let part: Vec<u64> = rows
                        .chunks_exact(words)
                        .flat_map(|m| m[w0..w0 + w].iter().copied())
                        .collect();
                    src_masks(full, &part, w)
                })
                .collect();
            let mut src = vec![0u64; full.num_src * words];
            for (p, w0) in parts.iter().zip((0..words).step_by(4)) {
                let w = (words - w0).min(4);
                for (m, from) in src.chunks_exact_mut(words).zip(p.chunks_exact(w)) {
                    m[w0..w0 + w].copy_from_slice(from);
                }
            }
            src
        }
    }
}

/// [`src_masks`] with `W` words per mask.
fn src_masks_of<const W: usize>(full: &Block, rows: &[u64]) -> Vec<u64> {
    let mut src = vec![0u64; full.num_src * W];
    src.par_chunks_mut(TASK * W)
        .enumerate()
        .for_each(|(t, chunk)| {
            for (i, m) in chunk.chunks_exact_mut(W).enumerate() {
                let u = t * TASK + i;
                let mut acc = [0u64; W];
                if u < full.num_dst {
                    acc = mask::<W>(rows, u);
                }
                let readers = &full.t_dst[full.t_indptr[u] as usize..full.t_indptr[u + 1] as usize];
                for &r in readers {
                    let from = mask::<W>(rows, r as usize);
                    for w in 0..W {
                        acc[w] |= from[w];
                    }
                }
                m.copy_from_slice(&acc);
            }
        });
    src
}

/// Row `r`'s mask of `W` words.
#[inline]
fn mask<const W: usize>(rows: &[u64], r: usize) -> [u64; W] {
    let mut m = [0u64; W];
    m.copy_from_slice(&rows[r * W..(r + 1) * W]);
    m
}

/// Counts one dst row of `degree` in-edges (`has_loop`: one of them is its own).
#[inline]
fn add_dst(c: &mut BlockSizes, degree: usize, has_loop: usize) {
    c.num_dst += 1;
    c.num_edges += degree;
    c.self_loops += has_loop;
    if c.degree_hist.len() <= degree {
        c.degree_hist.resize(degree + 1, 0);
    }
    c.degree_hist[degree] += 1;
}

fn merge_all(a: Vec<BlockSizes>, b: Vec<BlockSizes>) -> Vec<BlockSizes> {
    let (mut a, b) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    for (x, y) in a.iter_mut().zip(&b) {
        x.add(y);
    }
    a
}
