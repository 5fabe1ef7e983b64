//! Cherry: METIS on the out-degree-weighted message-flow graph of the training seeds over
//! the **whole graph**, cut once and reused every epoch.
//!
//! The message-flow graph (MFG) of the seeds is their L-hop in-neighbourhood: every node
//! within `L - 1` hops brings all its in-edges (duplicates and self-loops dropped), so it
//! holds every edge any epoch's sample can draw. Edge `u -> v` is weighted by its source's
//! out-degree in the MFG (how many nodes read `u`): cutting the edges of a widely read
//! source is what copies it into several micro-batches. METIS needs small positive integer
//! weights, so [`CherryWeight`] offers `1 + ⌊log2 outdeg⌋` (the default, see
//! `docs/PARTITIONING.md` for the comparison), `1 + outdeg` (halved until the weights sum
//! below 2³⁰) and unit weights. The MFG is made undirected for METIS; the two directions of
//! a pair add up.
//!
//! Non-seed nodes ([`NonSeeds`]): `Keep` leaves them in the METIS graph with vertex weight 0
//! (the balance counts seeds only, and two seeds that read the same non-seed stay joined
//! through it); `Remove` is the paper's removal step: only the seed-induced part of the MFG
//! is cut, and seeds that share only non-seed neighbours are no longer joined.
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

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::{Block, Csr};
use crate::partition::kway::MetisGraph;
use crate::partition::parts;

/// How non-seed nodes of the message-flow graph enter the cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NonSeeds {
    /// In the METIS graph with vertex weight 0 (seeds weigh 1).
    #[default]
    Keep,
    /// Removed: METIS cuts the seed-induced part of the MFG.
    Remove,
}

/// Edge weight from the source's out-degree `d` in the message-flow graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CherryWeight {
    /// `1 + ⌊log2 d⌋`.
    #[default]
    LogOutDegree,
    /// `1 + d`, with `d` halved until all weights sum below 2³⁰.
    OutDegree,
    /// 1.
    Unit,
}

/// Cherry's choices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CherryOptions {
    /// How the flow graph's non-seed nodes enter the cut.
    pub non_seeds: NonSeeds,
    /// How the flow graph's edges are weighted.
    pub weight: CherryWeight,
    /// METIS seed: fixed for the run, so the cut does not change with the epoch.
    pub metis_seed: u64,
}

/// The message-flow graph of `seeds` over `layers` hops of `graph`, undirected and
/// weighted as [`CherryOptions`] says; node `i < seeds.len()` is `seeds[i]`, other nodes
/// follow in discovery order (absent with [`NonSeeds::Remove`]).
pub fn message_flow_graph(
    graph: &Csr,
    seeds: &[u32],
    layers: usize,
    opts: &CherryOptions,
) -> Result<MetisGraph> {
    flow_graph_within(graph, seeds, layers, opts, i32::MAX as usize)
}

/// The refusal of a flow graph whose METIS arrays would pass `limit` entries.
fn too_large(seeds: usize, layers: usize, nodes: usize, edges: usize, limit: usize) -> Error {
    Error::invalid(format!(
        "cherry: the {layers}-hop message-flow graph of {seeds} seeds has {nodes} nodes and at \
         least {edges} edges, past the {limit} adjacency entries METIS's 32-bit indices \
         (idx_t) can hold; use betty, buffalo or grem, or smaller batches"
    ))
}

/// [`message_flow_graph`], refused (before its METIS arrays are allocated) once it holds
/// more than `limit` nodes or directed edges: each kept edge is at least one adjacency
/// entry.
fn flow_graph_within(
    graph: &Csr,
    seeds: &[u32],
    layers: usize,
    opts: &CherryOptions,
    limit: usize,
) -> Result<MetisGraph> {
    if layers == 0 {
        return Err(Error::invalid("cherry: layers must be at least 1"));
    }
    let mut local = vec![u32::MAX; graph.num_nodes];
    let mut nodes: Vec<u32> = Vec::with_capacity(seeds.len());
    for &v in seeds {
        let slot = local.get_mut(v as usize).ok_or_else(|| {
            Error::invalid(format!(
                "cherry: seed {v} out of range for {} nodes",
                graph.num_nodes
            ))
        })?;
        if *slot != u32::MAX {
            return Err(Error::invalid(format!("cherry: seed {v} appears twice")));
        }
        *slot = nodes.len() as u32;
        nodes.push(v);
    }
    // Directed MFG edges (src, dst) in local ids; each dst's sources distinct, no loops.
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    let mut frontier = 0..nodes.len();
    let mut row = Vec::new();
    for _ in 0..layers {
        let end = nodes.len();
        for i in frontier.clone() {
            let v = nodes[i];
            row.clear();
            row.extend(graph.neighbors(v).iter().copied().filter(|&u| u != v));
            row.sort_unstable();
            row.dedup();
            for &u in &row {
                let slot = local.get_mut(u as usize).ok_or_else(|| {
                    Error::invalid(format!("cherry: malformed graph: source {u} out of range"))
                })?;
                if *slot == u32::MAX {
                    *slot = nodes.len() as u32;
                    nodes.push(u);
                }
                src.push(*slot);
                dst.push(i as u32);
            }
            // With non-seeds kept every edge is kept: stop before it grows further.
            if opts.non_seeds == NonSeeds::Keep && (src.len() > limit || nodes.len() > limit) {
                return Err(too_large(
                    seeds.len(),
                    layers,
                    nodes.len(),
                    src.len(),
                    limit,
                ));
            }
        }
        frontier = end..nodes.len();
    }
    drop(local);

    let n = match opts.non_seeds {
        NonSeeds::Keep => nodes.len(),
        NonSeeds::Remove => seeds.len(),
    };
    let kept = src
        .iter()
        .zip(&dst)
        .filter(|&(&u, &v)| (u as usize) < n && (v as usize) < n)
        .count();
    if kept > limit || n > limit {
        return Err(too_large(seeds.len(), layers, nodes.len(), kept, limit));
    }
    let mut outdeg = vec![0u64; nodes.len()];
    for &u in &src {
        outdeg[u as usize] += 1;
    }
    let weight = edge_weight(opts.weight, &src, &outdeg);
    // Both directions of every kept edge, bucketed by row (counting sort, no per-row
    // vectors), then each row sorted and its repeated neighbours merged, in parallel.
    let mut ptr = vec![0usize; n + 1];
    for (&u, &v) in src.iter().zip(&dst) {
        if (u as usize) < n && (v as usize) < n {
            ptr[u as usize + 1] += 1;
            ptr[v as usize + 1] += 1;
        }
    }
    for i in 0..n {
        ptr[i + 1] += ptr[i];
    }
    let mut adj = vec![(0u32, 0u32); ptr[n]];
    let mut next = ptr[..n].to_vec();
    for (&u, &v) in src.iter().zip(&dst) {
        if (u as usize) < n && (v as usize) < n {
            let w = weight(u);
            adj[next[u as usize]] = (v, w);
            next[u as usize] += 1;
            adj[next[v as usize]] = (u, w);
            next[v as usize] += 1;
        }
    }
    drop((src, dst, next));
    let mut rows: Vec<&mut [(u32, u32)]> = Vec::with_capacity(n);
    let mut rest: &mut [(u32, u32)] = &mut adj;
    for i in 0..n {
        let (row, tail) = rest.split_at_mut(ptr[i + 1] - ptr[i]);
        rows.push(row);
        rest = tail;
    }
    let merged: Vec<usize> = rows
        .into_par_iter()
        .map(|r| {
            r.sort_unstable();
            let mut len = 0;
            for i in 0..r.len() {
                if len > 0 && r[len - 1].0 == r[i].0 {
                    r[len - 1].1 = r[len - 1].1.saturating_add(r[i].1);
                } else {
                    r[len] = r[i];
                    len += 1;
                }
            }
            len
        })
        .collect();
    let total: usize = merged.iter().sum();
    if total > limit {
        return Err(too_large(
            seeds.len(),
            layers,
            nodes.len(),
            total / 2,
            limit,
        ));
    }
    let weighted = opts.weight != CherryWeight::Unit;
    let mut g = MetisGraph {
        xadj: Vec::with_capacity(n + 1),
        adjncy: Vec::with_capacity(total),
        adjwgt: weighted.then(|| Vec::with_capacity(total)),
        vwgt: None,
    };
    g.xadj.push(0);
    for (i, &len) in merged.iter().enumerate() {
        for &(v, w) in &adj[ptr[i]..ptr[i] + len] {
            g.adjncy.push(v as i32);
            if let Some(wgt) = &mut g.adjwgt {
                wgt.push(w.min(i32::MAX as u32) as i32);
            }
        }
        g.xadj.push(g.adjncy.len() as i32);
    }
    if opts.non_seeds == NonSeeds::Keep {
        let mut vwgt = vec![0i32; n];
        vwgt[..seeds.len()].fill(1);
        g.vwgt = Some(vwgt);
    }
    Ok(g)
}

/// The weight of an edge from its source, per the scheme.
fn edge_weight<'a>(
    scheme: CherryWeight,
    src: &[u32],
    outdeg: &'a [u64],
) -> impl Fn(u32) -> u32 + 'a {
    let shift = match scheme {
        CherryWeight::OutDegree => {
            // Both directions of every edge land in METIS's weight array.
            let total = |shift: u32| -> u64 {
                src.iter()
                    .map(|&u| 2 * (1 + (outdeg[u as usize] >> shift)))
                    .sum()
            };
            (0..64).find(|&s| total(s) < 1 << 30).unwrap_or(63)
        }
        _ => 0,
    };
    move |u: u32| {
        let d = outdeg[u as usize].max(1);
        match scheme {
            CherryWeight::Unit => 1,
            CherryWeight::LogOutDegree => 1 + d.ilog2(),
            CherryWeight::OutDegree => (1 + (d >> shift)).min(u32::MAX as u64) as u32,
        }
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

/// Cherry's partitioner: cuts the message-flow graph on the first call for a seed set and
/// reuses the cut while the seed set (and K, L, the graph's size) stay the same.
#[derive(Debug)]
pub struct Cherry {
    layers: usize,
    opts: CherryOptions,
    cache: Mutex<Option<Cut>>,
    cuts: AtomicUsize,
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
        })
    }

    /// `k` seed lists (each in the order of `seeds`). `blocks` and the epoch's `seed` are
    /// not read: the cut depends on the graph, not on the epoch's sample (METIS uses
    /// [`CherryOptions::metis_seed`]). Errors when `k` is 0 or exceeds the seeds, or on a
    /// duplicate or out-of-range seed.
    pub fn partition(
        &self,
        seeds: &[u32],
        _blocks: &[Arc<Block>],
        graph: &Csr,
        k: usize,
        _seed: u64,
    ) -> Result<Vec<Vec<u32>>> {
        parts::check_k("cherry", seeds.len(), k)?;
        let mut sorted_seeds = seeds.to_vec();
        sorted_seeds.sort_unstable();
        if let Some(w) = sorted_seeds.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::invalid(format!(
                "cherry: seed {} appears twice",
                w[0]
            )));
        }
        let key = CutKey {
            k,
            num_nodes: graph.num_nodes,
            num_edges: graph.num_edges(),
            sorted_seeds,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.as_ref().map(|c| &c.key) != Some(&key) {
            let mfg = message_flow_graph(graph, &key.sorted_seeds, self.layers, &self.opts)?;
            let mut labels = mfg.part_kway(k, self.opts.metis_seed)?;
            labels.truncate(key.sorted_seeds.len());
            parts::fill_empty(&mut labels, k);
            self.cuts.fetch_add(1, Ordering::Relaxed);
            *cache = Some(Cut { key, labels });
        }
        let cut = cache
            .as_ref()
            .ok_or_else(|| Error::invalid("cherry: no cut"))?;
        let labels = seeds
            .iter()
            .map(|v| {
                cut.key
                    .sorted_seeds
                    .binary_search(v)
                    .map(|i| cut.labels[i])
                    .map_err(|_| Error::invalid(format!("cherry: seed {v} not in the cut")))
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(parts::groups(seeds, &labels, k))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_graph_past_metis_indices_is_refused_with_its_sizes() {
        // A path 0 <- 1 <- 2 <- 3: two hops from seeds 0, 1 hold 4 nodes, 3 edges, 6 entries.
        let g = Csr::from_edges(4, &[1, 2, 3], &[0, 1, 2]).unwrap();
        for non_seeds in [NonSeeds::Keep, NonSeeds::Remove] {
            let opts = CherryOptions {
                non_seeds,
                ..CherryOptions::default()
            };
            assert!(flow_graph_within(&g, &[0, 1], 2, &opts, 6).is_ok());
        }
        let keep = CherryOptions::default();
        // 3 edges fit 5, their 6 adjacency entries do not.
        assert!(flow_graph_within(&g, &[0, 1], 2, &keep, 5).is_err());
        let err = flow_graph_within(&g, &[0], 2, &keep, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("32-bit") && err.contains("2-hop"), "{err}");
        // Removed non-seeds leave only the seed-seed edge 1 -> 0.
        let remove = CherryOptions {
            non_seeds: NonSeeds::Remove,
            ..CherryOptions::default()
        };
        assert!(flow_graph_within(&g, &[0, 1], 2, &remove, 2).is_ok());
        assert!(flow_graph_within(&g, &[0, 1], 2, &remove, 0).is_err());
    }

    #[test]
    fn mfg_weights_follow_out_degree() {
        // 2 <- 0, 1 <- 0, 0 <- 3: node 0 feeds 2 nodes.
        let g = Csr::from_edges(4, &[0, 0, 3], &[2, 1, 0]).unwrap();
        let opts = CherryOptions::default();
        let mfg = message_flow_graph(&g, &[1, 2], 2, &opts).unwrap();
        // Locals: 1 -> 0, 2 -> 1, 0 -> 2, 3 -> 3.
        assert_eq!(mfg.xadj, vec![0, 1, 2, 5, 6]);
        assert_eq!(mfg.adjncy, vec![2, 2, 0, 1, 3, 2]);
        assert_eq!(mfg.adjwgt, Some(vec![2, 2, 2, 2, 1, 1]));
        assert_eq!(mfg.vwgt, Some(vec![1, 1, 0, 0]));
        let removed = CherryOptions {
            non_seeds: NonSeeds::Remove,
            ..opts
        };
        let mfg = message_flow_graph(&g, &[1, 2], 2, &removed).unwrap();
        assert_eq!(mfg.num_nodes(), 2);
        assert_eq!(mfg.num_entries(), 0);
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
}
