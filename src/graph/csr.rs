//! In-edge compressed sparse rows: the graph storage every sampler, block and op reads.
//!
//! Row `v` lists the in-neighbours (sources) of destination node `v`:
//! `indices[indptr[v]..indptr[v + 1]]`. Node ids are `u32`; offsets are `u64`, so a graph
//! with more than 4 billion edges is representable. `edge_ids`, when present, maps each CSR
//! position back to the edge's position in the input edge list.
//!
//! The arrays are [`Array`]s: owned when built here, or windows of the memory-mapped
//! dataset cache, whose pages are read on demand. Everything that builds a new graph
//! (`from_edges`, `symmetrize`...) returns an owned one.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::array::Array;

/// In-edge CSR (dst-major).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    /// Number of nodes; rows are `0..num_nodes`, and every index is below it.
    pub num_nodes: usize,
    /// `num_nodes + 1` offsets into `indices`.
    pub indptr: Array<u64>,
    /// Source node of each edge, grouped by destination.
    pub indices: Array<u32>,
    /// Optional original edge id of each CSR position.
    pub edge_ids: Option<Array<u64>>,
}

impl Csr {
    /// Builds the in-edge CSR of the directed edges `src[i] -> dst[i]`. Edges of one
    /// destination keep their input order (a stable counting sort); `edge_ids` records the
    /// input position of each edge.
    pub fn from_edges(num_nodes: usize, src: &[u32], dst: &[u32]) -> Result<Csr> {
        if src.len() != dst.len() {
            return Err(Error::invalid(format!(
                "edge list: {} sources but {} destinations",
                src.len(),
                dst.len()
            )));
        }
        if num_nodes > u32::MAX as usize {
            return Err(Error::invalid(format!(
                "{num_nodes} nodes do not fit u32 node ids"
            )));
        }
        let out_of_range = src
            .par_iter()
            .chain(dst.par_iter())
            .any(|&v| v as usize >= num_nodes);
        if out_of_range {
            let (i, v) = src
                .iter()
                .chain(dst.iter())
                .enumerate()
                .find(|(_, &v)| v as usize >= num_nodes)
                .map(|(i, &v)| (i % src.len().max(1), v))
                .unwrap_or((0, 0));
            return Err(Error::invalid(format!(
                "edge {i}: node id {v} out of range for {num_nodes} nodes"
            )));
        }
        let mut indptr = vec![0u64; num_nodes + 1];
        for &d in dst {
            indptr[d as usize + 1] += 1;
        }
        for v in 0..num_nodes {
            indptr[v + 1] += indptr[v];
        }
        let mut next: Vec<u64> = indptr[..num_nodes].to_vec();
        let mut indices = vec![0u32; src.len()];
        let mut edge_ids = vec![0u64; src.len()];
        for (e, (&s, &d)) in src.iter().zip(dst).enumerate() {
            let slot = next[d as usize] as usize;
            next[d as usize] += 1;
            indices[slot] = s;
            edge_ids[slot] = e as u64;
        }
        Ok(Csr {
            num_nodes,
            indptr: indptr.into(),
            indices: indices.into(),
            edge_ids: Some(edge_ids.into()),
        })
    }

    /// Number of edges.
    pub fn num_edges(&self) -> usize {
        self.indices.len()
    }

    /// In-neighbours of `v`, in CSR order.
    pub fn neighbors(&self, v: u32) -> &[u32] {
        let (a, b) = self.range(v);
        &self.indices[a..b]
    }

    /// The CSR positions of `v`'s in-edges.
    pub fn range(&self, v: u32) -> (usize, usize) {
        (
            self.indptr[v as usize] as usize,
            self.indptr[v as usize + 1] as usize,
        )
    }

    /// In-degree of every node.
    pub fn in_degrees(&self) -> Vec<u32> {
        self.indptr
            .windows(2)
            .map(|w| (w[1] - w[0]) as u32)
            .collect()
    }

    /// Out-degree of every node (how many rows list it as a source).
    pub fn out_degrees(&self) -> Vec<u32> {
        let mut deg = vec![0u32; self.num_nodes];
        for &s in self.indices.iter() {
            deg[s as usize] += 1;
        }
        deg
    }

    /// The transposed graph: row `u` lists the destinations of `u`'s out-edges, in
    /// increasing destination order. `edge_ids` hold CSR positions of `self`.
    pub fn transpose(&self) -> Csr {
        let n = self.num_nodes;
        let mut indptr = vec![0u64; n + 1];
        for &s in self.indices.iter() {
            indptr[s as usize + 1] += 1;
        }
        for v in 0..n {
            indptr[v + 1] += indptr[v];
        }
        let mut next: Vec<u64> = indptr[..n].to_vec();
        let mut indices = vec![0u32; self.indices.len()];
        let mut edge_ids = vec![0u64; self.indices.len()];
        for d in 0..n {
            let (a, b) = self.range(d as u32);
            for pos in a..b {
                let s = self.indices[pos] as usize;
                let slot = next[s] as usize;
                next[s] += 1;
                indices[slot] = d as u32;
                edge_ids[slot] = pos as u64;
            }
        }
        Csr {
            num_nodes: n,
            indptr: indptr.into(),
            indices: indices.into(),
            edge_ids: Some(edge_ids.into()),
        }
    }

    /// The heap bytes [`Csr::symmetrize`] holds at its peak, at most: the transpose (offsets,
    /// next slots, sources and edge ids), a row list per node (two edges per edge at most)
    /// and the result. For memory admission ([`crate::admission`]) before it runs.
    pub fn symmetrize_bytes(&self) -> u128 {
        let (n, e) = (self.num_nodes as u128 + 1, self.num_edges() as u128);
        (16 * n + 12 * e) + (24 * n + 8 * e) + (8 * n + 8 * e)
    }

    /// Adds the reverse of every edge, then sorts each row and drops duplicate edges
    /// (self-loops are kept once). Edge ids are dropped: edges no longer map one to one.
    pub fn symmetrize(&self) -> Csr {
        let t = self.transpose();
        let n = self.num_nodes;
        let mut rows: Vec<Vec<u32>> = (0..n as u32)
            .into_par_iter()
            .map(|v| {
                let mut row: Vec<u32> = self
                    .neighbors(v)
                    .iter()
                    .chain(t.neighbors(v))
                    .copied()
                    .collect();
                row.sort_unstable();
                row.dedup();
                row
            })
            .collect();
        Self::from_rows(n, &mut rows)
    }

    /// Sorts each row by source id and drops duplicate edges.
    pub fn dedup(&self) -> Csr {
        self.map_rows(|_, row| {
            row.sort_unstable();
            row.dedup();
        })
    }

    /// Adds a self-loop to every node that has none (appended at the end of its row).
    pub fn add_self_loops(&self) -> Csr {
        self.map_rows(|v, row| {
            if !row.contains(&v) {
                row.push(v);
            }
        })
    }

    /// Removes every self-loop.
    pub fn remove_self_loops(&self) -> Csr {
        self.map_rows(|v, row| row.retain(|&s| s != v))
    }

    fn map_rows(&self, f: impl Fn(u32, &mut Vec<u32>) + Sync) -> Csr {
        let mut rows: Vec<Vec<u32>> = (0..self.num_nodes as u32)
            .into_par_iter()
            .map(|v| {
                let mut row = self.neighbors(v).to_vec();
                f(v, &mut row);
                row
            })
            .collect();
        Self::from_rows(self.num_nodes, &mut rows)
    }

    fn from_rows(num_nodes: usize, rows: &mut [Vec<u32>]) -> Csr {
        let mut indptr = Vec::with_capacity(num_nodes + 1);
        indptr.push(0u64);
        let mut total = 0u64;
        for r in rows.iter() {
            total += r.len() as u64;
            indptr.push(total);
        }
        let mut indices = Vec::with_capacity(total as usize);
        for r in rows.iter_mut() {
            indices.append(r);
        }
        Csr {
            num_nodes,
            indptr: indptr.into(),
            indices: indices.into(),
            edge_ids: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_edges_groups_by_dst_and_keeps_order() {
        let csr = Csr::from_edges(4, &[1, 2, 0, 3, 1], &[0, 0, 2, 2, 3]).unwrap();
        assert_eq!(csr.indptr, vec![0, 2, 2, 4, 5]);
        assert_eq!(csr.indices, vec![1, 2, 0, 3, 1]);
        assert_eq!(csr.in_degrees(), vec![2, 0, 2, 1]);
        assert_eq!(csr.out_degrees(), vec![1, 2, 1, 1]);
    }

    #[test]
    fn out_of_range_is_an_error() {
        assert!(Csr::from_edges(2, &[0, 5], &[1, 0]).is_err());
        assert!(Csr::from_edges(2, &[0], &[1, 0]).is_err());
    }

    #[test]
    fn symmetrize_dedups_and_sorts() {
        let csr = Csr::from_edges(3, &[0, 0, 1, 2], &[1, 1, 2, 2]).unwrap();
        let s = csr.symmetrize();
        assert_eq!(s.neighbors(0), &[1]);
        assert_eq!(s.neighbors(1), &[0, 2]);
        assert_eq!(s.neighbors(2), &[1, 2]);
        let t = s.remove_self_loops().add_self_loops();
        assert_eq!(t.neighbors(0), &[1, 0]);
        assert_eq!(t.neighbors(2), &[1, 2]);
    }
}
