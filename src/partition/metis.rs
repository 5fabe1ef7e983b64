//! `metis`: METIS k-way partitioning (Karypis & Kumar) of the graph induced on the seeds,
//! so that seeds linked by an edge tend to share a micro-batch and, with them, their
//! sampled neighbourhoods (lower redundancy than `random` on graphs with locality).
//!
//! The induced graph keeps every edge of the sampling graph between two seeds, in either
//! direction, made undirected, without self-loops or duplicates, as METIS requires. Vertex
//! and edge weights are 1: parts are balanced in seeds. METIS is seeded from the run's seed.
//!
//! METIS may leave a part empty (tiny or edgeless inputs, K close to the number of seeds);
//! each empty part then takes the second half of the currently largest part, so exactly K
//! non-empty parts come back. The induced graph depends only on the seeds, so the answer is
//! cached and reused while the batch's seeds and K stay the same (every epoch of full-batch
//! training).

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::partition::{Batch, Partitioner};

const UNMARKED: u32 = u32::MAX;

/// The last answer and what it was asked.
#[derive(Debug)]
struct Cached {
    seeds: Vec<u32>,
    k: usize,
    seed: u64,
    parts: Vec<Vec<u32>>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct MetisPartitioner {
    cache: Option<Cached>,
    /// Seed position of each graph node, `UNMARKED` between calls.
    pos: Vec<u32>,
}

impl Partitioner for MetisPartitioner {
    fn name(&self) -> &str {
        "metis"
    }

    fn partition(&mut self, batch: &Batch<'_>, k: usize) -> Result<Vec<Vec<u32>>> {
        if let Some(c) = &self.cache {
            if c.k == k && c.seed == batch.seed && c.seeds == batch.seeds {
                return Ok(c.parts.clone());
            }
        }
        let (xadj, adjncy) = self.induced_graph(batch)?;
        let n = batch.seeds.len();
        let idx = |v: usize, what: &str| {
            metis::Idx::try_from(v)
                .map_err(|_| Error::invalid(format!("metis: {v} {what} do not fit METIS indices")))
        };
        let xadj = xadj
            .iter()
            .map(|&v| idx(v, "edges"))
            .collect::<Result<Vec<_>>>()?;
        let adjncy = adjncy
            .iter()
            .map(|&v| idx(v as usize, "seeds"))
            .collect::<Result<Vec<_>>>()?;
        let mut part = vec![0 as metis::Idx; n];
        let metis_err = |e: String| Error::Backend {
            backend: "metis",
            msg: format!("k-way partition of {n} seeds into {k} parts: {e}"),
        };
        metis::Graph::new(1, idx(k, "parts")?, &xadj, &adjncy)
            .map_err(|e| metis_err(format!("{e:?}")))?
            .set_option(metis::option::Seed(
                (batch.seed & 0x3fff_ffff) as metis::Idx,
            ))
            .part_kway(&mut part)
            .map_err(|e| metis_err(format!("{e:?}")))?;
        let mut parts = vec![Vec::new(); k];
        for (&s, &p) in batch.seeds.iter().zip(&part) {
            let p = usize::try_from(p)
                .ok()
                .filter(|&p| p < k)
                .ok_or_else(|| metis_err(format!("part {p} out of range")))?;
            parts[p].push(s);
        }
        fill_empty_parts(&mut parts);
        self.cache = Some(Cached {
            seeds: batch.seeds.to_vec(),
            k,
            seed: batch.seed,
            parts: parts.clone(),
        });
        Ok(parts)
    }
}

impl MetisPartitioner {
    /// CSR (offsets, neighbour positions) of the undirected simple graph on the seeds.
    fn induced_graph(&mut self, batch: &Batch<'_>) -> Result<(Vec<usize>, Vec<u32>)> {
        let g = batch.graph;
        if self.pos.len() != g.num_nodes {
            self.pos = vec![UNMARKED; g.num_nodes];
        }
        for (i, &s) in batch.seeds.iter().enumerate() {
            let slot = self.pos.get_mut(s as usize).ok_or_else(|| {
                Error::invalid(format!(
                    "metis: seed {s} out of range for {} nodes",
                    g.num_nodes
                ))
            });
            match slot {
                Ok(slot) => *slot = i as u32,
                Err(e) => {
                    self.unmark(&batch.seeds[..i]);
                    return Err(e);
                }
            }
        }
        let pos = &self.pos;
        let mut pairs: Vec<(u32, u32)> = batch
            .seeds
            .par_iter()
            .enumerate()
            .flat_map_iter(|(i, &s)| {
                let i = i as u32;
                g.neighbors(s)
                    .iter()
                    .filter_map(move |&u| pos.get(u as usize).copied())
                    .filter(move |&j| j != UNMARKED && j != i)
                    .flat_map(move |j| [(i, j), (j, i)])
            })
            .collect();
        self.unmark(batch.seeds);
        pairs.par_sort_unstable();
        pairs.dedup();
        let mut xadj = vec![0usize; batch.seeds.len() + 1];
        for &(i, _) in &pairs {
            xadj[i as usize + 1] += 1;
        }
        for i in 0..batch.seeds.len() {
            xadj[i + 1] += xadj[i];
        }
        Ok((xadj, pairs.into_iter().map(|(_, j)| j).collect()))
    }

    fn unmark(&mut self, seeds: &[u32]) {
        for &s in seeds {
            if let Some(p) = self.pos.get_mut(s as usize) {
                *p = UNMARKED;
            }
        }
    }
}

/// Gives every empty part the second half of the largest part (lowest index on ties).
/// Needs at least as many items as parts.
pub fn fill_empty_parts(parts: &mut [Vec<u32>]) {
    while let Some(empty) = parts.iter().position(Vec::is_empty) {
        let (largest, len) = parts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, p.len()))
            .fold((0, 0), |best, cur| if cur.1 > best.1 { cur } else { best });
        if len < 2 {
            return;
        }
        let tail = parts[largest].split_off(len / 2);
        parts[empty] = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_parts_are_filled() {
        let mut p = vec![vec![1, 2, 3, 4, 5], vec![], vec![6], vec![]];
        fill_empty_parts(&mut p);
        assert!(p.iter().all(|p| !p.is_empty()), "{p:?}");
        let mut all: Vec<u32> = p.concat();
        all.sort_unstable();
        assert_eq!(all, vec![1, 2, 3, 4, 5, 6]);
    }
}
