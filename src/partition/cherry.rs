//! Cherry: METIS on the out-degree-weighted message-flow graph of the training seeds over
//! the **whole graph**, cut once and reused every epoch.
//!
//! The graph cut ([`crate::partition::cherry_flow`]) is by default the paper's 1-hop
//! message-flow graph: the seeds and the sources they read, edge `u -> v` weighted by how
//! many seeds read `u` (cutting the edges of a widely read source is what copies it into
//! several micro-batches), non-seeds with vertex weight 0; the whole L-hop flow graph when
//! it is small ([`FlowHops::Auto`]: a low-degree graph). [`FlowHops::Layers`] always cuts
//! the L-hop graph (nearly the whole graph when seeds are a tenth of it: the first cut
//! cost 5-64x a Betty call). A graph METIS's 32-bit indices cannot hold is never
//! built: the cut falls back to a smaller graph and says so ([`Cherry::note`]).
//!
//! The cut does not depend on the epoch's sample, so [`Cherry`] caches the assignment keyed
//! by the seed set (and K, L and the graph's size) and every later call with the same seeds
//! only looks it up. **Per-micro-batch sampling:** because the lists are fixed, a loader
//! can skip the full-batch sample and sample each micro-batch from its own seeds
//! ([`Cherry::seed_lists`]); a micro-batch sampled alone draws the same neighbours as in the
//! full batch when the sampler seeds each (layer, node) stream by node id, as
//! `sample_blocks` does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::graph::{Block, Csr};
use crate::partition::betty::tree_weights;
use crate::partition::kway::MetisGraph;
use crate::partition::{cherry_flow, parts};

pub use crate::partition::cherry_flow::{CherryWeight, FlowHops, FlowSpec, NonSeeds};

/// Cherry's choices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CherryOptions {
    /// How many hops of in-edges the flow graph follows.
    pub hops: FlowHops,
    /// How the flow graph's non-seed nodes enter the cut.
    pub non_seeds: NonSeeds,
    /// How the flow graph's edges are weighted.
    pub weight: CherryWeight,
    /// METIS seed: fixed for the run, so the cut does not change with the epoch.
    pub metis_seed: u64,
    /// Every seed weighs 1 in METIS's balance (the paper's: parts of equal seed counts).
    /// Off by default: a seed weighs [`tree_weights`] of the first cut's sample, as in
    /// Betty, so that the parts are even in memory rather than in seeds.
    pub unit_weights: bool,
}

impl CherryOptions {
    /// The flow graph these options ask for, for a `layers`-layer model.
    pub fn spec(&self, layers: usize) -> FlowSpec {
        FlowSpec {
            hops: match self.hops {
                FlowHops::One => 1,
                FlowHops::Layers | FlowHops::Auto => layers,
            },
            entries_per_seed: (self.hops == FlowHops::Auto)
                .then_some(cherry_flow::AUTO_ENTRIES_PER_SEED),
            non_seeds: self.non_seeds,
            weight: self.weight,
        }
    }
}

/// The flow graph of `seeds` that `opts` asks for (a `layers`-layer model), undirected and
/// weighted, as [`Cherry`] cuts it (with [`FlowHops::Auto`], the graph it picks); node
/// `i < seeds.len()` is `seeds[i]`. An error, not a fallback, if METIS's 32-bit indices
/// cannot hold it.
pub fn message_flow_graph(
    graph: &Csr,
    seeds: &[u32],
    layers: usize,
    opts: &CherryOptions,
) -> Result<MetisGraph> {
    if layers == 0 {
        return Err(Error::invalid("cherry: layers must be at least 1"));
    }
    let cut = cherry_flow::cut_graph(graph, seeds, opts.spec(layers))?;
    match cut.fallback {
        Some(why) => Err(Error::invalid(why)),
        None => Ok(cut.graph),
    }
}

/// Key of a cached cut.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CutKey {
    k: usize,
    num_nodes: usize,
    num_edges: usize,
    /// The seed set, increasing.
    sorted_seeds: Vec<u32>,
}

/// A cut: the label of each seed of `key.sorted_seeds`.
#[derive(Clone, Debug)]
struct Cut {
    key: CutKey,
    labels: Vec<u32>,
}

impl Cut {
    /// The `k` seed lists of `seeds` (each in the order of `seeds`).
    fn lists(&self, seeds: &[u32], k: usize) -> Result<Vec<Vec<u32>>> {
        let labels = seeds
            .iter()
            .map(|v| {
                self.key
                    .sorted_seeds
                    .binary_search(v)
                    .map(|i| self.labels[i])
                    .map_err(|_| Error::invalid(format!("cherry: seed {v} not in the cut")))
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(parts::groups(seeds, &labels, k))
    }
}

/// The key of the cut of `seeds` into `k`; errors on a repeated seed.
fn cut_key(seeds: &[u32], graph: &Csr, k: usize) -> Result<CutKey> {
    let mut sorted_seeds = seeds.to_vec();
    sorted_seeds.sort_unstable();
    if let Some(w) = sorted_seeds.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::invalid(format!(
            "cherry: seed {} appears twice",
            w[0]
        )));
    }
    Ok(CutKey {
        k,
        num_nodes: graph.num_nodes,
        num_edges: graph.num_edges(),
        sorted_seeds,
    })
}

/// Cherry's partitioner: cuts the message-flow graph on the first call for a seed set and
/// reuses the cut while the seed set (and K, L, the graph's size) stay the same.
#[derive(Debug)]
pub struct Cherry {
    layers: usize,
    opts: CherryOptions,
    cache: Mutex<Option<Cut>>,
    cuts: AtomicUsize,
    /// Why the last cut used a smaller graph than asked for, if it did.
    fallback: Mutex<Option<String>>,
}

impl Cherry {
    /// A partitioner for `layers`-layer models. Errors when `layers` is 0.
    pub fn new(layers: usize, opts: CherryOptions) -> Result<Cherry> {
        if layers == 0 {
            return Err(Error::invalid("cherry: layers must be at least 1"));
        }
        Ok(Cherry {
            layers,
            opts,
            cache: Mutex::new(None),
            cuts: AtomicUsize::new(0),
            fallback: Mutex::new(None),
        })
    }

    /// `k` seed lists (each in the order of `seeds`). The cut depends on the graph and,
    /// for its seeds' balance weights, on the sample `blocks` of the batch that made it
    /// (not on later epochs' samples; METIS uses [`CherryOptions::metis_seed`]). Errors when `k` is 0 or exceeds the seeds, or on a
    /// duplicate or out-of-range seed.
    pub fn partition(
        &self,
        seeds: &[u32],
        blocks: &[Arc<Block>],
        graph: &Csr,
        k: usize,
        _seed: u64,
    ) -> Result<Vec<Vec<u32>>> {
        parts::check_k("cherry", seeds.len(), k)?;
        let key = cut_key(seeds, graph, k)?;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.as_ref().map(|c| &c.key) != Some(&key) {
            let mut cut =
                cherry_flow::cut_graph(graph, &key.sorted_seeds, self.opts.spec(self.layers))?;
            if !self.opts.unit_weights {
                weigh_seeds(&mut cut.graph, &key.sorted_seeds, blocks);
            }
            let mut labels = cut.graph.part_kway(k, self.opts.metis_seed)?;
            *self.fallback.lock().unwrap_or_else(|e| e.into_inner()) = cut.fallback;
            labels.truncate(key.sorted_seeds.len());
            parts::fill_empty(&mut labels, k);
            self.cuts.fetch_add(1, Ordering::Relaxed);
            *cache = Some(Cut { key, labels });
        }
        let cut = cache
            .as_ref()
            .ok_or_else(|| Error::invalid("cherry: no cut"))?;
        cut.lists(seeds, k)
    }

    /// What [`Cherry::partition`] returns for `seeds`, `graph` and `k` when its cut is
    /// cached (no METIS call); `None` when it is not, or on bad seeds.
    pub fn cached(&self, seeds: &[u32], graph: &Csr, k: usize) -> Option<Vec<Vec<u32>>> {
        let key = cut_key(seeds, graph, k).ok()?;
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let cut = cache.as_ref().filter(|c| c.key == key)?;
        cut.lists(seeds, k).ok()
    }

    /// The cached seed lists (each increasing), for a loader that samples every
    /// micro-batch from its own seeds; `None` before the first cut.
    pub fn seed_lists(&self) -> Option<Vec<Vec<u32>>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .as_ref()
            .map(|c| parts::groups(&c.key.sorted_seeds, &c.labels, c.key.k))
    }

    /// How many times METIS ran (1 while the seed set does not change).
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::Relaxed)
    }

    /// Why the last cut used a smaller flow graph than the options ask for (METIS's
    /// 32-bit indices could not hold it), if it did.
    pub fn note(&self) -> Option<String> {
        self.fallback
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Gives the flow graph's seed nodes (the first `sorted_seeds.len()`, in that order) their
/// [`tree_weights`] in the sample `blocks` as METIS balance weights; non-seeds keep theirs
/// (0). Leaves the weights as they are when the sample's output nodes are not exactly the
/// seeds (no sample, or another batch's).
fn weigh_seeds(g: &mut MetisGraph, sorted_seeds: &[u32], blocks: &[Arc<Block>]) {
    let Some(out) = blocks.last() else {
        return;
    };
    let mut by_id: Vec<(u32, i32)> = out
        .dst_nodes()
        .iter()
        .copied()
        .zip(tree_weights(blocks))
        .collect();
    if by_id.len() != sorted_seeds.len() {
        return;
    }
    by_id.sort_unstable_by_key(|&(v, _)| v);
    if by_id
        .iter()
        .map(|&(v, _)| v)
        .ne(sorted_seeds.iter().copied())
    {
        return;
    }
    let n = g.num_nodes();
    let vwgt = g.vwgt.get_or_insert_with(|| vec![1; n]);
    for (slot, &(_, w)) in vwgt.iter_mut().zip(&by_id) {
        *slot = w;
    }
}

/// Cherry behind the [`Partitioner`](crate::partition::Partitioner) trait: the message-flow
/// graph is cut once per seed set and K, and the seed lists are reused every epoch.
#[derive(Default)]
pub struct CherryPartitioner {
    /// Flow-graph construction and METIS settings.
    pub opts: CherryOptions,
    state: Option<Cherry>,
}

impl crate::partition::Partitioner for CherryPartitioner {
    fn name(&self) -> &str {
        "cherry"
    }

    fn partition(
        &mut self,
        batch: &crate::partition::Batch<'_>,
        k: usize,
    ) -> Result<Vec<Vec<u32>>> {
        let layers = batch.blocks().len();
        let cherry = match &mut self.state {
            Some(c) => c,
            None => self.state.insert(Cherry::new(
                layers,
                CherryOptions {
                    metis_seed: batch.seed,
                    ..self.opts
                },
            )?),
        };
        cherry.partition(batch.seeds, batch.blocks(), batch.graph, k, batch.seed)
    }

    fn note(&self) -> Option<String> {
        self.state.as_ref().and_then(Cherry::note)
    }

    fn cached(&self, seeds: &[u32], graph: &Csr, k: usize, _seed: u64) -> Option<Vec<Vec<u32>>> {
        self.state.as_ref()?.cached(seeds, graph, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dst nodes 10, 11, 12 with sampled trees of 3, 4 and 3 nodes ([`tree_weights`]: 17,
    /// 20, 17).
    fn sample() -> Vec<Arc<Block>> {
        let b = Block::new(
            6,
            vec![0, 2, 5, 7],
            vec![3, 4, 3, 4, 0, 5, 5],
            vec![10, 11, 12, 13, 14, 15],
        )
        .unwrap();
        vec![Arc::new(b)]
    }

    /// Three seeds and one non-seed in a path.
    fn flow_graph() -> MetisGraph {
        MetisGraph {
            xadj: vec![0, 1, 3, 5, 6],
            adjncy: vec![1, 0, 2, 1, 3, 2],
            adjwgt: None,
            vwgt: Some(vec![1, 1, 1, 0]),
        }
    }

    #[test]
    fn seeds_weigh_their_sampled_trees_and_non_seeds_stay_zero() {
        let mut g = flow_graph();
        weigh_seeds(&mut g, &[10, 11, 12], &sample());
        assert_eq!(g.vwgt, Some(vec![17, 20, 17, 0]));
        assert_eq!(tree_weights(&sample()), vec![17, 20, 17]);
    }

    #[test]
    fn another_batchs_sample_leaves_the_weights_as_they_are() {
        for seeds in [&[10u32, 11, 13][..], &[10, 11], &[]] {
            let mut g = flow_graph();
            weigh_seeds(&mut g, seeds, &sample());
            assert_eq!(g.vwgt, Some(vec![1, 1, 1, 0]), "{seeds:?}");
        }
        let mut g = flow_graph();
        weigh_seeds(&mut g, &[10, 11, 12], &[]);
        assert_eq!(g.vwgt, Some(vec![1, 1, 1, 0]));
    }
}
