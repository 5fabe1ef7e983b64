//! Buffalo's cheap, redundancy-aware memory model of a group of items (seed lists).
//!
//! Each item's exact block sizes are measured once (one [`Slicer::sizes`] walk of its own
//! footprint). A group's sizes are then predicted without walking it again:
//!
//! - the output layer's dst nodes, edges and degree histogram are **sums** over the items
//!   (every seed is in exactly one item);
//! - every lower level's nodes, and every lower layer's edges, are the **expected union**
//!   of the items' sets drawn independently from the full batch's `N`:
//!   `N * (1 - prod_i (1 - x_i / N))`: two items that each read a third of the batch's
//!   inputs are predicted to read `5/9` of them together, not `2/3`. Adding an item is one
//!   log-sum update per level, so a group's prediction costs O(layers), whatever its size;
//! - lower layers' degree histograms and self-loops are the items' sums scaled to the
//!   predicted dst count.
//!
//! The bytes of the predicted sizes come from the caller (the memory estimator's replay,
//! which reads sizes only). The prediction is checked against the full estimator on the
//! groups Buffalo forms; its error is reported ([`crate::partition::buffalo::BuffaloPlan`]).

use crate::graph::{BlockSizes, Slicer};

/// A running group: sums and log-miss probabilities of its items' sizes.
#[derive(Clone, Debug)]
pub struct GroupModel {
    /// Plain sums of the items' block sizes, layer by layer.
    sum: Vec<BlockSizes>,
    /// `sum_i ln(1 - src_i / N_l)` per layer `l`: the chance a source misses every item.
    miss_src: Vec<f64>,
    /// The same over edges, per layer.
    miss_edges: Vec<f64>,
    /// Items added.
    items: usize,
}

impl GroupModel {
    /// An empty group for a batch whose full blocks have `full` sizes.
    pub fn new(full: &[BlockSizes]) -> GroupModel {
        GroupModel {
            sum: vec![BlockSizes::default(); full.len()],
            miss_src: vec![0.0; full.len()],
            miss_edges: vec![0.0; full.len()],
            items: 0,
        }
    }

    /// Number of items added.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Adds an item of exact sizes `item` (a micro-batch of the batch whose full sizes are
    /// `full`).
    pub fn add(&mut self, item: &[BlockSizes], full: &[BlockSizes]) {
        for (l, (s, f)) in item.iter().zip(full).enumerate() {
            let acc = &mut self.sum[l];
            acc.num_src += s.num_src;
            acc.num_dst += s.num_dst;
            acc.num_edges += s.num_edges;
            acc.self_loops += s.self_loops;
            if acc.degree_hist.len() < s.degree_hist.len() {
                acc.degree_hist.resize(s.degree_hist.len(), 0);
            }
            for (a, &h) in acc.degree_hist.iter_mut().zip(&s.degree_hist) {
                *a += h;
            }
            self.miss_src[l] += ln_miss(s.num_src, f.num_src);
            self.miss_edges[l] += ln_miss(s.num_edges, f.num_edges);
        }
        self.items += 1;
    }

    /// The predicted block sizes of the group (they chain: a layer's dst count is the next
    /// layer's src count).
    pub fn sizes(&self, full: &[BlockSizes]) -> Vec<BlockSizes> {
        let layers = full.len();
        let mut out = vec![BlockSizes::default(); layers];
        let Some(top) = layers.checked_sub(1) else {
            return out;
        };
        // Output layer: exact sums.
        out[top].num_dst = self.sum[top].num_dst;
        out[top].num_edges = self.sum[top].num_edges;
        out[top].degree_hist = self.sum[top].degree_hist.clone();
        out[top].self_loops = self.sum[top].self_loops;
        for l in (0..layers).rev() {
            let union = |miss: f64, n: usize| (n as f64 * (1.0 - miss.exp())).round() as usize;
            let dst = out[l].num_dst;
            out[l].num_src =
                union(self.miss_src[l], full[l].num_src).clamp(dst, full[l].num_src.max(dst));
            if l > 0 {
                let below = out[l].num_src;
                let b = &mut out[l - 1];
                b.num_dst = below;
                b.num_edges = union(self.miss_edges[l - 1], full[l - 1].num_edges);
                let s = &self.sum[l - 1];
                b.degree_hist = scaled_hist(&s.degree_hist, below);
                b.self_loops = if s.num_dst == 0 {
                    0
                } else {
                    (s.self_loops as f64 * below as f64 / s.num_dst as f64).round() as usize
                }
                .min(below);
            }
        }
        out
    }
}

/// `ln(1 - x / n)`, `-inf` when the item holds all `n`.
fn ln_miss(x: usize, n: usize) -> f64 {
    if n == 0 {
        return 0.0;
    }
    (1.0 - (x.min(n) as f64 / n as f64)).ln()
}

/// `hist` scaled so that its counts sum to `total` (the rounding remainder goes to the
/// largest bin).
fn scaled_hist(hist: &[usize], total: usize) -> Vec<usize> {
    let sum: usize = hist.iter().sum();
    if sum == 0 {
        return hist.to_vec();
    }
    let f = total as f64 / sum as f64;
    let mut out: Vec<usize> = hist
        .iter()
        .map(|&h| (h as f64 * f).floor() as usize)
        .collect();
    let got: usize = out.iter().sum();
    if let Some(big) = (0..out.len()).max_by_key(|&i| (hist[i], i)) {
        out[big] += total.saturating_sub(got);
    }
    out
}

/// The exact sizes of every item (global seed lists): one footprint walk each.
pub fn item_sizes(slicer: &Slicer, items: &[Vec<u32>]) -> crate::Result<Vec<Vec<BlockSizes>>> {
    items.iter().map(|it| slicer.sizes(it)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(src: usize, dst: usize, edges: usize) -> BlockSizes {
        BlockSizes {
            num_src: src,
            num_dst: dst,
            num_edges: edges,
            degree_hist: vec![0, dst],
            self_loops: 0,
        }
    }

    #[test]
    fn one_item_is_predicted_exactly_and_overlap_shrinks_two() {
        let full = vec![sizes(900, 300, 600), sizes(300, 100, 200)];
        let item = vec![sizes(300, 100, 200), sizes(100, 50, 100)];
        let mut g = GroupModel::new(&full);
        g.add(&item, &full);
        assert_eq!(g.sizes(&full), item);
        g.add(&item, &full);
        let two = g.sizes(&full);
        // Outputs add up; lower levels overlap: 1 - (2/3)^2 = 5/9 of 900 sources.
        assert_eq!(two[1].num_dst, 100);
        assert_eq!(two[1].num_edges, 200);
        assert_eq!(two[0].num_src, 500);
        assert_eq!(two[0].num_dst, two[1].num_src);
        assert!(two[0].num_dst < 200 && two[0].num_dst >= 100);
        assert_eq!(two[0].degree_hist.iter().sum::<usize>(), two[0].num_dst);
    }
}
