//! Multi-layer uniform neighbour sampling without replacement (DGL / PyG convention).
//!
//! Sampling starts at the seeds and walks outward: the output layer samples in-neighbours of
//! the seeds, the sources it reaches become the dst nodes of the layer below, and so on down
//! to the input layer. Each layer becomes one [`Block`].
//!
//! A dst node whose in-degree is at most the layer's fanout keeps all its in-edges;
//! otherwise `fanout` distinct CSR positions are drawn uniformly (Floyd's algorithm) and kept
//! in CSR order. Every (layer, node) pair draws from its own stream,
//! `Rng::fork(Rng::fork(seed, layer).next_u64(), node)` with `layer` the block's index in the
//! returned list (0 = input layer) and `node` the global id, so the result does not depend on
//! the thread count or on where a node sits in the dst list.
//!
//! Relabelling is sequential and cheap: a dense marker array (one `u32` per graph node,
//! allocated once per [`Sampler`] and reset after every layer by walking only the entries it
//! touched) maps global ids to local ids. A block's src nodes are its dst nodes followed by
//! new sources in order of first appearance (dst order, then edge order).

use std::cell::RefCell;
use std::collections::HashSet;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::{Block, Csr};
use crate::rng::Rng;

/// Marker value of a node that has no local id in the layer being built.
const UNMARKED: u32 = u32::MAX;
/// Dst nodes per parallel task: large enough to amortise scheduling, small enough to
/// balance a power-law degree distribution over two or more threads.
const CHUNK: usize = 256;
/// Up to this many picks, Floyd's algorithm checks membership by a linear scan.
const LINEAR_MAX: usize = 32;
/// Up to this degree, larger fanouts check membership in a per-thread bitset (8 MiB at most).
const BITSET_MAX_DEGREE: u64 = 1 << 26;

/// Samples one block per fanout, from the input layer (`blocks[0]`) to the output layer
/// (`blocks[L - 1]`, whose dst nodes are exactly `seeds`, in the given order).
///
/// `fanouts` follows DGL: the **first entry is the input layer** and the last entry is the
/// output layer, so `[10, 25]` samples 25 in-neighbours per seed, then 10 per node of the
/// next hop. `-1` keeps all in-neighbours. Sampling is uniform without replacement; a node
/// whose in-degree is at most the fanout keeps all its in-edges, in CSR order. The same
/// `(graph, seeds, fanouts, seed)` gives the same blocks for any rayon thread count.
///
/// The src nodes of `blocks[l + 1]` are the dst nodes of `blocks[l]`.
///
/// Errors ([`Error::InvalidArgument`]): empty `fanouts`, a fanout of 0 or below -1, a seed
/// out of range, a duplicate seed, a malformed graph, or a layer with 2³² edges or more.
pub fn sample_blocks(graph: &Csr, seeds: &[u32], fanouts: &[i64], seed: u64) -> Result<Vec<Block>> {
    Sampler::new(graph).sample(seeds, fanouts, seed)
}

/// `num_layers` blocks that keep every in-edge (all fanouts `-1`); no randomness involved.
pub fn full_blocks(graph: &Csr, seeds: &[u32], num_layers: usize) -> Result<Vec<Block>> {
    if num_layers == 0 {
        return Err(Error::invalid("full_blocks: num_layers must be at least 1"));
    }
    sample_blocks(graph, seeds, &vec![-1; num_layers], 0)
}

/// A neighbour sampler that keeps its relabelling scratch (one `u32` per graph node)
/// between calls, so repeated mini-batches on a large graph do not reallocate it.
#[derive(Debug)]
pub struct Sampler<'g> {
    graph: &'g Csr,
    /// Local id of each global node in the layer being built; `UNMARKED` between layers.
    marker: Vec<u32>,
}

impl<'g> Sampler<'g> {
    /// A sampler over `graph`; the scratch is allocated on the first call.
    pub fn new(graph: &'g Csr) -> Self {
        Sampler {
            graph,
            marker: Vec::new(),
        }
    }

    /// See [`sample_blocks`].
    pub fn sample(&mut self, seeds: &[u32], fanouts: &[i64], seed: u64) -> Result<Vec<Block>> {
        let g = self.graph;
        if fanouts.is_empty() {
            return Err(Error::invalid("sample_blocks: fanouts is empty"));
        }
        let fanouts = fanouts
            .iter()
            .enumerate()
            .map(|(l, &f)| parse_fanout(l, f))
            .collect::<Result<Vec<usize>>>()?;
        if g.indptr.len() != g.num_nodes + 1
            || g.indptr.last().copied() != Some(g.indices.len() as u64)
        {
            return Err(Error::invalid(format!(
                "sample_blocks: malformed graph: {} nodes, {} offsets, {} edges",
                g.num_nodes,
                g.indptr.len(),
                g.indices.len()
            )));
        }
        if let Some((i, &v)) = seeds
            .iter()
            .enumerate()
            .find(|(_, &v)| v as usize >= g.num_nodes)
        {
            return Err(Error::invalid(format!(
                "sample_blocks: seed {i} is node {v}, out of range for {} nodes",
                g.num_nodes
            )));
        }
        if self.marker.len() != g.num_nodes {
            self.marker = vec![UNMARKED; g.num_nodes];
        }

        let num_layers = fanouts.len();
        let mut blocks = Vec::with_capacity(num_layers);
        let mut dst = seeds.to_vec();
        for layer in (0..num_layers).rev() {
            let layer_seed = Rng::fork(seed, layer as u64).next_u64();
            let block = self.sample_layer(dst, fanouts[layer], layer_seed)?;
            dst = if layer > 0 {
                block.src_nodes.clone()
            } else {
                Vec::new()
            };
            blocks.push(block);
        }
        blocks.reverse();
        Ok(blocks)
    }

    /// One block whose dst nodes are `dst` (distinct, in range).
    fn sample_layer(&mut self, dst: Vec<u32>, fanout: usize, layer_seed: u64) -> Result<Block> {
        let g = self.graph;

        // Offsets: each dst keeps min(degree, fanout) edges.
        let kept = dst
            .par_iter()
            .map(|&v| row_range(g, v).map(|(a, b)| (b - a).min(fanout)))
            .collect::<Result<Vec<usize>>>()?;
        let mut indptr = Vec::with_capacity(dst.len() + 1);
        indptr.push(0u32);
        let mut total = 0u64;
        for &k in &kept {
            total += k as u64;
            if total > u32::MAX as u64 {
                return Err(Error::invalid(format!(
                    "sample_blocks: a layer with {} dst nodes samples 2^32 edges or more",
                    dst.len()
                )));
            }
            indptr.push(total as u32);
        }
        drop(kept);

        // Global sources, written in parallel: each task owns CHUNK dst nodes and the
        // contiguous slice of edges they produce.
        let mut nbrs = vec![0u32; total as usize];
        let mut slices = Vec::with_capacity(dst.len().div_ceil(CHUNK));
        let mut rest: &mut [u32] = &mut nbrs;
        for c in (0..dst.len()).step_by(CHUNK) {
            let end = (c + CHUNK).min(dst.len());
            let (head, tail) = rest.split_at_mut((indptr[end] - indptr[c]) as usize);
            slices.push(head);
            rest = tail;
        }
        slices
            .into_par_iter()
            .zip(dst.par_chunks(CHUNK))
            .for_each(|(out, chunk)| {
                SCRATCH.with(|s| fill_chunk(g, chunk, fanout, layer_seed, out, &mut s.borrow_mut()))
            });

        // Relabel: dst nodes first, then new sources in order of first appearance.
        let marker = &mut self.marker;
        for (i, &v) in dst.iter().enumerate() {
            let first = marker[v as usize];
            if first != UNMARKED {
                unmark(marker, &dst[..i]);
                return Err(Error::invalid(format!(
                    "sample_blocks: duplicate seed: node {v} at positions {first} and {i}"
                )));
            }
            marker[v as usize] = i as u32;
        }
        let mut src_nodes = dst;
        for s in nbrs.iter_mut() {
            let Some(m) = marker.get_mut(*s as usize) else {
                let bad = *s;
                unmark(marker, &src_nodes);
                return Err(Error::invalid(format!(
                    "sample_blocks: malformed graph: source {bad} out of range for {} nodes",
                    g.num_nodes
                )));
            };
            if *m == UNMARKED {
                *m = src_nodes.len() as u32;
                src_nodes.push(*s);
            }
            *s = *m;
        }
        unmark(marker, &src_nodes);
        Block::new(src_nodes.len(), indptr, nbrs, src_nodes)
    }
}

/// Per-thread scratch for the picks of one dst node; left empty (bitset all zero) between
/// nodes, so its state never leaks from one node to the next.
#[derive(Default)]
struct Scratch {
    picks: Vec<u64>,
    bits: Vec<u64>,
    set: HashSet<u64>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fn fill_chunk(
    g: &Csr,
    chunk: &[u32],
    fanout: usize,
    layer_seed: u64,
    out: &mut [u32],
    s: &mut Scratch,
) {
    let mut at = 0;
    for &v in chunk {
        // In range: checked when the offsets were computed.
        let (a, b) = (
            g.indptr[v as usize] as usize,
            g.indptr[v as usize + 1] as usize,
        );
        let row = &g.indices[a..b];
        if row.len() <= fanout {
            out[at..at + row.len()].copy_from_slice(row);
            at += row.len();
        } else {
            let mut rng = Rng::fork(layer_seed, v as u64);
            pick_positions(&mut rng, row.len() as u64, fanout, s);
            for &p in &s.picks {
                out[at] = row[p as usize];
                at += 1;
            }
        }
    }
}

/// Draws `k < d` distinct positions of `0..d` uniformly into `s.picks`, sorted.
fn pick_positions(rng: &mut Rng, d: u64, k: usize, s: &mut Scratch) {
    if k <= LINEAR_MAX {
        floyd_linear(rng, d, k, &mut s.picks);
    } else if d <= BITSET_MAX_DEGREE {
        floyd_bitset(rng, d, k, &mut s.picks, &mut s.bits);
    } else {
        floyd_hash(rng, d, k, &mut s.picks, &mut s.set);
    }
    s.picks.sort_unstable();
}

/// Floyd's algorithm: for j in d-k..d, draw t in 0..=j and take t, or j if t is taken.
/// Every k-subset comes out with probability 1 / C(d, k).
fn floyd_linear(rng: &mut Rng, d: u64, k: usize, picks: &mut Vec<u64>) {
    picks.clear();
    for j in d - k as u64..d {
        let t = rng.below(j + 1);
        picks.push(if picks.contains(&t) { j } else { t });
    }
}

fn floyd_bitset(rng: &mut Rng, d: u64, k: usize, picks: &mut Vec<u64>, bits: &mut Vec<u64>) {
    let words = d.div_ceil(64) as usize;
    if bits.len() < words {
        bits.resize(words, 0);
    }
    picks.clear();
    for j in d - k as u64..d {
        let t = rng.below(j + 1);
        let (w, m) = ((t / 64) as usize, 1u64 << (t % 64));
        let p = if bits[w] & m != 0 { j } else { t };
        bits[(p / 64) as usize] |= 1u64 << (p % 64);
        picks.push(p);
    }
    for &p in picks.iter() {
        bits[(p / 64) as usize] = 0;
    }
}

fn floyd_hash(rng: &mut Rng, d: u64, k: usize, picks: &mut Vec<u64>, set: &mut HashSet<u64>) {
    picks.clear();
    set.clear();
    for j in d - k as u64..d {
        let t = rng.below(j + 1);
        let p = if set.insert(t) {
            t
        } else {
            set.insert(j);
            j
        };
        picks.push(p);
    }
    set.clear();
}

fn unmark(marker: &mut [u32], nodes: &[u32]) {
    for &v in nodes {
        marker[v as usize] = UNMARKED;
    }
}

/// CSR positions of `v`'s in-edges, checked against a malformed `indptr`.
fn row_range(g: &Csr, v: u32) -> Result<(usize, usize)> {
    let (a, b) = (g.indptr[v as usize], g.indptr[v as usize + 1]);
    if a > b || b > g.indices.len() as u64 {
        return Err(Error::invalid(format!(
            "sample_blocks: malformed graph: row {v} spans offsets {a}..{b} of {} edges",
            g.indices.len()
        )));
    }
    Ok((a as usize, b as usize))
}

fn parse_fanout(layer: usize, f: i64) -> Result<usize> {
    match f {
        -1 => Ok(usize::MAX),
        f if f >= 1 => Ok(usize::try_from(f).unwrap_or(usize::MAX)),
        f => Err(Error::invalid(format!(
            "sample_blocks: fanout {f} of layer {layer} must be -1 (all neighbours) or at least 1"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frequency of each position over many draws of `k` of `d` with one picker.
    fn frequencies(
        d: u64,
        k: usize,
        trials: u64,
        pick: impl Fn(&mut Rng, &mut Scratch),
    ) -> Vec<u64> {
        let mut counts = vec![0u64; d as usize];
        let mut s = Scratch::default();
        for t in 0..trials {
            let mut rng = Rng::fork(99, t);
            pick(&mut rng, &mut s);
            assert_eq!(s.picks.len(), k);
            let mut sorted = s.picks.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), k, "duplicate picks {:?}", s.picks);
            for &p in &s.picks {
                assert!(p < d);
                counts[p as usize] += 1;
            }
        }
        assert!(s.bits.iter().all(|&w| w == 0), "bitset left dirty");
        assert!(s.set.is_empty(), "hash set left dirty");
        counts
    }

    /// Every position's count lies within 5 standard deviations of trials * k / d.
    fn assert_uniform(counts: &[u64], k: usize, trials: u64) {
        let d = counts.len() as f64;
        let p = k as f64 / d;
        let mean = trials as f64 * p;
        let sd = (trials as f64 * p * (1.0 - p)).sqrt();
        for (i, &c) in counts.iter().enumerate() {
            assert!(
                (c as f64 - mean).abs() < 5.0 * sd,
                "position {i}: {c} picks, expected {mean:.0} +- {sd:.0}"
            );
        }
    }

    #[test]
    fn every_picker_is_uniform_and_distinct() {
        let (d, k, trials) = (120u64, 40usize, 6000u64);
        let linear = frequencies(d, k, trials, |r, s| floyd_linear(r, d, k, &mut s.picks));
        assert_uniform(&linear, k, trials);
        let bitset = frequencies(d, k, trials, |r, s| {
            floyd_bitset(r, d, k, &mut s.picks, &mut s.bits)
        });
        assert_uniform(&bitset, k, trials);
        let hash = frequencies(d, k, trials, |r, s| {
            floyd_hash(r, d, k, &mut s.picks, &mut s.set)
        });
        assert_uniform(&hash, k, trials);
        // The three pickers are the same algorithm: same stream, same subset.
        assert_eq!(linear, bitset);
        assert_eq!(linear, hash);
    }

    #[test]
    fn picks_come_out_sorted() {
        let mut s = Scratch::default();
        for (d, k) in [(10u64, 3usize), (1000, 100), (5, 4)] {
            pick_positions(&mut Rng::new(d), d, k, &mut s);
            assert!(s.picks.windows(2).all(|w| w[0] < w[1]), "{:?}", s.picks);
            assert_eq!(s.picks.len(), k);
        }
    }

    #[test]
    fn fanouts_are_parsed() {
        assert_eq!(parse_fanout(0, -1).unwrap(), usize::MAX);
        assert_eq!(parse_fanout(0, 7).unwrap(), 7);
        assert!(parse_fanout(0, 0).is_err());
        assert!(parse_fanout(0, -2).is_err());
    }

    #[test]
    fn marker_is_clean_after_errors_and_success() {
        let g = Csr::from_edges(4, &[1, 2, 3, 0], &[0, 0, 1, 2]).unwrap();
        let mut s = Sampler::new(&g);
        assert!(s.sample(&[0, 1, 0], &[2], 1).is_err());
        assert!(s.marker.iter().all(|&m| m == UNMARKED));
        let a = s.sample(&[0, 1], &[1, 2], 1).unwrap();
        assert!(s.marker.iter().all(|&m| m == UNMARKED));
        assert_eq!(a, s.sample(&[0, 1], &[1, 2], 1).unwrap());
    }

    #[test]
    fn malformed_graphs_are_errors() {
        let mut g = Csr::from_edges(3, &[1, 2], &[0, 0]).unwrap();
        g.indices[1] = 7;
        assert!(sample_blocks(&g, &[0], &[-1], 0).is_err());
        let mut g = Csr::from_edges(3, &[1, 2], &[0, 0]).unwrap();
        g.indptr[1] = 5;
        assert!(sample_blocks(&g, &[0], &[-1], 0).is_err());
        let mut g = Csr::from_edges(3, &[1, 2], &[0, 0]).unwrap();
        g.indptr.make_mut().pop();
        assert!(sample_blocks(&g, &[0], &[-1], 0).is_err());
    }
}
