//! METIS k-way partitioning (through the `metis` crate) and the graphs fed to it.
//!
//! [`MetisGraph`] is METIS's undirected CSR (`xadj`, `adjncy`, both directions of every
//! edge, no self-loops) with optional vertex and edge weights. **Edge weights are passed**
//! (`adjwgt`), unlike DGL's METIS wrapper, which drops them.
//!
//! METIS keeps its random state in a process-wide array (GKlib's `mt[]`), so two concurrent
//! calls race and neither is reproducible: every call here holds one process-wide lock.
//! Given the same graph, K and seed, the labels are the same on every run.
//!
//! Every METIS call in espalier goes through [`MetisGraph::part_kway`] (the `metis`
//! micro-batch partitioner via [`metis_seeds`], Betty, Cherry, [`metis_graph_partition`]),
//! and every seed-induced subgraph through [`seed_induced`] (`metis`, GREM).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::graph::{Block, Csr};
use crate::partition::parts;
use crate::rng::mix64;

/// Serialises METIS calls (its random state is a global).
static METIS_LOCK: Mutex<()> = Mutex::new(());

/// An undirected graph in METIS's layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetisGraph {
    /// `num_nodes + 1` offsets into `adjncy`.
    pub xadj: Vec<i32>,
    /// Neighbours; every edge appears in both endpoints' rows.
    pub adjncy: Vec<i32>,
    /// One weight per `adjncy` entry (at least 1, symmetric), or unit weights.
    pub adjwgt: Option<Vec<i32>>,
    /// One weight per node (0 allowed), or unit weights.
    pub vwgt: Option<Vec<i32>>,
}

impl MetisGraph {
    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.xadj.len().saturating_sub(1)
    }

    /// Number of `adjncy` entries (twice the undirected edges).
    pub fn num_entries(&self) -> usize {
        self.adjncy.len()
    }

    /// Bytes of the arrays handed to METIS.
    pub fn bytes(&self) -> usize {
        4 * (self.xadj.len()
            + self.adjncy.len()
            + self.adjwgt.as_ref().map_or(0, Vec::len)
            + self.vwgt.as_ref().map_or(0, Vec::len))
    }

    /// Builds the graph from rows of `(neighbour, weight)` that are already symmetric and
    /// free of self-loops and duplicates; `weighted` keeps the weights.
    pub fn from_rows(rows: &[Vec<(u32, u32)>], weighted: bool) -> Result<MetisGraph> {
        let total: usize = rows.iter().map(Vec::len).sum();
        if rows.len() >= i32::MAX as usize || total > i32::MAX as usize {
            return Err(Error::invalid(format!(
                "METIS: {} nodes and {total} adjacency entries do not fit 32-bit indices",
                rows.len()
            )));
        }
        let mut xadj = Vec::with_capacity(rows.len() + 1);
        let mut adjncy = Vec::with_capacity(total);
        let mut adjwgt = Vec::with_capacity(if weighted { total } else { 0 });
        xadj.push(0);
        for row in rows {
            for &(v, w) in row {
                adjncy.push(v as i32);
                if weighted {
                    adjwgt.push(w.min(i32::MAX as u32) as i32);
                }
            }
            xadj.push(adjncy.len() as i32);
        }
        Ok(MetisGraph {
            xadj,
            adjncy,
            adjwgt: weighted.then_some(adjwgt),
            vwgt: None,
        })
    }

    /// The undirected simple graph under `graph` (both directions, no self-loops, no
    /// duplicate edges), unweighted.
    pub fn from_csr(graph: &Csr) -> Result<MetisGraph> {
        let sym = graph.symmetrize().remove_self_loops();
        Self::from_symmetric_csr(&sym)
    }

    /// `graph` as is: the caller promises it is symmetric, without self-loops or duplicates.
    pub fn from_symmetric_csr(graph: &Csr) -> Result<MetisGraph> {
        if graph.num_nodes >= i32::MAX as usize || graph.num_edges() > i32::MAX as usize {
            return Err(Error::invalid(format!(
                "METIS: {} nodes and {} edges do not fit 32-bit indices",
                graph.num_nodes,
                graph.num_edges()
            )));
        }
        Ok(MetisGraph {
            xadj: graph.indptr.iter().map(|&o| o as i32).collect(),
            adjncy: graph.indices.iter().map(|&v| v as i32).collect(),
            adjwgt: None,
            vwgt: None,
        })
    }

    /// A label in `0..k` per node from METIS k-way (`METIS_PartGraphKway`, edge-cut
    /// objective, METIS's default 3% imbalance on vertex weight), seeded by `seed`. Parts
    /// may come back empty (see [`parts::fill_empty`]). `k == 1` or a graph without edges
    /// needs no METIS: the labels are then contiguous ranges of equal vertex weight.
    pub fn part_kway(&self, k: usize, seed: u64) -> Result<Vec<u32>> {
        self.part_kway_refined(k, seed, None)
    }

    /// [`Self::part_kway`] with `niter` refinement iterations per uncoarsening level
    /// (`METIS_OPTION_NITER`; `None` keeps METIS's default, 10). At least 1.
    pub fn part_kway_refined(&self, k: usize, seed: u64, niter: Option<usize>) -> Result<Vec<u32>> {
        let n = self.num_nodes();
        if let Some(i) = niter {
            if i == 0 || i > i32::MAX as usize {
                return Err(Error::invalid(format!(
                    "METIS: {i} refinement iterations (must be 1 to i32::MAX)"
                )));
            }
        }
        if k == 0 {
            return Err(Error::invalid("METIS: K must be at least 1"));
        }
        if k > i32::MAX as usize {
            return Err(Error::invalid(format!("METIS: K = {k} does not fit i32")));
        }
        self.check_weights()?;
        if k == 1 || n == 0 || self.adjncy.is_empty() {
            return Ok(self.ranges(k));
        }
        let mut part = vec![0 as metis::Idx; n];
        let options_seed = (mix64(seed) >> 33) as metis::Idx;
        let mut run = || -> std::result::Result<metis::Idx, metis::Error> {
            let mut g = metis::Graph::new(1, k as metis::Idx, &self.xadj, &self.adjncy)?
                .set_option(metis::option::Seed(options_seed));
            if let Some(i) = niter {
                g = g.set_option(metis::option::NIter(i as metis::Idx));
            }
            if let Some(w) = &self.adjwgt {
                g = g.set_adjwgt(w);
            }
            if let Some(w) = &self.vwgt {
                g = g.set_vwgt(w);
            }
            g.part_kway(&mut part)
        };
        let result = {
            let _guard = METIS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            run()
        };
        result.map_err(|e| Error::invalid(format!("METIS k-way into {k} parts: {e}")))?;
        Ok(part
            .iter()
            .map(|&p| (p.max(0) as u32).min(k as u32 - 1))
            .collect())
    }

    fn check_weights(&self) -> Result<()> {
        let n = self.num_nodes();
        if let Some(w) = &self.adjwgt {
            if w.len() != self.adjncy.len() {
                return Err(Error::invalid(format!(
                    "METIS: {} edge weights for {} adjacency entries",
                    w.len(),
                    self.adjncy.len()
                )));
            }
            if w.iter().any(|&x| x < 1) {
                return Err(Error::invalid("METIS: edge weights must be at least 1"));
            }
            if w.iter().map(|&x| x as i64).sum::<i64>() > i32::MAX as i64 {
                return Err(Error::invalid(
                    "METIS: the edge weights sum past i32::MAX (rescale them)",
                ));
            }
        }
        if let Some(w) = &self.vwgt {
            if w.len() != n {
                return Err(Error::invalid(format!(
                    "METIS: {} vertex weights for {n} nodes",
                    w.len()
                )));
            }
            if w.iter().any(|&x| x < 0) {
                return Err(Error::invalid("METIS: negative vertex weight"));
            }
            if w.iter().map(|&x| x as i64).sum::<i64>() > i32::MAX as i64 {
                return Err(Error::invalid(
                    "METIS: the vertex weights sum past i32::MAX",
                ));
            }
        }
        Ok(())
    }

    /// Contiguous ranges of (about) equal vertex weight; equal counts if all weights are 0.
    fn ranges(&self, k: usize) -> Vec<u32> {
        let n = self.num_nodes();
        let weights: Vec<u64> = match &self.vwgt {
            Some(w) if w.iter().any(|&x| x > 0) => w.iter().map(|&x| x as u64).collect(),
            _ => vec![1; n],
        };
        let total: u64 = weights.iter().sum::<u64>().max(1);
        let mut before = 0u64;
        weights
            .iter()
            .map(|&w| {
                let label = (before * k as u64 / total).min(k as u64 - 1) as u32;
                before += w;
                label
            })
            .collect()
    }
}

/// The subgraph of `graph` induced by `seeds`, undirected (an edge in either direction
/// joins two seeds), without self-loops or duplicates; node `i` is `seeds[i]`. Errors on a
/// seed out of range or listed twice.
pub fn seed_induced(graph: &Csr, seeds: &[u32]) -> Result<Csr> {
    let mut local: HashMap<u32, u32> = HashMap::with_capacity(seeds.len());
    for (i, &v) in seeds.iter().enumerate() {
        if v as usize >= graph.num_nodes {
            return Err(Error::invalid(format!(
                "seed_induced: seed {v} out of range for {} nodes",
                graph.num_nodes
            )));
        }
        if local.insert(v, i as u32).is_some() {
            return Err(Error::invalid(format!(
                "seed_induced: seed {v} appears twice"
            )));
        }
    }
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for (i, &v) in seeds.iter().enumerate() {
        for u in graph.neighbors(v) {
            if let Some(&j) = local.get(u) {
                if j != i as u32 {
                    src.push(j);
                    dst.push(i as u32);
                }
            }
        }
    }
    Ok(Csr::from_edges(seeds.len(), &src, &dst)?.symmetrize())
}

/// The plain METIS micro-batch partitioner: METIS k-way on the seed-induced subgraph of
/// `graph` (unweighted). Seeds with no edge to another seed go wherever METIS balances
/// them; `blocks` are only checked.
pub fn metis_seeds(
    seeds: &[u32],
    blocks: &[Arc<Block>],
    graph: &Csr,
    k: usize,
    seed: u64,
) -> Result<Vec<Vec<u32>>> {
    parts::check_batch("metis", seeds, blocks, k)?;
    let sub = seed_induced(graph, seeds)?;
    let mut labels = MetisGraph::from_symmetric_csr(&sub)?.part_kway(k, seed)?;
    Ok(parts::groups_filled(seeds, &mut labels, k))
}

/// METIS k-way on the undirected simple graph under `graph`: one label in `0..k` per node,
/// every label used. Errors when `k` is 0 or exceeds the node count.
pub fn metis_graph_partition(graph: &Csr, k: usize, seed: u64) -> Result<Vec<u32>> {
    parts::check_k("metis_graph_partition", graph.num_nodes, k)?;
    let mut labels = MetisGraph::from_csr(graph)?.part_kway(k, seed)?;
    parts::fill_empty(&mut labels, k);
    Ok(labels)
}

/// Edges of the undirected simple graph under `graph` (pairs `{u, v}`, `u != v`, joined in
/// either direction, counted once) whose endpoints have different labels. Errors when
/// `parts` does not hold one label per node.
pub fn edge_cut(graph: &Csr, parts: &[u32]) -> Result<u64> {
    if parts.len() != graph.num_nodes {
        return Err(Error::invalid(format!(
            "edge_cut: {} labels for {} nodes",
            parts.len(),
            graph.num_nodes
        )));
    }
    let mut cut: Vec<u64> = Vec::new();
    for v in 0..graph.num_nodes as u32 {
        for &u in graph.neighbors(v) {
            if u as usize >= graph.num_nodes {
                return Err(Error::invalid(format!("edge_cut: node {u} out of range")));
            }
            if parts[u as usize] != parts[v as usize] {
                let (a, b) = (u.min(v) as u64, u.max(v) as u64);
                cut.push(a << 32 | b);
            }
        }
    }
    cut.sort_unstable();
    cut.dedup();
    Ok(cut.len() as u64)
}

/// Undirected simple edges under `graph` (the denominator of an edge-cut fraction).
pub fn undirected_edges(graph: &Csr) -> u64 {
    let mut pairs: Vec<u64> = Vec::with_capacity(graph.num_edges());
    for v in 0..graph.num_nodes as u32 {
        for &u in graph.neighbors(v) {
            if u != v {
                pairs.push((u.min(v) as u64) << 32 | u.max(v) as u64);
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    pairs.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_triangles_split_at_the_bridge() {
        // 0-1-2 triangle, 3-4-5 triangle, bridge 2-3.
        let src = [0, 1, 2, 0, 3, 4, 5, 3, 2];
        let dst = [1, 2, 0, 2, 4, 5, 3, 5, 3];
        let g = Csr::from_edges(6, &src, &dst).unwrap();
        let labels = metis_graph_partition(&g, 2, 7).unwrap();
        assert_eq!(edge_cut(&g, &labels).unwrap(), 1, "{labels:?}");
        assert_eq!(undirected_edges(&g), 7);
        assert_eq!(labels, metis_graph_partition(&g, 2, 7).unwrap());
    }

    #[test]
    fn seed_induced_is_symmetric() {
        let g = Csr::from_edges(5, &[0, 1, 2, 4, 3], &[1, 2, 0, 0, 3]).unwrap();
        let s = seed_induced(&g, &[2, 0, 1]).unwrap();
        // local 0 = node 2, 1 = node 0, 2 = node 1: 2->0, 0->1, 1->2.
        assert_eq!(s.neighbors(0), &[1, 2]);
        assert_eq!(s.neighbors(1), &[0, 2]);
        assert_eq!(s.neighbors(2), &[0, 1]);
        assert!(seed_induced(&g, &[1, 1]).is_err());
    }

    #[test]
    fn bad_weights_are_errors() {
        let mut g = MetisGraph::from_rows(&[vec![(1, 1)], vec![(0, 0)]], true).unwrap();
        assert!(g.part_kway(2, 0).is_err());
        g.adjwgt = Some(vec![1, 1]);
        g.vwgt = Some(vec![1]);
        assert!(g.part_kway(2, 0).is_err());
        g.vwgt = None;
        assert_eq!(g.part_kway(1, 0).unwrap(), vec![0, 0]);
    }

    #[test]
    fn one_refinement_iteration_still_splits_at_the_bridge_and_zero_is_an_error() {
        let src = [0, 1, 2, 0, 3, 4, 5, 3, 2];
        let dst = [1, 2, 0, 2, 4, 5, 3, 5, 3];
        let csr = Csr::from_edges(6, &src, &dst).unwrap();
        let g = MetisGraph::from_csr(&csr).unwrap();
        let labels = g.part_kway_refined(2, 7, Some(1)).unwrap();
        assert_eq!(edge_cut(&csr, &labels).unwrap(), 1, "{labels:?}");
        assert!(g.part_kway_refined(2, 7, Some(0)).is_err());
    }
}
