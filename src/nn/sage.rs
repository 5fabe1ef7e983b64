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
use crate::graph::{Block, Buckets};
use crate::nn::init::{self, Init};
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
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
