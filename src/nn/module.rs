//! What every layer and model shares: named parameters, and the small stateless modules.

use crate::error::Result;
use crate::ops;
use crate::tensor::Tensor;

/// A layer or model with parameters.
pub trait Module {
    /// Every parameter, named `prefix.name` (dots between nesting levels), in a fixed order.
    fn named_parameters(&self, prefix: &str) -> Vec<(String, Tensor)>;

    /// The parameters alone, in the same order.
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters("")
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Drops every parameter's accumulated gradient.
    fn zero_grad(&self) {
        for p in self.parameters() {
            p.zero_grad();
        }
    }

    /// Number of scalar parameters.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(Tensor::numel).sum()
    }
}

/// Joins a prefix and a name with a dot (no leading dot for an empty prefix).
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A parameter-free activation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// `x`.
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// Leaky ReLU with this slope: `x` if positive, else `slope · x`.
    LeakyRelu(f64),
    /// ELU with this alpha: `x` if positive, else `alpha (eˣ - 1)`.
    Elu(f64),
    /// `1 / (1 + e⁻ˣ)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
}

impl Activation {
    /// Applies the activation.
    pub fn forward(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Identity => Ok(x.clone()),
            Activation::Relu => ops::relu(x),
            Activation::LeakyRelu(s) => ops::leaky_relu(x, s),
            Activation::Elu(a) => ops::elu(x, a),
            Activation::Sigmoid => ops::sigmoid(x),
            Activation::Tanh => ops::tanh(x),
        }
    }
}
