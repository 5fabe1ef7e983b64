//! Fully connected layer: `y = x·W + b`, with `W` stored `[in, out]` so the forward pass
//! needs no transpose.

use crate::device::Device;
use crate::error::Result;
use crate::nn::init::{self, Init};
use crate::nn::module::{join, Module};
use crate::ops;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// `y = x·W + b`.
#[derive(Clone, Debug)]
pub struct Linear {
    /// `[in, out]`.
    pub weight: Tensor,
    /// `[out]`, if the layer has a bias.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer with Glorot-uniform weights and a zero bias (if `bias`).
    pub fn new(
        fan_in: usize,
        fan_out: usize,
        bias: bool,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Linear> {
        Self::with_init(fan_in, fan_out, bias, Init::GlorotUniform, rng, device)
    }

    /// A layer with the given weight initialisation.
    pub fn with_init(
        fan_in: usize,
        fan_out: usize,
        bias: bool,
        init: Init,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Linear> {
        let weight = init::weight(fan_in, fan_out, init, rng, device)?;
        let bias = if bias {
            Some(init::zeros(&[fan_out], device)?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// `x·W + b` for `x` of shape `[n, in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = ops::matmul(x, &self.weight, false, false)?;
        match &self.bias {
            Some(b) => ops::add(&y, b),
            None => Ok(y),
        }
    }

    /// Input width.
    pub fn fan_in(&self) -> usize {
        self.weight.shape()[0]
    }

    /// Output width.
    pub fn fan_out(&self) -> usize {
        self.weight.shape()[1]
    }
}

impl Module for Linear {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        let mut v = vec![(join(prefix, "weight"), self.weight.clone())];
        if let Some(b) = &self.bias {
            v.push((join(prefix, "bias"), b.clone()));
        }
        v
    }
}
