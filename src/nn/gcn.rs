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
use crate::nn::init;
use crate::nn::linear::Linear;
use crate::nn::module::{join, Module};
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
        let gather = |ids: &[u32]| -> Result<Tensor> {
            let v = ids
                .iter()
                .map(|&u| {
                    norm.get(u as usize)
                        .copied()
                        .ok_or_else(|| Error::invalid(format!("gcn: node {u} has no degree norm")))
                })
                .collect::<Result<Vec<f32>>>()?;
            match h.dtype() {
                crate::tensor::DType::F64 => {
                    Tensor::from_f64(v.into_iter().map(f64::from).collect(), &[ids.len(), 1])
                }
                _ => Tensor::from_f32(v, &[ids.len(), 1], h.device()),
            }
        };
        let n_src = gather(&block.src_nodes)?;
        let n_dst = gather(block.dst_nodes())?;
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

impl Module for GcnLayer {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut v = self.fc.named_parameters(&join(prefix, "fc"));
        v.push((join(prefix, "bias"), self.bias.clone()));
        v
    }
}
