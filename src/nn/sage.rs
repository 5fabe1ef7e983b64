//! GraphSAGE layer (Hamilton et al., 2017) with DGL's `SAGEConv` semantics:
//! `h'_v = W_self·h_v + W_neigh·agg({h_u : u → v}) + b`, separate weights for self and
//! neighbours. Aggregators: `mean`, `sum`, and `pool` = `max_u ReLU(W_pool·h_u + b_pool)`
//! as in the paper.
//!
//! For `mean` and `sum` the projection is linear, so `W_neigh·agg(h) = agg(h·W_neigh)`;
//! the layer projects first when that shrinks the rows aggregated (in > out), as DGL does.

use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Block;
use crate::nn::init;
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
use crate::ops;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// How a SAGE layer aggregates its neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregator {
    Mean,
    Sum,
    Pool,
}

impl std::str::FromStr for Aggregator {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "mean" => Ok(Aggregator::Mean),
            "sum" => Ok(Aggregator::Sum),
            "pool" | "max" => Ok(Aggregator::Pool),
            _ => Err(Error::invalid(format!(
                "unknown SAGE aggregator `{s}`: expected mean, sum or pool"
            ))),
        }
    }
}

/// One GraphSAGE layer.
#[derive(Clone, Debug)]
pub struct SageLayer {
    pub aggr: Aggregator,
    pub fc_self: Linear,
    pub fc_neigh: Linear,
    /// `pool` only: the per-neighbour transform before the max.
    pub fc_pool: Option<Linear>,
    pub bias: Tensor,
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
        Ok(SageLayer {
            aggr,
            fc_self: Linear::new(in_dim, out_dim, false, rng, device)?,
            fc_neigh: Linear::new(in_dim, out_dim, false, rng, device)?,
            fc_pool,
            bias: init::zeros(&[out_dim], device)?,
        })
    }

    /// `h` holds the block's `num_src` rows; returns `num_dst` rows.
    pub fn forward(&self, block: &Arc<Block>, h: &Tensor) -> Result<Tensor> {
        let h_dst = ops::slice(h, 0, 0, block.num_dst)?;
        let neigh = match self.aggr {
            Aggregator::Mean | Aggregator::Sum => {
                let reduce = |x: &Tensor| match self.aggr {
                    Aggregator::Mean => ops::segment_mean(x, block),
                    _ => ops::segment_sum(x, block),
                };
                if self.fc_neigh.fan_in() > self.fc_neigh.fan_out() {
                    reduce(&self.fc_neigh.forward(h)?)?
                } else {
                    self.fc_neigh.forward(&reduce(h)?)?
                }
            }
            Aggregator::Pool => {
                let pool = self
                    .fc_pool
                    .as_ref()
                    .ok_or_else(|| Error::invalid("sage pool layer without fc_pool"))?;
                let z = ops::relu(&pool.forward(h)?)?;
                self.fc_neigh.forward(&ops::segment_max(&z, block)?)?
            }
        };
        ops::add(
            &ops::add(&self.fc_self.forward(&h_dst)?, &neigh)?,
            &self.bias,
        )
    }
}

impl Module for SageLayer {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut v = self.fc_self.named_parameters(&join(prefix, "fc_self"));
        v.extend(self.fc_neigh.named_parameters(&join(prefix, "fc_neigh")));
        if let Some(p) = &self.fc_pool {
            v.extend(p.named_parameters(&join(prefix, "fc_pool")));
        }
        v.push((join(prefix, "bias"), self.bias.clone()));
        v
    }
}
