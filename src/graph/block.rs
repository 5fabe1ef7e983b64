//! Blocks: the bipartite message-flow graphs one GNN layer runs on (DGL's convention).
//!
//! A block has `num_src` source nodes and `num_dst` destination nodes; the dst nodes are a
//! prefix of the src nodes (`src_nodes[..num_dst]` are the dst nodes' global ids), so a
//! layer reads a dst node's own previous representation at the same local index. Edges are
//! grouped by dst (`indptr`, `indices` hold local src ids) and, within a dst node, kept in
//! the graph's CSR order. The transposed CSR (per src: the dst nodes it feeds and the edge
//! positions) is built with the block, because every backward pass of a segment reduction
//! runs over it (deterministic, no float atomics).
//!
//! Offsets are u32: one block holds fewer than 2³² edges (GPU kernels index with u32).
//!
//! A block also keeps the copies of its index arrays that GPU backends make on first use
//! ([`Block::device_copy`]): one upload per block and device, however many layers and
//! backward passes read it, freed when the block is dropped. A block is treated as
//! immutable once it has run on a device; a clone starts without device copies.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::error::{Error, Result};

/// One layer's message-flow graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Number of source nodes (rows of the layer's input).
    pub num_src: usize,
    /// Number of destination nodes (rows of the layer's output); a prefix of the sources.
    pub num_dst: usize,
    /// `num_dst + 1` offsets into `indices`.
    pub indptr: Vec<u32>,
    /// Local source index of each edge, grouped by destination.
    pub indices: Vec<u32>,
    /// Global node id of each local source; the first `num_dst` are the destinations.
    pub src_nodes: Vec<u32>,
    /// `num_src + 1` offsets into `t_dst` / `t_edges`: the out-edges of each source.
    pub t_indptr: Vec<u32>,
    /// Local destination of each out-edge, grouped by source (increasing edge position).
    pub t_dst: Vec<u32>,
    /// Position in `indices` of each out-edge.
    pub t_edges: Vec<u32>,
    /// Uploads of the index arrays, per device (not part of the block's value).
    device_copies: DeviceCopies,
}

/// A backend's copy of a block's index arrays, keyed by device, and the stamp of the
/// arrays last found valid ([`Block::validated`]). Equality, cloning and defaults ignore
/// it: it is a cache of the block's value, not part of it.
#[derive(Default)]
struct DeviceCopies(
    Mutex<HashMap<Device, DeviceCopy>>,
    Mutex<Option<[usize; 12]>>,
);

/// One device's copy and the stamp of the arrays it was made from.
struct DeviceCopy {
    stamp: [usize; 12],
    data: Arc<dyn Any + Send + Sync>,
}

impl Clone for DeviceCopies {
    /// Empty: a clone may be changed before it runs, so it makes its own uploads.
    fn clone(&self) -> Self {
        DeviceCopies::default()
    }
}

impl PartialEq for DeviceCopies {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for DeviceCopies {}

impl std::fmt::Debug for DeviceCopies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut devices: Vec<&Device> = map.keys().collect();
        devices.sort();
        write!(f, "DeviceCopies({devices:?})")
    }
}

impl Block {
    /// Builds a block from its CSR; computes the transposed CSR. Checks every invariant.
    pub fn new(
        num_src: usize,
        indptr: Vec<u32>,
        indices: Vec<u32>,
        src_nodes: Vec<u32>,
    ) -> Result<Block> {
        let num_dst = indptr
            .len()
            .checked_sub(1)
            .ok_or_else(|| Error::invalid("block: empty indptr"))?;
        if num_dst > num_src || src_nodes.len() != num_src {
            return Err(Error::invalid(format!(
                "block: {num_dst} dst nodes, {num_src} src nodes, {} src ids (dst must be a prefix of src)",
                src_nodes.len()
            )));
        }
        if indptr[0] != 0
            || indptr.windows(2).any(|w| w[0] > w[1])
            || indptr[num_dst] as usize != indices.len()
        {
            return Err(Error::invalid(
                "block: indptr is not a valid offset array".to_string(),
            ));
        }
        if let Some(&bad) = indices.iter().find(|&&s| s as usize >= num_src) {
            return Err(Error::invalid(format!(
                "block: src index {bad} out of range for {num_src} sources"
            )));
        }
        let mut t_indptr = vec![0u32; num_src + 1];
        for &s in &indices {
            t_indptr[s as usize + 1] += 1;
        }
        for i in 0..num_src {
            t_indptr[i + 1] += t_indptr[i];
        }
        let mut next = t_indptr[..num_src].to_vec();
        let mut t_dst = vec![0u32; indices.len()];
        let mut t_edges = vec![0u32; indices.len()];
        for d in 0..num_dst {
            for e in indptr[d]..indptr[d + 1] {
                let s = indices[e as usize] as usize;
                let slot = next[s] as usize;
                next[s] += 1;
                t_dst[slot] = d as u32;
                t_edges[slot] = e;
            }
        }
        Ok(Block {
            num_src,
            num_dst,
            indptr,
            indices,
            src_nodes,
            t_indptr,
            t_dst,
            t_edges,
            device_copies: DeviceCopies::default(),
        })
    }

    /// Runs `check` (an O(edges) validation of the arrays the kernels index by) once per
    /// block: a success is remembered with the block's stamp, so the many ops that read
    /// one block (every layer, forward and backward, every epoch of a cached batch) do not
    /// walk its edges again. The same caveat as [`Block::device_copy`] applies: values
    /// changed in place after a check are not detected.
    pub fn validated(&self, check: impl FnOnce(&Block) -> Result<()>) -> Result<()> {
        let stamp = self.stamp();
        let mut valid = self
            .device_copies
            .1
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *valid == Some(stamp) {
            return Ok(());
        }
        check(self)?;
        *valid = Some(stamp);
        Ok(())
    }

    /// The copy of this block's index arrays on `device`, made by `upload` on first use and
    /// shared by every later call (the segment ops' kernels read it forward and backward).
    ///
    /// A copy is remade if a field was replaced or resized since it was made (the stamp
    /// holds every array's address and length); changing values in place after a block
    /// has run on a device is not detected: clone the block instead.
    pub fn device_copy<T: Any + Send + Sync>(
        &self,
        device: Device,
        upload: impl FnOnce(&Block) -> Result<T>,
    ) -> Result<Arc<T>> {
        let stamp = self.stamp();
        // Held during the upload, so two threads never upload the same block twice.
        let mut map = self
            .device_copies
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(&device).filter(|c| c.stamp == stamp) {
            if let Ok(data) = c.data.clone().downcast::<T>() {
                return Ok(data);
            }
        }
        // Drop a stale copy before making its replacement: device memory is what is short.
        map.remove(&device);
        let data = Arc::new(upload(self)?);
        map.insert(
            device,
            DeviceCopy {
                stamp,
                data: data.clone(),
            },
        );
        Ok(data)
    }

    /// Addresses and lengths of the index arrays, plus the node counts.
    fn stamp(&self) -> [usize; 12] {
        [
            self.num_src,
            self.num_dst,
            self.indptr.as_ptr() as usize,
            self.indptr.len(),
            self.indices.as_ptr() as usize,
            self.indices.len(),
            self.t_indptr.as_ptr() as usize,
            self.t_indptr.len(),
            self.t_dst.as_ptr() as usize,
            self.t_dst.len(),
            self.t_edges.as_ptr() as usize,
            self.t_edges.len(),
        ]
    }

    /// Number of edges.
    pub fn num_edges(&self) -> usize {
        self.indices.len()
    }

    /// In-degree of local dst `d`.
    pub fn degree(&self, d: usize) -> usize {
        (self.indptr[d + 1] - self.indptr[d]) as usize
    }

    /// Local sources of dst `d`, in edge order.
    pub fn neighbors(&self, d: usize) -> &[u32] {
        &self.indices[self.indptr[d] as usize..self.indptr[d + 1] as usize]
    }

    /// Global ids of the dst nodes.
    pub fn dst_nodes(&self) -> &[u32] {
        &self.src_nodes[..self.num_dst]
    }

    /// The block with a self-loop `d → d` appended to the in-edges of every dst node that
    /// has none (GAT's `add_self_loops`); existing edges keep their order, and the dst
    /// nodes stay a prefix of the sources (local dst `d` is local src `d`).
    pub fn with_self_loops(&self) -> Result<Block> {
        let mut indptr = Vec::with_capacity(self.num_dst + 1);
        let mut indices = Vec::with_capacity(self.num_edges() + self.num_dst);
        indptr.push(0u32);
        for d in 0..self.num_dst {
            let nbrs = self.neighbors(d);
            indices.extend_from_slice(nbrs);
            if !nbrs.contains(&(d as u32)) {
                indices.push(d as u32);
            }
            let end = u32::try_from(indices.len())
                .map_err(|_| Error::invalid("block: self-loops overflow u32 edge offsets"))?;
            indptr.push(end);
        }
        Block::new(self.num_src, indptr, indices, self.src_nodes.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_runs_once_per_block_and_a_failure_is_not_remembered() {
        let b = Block::new(3, vec![0, 2, 3], vec![0, 2, 2], vec![10, 11, 12]).unwrap();
        let mut runs = 0;
        for _ in 0..3 {
            b.validated(|_| {
                runs += 1;
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(runs, 1);
        let c = b.clone();
        assert!(c.validated(|_| Err(Error::invalid("bad"))).is_err());
        c.validated(|_| {
            runs += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(runs, 2);
        // A replaced array changes the stamp: the block is checked again.
        let mut d = b.clone();
        d.validated(|_| Ok(())).unwrap();
        d.indices = vec![0, 1, 2];
        d.validated(|_| {
            runs += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(runs, 3);
    }

    #[test]
    fn transpose_lists_out_edges() {
        // dst 0 <- {0, 2}, dst 1 <- {2}; sources 0..3 with globals 10, 11, 12.
        let b = Block::new(3, vec![0, 2, 3], vec![0, 2, 2], vec![10, 11, 12]).unwrap();
        assert_eq!(b.t_indptr, vec![0, 1, 1, 3]);
        assert_eq!(b.t_dst, vec![0, 0, 1]);
        assert_eq!(b.t_edges, vec![0, 1, 2]);
        assert_eq!(b.dst_nodes(), &[10, 11]);
    }

    #[test]
    fn device_copies_are_made_once_and_not_cloned() {
        let b = Block::new(3, vec![0, 2, 3], vec![0, 2, 2], vec![10, 11, 12]).unwrap();
        let mut uploads = 0;
        let mut get = |b: &Block| {
            b.device_copy(Device::Wgpu(7), |b| {
                uploads += 1;
                Ok(b.indices.clone())
            })
            .unwrap()
        };
        let first = get(&b);
        assert!(Arc::ptr_eq(&first, &get(&b)));
        let c = b.clone();
        assert_eq!(b, c);
        assert!(!Arc::ptr_eq(&first, &get(&c)));
        let mut d = c.clone();
        get(&d);
        d.indices = vec![1, 1, 1];
        assert_eq!(*get(&d), vec![1, 1, 1]);
        assert_eq!(uploads, 4);
        assert!(format!("{b:?}").contains("Wgpu(7)"));
    }

    #[test]
    fn self_loops_only_where_missing() {
        // dst 0 <- {0, 2} has one; dst 1 <- {2} and dst 2 <- {} get one.
        let b = Block::new(4, vec![0, 2, 3, 3], vec![0, 2, 2], vec![10, 11, 12, 13]).unwrap();
        let s = b.with_self_loops().unwrap();
        assert_eq!(s.indptr, vec![0, 2, 4, 5]);
        assert_eq!(s.indices, vec![0, 2, 2, 1, 2]);
        assert_eq!(s.src_nodes, b.src_nodes);
        assert_eq!(s.with_self_loops().unwrap(), s);
    }

    #[test]
    fn invalid_blocks_are_errors() {
        assert!(Block::new(1, vec![0, 1, 1], vec![0], vec![5]).is_err());
        assert!(Block::new(2, vec![0, 1], vec![3], vec![5, 6]).is_err());
        assert!(Block::new(2, vec![0, 2], vec![0], vec![5, 6]).is_err());
    }
}
