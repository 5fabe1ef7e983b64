//! The graph Cherry hands METIS: the seeds' message-flow graph (MFG), undirected and
//! weighted by each source's out-degree, within METIS's 32-bit indices.
//!
//! The MFG of the seeds over `h` hops: every node within `h - 1` hops of a seed brings all
//! its in-edges (duplicates and self-loops dropped). [`FlowHops::One`] (the Cherry paper's
//! graph) stops at the seeds' own in-edges: seeds and the sources they read.
//! [`FlowHops::Layers`] follows all L hops of the model, so it holds every edge any
//! epoch's sample can draw, but on a graph whose seeds are a tenth of its nodes its 2-hop
//! MFG is nearly the whole graph (METIS on it cost 5-64x a Betty call). [`FlowHops::Auto`]
//! (the default) cuts the L-hop graph while it holds at most [`AUTO_ENTRIES_PER_SEED`]
//! adjacency entries per seed (a low-degree graph, whose 1-hop graph barely joins its
//! seeds), else the 1-hop one; its build stops as soon as it passes that size.
//!
//! Edge `u -> v` is weighted by its source's out-degree in the MFG (how many nodes read
//! `u`): cutting the edges of a widely read source is what copies it into several
//! micro-batches. Non-seed nodes keep vertex weight 0 ([`NonSeeds::Keep`]), and one that a
//! single MFG edge touches (a source read by one seed, in the 1-hop graph) is left out: with
//! weight 0 and one edge it never has to be cut, so dropping it changes no cut's cost.
//!
//! **64-bit safety.** No array METIS cannot index is built: the edge list is counted while
//! it is discovered and a graph past the limit is abandoned before its METIS arrays exist.
//! [`cut_graph`] then falls back to a smaller graph (the L-hop MFG to the 1-hop one, the
//! 1-hop one to its seed-induced part) and says so; only a seed-induced graph past the
//! limit is an error.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::Csr;
use crate::partition::kway::MetisGraph;

/// How many hops of in-edges the flow graph follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlowHops {
    /// As many hops as the model has layers while the graph stays within
    /// [`AUTO_ENTRIES_PER_SEED`] adjacency entries per seed, else one.
    #[default]
    Auto,
    /// The seeds' own in-edges: seeds and the sources they read (the Cherry paper's).
    One,
    /// As many hops as the model has layers.
    Layers,
}

/// [`FlowHops::Auto`]'s bound on the deeper graph: adjacency entries per seed (Betty's
/// REG, whose cut cost is the goal, holds 30-70 per seed on products-like). Chosen on
/// five graphs (`docs/PARTITIONING.md`): the 2-hop graph holds 9 per seed on road-like,
/// where it cuts 9% less redundancy than the 1-hop one, and 29-470 on as-like,
/// email-enron and products-like, where the 1-hop graph is within 2% or better.
pub const AUTO_ENTRIES_PER_SEED: usize = 16;

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

/// One flow graph to build: its hops, its non-seeds and its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    /// Hops of in-edges followed (at least 1).
    pub hops: usize,
    /// When set, the `hops`-hop graph is cut only if it holds at most this many adjacency
    /// entries per seed; the 1-hop graph otherwise ([`FlowHops::Auto`]).
    pub entries_per_seed: Option<usize>,
    /// Whether non-seeds stay in the graph.
    pub non_seeds: NonSeeds,
    /// Edge weights.
    pub weight: CherryWeight,
}

/// A flow graph and what it took to get one METIS can index.
#[derive(Clone, Debug)]
pub struct CutGraph {
    /// The graph: node `i < seeds.len()` is `seeds[i]`.
    pub graph: MetisGraph,
    /// The graph built (after any fallback).
    pub spec: FlowSpec,
    /// Why a smaller graph than asked for was built, if one was.
    pub fallback: Option<String>,
}

/// The flow graph `spec` asks for, or the first smaller one that fits METIS's 32-bit
/// indices (`hops` to 1, then non-seeds removed), with the reason in
/// [`CutGraph::fallback`]. Errors on a bad seed or when even the seed-induced graph does
/// not fit.
pub fn cut_graph(graph: &Csr, seeds: &[u32], spec: FlowSpec) -> Result<CutGraph> {
    cut_graph_within(graph, seeds, spec, i32::MAX as usize)
}

/// [`cut_graph`] with `limit` in place of `i32::MAX` (tests use a small one).
pub(crate) fn cut_graph_within(
    graph: &Csr,
    seeds: &[u32],
    spec: FlowSpec,
    limit: usize,
) -> Result<CutGraph> {
    let mut spec = spec;
    if let (Some(per_seed), true) = (spec.entries_per_seed, spec.hops > 1) {
        // Not a fallback: the deeper graph is only wanted while it is small. Its
        // discovery stops at 4x the bound in directed edges (leaves are dropped later).
        let entries = per_seed.saturating_mul(seeds.len()).min(limit);
        let edges = entries.saturating_mul(4).min(limit);
        if let Ok(g) = build(graph, seeds, spec, edges, entries)? {
            return Ok(CutGraph {
                graph: g,
                spec,
                fallback: None,
            });
        }
        spec.hops = 1;
    }
    let mut tries = vec![spec];
    if spec.hops > 1 {
        tries.push(FlowSpec { hops: 1, ..spec });
    }
    if spec.non_seeds == NonSeeds::Keep {
        tries.push(FlowSpec {
            hops: 1,
            non_seeds: NonSeeds::Remove,
            ..spec
        });
    }
    let mut refused: Vec<String> = Vec::new();
    for t in tries {
        match build(graph, seeds, t, limit, limit)? {
            Ok(g) => {
                let fallback = (!refused.is_empty()).then(|| {
                    format!(
                        "cherry: {}; cut the {} instead",
                        refused.join("; "),
                        describe(t)
                    )
                });
                return Ok(CutGraph {
                    graph: g,
                    spec: t,
                    fallback,
                });
            }
            Err(why) => refused.push(why),
        }
    }
    Err(Error::invalid(format!(
        "cherry: {}; use betty, buffalo or grem, or smaller batches",
        refused.join("; ")
    )))
}

/// The flow graph of `spec`, exactly (no fallback); an error if it does not fit METIS.
pub fn message_flow_graph(graph: &Csr, seeds: &[u32], spec: FlowSpec) -> Result<MetisGraph> {
    let limit = i32::MAX as usize;
    build(graph, seeds, spec, limit, limit)?.map_err(|why| Error::invalid(format!("cherry: {why}")))
}

/// A flow graph's name in messages.
fn describe(spec: FlowSpec) -> String {
    match spec.non_seeds {
        NonSeeds::Keep => format!("{}-hop message-flow graph", spec.hops),
        NonSeeds::Remove => format!("seed-induced part of the {}-hop flow graph", spec.hops),
    }
}

/// The seeds numbered first: `local[v]` is seed `v`'s local id (`u32::MAX` for every
/// other node) and `nodes` the seeds in local order; `Err` on a seed out of range or
/// listed twice.
fn seed_ids(graph: &Csr, seeds: &[u32]) -> Result<(Vec<u32>, Vec<u32>)> {
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
    Ok((local, nodes))
}

/// `Ok(Ok(graph))`; `Ok(Err(why))` when its discovery passes `max_edges` directed edges
/// or `limit` nodes, or the graph `limit` adjacency entries (all found before its METIS
/// arrays are allocated); `Err` on bad input.
fn build(
    graph: &Csr,
    seeds: &[u32],
    spec: FlowSpec,
    max_edges: usize,
    limit: usize,
) -> Result<std::result::Result<MetisGraph, String>> {
    if spec.hops == 0 {
        return Err(Error::invalid(
            "cherry: the flow graph needs at least 1 hop",
        ));
    }
    let too_large = |nodes: usize, edges: usize| {
        format!(
            "the {} of {} seeds has {nodes} nodes and {edges} edges or more, past the \
             {limit} adjacency entries METIS's 32-bit indices (idx_t) can hold",
            describe(spec),
            seeds.len()
        )
    };
    let s = seeds.len();
    let keep = spec.non_seeds == NonSeeds::Keep;
    if s > limit {
        return Ok(Err(too_large(s, 0)));
    }
    let (mut local, mut nodes) = seed_ids(graph, seeds)?;
    // Readers of each node (its MFG out-degree), and the directed edges the graph keeps
    // (src, dst) in local ids: all with non-seeds kept, seed to seed otherwise. Each dst's
    // sources are distinct and no edge is a loop.
    let mut outdeg = vec![0u32; s];
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    let mut frontier = 0..s;
    let mut row = Vec::new();
    for _ in 0..spec.hops {
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
                    outdeg.push(0);
                }
                outdeg[*slot as usize] += 1;
                if keep || ((*slot as usize) < s && i < s) {
                    src.push(*slot);
                    dst.push(i as u32);
                }
            }
            if src.len() > max_edges || (keep && nodes.len() > limit) {
                return Ok(Err(too_large(nodes.len(), src.len())));
            }
        }
        frontier = end..nodes.len();
    }
    drop(local);

    // Node ids in the METIS graph: seeds first, then the non-seeds two or more edges touch.
    let mut id: Vec<u32> = (0..s as u32).collect();
    if keep {
        let mut touched = vec![0u8; nodes.len()];
        for (&u, &v) in src.iter().zip(&dst) {
            touched[u as usize] = touched[u as usize].saturating_add(1);
            touched[v as usize] = touched[v as usize].saturating_add(1);
        }
        let mut next = s as u32;
        id.extend(touched[s..].iter().map(|&t| {
            if t >= 2 {
                next += 1;
                next - 1
            } else {
                u32::MAX
            }
        }));
    }
    let n = id.iter().filter(|&&x| x != u32::MAX).count();
    let mut kept: Vec<(u32, u32, u32)> = {
        let weight = edge_weight(spec.weight, &src, &outdeg);
        src.iter()
            .zip(&dst)
            .filter_map(|(&u, &v)| {
                let (a, b) = (id[u as usize], id[v as usize]);
                (a != u32::MAX && b != u32::MAX).then(|| (a, b, weight(u)))
            })
            .collect()
    };
    drop((src, dst, id, outdeg));
    if 2 * kept.len() > limit {
        return Ok(Err(too_large(nodes.len(), kept.len())));
    }
    let g = metis_arrays(n, &mut kept, spec.weight != CherryWeight::Unit);
    if keep {
        let mut vwgt = vec![0i32; n];
        vwgt[..s].fill(1);
        Ok(Ok(MetisGraph {
            vwgt: Some(vwgt),
            ..g
        }))
    } else {
        Ok(Ok(g))
    }
}

/// METIS's arrays of `n` nodes from directed weighted edges: both directions of each,
/// bucketed by row (counting sort), each row sorted and its repeated neighbours merged
/// (weights added), in parallel. The caller has checked that `2 * edges.len()` fits i32.
fn metis_arrays(n: usize, edges: &mut [(u32, u32, u32)], weighted: bool) -> MetisGraph {
    let mut ptr = vec![0usize; n + 1];
    for &(u, v, _) in edges.iter() {
        ptr[u as usize + 1] += 1;
        ptr[v as usize + 1] += 1;
    }
    for i in 0..n {
        ptr[i + 1] += ptr[i];
    }
    let mut adj = vec![(0u32, 0u32); ptr[n]];
    let mut next = ptr[..n].to_vec();
    for &(u, v, w) in edges.iter() {
        adj[next[u as usize]] = (v, w);
        next[u as usize] += 1;
        adj[next[v as usize]] = (u, w);
        next[v as usize] += 1;
    }
    drop(next);
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
    g
}

/// The weight of an edge from its source, per the scheme.
fn edge_weight<'a>(
    scheme: CherryWeight,
    src: &[u32],
    outdeg: &'a [u32],
) -> impl Fn(u32) -> u32 + 'a {
    let shift = match scheme {
        CherryWeight::OutDegree => {
            // Both directions of every edge land in METIS's weight array.
            let total = |shift: u32| -> u64 {
                src.iter()
                    .map(|&u| 2 * (1 + (outdeg[u as usize] as u64 >> shift)))
                    .sum()
            };
            (0..32).find(|&s| total(s) < 1 << 30).unwrap_or(31)
        }
        _ => 0,
    };
    move |u: u32| {
        let d = outdeg[u as usize].max(1);
        match scheme {
            CherryWeight::Unit => 1,
            CherryWeight::LogOutDegree => 1 + d.ilog2(),
            CherryWeight::OutDegree => 1 + (d >> shift),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(hops: usize, non_seeds: NonSeeds) -> FlowSpec {
        FlowSpec {
            hops,
            entries_per_seed: None,
            non_seeds,
            weight: CherryWeight::LogOutDegree,
        }
    }

    #[test]
    fn one_hop_graph_drops_sources_read_by_one_seed_and_weighs_by_readers() {
        // Seeds 0, 1, 2. Source 3 is read by 0 and 1, source 4 by 2 only, 1 reads 0.
        // 5 -> 3 is two hops away.
        let g = Csr::from_edges(6, &[3, 3, 4, 0, 5], &[0, 1, 2, 1, 3]).unwrap();
        let mfg = message_flow_graph(&g, &[0, 1, 2], spec(1, NonSeeds::Keep)).unwrap();
        // Locals: seeds 0, 1, 2; then 3 -> 3 (two readers: weight 2); 4 (one reader) out.
        assert_eq!(mfg.num_nodes(), 4);
        assert_eq!(mfg.xadj, vec![0, 2, 4, 4, 6]);
        assert_eq!(mfg.adjncy, vec![1, 3, 0, 3, 0, 1]);
        assert_eq!(mfg.adjwgt, Some(vec![1, 2, 1, 2, 2, 2]));
        assert_eq!(mfg.vwgt, Some(vec![1, 1, 1, 0]));
        // Two hops bring 5 -> 3, so 3 has three edges and 5 one (left out).
        let two = message_flow_graph(&g, &[0, 1, 2], spec(2, NonSeeds::Keep)).unwrap();
        assert_eq!(two.num_nodes(), 4);
        // The seed-induced part: the edge 0 - 1 only.
        let seeds_only = message_flow_graph(&g, &[0, 1, 2], spec(1, NonSeeds::Remove)).unwrap();
        assert_eq!(seeds_only.xadj, vec![0, 1, 2, 2]);
        assert_eq!(seeds_only.adjncy, vec![1, 0]);
    }

    #[test]
    fn a_graph_past_the_limit_falls_back_to_a_smaller_one_and_says_so() {
        // A path 0 <- 1 <- 2 <- 3 <- 4 and 2 -> 0, seeds 0 and 1.
        let g = Csr::from_edges(5, &[1, 2, 2, 3, 4], &[0, 0, 1, 2, 3]).unwrap();
        let asked = spec(3, NonSeeds::Keep);
        let full = cut_graph_within(&g, &[0, 1], asked, 100).unwrap();
        assert_eq!(full.spec, asked);
        assert!(full.fallback.is_none());
        // 3 hops: 4 edges (8 entries; 4 -> 3 left out) do not fit 7; 1 hop: 6 entries.
        let one = cut_graph_within(&g, &[0, 1], asked, 7).unwrap();
        assert_eq!(one.spec, spec(1, NonSeeds::Keep));
        assert_eq!(one.graph.num_entries(), 6);
        let why = one.fallback.unwrap();
        assert!(why.contains("3-hop") && why.contains("32-bit"), "{why}");
        // Seed-induced: 1 -> 0 (2 entries).
        let seeds = cut_graph_within(&g, &[0, 1], asked, 5).unwrap();
        assert_eq!(seeds.spec, spec(1, NonSeeds::Remove));
        assert_eq!(seeds.graph.num_entries(), 2);
        let err = cut_graph_within(&g, &[0, 1], asked, 1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("seed-induced") && err.contains("betty"),
            "{err}"
        );
    }

    #[test]
    fn auto_hops_cut_the_deeper_graph_only_while_it_is_small() {
        // The path of the fallback test: 3 hops give 8 entries for 2 seeds (4 per seed),
        // 1 hop gives 6.
        let g = Csr::from_edges(5, &[1, 2, 2, 3, 4], &[0, 0, 1, 2, 3]).unwrap();
        let auto = |per_seed| FlowSpec {
            entries_per_seed: Some(per_seed),
            ..spec(3, NonSeeds::Keep)
        };
        let deep = cut_graph(&g, &[0, 1], auto(4)).unwrap();
        assert_eq!((deep.spec.hops, deep.graph.num_entries()), (3, 8));
        let shallow = cut_graph(&g, &[0, 1], auto(3)).unwrap();
        assert_eq!((shallow.spec.hops, shallow.graph.num_entries()), (1, 6));
        // Choosing the smaller graph by design is no fallback.
        assert!(shallow.fallback.is_none());
    }

    #[test]
    fn bad_seeds_are_errors() {
        let g = Csr::from_edges(3, &[1], &[0]).unwrap();
        let s = spec(1, NonSeeds::Keep);
        assert!(cut_graph(&g, &[0, 0], s).is_err());
        assert!(cut_graph(&g, &[7], s).is_err());
        assert!(cut_graph(&g, &[0], spec(0, NonSeeds::Keep)).is_err());
    }
}
