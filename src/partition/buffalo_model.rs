//! Buffalo's cheap, redundancy-aware memory model of a group of items (seed lists).
//!
//! Items belong to *clusters* (Buffalo's GREM parts, or the pieces of one bucket). The
//! exact block sizes of every item and of every cluster are measured once (counted from
//! the items' [`crate::graph::Footprints`], one walk for all of them; past
//! 256 items, one [`Slicer::sizes`] walk each). A group's sizes are then predicted
//! without walking it again:
//!
//! - the output layer's dst nodes, edges and degree histogram are **sums** over the items
//!   (every seed is in exactly one item);
//! - within a cluster whose items read, summed, `r` times the cluster's `X` sources (its
//!   redundancy), a fraction `f` of its items is predicted to read `X (1 - (1 - f)^r)`:
//!   the whole cluster for `f = 1`, `r` times its share for small `f`;
//! - across clusters, the sets are taken as drawn independently from the batch's `N`:
//!   `N (1 - prod_c (1 - u_c / N))`. Lower layers' edges the same way; their degree
//!   histograms and self-loops are the items' sums scaled to the predicted dst count.
//!
//! Adding an item is O(1); a prediction is O(layers x clusters touched), whatever the
//! group's size. The bytes of the predicted sizes come from the caller (the memory
//! estimator's replay, which reads sizes only). The prediction is checked against the
//! full estimator on the groups Buffalo forms; its error is reported
//! ([`crate::partition::buffalo::BuffaloPlan`]).

use rayon::prelude::*;

use crate::graph::{BlockSizes, Footprints, Slicer};

/// Exact sizes and redundancy of every cluster.
#[derive(Clone, Debug)]
pub struct Clusters {
    /// The cluster's exact block sizes.
    sizes: Vec<Vec<BlockSizes>>,
    /// Seeds of the cluster.
    seeds: Vec<usize>,
    /// Per cluster and layer: its items' summed sources over its own, and edges likewise.
    r_src: Vec<Vec<f64>>,
    r_edges: Vec<Vec<f64>>,
}

impl Clusters {
    /// Measures cluster `c` as the union of the items `i` with `cluster[i] == c`
    /// (`items[i]` global seeds, `item_sizes[i]` their exact sizes): counted from `prints`
    /// (the items' footprints) where given, else walked.
    pub fn new(
        slicer: &Slicer,
        prints: Option<&Footprints>,
        items: &[Vec<u32>],
        item_sizes: &[Vec<BlockSizes>],
        cluster: &[usize],
    ) -> crate::Result<Clusters> {
        let n = cluster.iter().map(|&c| c + 1).max().unwrap_or(0);
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut of: Vec<Vec<usize>> = vec![Vec::new(); n];
        let layers = item_sizes.first().map_or(0, Vec::len);
        let (mut src, mut edges) = (vec![vec![0usize; layers]; n], vec![vec![0usize; layers]; n]);
        for (i, ((it, sz), &c)) in items.iter().zip(item_sizes).zip(cluster).enumerate() {
            members[c].extend_from_slice(it);
            of[c].push(i);
            for (l, b) in sz.iter().enumerate() {
                src[c][l] += b.num_src;
                edges[c][l] += b.num_edges;
            }
        }
        let sizes = match prints {
            Some(f) if f.lists() == items.len() => f.union_sizes(&of)?,
            _ => members
                .par_iter()
                .map(|m| {
                    if m.is_empty() {
                        Ok(vec![BlockSizes::default(); layers])
                    } else {
                        slicer.sizes(m)
                    }
                })
                .collect::<crate::Result<Vec<_>>>()?,
        };
        let ratio = |sum: usize, own: usize| {
            if own == 0 {
                1.0
            } else {
                (sum as f64 / own as f64).max(1.0)
            }
        };
        // Per cluster and layer: the items' summed count over the cluster's own.
        let redundancy = |sums: &[Vec<usize>], own: fn(&BlockSizes) -> usize| -> Vec<Vec<f64>> {
            (0..n)
                .map(|c| {
                    (0..layers)
                        .map(|l| ratio(sums[c][l], own(&sizes[c][l])))
                        .collect()
                })
                .collect()
        };
        let r_src = redundancy(&src, |b| b.num_src);
        let r_edges = redundancy(&edges, |b| b.num_edges);
        Ok(Clusters {
            seeds: members.iter().map(Vec::len).collect(),
            sizes,
            r_src,
            r_edges,
        })
    }
}

/// A running group: sums of its items' sizes and the share of each cluster it holds.
#[derive(Clone, Debug)]
pub struct GroupModel {
    /// Plain sums of the items' block sizes, layer by layer.
    sum: Vec<BlockSizes>,
    /// `(cluster, fraction of its seeds)` for every cluster the group touches.
    touched: Vec<(usize, f64)>,
    /// Items added.
    items: usize,
}

impl GroupModel {
    /// An empty group for a batch whose full blocks have `full` sizes.
    pub fn new(full: &[BlockSizes]) -> GroupModel {
        GroupModel {
            sum: vec![BlockSizes::default(); full.len()],
            touched: Vec::new(),
            items: 0,
        }
    }

    /// Number of items added.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Adds an item of exact sizes `item` from cluster `c`.
    pub fn add(&mut self, item: &[BlockSizes], c: usize, clusters: &Clusters) {
        for (acc, s) in self.sum.iter_mut().zip(item) {
            acc.add(s);
        }
        let share = item.last().map_or(0, |b| b.num_dst) as f64 / clusters.seeds[c].max(1) as f64;
        match self.touched.iter_mut().find(|(x, _)| *x == c) {
            Some((_, f)) => *f = (*f + share).min(1.0),
            None => self.touched.push((c, share.min(1.0))),
        }
        self.items += 1;
    }

    /// The predicted block sizes of the group (they chain: a layer's dst count is the next
    /// layer's src count).
    pub fn sizes(&self, full: &[BlockSizes], clusters: &Clusters) -> Vec<BlockSizes> {
        let layers = full.len();
        let mut out = vec![BlockSizes::default(); layers];
        let Some(top) = layers.checked_sub(1) else {
            return out;
        };
        // ln of the chance that a source (or edge) of layer `l` misses every cluster share.
        let miss = |l: usize, edges: bool| -> f64 {
            self.touched
                .iter()
                .map(|&(c, f)| {
                    let (x, r, n) = if edges {
                        (
                            clusters.sizes[c][l].num_edges,
                            clusters.r_edges[c][l],
                            full[l].num_edges,
                        )
                    } else {
                        (
                            clusters.sizes[c][l].num_src,
                            clusters.r_src[c][l],
                            full[l].num_src,
                        )
                    };
                    let u = x as f64 * (1.0 - (1.0 - f).powf(r));
                    ln_miss(u, n)
                })
                .sum()
        };
        // Output layer: exact sums.
        out[top].num_dst = self.sum[top].num_dst;
        out[top].num_edges = self.sum[top].num_edges;
        out[top].degree_hist = self.sum[top].degree_hist.clone();
        out[top].self_loops = self.sum[top].self_loops;
        for l in (0..layers).rev() {
            let union = |m: f64, n: usize| (n as f64 * (1.0 - m.exp())).round() as usize;
            let dst = out[l].num_dst;
            out[l].num_src =
                union(miss(l, false), full[l].num_src).clamp(dst, full[l].num_src.max(dst));
            if l > 0 {
                let below = out[l].num_src;
                let b = &mut out[l - 1];
                b.num_dst = below;
                b.num_edges = union(miss(l - 1, true), full[l - 1].num_edges);
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

/// `ln(1 - x / n)`, `-inf` when `x` covers all `n`.
fn ln_miss(x: f64, n: usize) -> f64 {
    if n == 0 {
        return 0.0;
    }
    (1.0 - (x / n as f64).min(1.0)).ln()
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

/// The exact sizes of every item (global seed lists): `known[i]` where given (measured
/// already), else one footprint walk each, in parallel.
pub fn item_sizes(
    slicer: &Slicer,
    items: &[Vec<u32>],
    known: Vec<Option<Vec<BlockSizes>>>,
) -> crate::Result<Vec<Vec<BlockSizes>>> {
    if known.len() != items.len() {
        return Err(crate::error::Error::invalid(format!(
            "buffalo: {} known sizes for {} items",
            known.len(),
            items.len()
        )));
    }
    let missing: Vec<&[u32]> = items
        .iter()
        .zip(&known)
        .filter(|(_, k)| k.is_none())
        .map(|(it, _)| it.as_slice())
        .collect();
    let mut measured = slicer.sizes_all(&missing)?.into_iter();
    Ok(known
        .into_iter()
        .map(|k| k.or_else(|| measured.next()).unwrap_or_default())
        .collect())
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
        // Two clusters of one item each (no slicer needed: sizes given directly).
        let clusters = Clusters {
            sizes: vec![item.clone(), item.clone()],
            seeds: vec![50, 50],
            r_src: vec![vec![1.0; 2]; 2],
            r_edges: vec![vec![1.0; 2]; 2],
        };
        let mut g = GroupModel::new(&full);
        g.add(&item, 0, &clusters);
        assert_eq!(g.sizes(&full, &clusters), item);
        g.add(&item, 1, &clusters);
        let two = g.sizes(&full, &clusters);
        // Outputs add up; lower levels overlap: 1 - (2/3)^2 = 5/9 of 900 sources.
        assert_eq!(two[1].num_dst, 100);
        assert_eq!(two[1].num_edges, 200);
        assert_eq!(two[0].num_src, 500);
        assert_eq!(two[0].num_dst, two[1].num_src);
        assert_eq!(two[0].degree_hist.iter().sum::<usize>(), two[0].num_dst);
    }

    #[test]
    fn half_a_redundant_cluster_reads_more_than_half_its_sources() {
        let full = vec![sizes(1000, 100, 400)];
        let clusters = Clusters {
            sizes: vec![vec![sizes(400, 100, 400)]],
            seeds: vec![100],
            r_src: vec![vec![2.0]],
            r_edges: vec![vec![1.0]],
        };
        let mut g = GroupModel::new(&full);
        g.add(&[sizes(200, 50, 200)], 0, &clusters);
        // 1 - (1/2)^2 = 3/4 of the cluster's 400 sources.
        assert_eq!(g.sizes(&full, &clusters)[0].num_src, 300);
    }
}
