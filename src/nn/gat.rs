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

use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
use crate::nn::config::{Forward, ModelKind};
use crate::nn::exec::{Eager, Exec};
use crate::nn::init;
use crate::nn::kind::{Hybrid, KindConfig, ModelEntry, ModelFlags, WidthFlag};
use crate::nn::layer::{BuildCtx, Layer, LayerAt, LayerSpec};
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
use crate::ops::dropout_key;
use crate::rng::Rng;
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
        let p = GatParams {
            w: &self.fc.weight,
            attn_src: &self.attn_src,
            attn_dst: &self.attn_dst,
            bias: &self.bias,
        };
        gat_forward(
            &mut Eager,
            &p,
            self.heads,
            self.self_loops,
            dropout,
            h,
            block,
        )
    }
}

/// A GAT layer's parameters on either executor.
struct GatParams<'p, T> {
    w: &'p T,
    attn_src: &'p T,
    attn_dst: &'p T,
    bias: &'p T,
}

/// [`GatLayer::forward`] on either executor (see the module docs): `z = h·W`; per side
/// [`headwise_dot`] (the dst side on the copy `z[..nd]`); the two edge index tensors;
/// both sides gathered to `[E, H]`, `add`, `leaky_relu`, `segment_softmax`, attention
/// dropout, `segment_weighted_sum`, `+ bias`. With `self_loops` the two segment ops read
/// the self-looped block, which lives until the forward returns and both ops' backward
/// rules have run (on a GPU, with its index arrays).
fn gat_forward<'b, E: Exec<'b>>(
    e: &mut E,
    p: &GatParams<'_, E::T>,
    heads: usize,
    self_loops: bool,
    dropout: Option<AttnDropout>,
    h: &E::T,
    block: &E::Block,
) -> Result<E::T> {
    let looped = match self_loops {
        true => Some(e.self_looped(block)?),
        false => None,
    };
    let edges = looped.as_ref().unwrap_or(block);
    let z = e.matmul(h, p.w)?;
    let el = headwise(e, &z, p.attn_src, heads)?;
    let z_dst = e.slice_rows(&z, E::block_rows(block).1)?;
    let er = headwise(e, &z_dst, p.attn_dst, heads)?;
    e.free(z_dst);
    let (src, dst) = e.edge_ends(edges, h)?;
    let sl = e.gather(&el, &src)?;
    let sr = e.gather(&er, &dst)?;
    let sum = e.add(&sl, &sr)?;
    let score = e.leaky_relu(&sum, NEGATIVE_SLOPE)?;
    for v in [sum, sr, sl] {
        e.free(v);
    }
    let mut alpha = e.segment_softmax(&score, edges)?;
    if let Some(d) = dropout.filter(|d| d.p > 0.0) {
        let dropped = e.dropout(&alpha, d.p, d.key, edges, true)?;
        e.free(alpha);
        alpha = dropped;
    }
    let out = e.segment_weighted_sum(&z, &alpha, edges)?;
    let res = e.add(&out, p.bias)?;
    for v in [out, alpha, score, dst, src, er, el, z] {
        e.free(v);
    }
    if let Some(b) = looped {
        e.free_block(b);
    }
    Ok(res)
}

/// [`headwise_dot`] on either executor: `z ⊙ a`, viewed `[n·H, D]`, summed per row,
/// viewed `[n, H]`.
fn headwise<'b, E: Exec<'b>>(e: &mut E, z: &E::T, a: &E::T, heads: usize) -> Result<E::T> {
    let (n, width) = E::dims(z);
    if heads == 0 || width % heads != 0 {
        return Err(Error::shape(
            "gat",
            format!("width {width} does not split into {heads} heads"),
        ));
    }
    let prod = e.mul(z, a)?;
    let flat = e.reshape(&prod, n * heads, width / heads)?;
    let sums = e.sum_rows(&flat)?;
    e.free(flat);
    let out = e.reshape(&sums, n, heads)?;
    e.free(sums);
    e.free(prod);
    Ok(out)
}

/// Per row and head, `Σ_j z[n, k·D + j] · a[k·D + j]`: `[n, H·D]` and `[H·D]` to `[n, H]`.
pub fn headwise_dot(z: &Tensor, a: &Tensor, heads: usize) -> Result<Tensor> {
    if z.shape().len() != 2 {
        return Err(Error::shape(
            "gat",
            format!("features must be 2-D, got {:?}", z.shape()),
        ));
    }
    headwise(&mut Eager, z, a, heads)
}

pub use crate::nn::exec::{edge_dst, edge_ids};

impl Module for GatLayer {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut v = self.fc.named_parameters(&join(prefix, "fc"));
        v.push((join(prefix, "attn_src"), self.attn_src.clone()));
        v.push((join(prefix, "attn_dst"), self.attn_dst.clone()));
        v.push((join(prefix, "bias"), self.bias.clone()));
        v
    }
}

/// A [`GatLayer`] with its attention dropout, as a model runs it.
#[derive(Clone, Debug)]
pub struct GatModelLayer {
    /// The layer.
    pub layer: GatLayer,
    /// Dropout probability on the attention weights in training.
    pub attn_dropout: f64,
}

impl Module for GatModelLayer {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        self.layer.named_parameters(prefix)
    }
}

impl Layer for GatModelLayer {
    /// Attention dropout masks are keyed by (seed, epoch, layer), in a key space apart
    /// from the dropout between layers.
    fn forward(&self, block: &Arc<Block>, h: &Tensor, l: usize, f: &Forward) -> Result<Tensor> {
        let p = self.attn_dropout;
        let dropout = (f.training && p > 0.0).then(|| AttnDropout {
            p,
            key: dropout_key(f.seed, f.epoch, (1 << 32) | l as u64),
        });
        self.layer.forward(block, h, dropout)
    }
}

/// GAT in the registry of model kinds.
pub const MODEL: ModelEntry = ModelEntry {
    kind: ModelKind::Gat,
    names: &["gat"],
    help:
        "GAT, multi-head attention over the in-edges, with --heads, --attn-dropout and --self-loops",
    flags: &[
        (
            "--heads",
            "GAT only: attention heads of the hidden layers (default 4; concatenated, the \
             output layer has one), as --heads of the PyTorch Geometric reference script. \
             --hidden is the width per head",
        ),
        (
            "--attn-dropout",
            "GAT only: dropout on attention weights, in [0, 1) (default 0, as the PyTorch \
             Geometric reference script)",
        ),
        (
            "--self-loops",
            "GAT only: add a self-loop to every dst node without one: true (default, PyG's \
             default) or false",
        ),
    ],
    default: || Arc::new(GatConfig::default()),
    parse: |flags: &ModelFlags| {
        let mut c = GatConfig::default();
        if let Some(heads) = flags.get::<usize>("--heads")? {
            if heads == 0 {
                return Err(Error::flag("--heads", "--heads must be at least 1"));
            }
            c.heads = heads;
        }
        if let Some(p) = flags.get::<f64>("--attn-dropout")? {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::flag(
                    "--attn-dropout",
                    format!("--attn-dropout {p} must be in [0, 1)"),
                ));
            }
            c.attn_dropout = p;
        }
        if let Some(on) = flags.get::<bool>("--self-loops")? {
            c.self_loops = on;
        }
        Ok(Arc::new(c))
    },
    hybrid: Hybrid::No,
};

/// GAT's own settings. Hidden layers have `heads` heads of the model's hidden width each,
/// concatenated; the output layer has one head of the class count (as the PyG peer).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct GatConfig {
    /// Attention heads of the hidden layers (`--heads`).
    pub heads: usize,
    /// Dropout on the attention weights (`--attn-dropout`; 0 in the PyG peer).
    pub attn_dropout: f64,
    /// Add a self-loop to every dst node without one (`--self-loops`; PyG's default).
    pub self_loops: bool,
}

impl Default for GatConfig {
    /// The CLI's defaults: 4 heads, no attention dropout, self-loops.
    fn default() -> Self {
        GatConfig {
            heads: 4,
            attn_dropout: 0.0,
            self_loops: true,
        }
    }
}

impl KindConfig for GatConfig {
    fn kind(&self) -> ModelKind {
        ModelKind::Gat
    }

    fn validate(&self) -> Result<()> {
        if self.heads == 0 {
            return Err(Error::invalid("gat needs at least one head"));
        }
        if !(0.0..1.0).contains(&self.attn_dropout) {
            return Err(Error::invalid(format!(
                "attention dropout {} must be in [0, 1)",
                self.attn_dropout
            )));
        }
        Ok(())
    }

    fn output_layer_differs(&self) -> bool {
        true
    }

    fn width_flags(&self) -> Vec<WidthFlag> {
        vec![WidthFlag {
            flag: "--heads",
            value: self.heads.to_string(),
            lowered: Arc::new(GatConfig { heads: 1, ..*self }),
        }]
    }

    fn label(&self) -> String {
        match self.heads {
            1 => "gat (1 head)".to_string(),
            n => format!("gat ({n} heads)"),
        }
    }

    fn width_note(&self) -> String {
        format!(", {} heads", self.heads)
    }

    fn hidden_width(&self, hidden: usize) -> Option<usize> {
        self.heads.checked_mul(hidden)
    }

    fn layer(&self, at: LayerAt) -> Box<dyn LayerSpec> {
        let heads = if at.last { 1 } else { self.heads.max(1) };
        Box::new(GatSpec {
            in_dim: at.in_dim,
            out_per_head: at.out_dim / heads,
            heads,
            attn_dropout: self.attn_dropout,
            self_loops: self.self_loops,
        })
    }
}

/// A GAT layer before it has weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GatSpec {
    /// Input width.
    pub in_dim: usize,
    /// Width of one head's output.
    pub out_per_head: usize,
    /// Attention heads.
    pub heads: usize,
    /// Dropout on the attention weights in training.
    pub attn_dropout: f64,
    /// Add a self-loop to every dst node without one.
    pub self_loops: bool,
}

impl LayerSpec for GatSpec {
    fn parameter_shapes(&self) -> Option<Vec<(&'static str, Vec<u64>)>> {
        let i = self.in_dim as u64;
        let o = (self.heads as u64).checked_mul(self.out_per_head as u64)?;
        Some(vec![
            ("fc.weight", vec![i, o]),
            ("attn_src", vec![o]),
            ("attn_dst", vec![o]),
            ("bias", vec![o]),
        ])
    }

    /// Attention weights the projected rows, all heads together.
    fn multiply_adds_per_edge(&self) -> f64 {
        self.heads as f64 * self.out_per_head as f64
    }

    fn build(&self, ctx: &mut BuildCtx<'_>) -> Result<Box<dyn Layer>> {
        let mut layer = GatLayer::new(
            self.in_dim,
            self.out_per_head,
            self.heads,
            &mut ctx.rng,
            ctx.device,
        )?;
        layer.self_loops = self.self_loops;
        Ok(Box::new(GatModelLayer {
            layer,
            attn_dropout: self.attn_dropout,
        }))
    }

    fn trace(
        &self,
        r: &mut Replay,
        h: &Val,
        block: &SymBlock<'_>,
        _: Option<usize>,
    ) -> Result<Val> {
        let (i, heads) = (self.in_dim, self.heads.max(1));
        let o = heads.saturating_mul(self.out_per_head);
        let (w, attn_src, attn_dst, bias) =
            (r.param(i, o), r.param(1, o), r.param(1, o), r.param(1, o));
        let p = GatParams {
            w: &w,
            attn_src: &attn_src,
            attn_dst: &attn_dst,
            bias: &bias,
        };
        // Training: the attention dropout runs where it is set (its key does not matter).
        let dropout = (self.attn_dropout > 0.0).then_some(AttnDropout {
            p: self.attn_dropout,
            key: 0,
        });
        gat_forward(r, &p, heads, self.self_loops, dropout, h, block)
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
