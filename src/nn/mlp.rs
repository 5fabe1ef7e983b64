//! Multi-layer perceptron: Linear layers with an activation between them.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::linear::Linear;
use crate::nn::module::{join, Activation, Module};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// `Linear → act → … → Linear`.
#[derive(Clone, Debug)]
pub struct Mlp {
    /// The linear layers, input first.
    pub layers: Vec<Linear>,
    /// Applied between layers (not after the last).
    pub activation: Activation,
}

impl Mlp {
    /// An MLP through the widths in `sizes` (at least input and output).
    pub fn new(
        sizes: &[usize],
        activation: Activation,
        rng: &mut Rng,
        device: Device,
    ) -> Result<Mlp> {
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(Error::invalid(format!(
                "mlp: layer sizes {sizes:?} need at least two non-zero widths"
            )));
        }
        let layers = sizes
            .windows(2)
            .map(|w| Linear::new(w[0], w[1], true, rng, device))
            .collect::<Result<_>>()?;
        Ok(Mlp { layers, activation })
    }

    /// Forward pass; no activation after the last layer.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(&h)?;
            if i + 1 < self.layers.len() {
                h = self.activation.forward(&h)?;
            }
        }
        Ok(h)
    }
}

impl Module for Mlp {
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.named_parameters(&join(prefix, &format!("layers.{i}"))))
            .collect()
    }
}
