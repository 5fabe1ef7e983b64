//! GCN layer (Kipf & Welling, 2017) with symmetric normalisation and a self-loop:
//! `h'_v = Σ_{u ∈ N(v) ∪ {v}} h_u·W / √(d̃_u·d̃_v) + b`, where `d̃ = in-degree + 1`.
//!
//! The degrees are the **graph's**, not the block's: a sampled block's degrees depend on
//! the sample and on how a batch is split into micro-batches, the graph's do not, so a
//! micro-batch computes exactly what the full batch computes for its seeds.

use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Block;
use crate::nn::config::{Forward, ModelKind};
use crate::nn::init;
use crate::nn::kind::{Hybrid, KindConfig, ModelEntry};
use crate::nn::layer::{BuildCtx, HybridLayer, HybridSpec, Layer, LayerAt, LayerSpec};
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
use crate::nn::replay::{Replay, SymBlock, Val};
use crate::ops;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// One GCN layer.
#[derive(Clone, Debug)]
pub struct GcnLayer {
    /// `[in, out]`, no bias.
    pub fc: Linear,
    /// `[out]`.
    pub bias: Tensor,
}

/// `1/√(in-degree + 1)` per node of a graph: the normalisation GCN layers read.
pub fn gcn_norm(in_degrees: &[u32]) -> Vec<f32> {
    in_degrees
        .iter()
        .map(|&d| 1.0 / ((d as f64 + 1.0).sqrt()) as f32)
        .collect()
}

impl GcnLayer {
    /// A layer from `in_dim` to `out_dim` features.
    pub fn new(in_dim: usize, out_dim: usize, rng: &mut Rng, device: Device) -> Result<Self> {
        Ok(GcnLayer {
            fc: Linear::new(in_dim, out_dim, false, rng, device)?,
            bias: init::zeros(&[out_dim], device)?,
        })
    }

    /// `h` holds the block's `num_src` rows; `norm` is [`gcn_norm`] of the whole graph.
    pub fn forward(&self, block: &Arc<Block>, h: &Tensor, norm: &[f32]) -> Result<Tensor> {
        let (n_src, n_dst) = norms(block, h, norm)?;
        // Project first when it shrinks what is aggregated (the maths is linear).
        let project_first = self.fc.fan_in() > self.fc.fan_out();
        let x = if project_first {
            self.fc.forward(h)?
        } else {
            h.clone()
        };
        let xs = ops::mul(&x, &n_src)?;
        let agg = ops::add(
            &ops::segment_sum(&xs, block)?,
            &ops::slice(&xs, 0, 0, block.num_dst)?,
        )?;
        let agg = ops::mul(&agg, &n_dst)?;
        let out = if project_first {
            agg
        } else {
            self.fc.forward(&agg)?
        };
        ops::add(&out, &self.bias)
    }
}

/// The degree norms of the block's src nodes `[num_src, 1]` and dst nodes `[num_dst, 1]`,
/// in `like`'s float type and on its device; `norm` is [`gcn_norm`] of the whole graph.
fn norms(block: &Block, like: &Tensor, norm: &[f32]) -> Result<(Tensor, Tensor)> {
    let gather = |ids: &[u32]| -> Result<Tensor> {
        let v = ids
            .iter()
            .map(|&u| {
                norm.get(u as usize)
                    .copied()
                    .ok_or_else(|| Error::invalid(format!("gcn: node {u} has no degree norm")))
            })
            .collect::<Result<Vec<f32>>>()?;
        match like.dtype() {
            crate::tensor::DType::F64 => {
                Tensor::from_f64(v.into_iter().map(f64::from).collect(), &[ids.len(), 1])
            }
            _ => Tensor::from_f32(v, &[ids.len(), 1], like.device()),
        }
    };
    Ok((gather(&block.src_nodes)?, gather(block.dst_nodes())?))
}

impl Module for GcnLayer {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut v = self.fc.named_parameters(&join(prefix, "fc"));
        v.push((join(prefix, "bias"), self.bias.clone()));
        v
    }
}

/// A [`GcnLayer`] with the graph's degree norms it reads.
#[derive(Clone, Debug)]
pub struct GcnNormed {
    /// The layer.
    pub layer: GcnLayer,
    /// [`gcn_norm`] of the whole graph, shared by the model's layers.
    pub norm: Arc<Vec<f32>>,
}

impl Module for GcnNormed {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        self.layer.named_parameters(prefix)
    }
}

impl Layer for GcnNormed {
    fn forward(&self, block: &Arc<Block>, h: &Tensor, _l: usize, _f: &Forward) -> Result<Tensor> {
        self.layer.forward(block, h, &self.norm)
    }

    fn hybrid(&self) -> Option<&dyn HybridLayer> {
        Some(self)
    }
}

/// GCN split for the hybrid mode: the aggregation is
/// `n_dst ⊙ (segment_sum(h ⊙ n_src) + (h ⊙ n_src)[..nd])` (aggregating first whatever the
/// widths, so the result may round differently from [`GcnLayer::forward`]), the update
/// `a·W + b`, which reads no row of `h`.
impl HybridLayer for GcnNormed {
    fn aggregate(&self, block: &Arc<Block>, h: &Tensor) -> Result<Tensor> {
        let (n_src, n_dst) = norms(block, h, &self.norm)?;
        let xs = ops::mul(h, &n_src)?;
        let seg = ops::segment_sum(&xs, block)?;
        let own = ops::slice(&xs, 0, 0, block.num_dst)?;
        let agg = ops::add(&seg, &own)?;
        drop(seg);
        drop(own);
        ops::mul(&agg, &n_dst)
    }

    fn reads_dst_rows(&self) -> bool {
        false
    }

    fn update(&self, _block: &Arc<Block>, _h: Option<&Tensor>, a: &Tensor) -> Result<Tensor> {
        ops::add(&self.layer.fc.forward(a)?, &self.layer.bias)
    }

    /// `h̄ = n_src ⊙ (segment_sumᵀ(t) + t padded to num_src rows)`, `t = n_dst ⊙ ā`.
    fn aggregate_backward(&self, block: &Arc<Block>, a_grad: &Tensor) -> Result<Tensor> {
        let (n_src, n_dst) = norms(block, a_grad, &self.norm)?;
        let t = ops::mul(a_grad, &n_dst)?;
        let seg = ops::segment_sum_transposed(&t, block, false)?;
        let (rows, cols) = (block.num_src, a_grad.shape().get(1).copied().unwrap_or(1));
        let own = ops::slice::slice_backward(&t, 0, 0, &[rows, cols])?;
        let sum = ops::add(&seg, &own)?;
        drop(seg);
        drop(own);
        ops::mul(&sum, &n_src)
    }
}

/// GCN in the registry of model kinds.
pub const MODEL: ModelEntry = ModelEntry {
    kind: ModelKind::Gcn,
    names: &["gcn"],
    help: "GCN, symmetric normalisation by the graph's degrees with self-loops",
    flags: &[],
    default: || Arc::new(GcnConfig),
    parse: |_| Ok(Arc::new(GcnConfig)),
    hybrid: Hybrid::Yes,
};

/// GCN's own settings: none beyond the shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcnConfig;

impl KindConfig for GcnConfig {
    fn kind(&self) -> ModelKind {
        ModelKind::Gcn
    }

    fn label(&self) -> String {
        "gcn".to_string()
    }

    fn layer(&self, at: LayerAt) -> Box<dyn LayerSpec> {
        Box::new(GcnSpec {
            in_dim: at.in_dim,
            out_dim: at.out_dim,
        })
    }
}

/// A GCN layer before it has weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcnSpec {
    /// Input width.
    pub in_dim: usize,
    /// Output width.
    pub out_dim: usize,
}

impl LayerSpec for GcnSpec {
    fn parameter_shapes(&self) -> Option<Vec<(&'static str, Vec<u64>)>> {
        let (i, o) = (self.in_dim as u64, self.out_dim as u64);
        Some(vec![("fc.weight", vec![i, o]), ("bias", vec![o])])
    }

    fn multiply_adds_per_edge(&self) -> f64 {
        self.in_dim as f64
    }

    fn build(&self, ctx: &mut BuildCtx<'_>) -> Result<Box<dyn Layer>> {
        let layer = GcnLayer::new(self.in_dim, self.out_dim, &mut ctx.rng, ctx.device)?;
        let norm = ctx.degree_norm("gcn", gcn_norm)?;
        Ok(Box::new(GcnNormed { layer, norm }))
    }

    fn replay(&self, r: &mut Replay, h: &Val, block: &SymBlock<'_>, _: Option<usize>) -> Val {
        replay_gcn(r, h, (self.in_dim, self.out_dim), block)
    }

    fn hybrid(&self) -> Option<&dyn HybridSpec> {
        Some(self)
    }
}

/// Replays of [`GcnNormed`]'s [`HybridLayer`] split: the aggregation (norms `[ns, 1]`,
/// `[nd, 1]`, `h ⊙ n_src`, the segment sum and the dst rows, their sum, `⊙ n_dst`); the
/// update's parameters, `a·W`, `+ b`; the aggregation's backward (norms, `t = ā ⊙ n_dst`,
/// `segment_sumᵀ(t)` and `t` padded, their sum, `⊙ n_src`).
impl HybridSpec for GcnSpec {
    fn replay_aggregate(&self, r: &mut Replay, h: &Val, block: &SymBlock<'_>) -> Val {
        let sizes = block.sizes;
        let n_src = r.input(sizes.num_src, 1);
        let n_dst = r.input(sizes.num_dst, 1);
        let xs = r.mul(h, &n_src);
        let seg = r.segment(&xs, block, false);
        let own = r.slice_rows(&xs, sizes.num_dst);
        let agg = r.add(&seg, &own);
        r.release(seg.buf);
        r.release(own.buf);
        let out = r.mul(&agg, &n_dst);
        for v in [agg, xs, n_dst, n_src] {
            r.release(v.buf);
        }
        out
    }

    fn reads_dst_rows(&self) -> bool {
        false
    }

    fn replay_update(&self, r: &mut Replay, _h: Option<&Val>, a: &Val, _: &SymBlock<'_>) -> Val {
        let w = r.param(self.in_dim, self.out_dim);
        let bias = r.param(1, self.out_dim);
        let m = r.matmul(a, &w);
        let out = r.add(&m, &bias);
        r.release(m.buf);
        out
    }

    fn replay_aggregate_backward(&self, r: &mut Replay, a_grad: &Val, block: &SymBlock<'_>) -> Val {
        let (ns, nd) = (block.sizes.num_src, block.sizes.num_dst);
        let n_src = r.input(ns, 1);
        let n_dst = r.input(nd, 1);
        let t = r.mul(a_grad, &n_dst);
        // `segment_sum_transposed`: the block's arrays (uploaded by the first op that
        // reads them), then `[ns, c]`.
        r.block_upload(block);
        let seg = r.input(ns, a_grad.cols);
        let own = r.input(ns, a_grad.cols);
        let sum = r.add(&seg, &own);
        r.release(seg.buf);
        r.release(own.buf);
        let out = r.mul(&sum, &n_src);
        for v in [sum, t, n_dst, n_src] {
            r.release(v.buf);
        }
        out
    }
}

/// Replay of [`GcnLayer::forward`].
///
/// **GCN**: norms `[ns, 1]`, `[nd, 1]`; `x = matmul(h, W)` when `i > o` (projection
/// first), `xs = x ⊙ norm_src`, `agg = segment_sum(xs) + xs[..nd]`, `agg ⊙ norm_dst`,
/// then `matmul(·, W)` when not projected, `+ bias`.
fn replay_gcn(r: &mut Replay, h: &Val, (i, o): (usize, usize), block: &SymBlock) -> Val {
    let sizes = block.sizes;
    let w = r.param(i, o);
    let bias = r.param(1, o);
    let n_src = r.input(sizes.num_src, 1);
    let n_dst = r.input(sizes.num_dst, 1);
    let project_first = i > o;
    let x = if project_first {
        r.matmul(h, &w)
    } else {
        h.clone_in(r)
    };
    let xs = r.mul(&x, &n_src);
    let seg = r.segment(&xs, block, false);
    let sl = r.slice_rows(&xs, sizes.num_dst);
    let agg = r.add(&seg, &sl);
    r.release(seg.buf);
    r.release(sl.buf);
    let agg2 = r.mul(&agg, &n_dst);
    let out = if project_first {
        agg2.clone_in(r)
    } else {
        r.matmul(&agg2, &w)
    };
    let res = r.add(&out, &bias);
    for v in [out, agg2, agg, xs, x, n_dst, n_src] {
        r.release(v.buf);
    }
    res
}
