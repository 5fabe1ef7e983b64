//! Graph attention layer (Veličković et al., 2018) with PyG's `GATConv` semantics.
//!
//! With `z = h·W` split into `H` heads of width `D` (`z[u] = [z_u¹ … z_uᴴ]`):
//!
//! ```text
//! s[e, k] = LeakyReLU(a_srcᵏ·z_{src(e)}ᵏ + a_dstᵏ·z_{dst(e)}ᵏ)        slope 0.2
//! α[·, k] = softmax of s[·, k] over each dst node's in-edges          (ops::segment_softmax)
//! α       = dropout(α)                                                (training only)
//! out[d]  = [Σ_e α[e, k]·z_{src(e)}ᵏ]_{k=1..H} + b                    (ops::segment_weighted_sum)
//! ```
//!
//! Heads are a dimension of every tensor (`[n, H·D]`, `[E, H]`), never a loop. The heads'
//! outputs are concatenated; a model's output layer uses one head (as the PyG peer does),
//! so nothing is averaged. Self-loops (on by default, as PyG's `add_self_loops`) are added
//! on the CPU to every dst node that has none ([`Block::with_self_loops`]).
//!
//! Attention dropout masks are keyed by a per-edge id hashed from the edge's **global**
//! (dst, src) node ids and its occurrence among duplicate (dst, src) edges, so a
//! micro-batch, which keeps every in-edge of its dst nodes in order, drops exactly the
//! attention weights the full batch drops.

use std::collections::HashMap;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Block;
use crate::nn::init;
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
use crate::ops;
use crate::rng::{hash3, Rng};
use crate::tensor::Tensor;

/// Slope of the LeakyReLU on attention scores (the paper's and PyG's default).
pub const NEGATIVE_SLOPE: f64 = 0.2;

/// One GAT layer: `heads` heads of `out_per_head` features each.
#[derive(Clone, Debug)]
pub struct GatLayer {
    /// `[in, heads·D]`, no bias.
    pub fc: Linear,
    /// `[heads·D]`: head `k`'s source attention vector in columns `k·D .. (k+1)·D`.
    pub attn_src: Tensor,
    /// `[heads·D]`: the destination attention vectors.
    pub attn_dst: Tensor,
    /// `[heads·D]`.
    pub bias: Tensor,
    /// Number of attention heads.
    pub heads: usize,
    /// Add a self-loop to every dst node without one before attending.
    pub self_loops: bool,
}

/// Attention dropout of one forward pass: probability and mask key.
#[derive(Clone, Copy, Debug)]
pub struct AttnDropout {
    /// Dropout probability.
    pub p: f64,
    /// Mask key (see [`crate::ops::dropout_key`]).
    pub key: u32,
}

impl GatLayer {
    /// A layer from `in_dim` features to `heads` heads of `out_per_head` features (Glorot
    /// weights and attention vectors, zero bias, as PyG).
    pub fn new(
        in_dim: usize,
        out_per_head: usize,
        heads: usize,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self> {
        if heads == 0 || out_per_head == 0 {
            return Err(Error::invalid(format!(
                "gat: {heads} heads of width {out_per_head}: both must be positive"
            )));
        }
        let width = heads.checked_mul(out_per_head).ok_or_else(|| {
            Error::invalid(format!(
                "gat: {heads} heads of width {out_per_head} overflow the address space"
            ))
        })?;
        // PyG draws att [1, H, D] Glorot-uniform over (H, D).
        let bound = (6.0 / (heads + out_per_head) as f64).sqrt();
        let attn_src = init::uniform(&[width], bound, rng, device)?;
        let attn_dst = init::uniform(&[width], bound, rng, device)?;
        Ok(GatLayer {
            fc: Linear::new(in_dim, width, false, rng, device)?,
            attn_src,
            attn_dst,
            bias: init::zeros(&[width], device)?,
            heads,
            self_loops: true,
        })
    }

    /// Output width (`heads · D`).
    pub fn out_dim(&self) -> usize {
        self.fc.fan_out()
    }

    /// `h` holds the block's `num_src` rows; returns `num_dst` rows of `heads · D`.
    pub fn forward(
        &self,
        block: &Arc<Block>,
        h: &Tensor,
        dropout: Option<AttnDropout>,
    ) -> Result<Tensor> {
        let width = self.out_dim();
        if self.heads == 0 || width % self.heads != 0 {
            return Err(Error::invalid(format!(
                "gat: width {width} does not split into {} heads",
                self.heads
            )));
        }
        let block = if self.self_loops {
            Arc::new(block.with_self_loops()?)
        } else {
            block.clone()
        };
        let dev = h.device();
        let e = block.num_edges();
        let z = self.fc.forward(h)?;
        let el = headwise_dot(&z, &self.attn_src, self.heads)?;
        let er = headwise_dot(
            &ops::slice(&z, 0, 0, block.num_dst)?,
            &self.attn_dst,
            self.heads,
        )?;
        let src = Tensor::from_u32(block.indices.clone(), &[e], dev)?;
        let dst = Tensor::from_u32(edge_dst(&block), &[e], dev)?;
        let s = ops::leaky_relu(
            &ops::add(
                &ops::index_select(&el, &src)?,
                &ops::index_select(&er, &dst)?,
            )?,
            NEGATIVE_SLOPE,
        )?;
        let mut alpha = ops::segment_softmax(&s, &block)?;
        if let Some(d) = dropout.filter(|d| d.p > 0.0) {
            let ids = Tensor::from_u32(edge_ids(&block), &[e], dev)?;
            alpha = ops::dropout(&alpha, d.p, d.key, Some(&ids))?;
        }
        let out = ops::segment_weighted_sum(&z, &alpha, &block)?;
        ops::add(&out, &self.bias)
    }
}

/// Per row and head, `Σ_j z[n, k·D + j] · a[k·D + j]`: `[n, H·D]` and `[H·D]` to `[n, H]`.
pub fn headwise_dot(z: &Tensor, a: &Tensor, heads: usize) -> Result<Tensor> {
    let (n, width) = match z.shape() {
        [n, w] => (*n, *w),
        s => {
            return Err(Error::shape(
                "gat",
                format!("features must be 2-D, got {s:?}"),
            ))
        }
    };
    if heads == 0 || width % heads != 0 {
        return Err(Error::shape(
            "gat",
            format!("width {width} does not split into {heads} heads"),
        ));
    }
    let d = width / heads;
    let prod = ops::mul(z, a)?;
    let sums = ops::sum_dim(&ops::reshape(&prod, &[n * heads, d])?, 1)?;
    ops::reshape(&sums, &[n, heads])
}

/// The local dst node of every edge position.
pub fn edge_dst(block: &Block) -> Vec<u32> {
    let mut v = Vec::with_capacity(block.num_edges());
    for d in 0..block.num_dst {
        v.extend(std::iter::repeat_n(d as u32, block.degree(d)));
    }
    v
}

/// A 32-bit id per edge position from global ids: `hash3(global dst, global src,
/// occurrence)`, where occurrence counts earlier edges of the same dst from the same src.
/// It depends only on the graph and the dst node's in-edges, not on the batch.
pub fn edge_ids(block: &Block) -> Vec<u32> {
    let mut ids = Vec::with_capacity(block.num_edges());
    let mut seen: HashMap<u32, u32> = HashMap::new();
    for d in 0..block.num_dst {
        let gd = block.src_nodes[d];
        seen.clear();
        for &u in block.neighbors(d) {
            let gu = block.src_nodes[u as usize];
            let occ = seen.entry(gu).or_insert(0);
            ids.push(hash3(gd, gu, *occ));
            *occ += 1;
        }
    }
    ids
}

impl Module for GatLayer {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut v = self.fc.named_parameters(&join(prefix, "fc"));
        v.push((join(prefix, "attn_src"), self.attn_src.clone()));
        v.push((join(prefix, "attn_dst"), self.attn_dst.clone()));
        v.push((join(prefix, "bias"), self.bias.clone()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_ids_follow_global_ids_and_occurrences() {
        // dst 0 (global 7) <- {1, 1, 2}; the same edges in another block with other local ids.
        let a = Block::new(3, vec![0, 3], vec![1, 1, 2], vec![7, 8, 9]).unwrap();
        let b = Block::new(4, vec![0, 0, 3], vec![3, 3, 2], vec![5, 7, 9, 8]).unwrap();
        let ia = edge_ids(&a);
        assert_ne!(ia[0], ia[1], "duplicate edges get distinct ids");
        assert_eq!(ia, edge_ids(&b));
        assert_eq!(edge_dst(&b), vec![1, 1, 1]);
    }
}
