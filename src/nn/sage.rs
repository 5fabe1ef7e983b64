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
//! dense batch ([`ops::lstm_aggregate`]): the input projection `x·W_ih + b` is computed
//! once per src row, gathered per (node, step) with [`ops::index_select`] in the buckets'
//! row order ([`crate::graph::Bucket::src_indices`]), and each step is one matmul
//! (`h·W_hh`) plus the fused cell. Parameters: `lstm.weight_ih [F, 4F]`,
//! `lstm.weight_hh [F, 4F]`, `lstm.bias [4F]` (gates i, f, g, o; one bias, the sum of
//! PyTorch's two), initialised U(−1/√F, 1/√F) as in PyTorch.

use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{Block, BlockSizes, Buckets};
use crate::nn::config::{Forward, ModelKind};
use crate::nn::init::{self, Init};
use crate::nn::kind::{Hybrid, KindConfig, ModelEntry, ModelFlags};
use crate::nn::layer::{BuildCtx, HybridLayer, HybridSpec, Layer, LayerAt, LayerSpec};
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
use crate::nn::replay::{Replay, SymBlock, Val};
use crate::ops;
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
        let max_degree = (0..block.num_dst).map(|d| block.degree(d)).max();
        let buckets = Buckets::new(block, max_degree);
        let buckets = match split {
            Some(n) => buckets.split_explosion(n)?,
            None => buckets,
        };
        let plan = Arc::new(ops::LstmPlan::new(block, &buckets)?);
        let xw = ops::add(&ops::matmul(h, &self.weight_ih, false, false)?, &self.bias)?;
        let idx = Tensor::from_u32(plan.src.clone(), &[plan.rows()], h.device())?;
        let xg = ops::index_select(&xw, &idx)?;
        drop(xw);
        ops::lstm_aggregate(&xg, &self.weight_hh, &plan)
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
        if matches!(self.aggr, Aggregator::Mean | Aggregator::Sum) {
            return self.forward_mean_sum(block, h);
        }
        let h_dst = ops::slice(h, 0, 0, block.num_dst)?;
        let neigh = match self.aggr {
            Aggregator::Mean | Aggregator::Sum => unreachable!("handled above"),
            Aggregator::Pool => {
                let pool = self
                    .fc_pool
                    .as_ref()
                    .ok_or_else(|| Error::invalid("sage pool layer without fc_pool"))?;
                let z = ops::relu(&pool.forward(h)?)?;
                self.fc_neigh.forward(&ops::segment_max(&z, block)?)?
            }
            Aggregator::Max => self.fc_neigh.forward(&ops::segment_max(h, block)?)?,
            Aggregator::Lstm => {
                let lstm = self
                    .lstm
                    .as_ref()
                    .ok_or_else(|| Error::invalid("sage lstm layer without lstm weights"))?;
                self.fc_neigh
                    .forward(&lstm.aggregate(block, h, self.lstm_split)?)?
            }
        };
        ops::add(
            &ops::add(&self.fc_self.forward(&h_dst)?, &neigh)?,
            &self.bias,
        )
    }
}

impl SageLayer {
    /// `mean` and `sum`: the neighbour term in the cheaper order ([`projects_first`]);
    /// the self term reads `h`'s dst rows in place ([`ops::matmul_rows`]) where `h` is
    /// kept anyway, by the projection's product or as the features (no gradient: they
    /// live until the micro-batch ends), and from a copy otherwise (which holds only the
    /// dst rows until backward, where keeping all of `h` would hold more).
    fn forward_mean_sum(&self, block: &Arc<Block>, h: &Tensor) -> Result<Tensor> {
        let nd = block.num_dst;
        let (i, o) = (self.fc_neigh.fan_in(), self.fc_neigh.fan_out());
        let project = projects_first(block.num_src, nd, block.num_edges(), i, o);
        let h_dst = if project || !h.requires_grad() {
            None
        } else {
            Some(ops::slice(h, 0, 0, nd)?)
        };
        let reduce = |x: &Tensor| match self.aggr {
            Aggregator::Mean => ops::segment_mean(x, block),
            _ => ops::segment_sum(x, block),
        };
        let neigh = if project {
            reduce(&self.fc_neigh.forward(h)?)?
        } else {
            self.fc_neigh.forward(&reduce(h)?)?
        };
        let own = match &h_dst {
            Some(x) => self.fc_self.forward(x)?,
            None => ops::matmul_rows(h, nd, &self.fc_self.weight)?,
        };
        ops::add(&ops::add(&own, &neigh)?, &self.bias)
    }
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

    fn hybrid(&self) -> Option<&dyn HybridLayer> {
        let split: &dyn HybridLayer = self;
        matches!(self.aggr, Aggregator::Mean | Aggregator::Sum).then_some(split)
    }
}

/// `mean` and `sum` split for the hybrid mode: the aggregation is `segment_mean(h)` (or
/// `segment_sum`), the update `h_dst·W_self + a·W_neigh + b` (aggregating first whatever
/// [`projects_first`] says, so the result may round differently from
/// [`SageLayer::forward`]).
impl HybridLayer for SageLayer {
    fn aggregate(&self, block: &Arc<Block>, h: &Tensor) -> Result<Tensor> {
        match self.aggr {
            Aggregator::Mean => ops::segment_mean(h, block),
            Aggregator::Sum => ops::segment_sum(h, block),
            other => Err(Error::invalid(format!(
                "sage-{}: the aggregation has weights, so there is no hybrid split",
                other.name()
            ))),
        }
    }

    fn update(&self, block: &Arc<Block>, h: Option<&Tensor>, a: &Tensor) -> Result<Tensor> {
        let h = h.ok_or_else(|| Error::invalid("sage update: its self term needs the dst rows"))?;
        let neigh = self.fc_neigh.forward(a)?;
        let own = ops::matmul_rows(h, block.num_dst, &self.fc_self.weight)?;
        ops::add(&ops::add(&own, &neigh)?, &self.bias)
    }

    fn aggregate_backward(&self, block: &Arc<Block>, a_grad: &Tensor) -> Result<Tensor> {
        ops::segment_sum_transposed(a_grad, block, self.aggr == Aggregator::Mean)
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

    fn replay(
        &self,
        r: &mut Replay,
        h: &Val,
        block: &SymBlock<'_>,
        bucket_split: Option<usize>,
    ) -> Val {
        let io = (self.in_dim, self.out_dim);
        match self.aggr {
            Aggregator::Mean | Aggregator::Sum => replay_mean_sum(r, h, io, block),
            Aggregator::Pool => replay_pool(r, h, io, block),
            Aggregator::Max => replay_max(r, h, io, block),
            Aggregator::Lstm => replay_lstm(r, h, io, block.sizes, bucket_split),
        }
    }

    fn hybrid(&self) -> Option<&dyn HybridSpec> {
        let split: &dyn HybridSpec = self;
        matches!(self.aggr, Aggregator::Mean | Aggregator::Sum).then_some(split)
    }
}

/// Replays of [`SageLayer`]'s [`HybridLayer`] split: the aggregation `[nd, i]` (what
/// its autograd rule keeps: nothing but the block); the update's three parameters, then
/// `a·W_neigh`, `matmul_rows(h, nd, W_self)` (keeps `h`), two adds; the transposed
/// aggregation `[ns, i]`.
impl HybridSpec for SageSpec {
    fn replay_aggregate(&self, r: &mut Replay, h: &Val, block: &SymBlock<'_>) -> Val {
        r.segment(h, block, false)
    }

    fn replay_update(&self, r: &mut Replay, h: Option<&Val>, a: &Val, block: &SymBlock<'_>) -> Val {
        let sizes = block.sizes;
        let (i, o) = (self.in_dim, self.out_dim);
        // The trainer gives the dst rows to a layer that reads them ([`HybridSpec`]).
        let h = h.copied().unwrap_or(*a);
        let w_self = r.param(i, o);
        let w_neigh = r.param(i, o);
        let bias = r.param(1, o);
        let neigh = r.matmul(a, &w_neigh);
        let own = r.matmul_rows(&h, sizes.num_dst, &w_self);
        let a1 = r.add(&own, &neigh);
        let out = r.add(&a1, &bias);
        for v in [own, a1, neigh] {
            r.release(v.buf);
        }
        out
    }

    /// `segment_sum_transposed`: the block's arrays (uploaded by the first op that reads
    /// them), then `[ns, i]`.
    fn replay_aggregate_backward(
        &self,
        r: &mut Replay,
        _a_grad: &Val,
        block: &SymBlock<'_>,
    ) -> Val {
        r.block_upload(block);
        r.input(block.sizes.num_src, self.in_dim)
    }
}

/// Replay of [`SageLayer::forward`] with `mean` or `sum` ([`SageLayer::forward_mean_sum`]),
/// `i`/`o` the layer's widths, `ns`/`nd` the block's src/dst counts.
///
/// **SAGE mean/sum**: the self term is `matmul_rows(h, nd, W_self)` when `h` is kept
/// anyway (projecting first, or `h` without gradient: the features), else
/// `h_dst = slice(h)` `[nd, i]` first, kept by `matmul(h_dst, W_self)`, computed after
/// the neighbours. Neighbours, projecting first when that takes fewer multiply-adds
/// ([`projects_first`]): `segment(matmul(h, W_neigh))` (keeps `h`, a
/// transient `[ns, o]`) else `matmul(segment(h), W_neigh)` (keeps the aggregate
/// `[nd, i]`). Then `(self + neigh) + bias`: three `[nd, o]` outputs, the first two
/// transient.
fn replay_mean_sum(r: &mut Replay, h: &Val, (i, o): (usize, usize), block: &SymBlock) -> Val {
    let sizes = block.sizes;
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let bias = r.param(1, o);
    let project = projects_first(sizes.num_src, sizes.num_dst, sizes.num_edges, i, o);
    let h_dst = if project || !h.grad {
        None
    } else {
        Some(r.slice_rows(h, sizes.num_dst))
    };
    let neigh = if project {
        let t = r.matmul(h, &w_neigh);
        let n = r.segment(&t, block, false);
        r.release(t.buf);
        n
    } else {
        let t = r.segment(h, block, false);
        let n = r.matmul(&t, &w_neigh);
        r.release(t.buf);
        n
    };
    let own = match &h_dst {
        Some(x) => r.matmul(x, &w_self),
        None => r.matmul_rows(h, sizes.num_dst, &w_self),
    };
    let a1 = r.add(&own, &neigh);
    let out = r.add(&a1, &bias);
    r.release(own.buf);
    r.release(a1.buf);
    r.release(neigh.buf);
    if let Some(x) = h_dst {
        r.release(x.buf);
    }
    out
}

/// Replay of the `max` arm of [`SageLayer::forward`]: the copy `h_dst = h[..nd]` `[nd, i]`
/// first, `segment_max` `[nd, i]` + argmax, `matmul(max, W_neigh)`, then
/// [`replay_finish`].
fn replay_max(r: &mut Replay, h: &Val, (i, o): (usize, usize), block: &SymBlock) -> Val {
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let bias = r.param(1, o);
    let h_dst = r.slice_rows(h, block.sizes.num_dst);
    let mx = r.segment(h, block, true);
    let neigh = r.matmul(&mx, &w_neigh);
    r.release(mx.buf);
    replay_finish(r, h_dst, neigh, &w_self, &bias)
}

/// Replay of the `pool` arm of [`SageLayer::forward`].
///
/// **SAGE pool**: `relu(matmul(h, W_pool) + b_pool)` `[ns, i]` (kept by relu),
/// `segment_max` `[nd, i]` + argmax, `matmul(max, W_neigh)`, then [`replay_finish`].
fn replay_pool(r: &mut Replay, h: &Val, (i, o): (usize, usize), block: &SymBlock) -> Val {
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let w_pool = r.param(i, i);
    let b_pool = r.param(1, i);
    let bias = r.param(1, o);
    let h_dst = r.slice_rows(h, block.sizes.num_dst);
    let m = r.matmul(h, &w_pool);
    let z1 = r.add(&m, &b_pool);
    r.release(m.buf);
    let z = r.relu(&z1);
    r.release(z1.buf);
    let mx = r.segment(&z, block, true);
    let neigh = r.matmul(&mx, &w_neigh);
    r.release(mx.buf);
    r.release(z.buf);
    replay_finish(r, h_dst, neigh, &w_self, &bias)
}

/// `(fc_self(h_dst) + neigh) + bias` (three `[nd, o]` outputs, the first two transient),
/// then the layer's locals go.
fn replay_finish(r: &mut Replay, h_dst: Val, neigh: Val, w_self: &Val, bias: &Val) -> Val {
    let s = r.matmul(&h_dst, w_self);
    let a1 = r.add(&s, &neigh);
    let out = r.add(&a1, bias);
    r.release(s.buf);
    r.release(a1.buf);
    r.release(neigh.buf);
    r.release(h_dst.buf);
    out
}

/// The LSTM's dense batches `(nodes, degree)` from the degree histogram, in the order of
/// [`crate::graph::Buckets`] (increasing degree; the largest degree's bucket, the
/// explosion bucket, cut into pieces of at most `split` nodes).
fn lstm_buckets(hist: &[usize], split: Option<usize>) -> Vec<(usize, usize)> {
    let max = hist.iter().rposition(|&n| n > 0).unwrap_or(0);
    let mut v = Vec::new();
    for (k, &m) in hist.iter().enumerate().skip(1).filter(|&(_, &m)| m > 0) {
        match split.filter(|&n| k == max && n > 0) {
            Some(n) => {
                let mut left = m;
                while left > 0 {
                    v.push((left.min(n), k));
                    left -= left.min(n);
                }
            }
            None => v.push((m, k)),
        }
    }
    v
}

/// Replay of the `lstm` arm of [`SageLayer::forward`] ([`LstmParams::aggregate`]).
///
/// **SAGE-LSTM**: `xw = matmul(h, W_ih) + b` `[ns, 4F]` (the product transient), the
/// per-(node, step) rows `xg = index_select(xw, idx)` `[R, 4F]` (`R = Σ` nodes × degree over
/// the buckets of `degree_hist`, the explosion bucket cut by `lstm_split`; `idx` u32 `[R]`
/// kept by the gather), then `lstm_aggregate`; `xw` and `xg` go after it, and
/// `matmul(agg, W_neigh)` keeps the aggregate. Then [`replay_finish`].
fn replay_lstm(
    r: &mut Replay,
    h: &Val,
    (i, o): (usize, usize),
    sizes: &BlockSizes,
    split: Option<usize>,
) -> Val {
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let w_ih = r.param(i, i.saturating_mul(4));
    let w_hh = r.param(i, i.saturating_mul(4));
    let b = r.param(1, i.saturating_mul(4));
    let bias = r.param(1, o);
    let h_dst = r.slice_rows(h, sizes.num_dst);
    let buckets = lstm_buckets(&sizes.degree_hist, split);
    let rows = buckets.iter().map(|&(m, k)| m * k).sum();
    let mm = r.matmul(h, &w_ih);
    let xw = r.add(&mm, &b);
    r.release(mm.buf);
    let idx = r.input(rows, 1);
    let xg = r.gather(&xw, &idx);
    r.release(xw.buf);
    let agg = r.lstm(&xg, &w_hh, sizes.num_dst, buckets);
    r.release(xg.buf);
    r.release(idx.buf);
    let neigh = r.matmul(&agg, &w_neigh);
    r.release(agg.buf);
    replay_finish(r, h_dst, neigh, &w_self, &bias)
}
