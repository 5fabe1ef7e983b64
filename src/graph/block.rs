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
//! A block is immutable: [`Block::new`] checks every invariant the kernels index by, once,
//! and the arrays are read through [`BlockArrays`] (`block.indptr`, `block.num_src`...),
//! which only `Block::new` makes and nothing can change. So the ops need not check a block
//! again, and the copies of its index arrays that GPU backends make on first use
//! ([`Block::device_copy`]: one upload per block and device, however many layers and
//! backward passes read it) can never go stale. Clones share the arrays and the copies;
//! the copies are freed with the last clone.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// A block's arrays, read-only: reached through a [`Block`] (which derefs to them) and
/// made only by [`Block::new`].
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockArrays {
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
}

/// One layer's message-flow graph: its arrays and their copies on devices.
#[derive(Clone)]
pub struct Block(Arc<Shared>);

/// What the clones of one block share.
struct Shared {
    arrays: BlockArrays,
    /// Uploads of the index arrays, per device name (not part of the block's value).
    device_copies: Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>,
}

impl std::ops::Deref for Block {
    type Target = BlockArrays;
    fn deref(&self) -> &BlockArrays {
        &self.0.arrays
    }
}

impl PartialEq for Block {
    /// Same arrays (device copies are a cache, not part of the value).
    fn eq(&self, other: &Self) -> bool {
        self.0.arrays == other.0.arrays
    }
}

impl Eq for Block {}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self
            .0
            .device_copies
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut devices: Vec<&String> = map.keys().collect();
        devices.sort();
        f.debug_struct("Block")
            .field("arrays", &self.0.arrays)
            .field("device_copies", &devices)
            .finish()
    }
}

impl Default for Block {
    /// The block of no nodes and no edges.
    fn default() -> Self {
        Block::new(0, vec![0], Vec::new(), Vec::new()).expect("the empty block is valid")
    }
}

impl Block {
    /// Builds a block from its CSR and computes the transposed CSR. Checks every invariant
    /// the kernels index by: this is the only check a block gets.
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
        if indices.len() >= u32::MAX as usize || num_src >= u32::MAX as usize {
            return Err(Error::invalid(format!(
                "block: {} edges and {num_src} src nodes: both must fit u32 positions",
                indices.len()
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
        Ok(Block(Arc::new(Shared {
            arrays: BlockArrays {
                num_src,
                num_dst,
                indptr,
                indices,
                src_nodes,
                t_indptr,
                t_dst,
                t_edges,
            },
            device_copies: Mutex::new(HashMap::new()),
        })))
    }

    /// The copy of this block's index arrays on the device named `device` (`cuda:0`, as
    /// the device prints), made by `upload` on first use and shared by every later call and
    /// every clone (the segment ops' kernels read it forward and backward). The arrays never
    /// change, so a copy never goes stale. The graph knows devices by name only: the
    /// device layer, which uploads, sits above it.
    pub fn device_copy<T: Any + Send + Sync>(
        &self,
        device: &str,
        upload: impl FnOnce(&Block) -> Result<T>,
    ) -> Result<Arc<T>> {
        // Held during the upload, so two threads never upload the same block twice.
        let mut map = self
            .0
            .device_copies
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(data) = map.get(device) {
            if let Ok(data) = data.clone().downcast::<T>() {
                return Ok(data);
            }
        }
        let data = Arc::new(upload(self)?);
        map.insert(device.to_string(), data.clone());
        Ok(data)
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
    fn transpose_lists_out_edges() {
        // dst 0 <- {0, 2}, dst 1 <- {2}; sources 0..3 with globals 10, 11, 12.
        let b = Block::new(3, vec![0, 2, 3], vec![0, 2, 2], vec![10, 11, 12]).unwrap();
        assert_eq!(b.t_indptr, vec![0, 1, 1, 3]);
        assert_eq!(b.t_dst, vec![0, 0, 1]);
        assert_eq!(b.t_edges, vec![0, 1, 2]);
        assert_eq!(b.dst_nodes(), &[10, 11]);
    }

    #[test]
    fn device_copies_are_made_once_per_device_and_shared_by_clones() {
        let b = Block::new(3, vec![0, 2, 3], vec![0, 2, 2], vec![10, 11, 12]).unwrap();
        let mut uploads = 0;
        let mut get = |b: &Block, device| {
            b.device_copy(device, |b| {
                uploads += 1;
                Ok(b.indices.clone())
            })
            .unwrap()
        };
        let first = get(&b, "wgpu:7");
        assert!(Arc::ptr_eq(&first, &get(&b, "wgpu:7")));
        let c = b.clone();
        assert_eq!(b, c);
        assert!(Arc::ptr_eq(&first, &get(&c, "wgpu:7")));
        let other = get(&c, "cuda:0");
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(uploads, 2);
        assert!(format!("{b:?}").contains("wgpu:7"));
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
        assert!(Block::new(2, vec![0, 2, 1], vec![0, 1], vec![5, 6]).is_err());
        assert_eq!(Block::default().num_edges(), 0);
    }
}
