//! A model is a stack of layers, and a layer kind is one file that holds, side by side:
//!
//! - its **spec** ([`LayerSpec`]): what the layer is before it has weights (widths and
//!   options), the shapes of its parameters, how to build it, and its **trace**: the
//!   layer's own forward, written once over [`crate::nn::exec::Exec`], run on the
//!   symbolic buffers of [`crate::meta`] for the memory estimator;
//! - the **layer** itself ([`Layer`]): its parameters and its `forward`;
//! - its model kind's own configuration and registry entry ([`crate::nn::kind`], listed in
//!   [`crate::nn::model::MODELS`]).
//!
//! [`crate::nn::Gnn`] builds its layers from the specs and the estimator
//! ([`crate::train::MemoryEstimator`]) traces the same specs, so a model cannot train
//! without an estimate, and the two change in one place.

use std::fmt::Debug;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
use crate::nn::config::Forward;
use crate::nn::exec::{Eager, Exec};
use crate::nn::module::Module;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// A layer with weights.
pub trait Layer: Module + Debug + Send + Sync {
    /// The block's dst rows from its src rows `h`, in pass `f`; `l` is the layer's index in
    /// its model, which keys the layer's random masks.
    fn forward(&self, block: &Arc<Block>, h: &Tensor, l: usize, f: &Forward) -> Result<Tensor>;

    /// A layer that aggregates per degree bucket cuts each block's largest-degree bucket
    /// (the explosion bucket) into pieces of at most `max_nodes` dst nodes (`None`: no
    /// split); other layers ignore it.
    fn set_bucket_split(&mut self, _max_nodes: Option<usize>) {}

    /// The layer split into its weight-free aggregation and its update, for full-graph
    /// training's hybrid mode; `None` (the default) where the aggregation has weights.
    fn hybrid(&self) -> Option<&HybridEager> {
        None
    }
}

/// A layer whose aggregation has no weights (HongTu's hybrid mode): its forward is
/// `update(h, aggregate(h))`, so full-graph training can cache the aggregation on the host
/// in the forward pass, and recompute only the update in the backward pass, from the
/// block's dst rows and that cache, without the src rows. Written over an executor: the
/// layer implements it on tensors ([`Eager`], [`Layer::hybrid`]) and its spec on the
/// estimator's symbolic buffers ([`Replay`], [`LayerSpec::hybrid`]: its parameters
/// declared first, as in [`LayerSpec::trace`]), both through the same functions.
pub trait HybridLayer<'b, E: Exec<'b>> {
    /// The aggregation `[num_dst, in]` of the block's src rows `h` (no weights).
    fn aggregate(&self, e: &mut E, block: &E::Block, h: &E::T) -> Result<E::T>;

    /// Whether [`HybridLayer::update`] reads the dst rows of `h` (SAGE's self term; GCN's
    /// self-loop is inside its aggregation, so it reads none).
    fn reads_dst_rows(&self) -> bool {
        true
    }

    /// The layer's output `[num_dst, out]` from `h`, whose first `num_dst` rows are the
    /// block's dst rows (it may have only those; `None` where
    /// [`HybridLayer::reads_dst_rows`] is false), and the aggregation `a`.
    fn update(&self, e: &mut E, block: &E::Block, h: Option<&E::T>, a: &E::T) -> Result<E::T>;

    /// The gradient `[num_src, in]` that [`HybridLayer::aggregate`] passes to `h` from the
    /// gradient `a_grad` of its output (the aggregation is linear, so `h` is not needed).
    fn aggregate_backward(&self, e: &mut E, block: &E::Block, a_grad: &E::T) -> Result<E::T>;
}

/// A layer's [`HybridLayer`] split on tensors.
pub type HybridEager = dyn for<'b> HybridLayer<'b, Eager>;

/// A spec's [`HybridLayer`] split on the estimator's symbolic buffers.
pub type HybridTrace = dyn for<'b> HybridLayer<'b, Replay>;

/// One layer before it has weights.
pub trait LayerSpec: Debug + Send + Sync {
    /// `(name, shape)` of every parameter, in the order [`LayerSpec::build`] creates them;
    /// `None` when a size overflows 64 bits.
    fn parameter_shapes(&self) -> Option<Vec<(&'static str, Vec<u64>)>>;

    /// Multiply-adds per edge of the forward's aggregation: the cost proxy that balances
    /// ranks ([`crate::dist::micro_cost`]), not a time model.
    fn multiply_adds_per_edge(&self) -> f64;

    /// The layer with seeded initial weights.
    fn build(&self, ctx: &mut BuildCtx<'_>) -> Result<Box<dyn Layer>>;

    /// The layer's forward in training mode on the estimator's symbolic buffers: what the
    /// layer holds before its forward starts (its parameters, [`Replay::param`]; inputs
    /// computed on the host), then the same forward the layer runs, on [`Replay`] (the
    /// forward is written once over [`crate::nn::exec::Exec`]). `h` is the input (kept by
    /// the caller, which releases it after); `block` the block (held by the caller; its
    /// sizes, and its index arrays as the ops upload them on a GPU); `bucket_split` as
    /// [`Layer::set_bucket_split`]. Returns the output.
    fn trace(
        &self,
        r: &mut Replay,
        h: &Val,
        block: &SymBlock<'_>,
        bucket_split: Option<usize>,
    ) -> Result<Val>;

    /// The layer's [`HybridLayer`] split on symbolic buffers, where it has one.
    fn hybrid(&self) -> Option<&HybridTrace> {
        None
    }
}

/// What building a model's layers shares: the weights' random stream, the device, and the
/// graph's degrees for layers normalised by them.
pub struct BuildCtx<'a> {
    /// Draws every initial weight, layer after layer.
    pub rng: Rng,
    /// Where the parameters live.
    pub device: Device,
    in_degrees: Option<&'a [u32]>,
    norm: Option<Arc<Vec<f32>>>,
}

impl<'a> BuildCtx<'a> {
    /// A context seeded with `seed`; `in_degrees` are the graph's (GCN reads them).
    pub fn new(seed: u64, device: Device, in_degrees: Option<&'a [u32]>) -> Self {
        BuildCtx {
            rng: Rng::new(seed),
            device,
            in_degrees,
            norm: None,
        }
    }

    /// `norm` of the graph's in-degrees (GCN's `1/√(in-degree + 1)` per node,
    /// [`crate::nn::gcn::gcn_norm`]), computed once and shared by the layers that read it
    /// (one normalisation per model: the first call's `norm` is the one kept).
    pub fn degree_norm(
        &mut self,
        model: &str,
        norm: fn(&[u32]) -> Vec<f32>,
    ) -> Result<Arc<Vec<f32>>> {
        if self.norm.is_none() {
            let d = self
                .in_degrees
                .ok_or_else(|| Error::invalid(format!("{model} needs the graph's in-degrees")))?;
            self.norm = Some(Arc::new(norm(d)));
        }
        Ok(self.norm.clone().expect("set above"))
    }
}

/// Where a layer stands in its model, and its widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerAt {
    /// Its index, the input layer 0.
    pub index: usize,
    /// It is the output layer.
    pub last: bool,
    /// Input width.
    pub in_dim: usize,
    /// Output width.
    pub out_dim: usize,
}
