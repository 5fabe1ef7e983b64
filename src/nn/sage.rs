//! GraphSAGE layer (Hamilton et al., 2017) with DGL's `SAGEConv` semantics:
//! `h'_v = W_self·h_v + W_neigh·agg({h_u : u → v}) + b`, separate weights for self and
//! neighbours. Aggregators: `mean`, `sum`, `pool` = `max_u ReLU(W_pool·h_u + b_pool)` as in
//! the paper, and `lstm`.
//!
//! For `mean` and `sum` the projection is linear, so `W_neigh·agg(h) = agg(h·W_neigh)`;
//! the layer takes the order with fewer multiply-adds ([`projects_first`]). DGL projects
//! first whenever in > out, PyG never does; on a first layer with wide features and many
//! more src than dst rows (Cora: 1,433 features, 1,413 src and about 600 dst rows)
//! aggregating first halves that layer's products, forward and backward.
//!
//! `lstm` follows DGL's `nn.LSTM(in_feats, in_feats)` reducer: per dst node an LSTM (input
//! and hidden width = the layer's input width) runs over its sampled neighbours in edge
//! order for exactly `degree` steps from zero states; the last hidden state is the
//! aggregate (zeros without neighbours), then `fc_neigh`. It runs per degree bucket as a
//! dense batch ([`crate::ops::lstm_aggregate`]): the input projection `x·W_ih + b` is computed
//! once per src row, read per (node, step) through an index in the buckets' row order
//! ([`crate::graph::Bucket::src_indices`]) by the op itself (no gathered copy),
//! and each step is one matmul (`h·W_hh`) plus the fused cell. Parameters: `lstm.weight_ih [F, 4F]`,
//! `lstm.weight_hh [F, 4F]`, `lstm.bias [4F]` (gates i, f, g, o; one bias, the sum of
//! PyTorch's two), initialised U(−1/√F, 1/√F) as in PyTorch.

use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
use crate::nn::config::{Forward, ModelKind};
use crate::nn::exec::{Eager, Exec, Reduce};
use crate::nn::init::{self, Init};
use crate::nn::kind::{Hybrid, KindConfig, ModelEntry, ModelFlags};
use crate::nn::layer::{
    BuildCtx, HybridEager, HybridLayer, HybridTrace, Layer, LayerAt, LayerSpec,
};
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// How a SAGE layer aggregates its neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregator {
    /// Mean of the neighbours.
    Mean,
    /// Sum of the neighbours.
    Sum,
    /// Element-wise max of the neighbours after a linear layer and ReLU (DGL's `pool`).
    Pool,
    /// Element-wise max of the neighbours' features themselves (PyG's `max`; 0 for a node
    /// without neighbours).
    Max,
    /// An LSTM over the neighbours.
    Lstm,
}

impl std::str::FromStr for Aggregator {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "mean" => Ok(Aggregator::Mean),
            "sum" => Ok(Aggregator::Sum),
            "pool" => Ok(Aggregator::Pool),
            "max" => Ok(Aggregator::Max),
            "lstm" => Ok(Aggregator::Lstm),
            _ => Err(Error::invalid(format!(
                "unknown SAGE aggregator `{s}`: expected mean, sum, max, pool or lstm"
            ))),
        }
    }
}

impl Aggregator {
    /// The name `--aggr` takes.
    pub fn name(self) -> &'static str {
        match self {
            Aggregator::Mean => "mean",
            Aggregator::Sum => "sum",
            Aggregator::Pool => "pool",
            Aggregator::Max => "max",
            Aggregator::Lstm => "lstm",
        }
    }
}

/// Whether a `mean` or `sum` layer from `i` to `o` features over a block of `num_src`
/// src rows, `num_dst` dst rows and `num_edges` edges projects before aggregating,
/// `agg(h·W)`: `num_src·i·o + num_edges·o` multiply-adds, against `num_edges·i +
/// num_dst·i·o` for `agg(h)·W` (the backward's products scale the same way). Ties
/// aggregate first. The memory estimator takes the same decision.
pub fn projects_first(
    num_src: usize,
    num_dst: usize,
    num_edges: usize,
    i: usize,
    o: usize,
) -> bool {
    let (ns, nd, e, i, o) = (
        num_src as u128,
        num_dst as u128,
        num_edges as u128,
        i as u128,
        o as u128,
    );
    ns * i * o + e * o < e * i + nd * i * o
}

/// One GraphSAGE layer.
#[derive(Clone, Debug)]
pub struct SageLayer {
    /// How neighbours are aggregated.
    pub aggr: Aggregator,
    /// `[in, out]`: the node's own features.
    pub fc_self: Linear,
    /// `[in, out]`: the aggregated neighbours.
    pub fc_neigh: Linear,
    /// `pool` only: the per-neighbour transform before the max.
    pub fc_pool: Option<Linear>,
    /// `lstm` only: the LSTM's weights.
    pub lstm: Option<LstmParams>,
    /// `lstm` only: split the bucket of the block's largest in-degree (after fanout
    /// sampling, the explosion bucket) into pieces of at most this many dst nodes, to cap
    /// one launch's buffers. `None` (the default): no split.
    pub lstm_split: Option<usize>,
    /// `[out]`.
    pub bias: Tensor,
}

/// The weights of a SAGE layer's LSTM aggregator (gate order i, f, g, o).
#[derive(Clone, Debug)]
pub struct LstmParams {
    /// `[F, 4F]`.
    pub weight_ih: Tensor,
    /// `[F, 4F]`.
    pub weight_hh: Tensor,
    /// `[4F]`.
    pub bias: Tensor,
}

impl LstmParams {
    /// PyTorch's initialisation: every value U(−1/√F, 1/√F).
    pub fn new(f: usize, rng: &mut Rng, device: Device) -> Result<Self> {
        let bound = 1.0 / (f.max(1) as f64).sqrt();
        let f4 = f.checked_mul(4).ok_or_else(|| {
            Error::invalid(format!("sage-lstm: width {f} overflows the address space"))
        })?;
        Ok(LstmParams {
            weight_ih: init::uniform(&[f, f4], bound, rng, device)?,
            weight_hh: init::uniform(&[f, f4], bound, rng, device)?,
            bias: init::uniform(&[f4], bound, rng, device)?,
        })
    }

    /// The aggregate of every dst node of `block` from the src rows `h` (see the module
    /// docs); `split` caps the explosion bucket's nodes per launch.
    pub fn aggregate(
        &self,
        block: &Arc<Block>,
        h: &Tensor,
        split: Option<usize>,
    ) -> Result<Tensor> {
        let w = (&self.weight_ih, &self.weight_hh, &self.bias);
        lstm_aggregate(&mut Eager, w, h, block, split)
    }
}

impl Module for LstmParams {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        vec![
            (join(prefix, "weight_ih"), self.weight_ih.clone()),
            (join(prefix, "weight_hh"), self.weight_hh.clone()),
            (join(prefix, "bias"), self.bias.clone()),
        ]
    }
}

impl SageLayer {
    /// A layer from `in_dim` to `out_dim` features.
    pub fn new(
        in_dim: usize,
        out_dim: usize,
        aggr: Aggregator,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Self> {
        let fc_pool = match aggr {
            Aggregator::Pool => Some(Linear::new(in_dim, in_dim, true, rng, device)?),
            _ => None,
        };
        let lstm = match aggr {
            Aggregator::Lstm => Some(LstmParams::new(in_dim, rng, device)?),
            _ => None,
        };
        // PyG's SAGEConv: `lin_l` (neighbours, with the bias) and `lin_r` (self) are
        // `torch_geometric.nn.Linear`s with PyTorch's default, U(±1/√in) for weights and
        // bias alike (not Glorot, which its GCNConv and GATConv draw).
        let fc = |rng: &mut Rng| {
            Linear::with_init(in_dim, out_dim, false, Init::TorchLinear, rng, device)
        };
        let fc_self = fc(rng)?;
        let fc_neigh = fc(rng)?;
        let bias = init::uniform(&[out_dim], init::torch_linear_bound(in_dim), rng, device)?;
        Ok(SageLayer {
            aggr,
            fc_self,
            fc_neigh,
            fc_pool,
            lstm,
            lstm_split: None,
            bias,
        })
    }

    /// `h` holds the block's `num_src` rows; returns `num_dst` rows.
    pub fn forward(&self, block: &Arc<Block>, h: &Tensor) -> Result<Tensor> {
        let p = SageParams {
            w_self: &self.fc_self.weight,
            w_neigh: &self.fc_neigh.weight,
            bias: &self.bias,
        };
        let e = &mut Eager;
        match self.aggr {
            Aggregator::Mean | Aggregator::Sum => {
                sage_mean_sum(e, &p, h, block, self.aggr == Aggregator::Mean)
            }
            Aggregator::Max => sage_max(e, &p, None, h, block),
            Aggregator::Pool => {
                let pool = self
                    .fc_pool
                    .as_ref()
                    .ok_or_else(|| Error::invalid("sage pool layer without fc_pool"))?;
                let b_pool = pool
                    .bias
                    .as_ref()
                    .ok_or_else(|| Error::invalid("sage pool layer without its bias"))?;
                sage_max(e, &p, Some((&pool.weight, b_pool)), h, block)
            }
            Aggregator::Lstm => {
                let lstm = self
                    .lstm
                    .as_ref()
                    .ok_or_else(|| Error::invalid("sage lstm layer without lstm weights"))?;
                let w = (&lstm.weight_ih, &lstm.weight_hh, &lstm.bias);
                sage_lstm(e, &p, w, h, block, self.lstm_split)
            }
        }
    }
}

/// A SAGE layer's weights on either executor.
struct SageParams<'p, T> {
    w_self: &'p T,
    w_neigh: &'p T,
    bias: &'p T,
}

/// `mean` and `sum` on either executor: the neighbour term in the cheaper order
/// ([`projects_first`]); the self term reads `h`'s dst rows in place
/// ([`crate::ops::matmul_rows`]) where `h` is kept anyway, by the projection's product or as the
/// features (no gradient: they live until the micro-batch ends), and from a copy otherwise
/// (which holds only the dst rows until backward, where keeping all of `h` would hold
/// more).
fn sage_mean_sum<'b, E: Exec<'b>>(
    e: &mut E,
    p: &SageParams<'_, E::T>,
    h: &E::T,
    block: &E::Block,
    mean: bool,
) -> Result<E::T> {
    let (ns, nd, ne) = E::block_rows(block);
    let (i, o) = E::dims(p.w_neigh);
    let project = projects_first(ns, nd, ne, i, o);
    let h_dst = if project || !E::needs_grad(h) {
        None
    } else {
        Some(e.slice_rows(h, nd)?)
    };
    let how = if mean { Reduce::Mean } else { Reduce::Sum };
    let neigh = if project {
        let t = e.matmul(h, p.w_neigh)?;
        let n = e.segment(&t, block, how)?;
        e.free(t);
        n
    } else {
        let t = e.segment(h, block, how)?;
        let n = e.matmul(&t, p.w_neigh)?;
        e.free(t);
        n
    };
    let own = match &h_dst {
        Some(x) => e.matmul(x, p.w_self)?,
        None => e.matmul_rows(h, nd, p.w_self)?,
    };
    let a1 = e.add(&own, &neigh)?;
    let out = e.add(&a1, p.bias)?;
    for v in [own, a1, neigh] {
        e.free(v);
    }
    if let Some(x) = h_dst {
        e.free(x);
    }
    Ok(out)
}

/// `max` (PyG's: `segment_max(h)·W_neigh`) or, with `pool`'s weight and bias, `pool`
/// (DGL's: `segment_max(relu(h·W_pool + b_pool))·W_neigh`), on either executor; the copy
/// `h_dst = h[..nd]` first, then [`sage_self_term`].
fn sage_max<'b, E: Exec<'b>>(
    e: &mut E,
    p: &SageParams<'_, E::T>,
    pool: Option<(&E::T, &E::T)>,
    h: &E::T,
    block: &E::Block,
) -> Result<E::T> {
    let h_dst = e.slice_rows(h, E::block_rows(block).1)?;
    let neigh = match pool {
        None => {
            let mx = e.segment(h, block, Reduce::Max)?;
            let neigh = e.matmul(&mx, p.w_neigh)?;
            e.free(mx);
            neigh
        }
        Some((w_pool, b_pool)) => {
            let m = e.matmul(h, w_pool)?;
            let z1 = e.add(&m, b_pool)?;
            e.free(m);
            let z = e.relu(&z1)?;
            e.free(z1);
            let mx = e.segment(&z, block, Reduce::Max)?;
            let neigh = e.matmul(&mx, p.w_neigh)?;
            e.free(mx);
            e.free(z);
            neigh
        }
    };
    sage_self_term(e, p, h_dst, neigh)
}

/// `(h_dst·W_self + neigh) + bias` (three `[nd, o]` outputs, the first two transient), then
/// the layer's locals go.
fn sage_self_term<'b, E: Exec<'b>>(
    e: &mut E,
    p: &SageParams<'_, E::T>,
    h_dst: E::T,
    neigh: E::T,
) -> Result<E::T> {
    let s = e.matmul(&h_dst, p.w_self)?;
    let a1 = e.add(&s, &neigh)?;
    let out = e.add(&a1, p.bias)?;
    for v in [s, a1, neigh, h_dst] {
        e.free(v);
    }
    Ok(out)
}

/// The hybrid update `h[..nd]·W_self + a·W_neigh + b` on either executor.
fn sage_update<'b, E: Exec<'b>>(
    e: &mut E,
    p: &SageParams<'_, E::T>,
    h: &E::T,
    a: &E::T,
    block: &E::Block,
) -> Result<E::T> {
    let neigh = e.matmul(a, p.w_neigh)?;
    let own = e.matmul_rows(h, E::block_rows(block).1, p.w_self)?;
    let a1 = e.add(&own, &neigh)?;
    let out = e.add(&a1, p.bias)?;
    for v in [own, a1, neigh] {
        e.free(v);
    }
    Ok(out)
}

impl Module for SageLayer {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut v = self.fc_self.named_parameters(&join(prefix, "fc_self"));
        v.extend(self.fc_neigh.named_parameters(&join(prefix, "fc_neigh")));
        if let Some(p) = &self.fc_pool {
            v.extend(p.named_parameters(&join(prefix, "fc_pool")));
        }
        if let Some(l) = &self.lstm {
            v.extend(l.named_parameters(&join(prefix, "lstm")));
        }
        v.push((join(prefix, "bias"), self.bias.clone()));
        v
    }
}

impl Layer for SageLayer {
    fn forward(&self, block: &Arc<Block>, h: &Tensor, _l: usize, _f: &Forward) -> Result<Tensor> {
        SageLayer::forward(self, block, h)
    }

    fn set_bucket_split(&mut self, max_nodes: Option<usize>) {
        self.lstm_split = max_nodes;
    }

    fn hybrid(&self) -> Option<&HybridEager> {
        let split: &HybridEager = self;
        matches!(self.aggr, Aggregator::Mean | Aggregator::Sum).then_some(split)
    }
}

/// `mean` and `sum` split for the hybrid mode: the aggregation is `segment_mean(h)` (or
/// `segment_sum`), the update `h_dst·W_self + a·W_neigh + b` (aggregating first whatever
/// [`projects_first`] says, so the result may round differently from
/// [`SageLayer::forward`]).
impl HybridLayer<'_, Eager> for SageLayer {
    fn aggregate(&self, e: &mut Eager, block: &Arc<Block>, h: &Tensor) -> Result<Tensor> {
        e.segment(h, block, hybrid_reduce(self.aggr)?)
    }

    fn update(
        &self,
        e: &mut Eager,
        block: &Arc<Block>,
        h: Option<&Tensor>,
        a: &Tensor,
    ) -> Result<Tensor> {
        let h = h.ok_or_else(|| Error::invalid("sage update: its self term needs the dst rows"))?;
        let p = SageParams {
            w_self: &self.fc_self.weight,
            w_neigh: &self.fc_neigh.weight,
            bias: &self.bias,
        };
        sage_update(e, &p, h, a, block)
    }

    fn aggregate_backward(&self, e: &mut Eager, block: &Arc<Block>, g: &Tensor) -> Result<Tensor> {
        e.segment_transposed(g, block, self.aggr == Aggregator::Mean)
    }
}

/// The reduction of the hybrid split's aggregation: mean or sum; the other aggregators
/// have weights, so no split.
fn hybrid_reduce(aggr: Aggregator) -> Result<Reduce> {
    match aggr {
        Aggregator::Mean => Ok(Reduce::Mean),
        Aggregator::Sum => Ok(Reduce::Sum),
        other => Err(Error::invalid(format!(
            "sage-{}: the aggregation has weights, so there is no hybrid split",
            other.name()
        ))),
    }
}

/// GraphSAGE in the registry of model kinds.
pub const MODEL: ModelEntry = ModelEntry {
    kind: ModelKind::Sage,
    names: &["sage", "graphsage"],
    help:
        "GraphSAGE, self and aggregated neighbours with separate weights, --aggr picks the aggregator",
    flags: &[(
        "--aggr",
        "SAGE only: the aggregator, mean (default), sum, max (PyG's: the max of the \
         neighbours' features), pool (DGL's: a linear layer and ReLU, then the max) or lstm \
         (DGL semantics, run per degree bucket)",
    )],
    default: || Arc::new(SageConfig::default()),
    parse: |flags: &ModelFlags| {
        let mut c = SageConfig::default();
        if let Some(aggr) = flags.get_parsed("--aggr", str::parse::<Aggregator>)? {
            c.aggr = aggr;
        }
        Ok(Arc::new(c))
    },
    hybrid: Hybrid::With("with --aggr mean or sum"),
};

/// GraphSAGE's own settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SageConfig {
    /// The neighbour aggregator (`--aggr`).
    pub aggr: Aggregator,
}

impl Default for SageConfig {
    /// The mean aggregator.
    fn default() -> Self {
        SageConfig {
            aggr: Aggregator::Mean,
        }
    }
}

impl KindConfig for SageConfig {
    fn kind(&self) -> ModelKind {
        ModelKind::Sage
    }

    fn label(&self) -> String {
        format!("sage-{}", self.aggr.name())
    }

    fn splits_buckets(&self) -> bool {
        self.aggr == Aggregator::Lstm
    }

    fn layer(&self, at: LayerAt) -> Box<dyn LayerSpec> {
        Box::new(SageSpec {
            in_dim: at.in_dim,
            out_dim: at.out_dim,
            aggr: self.aggr,
        })
    }
}

/// A GraphSAGE layer before it has weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SageSpec {
    /// Input width.
    pub in_dim: usize,
    /// Output width.
    pub out_dim: usize,
    /// The neighbour aggregator.
    pub aggr: Aggregator,
}

impl LayerSpec for SageSpec {
    fn parameter_shapes(&self) -> Option<Vec<(&'static str, Vec<u64>)>> {
        let (i, o) = (self.in_dim as u64, self.out_dim as u64);
        let mut shapes = vec![
            ("fc_self.weight", vec![i, o]),
            ("fc_neigh.weight", vec![i, o]),
        ];
        match self.aggr {
            Aggregator::Pool => {
                shapes.push(("fc_pool.weight", vec![i, i]));
                shapes.push(("fc_pool.bias", vec![i]));
            }
            Aggregator::Lstm => {
                let i4 = i.checked_mul(4)?;
                shapes.push(("lstm.weight_ih", vec![i, i4]));
                shapes.push(("lstm.weight_hh", vec![i, i4]));
                shapes.push(("lstm.bias", vec![i4]));
            }
            Aggregator::Mean | Aggregator::Sum | Aggregator::Max => {}
        }
        shapes.push(("bias", vec![o]));
        Some(shapes)
    }

    /// The LSTM's four gates, input and hidden, per (node, step); pool's transform per
    /// neighbour; the other aggregators read each neighbour's row once.
    fn multiply_adds_per_edge(&self) -> f64 {
        let i = self.in_dim as f64;
        match self.aggr {
            Aggregator::Lstm => 8.0 * i * i,
            Aggregator::Pool => i * i,
            Aggregator::Mean | Aggregator::Sum | Aggregator::Max => i,
        }
    }

    fn build(&self, ctx: &mut BuildCtx<'_>) -> Result<Box<dyn Layer>> {
        let layer = SageLayer::new(
            self.in_dim,
            self.out_dim,
            self.aggr,
            &mut ctx.rng,
            ctx.device,
        )?;
        Ok(Box::new(layer))
    }

    fn trace(
        &self,
        r: &mut Replay,
        h: &Val,
        block: &SymBlock<'_>,
        bucket_split: Option<usize>,
    ) -> Result<Val> {
        let (w_self, w_neigh, bias) = self.params(r);
        let p = SageParams {
            w_self: &w_self,
            w_neigh: &w_neigh,
            bias: &bias,
        };
        let i = self.in_dim;
        match self.aggr {
            Aggregator::Mean | Aggregator::Sum => {
                sage_mean_sum(r, &p, h, block, self.aggr == Aggregator::Mean)
            }
            Aggregator::Max => sage_max(r, &p, None, h, block),
            Aggregator::Pool => {
                let (w_pool, b_pool) = (r.param(i, i), r.param(1, i));
                sage_max(r, &p, Some((&w_pool, &b_pool)), h, block)
            }
            Aggregator::Lstm => lstm_trace(r, &p, h, i, block, bucket_split),
        }
    }

    fn hybrid(&self) -> Option<&HybridTrace> {
        let split: &HybridTrace = self;
        matches!(self.aggr, Aggregator::Mean | Aggregator::Sum).then_some(split)
    }
}

impl SageSpec {
    /// `W_self`, `W_neigh` and the bias on symbolic buffers.
    fn params(&self, r: &mut Replay) -> (Val, Val, Val) {
        let (i, o) = (self.in_dim, self.out_dim);
        (r.param(i, o), r.param(i, o), r.param(1, o))
    }
}

/// [`SageLayer`]'s [`HybridLayer`] split on symbolic buffers.
impl<'b> HybridLayer<'b, Replay> for SageSpec {
    fn aggregate(&self, r: &mut Replay, block: &SymBlock<'b>, h: &Val) -> Result<Val> {
        r.segment(h, block, hybrid_reduce(self.aggr)?)
    }

    fn update(
        &self,
        r: &mut Replay,
        block: &SymBlock<'b>,
        h: Option<&Val>,
        a: &Val,
    ) -> Result<Val> {
        let h = h.ok_or_else(|| Error::invalid("sage update: its self term needs the dst rows"))?;
        let (w_self, w_neigh, bias) = self.params(r);
        let p = SageParams {
            w_self: &w_self,
            w_neigh: &w_neigh,
            bias: &bias,
        };
        sage_update(r, &p, h, a, block)
    }

    fn aggregate_backward(&self, r: &mut Replay, block: &SymBlock<'b>, g: &Val) -> Result<Val> {
        r.segment_transposed(g, block, self.aggr == Aggregator::Mean)
    }
}

/// The `lstm` arm of [`SageLayer::forward`] on symbolic buffers: the LSTM's parameters,
/// then the same [`sage_lstm`] the layer runs.
fn lstm_trace(
    r: &mut Replay,
    p: &SageParams<'_, Val>,
    h: &Val,
    i: usize,
    block: &SymBlock<'_>,
    split: Option<usize>,
) -> Result<Val> {
    let i4 = i.saturating_mul(4);
    let (w_ih, w_hh, b) = (r.param(i, i4), r.param(i, i4), r.param(1, i4));
    sage_lstm(r, p, (&w_ih, &w_hh, &b), h, block, split)
}

/// The `lstm` arm of [`SageLayer::forward`] on either executor: the copy `h_dst`, the
/// aggregate ([`lstm_aggregate`]), `agg·W_neigh` (the aggregate goes after it), then
/// [`sage_self_term`].
fn sage_lstm<'b, E: Exec<'b>>(
    e: &mut E,
    p: &SageParams<'_, E::T>,
    lstm: (&E::T, &E::T, &E::T),
    h: &E::T,
    block: &E::Block,
    split: Option<usize>,
) -> Result<E::T> {
    let h_dst = e.slice_rows(h, E::block_rows(block).1)?;
    let agg = lstm_aggregate(e, lstm, h, block, split)?;
    let neigh = e.matmul(&agg, p.w_neigh)?;
    e.free(agg);
    sage_self_term(e, p, h_dst, neigh)
}

/// [`LstmParams::aggregate`] on either executor: `xw = h·W_ih + b` `[ns, 4F]` (the
/// product transient), the buckets' plan ([`Exec::lstm_plan`]: the index `idx` u32 `[R]`
/// of the src row each (node, step) reads, in the buckets' row order), then
/// [`crate::ops::lstm_aggregate`], which reads the rows of `xw` through `idx` (keeping
/// `idx`); `xw` and `idx` go after it.
fn lstm_aggregate<'b, E: Exec<'b>>(
    e: &mut E,
    (w_ih, w_hh, b): (&E::T, &E::T, &E::T),
    h: &E::T,
    block: &E::Block,
    split: Option<usize>,
) -> Result<E::T> {
    let m = e.matmul(h, w_ih)?;
    let xw = e.add(&m, b)?;
    e.free(m);
    let (idx, plan) = e.lstm_plan(block, split, h)?;
    let agg = e.lstm(&xw, &idx, w_hh, &plan)?;
    e.free(xw);
    e.free(idx);
    Ok(agg)
}
