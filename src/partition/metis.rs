//! `metis`: METIS k-way partitioning (Karypis & Kumar) of the graph induced on the seeds,
//! so that seeds linked by an edge tend to share a micro-batch and, with them, their
//! sampled neighbourhoods (lower redundancy than `random` on graphs with locality).
//!
//! The work is [`kway::metis_seeds`]: the induced graph keeps every edge of the sampling
//! graph between two seeds, in either direction, made undirected, without self-loops or
//! duplicates, as METIS requires ([`kway::seed_induced`]). Vertex and edge weights are 1:
//! parts are balanced in seeds. METIS is seeded from the run's seed and called under the
//! process-wide METIS lock; parts it leaves empty are refilled from the largest
//! ([`crate::partition::parts::fill_empty`]), so exactly K non-empty parts come back.
//!
//! The induced graph depends only on the seeds, so the answer is cached and reused while
//! the batch's seeds and K stay the same (every epoch of full-batch training).

use crate::error::Result;
use crate::graph::Csr;
use crate::partition::kway;
use crate::partition::{Batch, Partitioner};

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
}

impl Partitioner for MetisPartitioner {
    fn name(&self) -> &str {
        "metis"
    }

    fn partition(&mut self, batch: &Batch<'_>, k: usize) -> Result<Vec<Vec<u32>>> {
        if let Some(parts) = self.cached(batch.seeds, batch.graph, k, batch.seed) {
            return Ok(parts);
        }
        let parts = kway::metis_seeds(batch.seeds, batch.blocks(), batch.graph, k, batch.seed)?;
        self.cache = Some(Cached {
            seeds: batch.seeds.to_vec(),
            k,
            seed: batch.seed,
            parts: parts.clone(),
        });
        Ok(parts)
    }

    fn cached(&self, seeds: &[u32], _graph: &Csr, k: usize, seed: u64) -> Option<Vec<Vec<u32>>> {
        let c = self.cache.as_ref()?;
        (c.k == k && c.seed == seed && c.seeds == seeds).then(|| c.parts.clone())
    }
}
