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
use crate::meta::{Replay, SymBlock, Val};
use crate::nn::config::{Forward, ModelKind};
use crate::nn::exec::{Eager, Exec, Reduce};
use crate::nn::init;
use crate::nn::kind::{Hybrid, KindConfig, ModelEntry};
use crate::nn::layer::{
    BuildCtx, HybridEager, HybridLayer, HybridTrace, Layer, LayerAt, LayerSpec,
};
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
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
        let norms = norms(block, h, norm)?;
        gcn_forward(&mut Eager, (&self.fc.weight, &self.bias), h, block, norms)
    }
}

/// [`GcnLayer::forward`] on either executor, from the weight `w` `[in, out]`, the bias and
/// the degree norms `(n_src [ns, 1], n_dst [nd, 1])` (which it frees).
fn gcn_forward<'b, E: Exec<'b>>(
    e: &mut E,
    (w, bias): (&E::T, &E::T),
    h: &E::T,
    block: &E::Block,
    (n_src, n_dst): (E::T, E::T),
) -> Result<E::T> {
    let (i, o) = E::dims(w);
    // Project first when it shrinks what is aggregated (the maths is linear).
    let project_first = i > o;
    let x = if project_first {
        e.matmul(h, w)?
    } else {
        e.share(h)
    };
    let xs = e.mul(&x, &n_src)?;
    let agg = with_self_loop(e, &xs, block)?;
    let agg2 = e.mul(&agg, &n_dst)?;
    let out = if project_first {
        e.share(&agg2)
    } else {
        e.matmul(&agg2, w)?
    };
    let res = e.add(&out, bias)?;
    for v in [out, agg2, agg, xs, x, n_dst, n_src] {
        e.free(v);
    }
    Ok(res)
}

/// `segment_sum(xs) + xs[..nd]`: the in-neighbours' rows and the node's own (its
/// self-loop), the two parts freed once summed.
fn with_self_loop<'b, E: Exec<'b>>(e: &mut E, xs: &E::T, block: &E::Block) -> Result<E::T> {
    let seg = e.segment(xs, block, Reduce::Sum)?;
    let own = e.slice_rows(xs, E::block_rows(block).1)?;
    let agg = e.add(&seg, &own)?;
    e.free(seg);
    e.free(own);
    Ok(agg)
}

/// [`HybridLayer::aggregate`] of GCN on either executor: `n_dst ⊙ (segment_sum(h ⊙ n_src) +
/// (h ⊙ n_src)[..nd])`.
fn gcn_aggregate<'b, E: Exec<'b>>(
    e: &mut E,
    h: &E::T,
    block: &E::Block,
    (n_src, n_dst): (E::T, E::T),
) -> Result<E::T> {
    let xs = e.mul(h, &n_src)?;
    let agg = with_self_loop(e, &xs, block)?;
    let out = e.mul(&agg, &n_dst)?;
    for v in [agg, xs, n_dst, n_src] {
        e.free(v);
    }
    Ok(out)
}

/// The update `a·W + b` on either executor.
fn gcn_update<'b, E: Exec<'b>>(e: &mut E, (w, bias): (&E::T, &E::T), a: &E::T) -> Result<E::T> {
    let m = e.matmul(a, w)?;
    let out = e.add(&m, bias)?;
    e.free(m);
    Ok(out)
}

/// [`HybridLayer::aggregate_backward`] of GCN on either executor:
/// `h̄ = n_src ⊙ (segment_sumᵀ(t) + t padded to num_src rows)`, `t = n_dst ⊙ ā`.
fn gcn_aggregate_backward<'b, E: Exec<'b>>(
    e: &mut E,
    a_grad: &E::T,
    block: &E::Block,
    (n_src, n_dst): (E::T, E::T),
) -> Result<E::T> {
    let ns = E::block_rows(block).0;
    let t = e.mul(a_grad, &n_dst)?;
    let seg = e.segment_transposed(&t, block, false)?;
    let own = e.pad_rows(&t, ns)?;
    let sum = e.add(&seg, &own)?;
    e.free(seg);
    e.free(own);
    let out = e.mul(&sum, &n_src)?;
    for v in [sum, t, n_dst, n_src] {
        e.free(v);
    }
    Ok(out)
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

    fn hybrid(&self) -> Option<&HybridEager> {
        Some(self)
    }
}

/// GCN split for the hybrid mode: the aggregation is
/// `n_dst ⊙ (segment_sum(h ⊙ n_src) + (h ⊙ n_src)[..nd])` (aggregating first whatever the
/// widths, so the result may round differently from [`GcnLayer::forward`]), the update
/// `a·W + b`, which reads no row of `h`.
impl HybridLayer<'_, Eager> for GcnNormed {
    fn aggregate(&self, e: &mut Eager, block: &Arc<Block>, h: &Tensor) -> Result<Tensor> {
        let norms = norms(block, h, &self.norm)?;
        gcn_aggregate(e, h, block, norms)
    }

    fn reads_dst_rows(&self) -> bool {
        false
    }

    fn update(
        &self,
        e: &mut Eager,
        _: &Arc<Block>,
        _: Option<&Tensor>,
        a: &Tensor,
    ) -> Result<Tensor> {
        let l = &self.layer;
        gcn_update(e, (&l.fc.weight, &l.bias), a)
    }

    fn aggregate_backward(&self, e: &mut Eager, block: &Arc<Block>, g: &Tensor) -> Result<Tensor> {
        let norms = norms(block, g, &self.norm)?;
        gcn_aggregate_backward(e, g, block, norms)
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

    fn trace(
        &self,
        r: &mut Replay,
        h: &Val,
        block: &SymBlock<'_>,
        _: Option<usize>,
    ) -> Result<Val> {
        let (w, bias) = self.params(r);
        let norms = sym_norms(r, block);
        gcn_forward(r, (&w, &bias), h, block, norms)
    }

    fn hybrid(&self) -> Option<&HybridTrace> {
        Some(self)
    }
}

impl GcnSpec {
    /// The weight and bias on symbolic buffers.
    fn params(&self, r: &mut Replay) -> (Val, Val) {
        (r.param(self.in_dim, self.out_dim), r.param(1, self.out_dim))
    }
}

/// The degree norms `[ns, 1]` and `[nd, 1]` on symbolic buffers (uploaded from the host).
fn sym_norms(r: &mut Replay, block: &SymBlock<'_>) -> (Val, Val) {
    (
        r.input(block.sizes.num_src, 1),
        r.input(block.sizes.num_dst, 1),
    )
}

/// [`GcnNormed`]'s [`HybridLayer`] split on symbolic buffers.
impl<'b> HybridLayer<'b, Replay> for GcnSpec {
    fn aggregate(&self, r: &mut Replay, block: &SymBlock<'b>, h: &Val) -> Result<Val> {
        let norms = sym_norms(r, block);
        gcn_aggregate(r, h, block, norms)
    }

    fn reads_dst_rows(&self) -> bool {
        false
    }

    fn update(&self, r: &mut Replay, _: &SymBlock<'b>, _: Option<&Val>, a: &Val) -> Result<Val> {
        let (w, bias) = self.params(r);
        gcn_update(r, (&w, &bias), a)
    }

    fn aggregate_backward(&self, r: &mut Replay, block: &SymBlock<'b>, g: &Val) -> Result<Val> {
        let norms = sym_norms(r, block);
        gcn_aggregate_backward(r, g, block, norms)
    }
}
