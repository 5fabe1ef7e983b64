//! The edges: each node's in-edges drawn from its own class with probability `h` and from
//! any node otherwise, proportional to the Chung-Lu weights, distinct and without
//! self-loops, node chunk by node chunk so that the result does not depend on threads.

use rayon::prelude::*;

use crate::graph::csr::Csr;
use crate::rng::Rng;

use super::alias::{build_alias, draw, Alias};
use super::draws::NODE_CHUNK;

/// Draws the in-edges of node chunks: the alias tables over all nodes and per class.
/// Chunk `ci` (nodes `ci * NODE_CHUNK..`) uses its own random stream, so chunks can be
/// drawn in any order, in parallel or one by one, with the same result.
pub(super) struct EdgeSampler<'a> {
    classes: &'a [u32],
    degrees: &'a [u32],
    global: Vec<Alias>,
    /// Class `c`'s members are `members[start[c]..start[c + 1]]`, and their table is
    /// `class_tables[start[c]..start[c + 1]]`.
    start: Vec<usize>,
    members: Vec<u32>,
    class_tables: Vec<Alias>,
    h: f64,
    seed: u64,
}

impl<'a> EdgeSampler<'a> {
    pub(super) fn new(
        classes: &'a [u32],
        w: &[f64],
        degrees: &'a [u32],
        num_classes: usize,
        h: f64,
        seed: u64,
    ) -> Self {
        let n = w.len();
        // Global table.
        let mut global = vec![Alias::default(); n];
        build_alias(w, &mut global);
        // Per-class tables over the class members (counting sort by class).
        let mut start = vec![0usize; num_classes + 1];
        for &c in classes {
            start[c as usize + 1] += 1;
        }
        for c in 0..num_classes {
            start[c + 1] += start[c];
        }
        let mut members = vec![0u32; n];
        let mut next = start.clone();
        for (v, &c) in classes.iter().enumerate() {
            members[next[c as usize]] = v as u32;
            next[c as usize] += 1;
        }
        let mut class_tables = vec![Alias::default(); n];
        {
            let mut rest = class_tables.as_mut_slice();
            let mut jobs = Vec::with_capacity(num_classes);
            for c in 0..num_classes {
                let (head, tail) = rest.split_at_mut(start[c + 1] - start[c]);
                jobs.push((c, head));
                rest = tail;
            }
            jobs.into_par_iter().for_each(|(c, out)| {
                let ws: Vec<f64> = members[start[c]..start[c + 1]]
                    .iter()
                    .map(|&v| w[v as usize])
                    .collect();
                build_alias(&ws, out);
            });
        }
        EdgeSampler {
            classes,
            degrees,
            global,
            start,
            members,
            class_tables,
            h,
            seed,
        }
    }

    /// Number of node chunks.
    pub(super) fn chunks(&self) -> usize {
        self.degrees.len().div_ceil(NODE_CHUNK)
    }

    /// The nodes of chunk `ci`.
    pub(super) fn nodes(&self, ci: usize) -> std::ops::Range<usize> {
        ci * NODE_CHUNK..((ci + 1) * NODE_CHUNK).min(self.degrees.len())
    }

    /// Edges of chunk `ci`.
    pub(super) fn chunk_edges(&self, ci: usize) -> usize {
        self.degrees[self.nodes(ci)]
            .iter()
            .map(|&d| d as usize)
            .sum()
    }

    /// Fills `out` (of [`EdgeSampler::chunk_edges`] values) with the rows of chunk `ci`,
    /// one after the other: row `v` holds `degrees[v]` distinct sources, sorted, none
    /// equal to `v`.
    pub(super) fn chunk(&self, ci: usize, out: &mut [u32]) {
        let n = self.degrees.len();
        let mut rng = Rng::fork(self.seed, ci as u64);
        let mut buf: Vec<u32> = Vec::new();
        let mut pos = 0;
        for v in self.nodes(ci) {
            let deg = self.degrees[v] as usize;
            if deg == 0 {
                continue;
            }
            let c = self.classes[v] as usize;
            let own = &self.class_tables[self.start[c]..self.start[c + 1]];
            let own_members = &self.members[self.start[c]..self.start[c + 1]];
            buf.clear();
            // Own-class edges: Binomial(deg, h), at most the other members of the class.
            let k_own = if own.len() > 1 {
                let k = (0..deg).filter(|_| rng.uniform() < self.h).count();
                k.min(own.len() - 1)
            } else {
                0
            };
            let (exclude, r) = (v as u32, &mut rng);
            let own_draw = |r: &mut Rng| own_members[draw(own, r)];
            fill_distinct(&mut buf, k_own, exclude, r, own_draw, own.len(), |i| {
                own_members[i]
            });
            let any_draw = |r: &mut Rng| draw(&self.global, r) as u32;
            fill_distinct(&mut buf, deg, exclude, r, any_draw, n, |i| i as u32);
            out[pos..pos + deg].copy_from_slice(&buf);
            pos += deg;
        }
    }
}

/// The in-edge CSR of [`EdgeSampler`]'s rows. The CSR order is the input order
/// (`edge_ids` = identity), so a written copy reads back to the same graph.
pub(super) fn in_edges(sampler: &EdgeSampler) -> Csr {
    let n = sampler.degrees.len();
    let mut indptr = Vec::with_capacity(n + 1);
    indptr.push(0u64);
    let mut total = 0u64;
    for &d in sampler.degrees {
        total += d as u64;
        indptr.push(total);
    }
    let mut indices = vec![0u32; total as usize];
    // Split the output by node chunk.
    let mut jobs = Vec::with_capacity(sampler.chunks());
    {
        let mut rest = indices.as_mut_slice();
        for ci in 0..sampler.chunks() {
            let (chunk, tail) = rest.split_at_mut(sampler.chunk_edges(ci));
            jobs.push((ci, chunk));
            rest = tail;
        }
    }
    jobs.into_par_iter()
        .for_each(|(ci, out)| sampler.chunk(ci, out));
    let edge_ids: Vec<u64> = (0..total).into_par_iter().collect();
    Csr {
        num_nodes: n,
        indptr: indptr.into(),
        indices: indices.into(),
        edge_ids: Some(edge_ids.into()),
    }
}

/// Grows the sorted, duplicate-free `buf` to `len` ids, none equal to `exclude`, drawing
/// with `draw`; if draws keep hitting ids already taken (a target set nearly exhausted),
/// the next free ids of `pool` after a random start are taken instead.
fn fill_distinct(
    buf: &mut Vec<u32>,
    len: usize,
    exclude: u32,
    rng: &mut Rng,
    mut draw: impl FnMut(&mut Rng) -> u32,
    pool_len: usize,
    pool: impl Fn(usize) -> u32,
) {
    let mut rounds = 0;
    while buf.len() < len && rounds < 32 {
        for _ in buf.len()..len {
            let t = draw(rng);
            if t != exclude {
                buf.push(t);
            }
        }
        buf.sort_unstable();
        buf.dedup();
        rounds += 1;
    }
    if buf.len() < len {
        let mut i = rng.below(pool_len as u64) as usize;
        for _ in 0..pool_len {
            let t = pool(i);
            if t != exclude {
                if let Err(at) = buf.binary_search(&t) {
                    buf.insert(at, t);
                    if buf.len() == len {
                        break;
                    }
                }
            }
            i = (i + 1) % pool_len;
        }
    }
}
