//! Optimizers: SGD (momentum, L2 weight decay) and Adam / AdamW, updating parameters in
//! place on their device. State (momentum, moments) lives on the parameter's device and is
//! counted by its memory tracker; it is created on the first step.

use std::collections::HashMap;

use crate::autograd::NoGradGuard;
use crate::error::{Error, Result};
use crate::ops::{self, AdamStep, SgdStep};
use crate::tensor::Tensor;

/// Updates parameters from their accumulated gradients. `Send`, so that a trainer can move
/// to another thread (the Python package trains on a worker thread while the caller's
/// thread waits for Ctrl-C).
pub trait Optimizer: Send {
    /// One update of every parameter that has a gradient.
    fn step(&mut self) -> Result<()>;
    /// Drops every parameter's gradient.
    fn zero_grad(&self);
    /// The learning rate.
    fn lr(&self) -> f64;
    /// Sets the learning rate of the next steps (a schedule calls this once per epoch).
    fn set_lr(&mut self, lr: f64);
    /// Bytes of optimizer state per parameter byte (for memory estimates).
    fn state_factor(&self) -> usize;
    /// The state as named tensors (`m.3`: first moment of parameter 3) and the step count.
    fn state_dict(&self) -> (Vec<(String, Tensor)>, u64);
    /// Restores what [`Optimizer::state_dict`] gave.
    fn load_state_dict(&mut self, state: &HashMap<String, Tensor>, step: u64) -> Result<()>;
}

/// Takes `name` from a state dict, checking its shape against parameter `p`.
fn state_entry(state: &HashMap<String, Tensor>, name: &str, p: &Tensor) -> Result<Option<Tensor>> {
    match state.get(name) {
        None => Ok(None),
        Some(t) if t.shape() == p.shape() => Ok(Some(t.clone().to_device(p.device())?)),
        Some(t) => Err(Error::invalid(format!(
            "optimizer state `{name}` has shape {:?} but its parameter has {:?}",
            t.shape(),
            p.shape()
        ))),
    }
}

fn check_lr(lr: f64, weight_decay: f64) -> Result<()> {
    if !(lr.is_finite() && lr > 0.0) {
        return Err(Error::invalid(format!(
            "learning rate {lr} must be positive"
        )));
    }
    if !(weight_decay.is_finite() && weight_decay >= 0.0) {
        return Err(Error::invalid(format!(
            "weight decay {weight_decay} must be non-negative"
        )));
    }
    Ok(())
}

/// Stochastic gradient descent with optional momentum and L2 weight decay.
pub struct Sgd {
    params: Vec<Tensor>,
    velocity: Vec<Option<Tensor>>,
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: plain SGD).
    pub momentum: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
}

impl Sgd {
    /// SGD over `params`.
    pub fn new(params: Vec<Tensor>, lr: f64, momentum: f64, weight_decay: f64) -> Result<Sgd> {
        check_lr(lr, weight_decay)?;
        if !(0.0..1.0).contains(&momentum) {
            return Err(Error::invalid(format!(
                "momentum {momentum} must be in [0, 1)"
            )));
        }
        let velocity = vec![None; params.len()];
        Ok(Sgd {
            params,
            velocity,
            lr,
            momentum,
            weight_decay,
        })
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        let _g = NoGradGuard::new();
        for (p, vel) in self.params.iter().zip(self.velocity.iter_mut()) {
            let Some(g) = p.grad() else { continue };
            let first = vel.is_none() && self.momentum > 0.0;
            if first {
                *vel = Some(p.zeros_like()?);
            }
            let h = SgdStep {
                lr: self.lr,
                momentum: self.momentum,
                weight_decay: self.weight_decay,
                first,
            };
            ops::sgd_update(p, &g, vel.as_ref(), h)?;
        }
        Ok(())
    }

    fn zero_grad(&self) {
        self.params.iter().for_each(Tensor::zero_grad);
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn state_factor(&self) -> usize {
        usize::from(self.momentum > 0.0)
    }

    fn state_dict(&self) -> (Vec<(String, Tensor)>, u64) {
        let v = self.velocity.iter().enumerate();
        (
            v.filter_map(|(i, b)| b.clone().map(|b| (format!("velocity.{i}"), b)))
                .collect(),
            0,
        )
    }

    fn load_state_dict(&mut self, state: &HashMap<String, Tensor>, _step: u64) -> Result<()> {
        for (i, p) in self.params.iter().enumerate() {
            self.velocity[i] = state_entry(state, &format!("velocity.{i}"), p)?;
        }
        Ok(())
    }
}

/// Adam (L2 weight decay added to the gradient, as `torch.optim.Adam`) or AdamW
/// (decoupled weight decay, as `torch.optim.AdamW`).
pub struct Adam {
    params: Vec<Tensor>,
    moments: Vec<Option<(Tensor, Tensor)>>,
    step: u64,
    /// Learning rate.
    pub lr: f64,
    /// Decays of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator's square root.
    pub eps: f64,
    /// Weight decay: L2 on the gradient, or decoupled (AdamW).
    pub weight_decay: f64,
    /// Decoupled weight decay (AdamW) instead of L2.
    pub decoupled: bool,
}

impl Adam {
    /// Adam with β = (0.9, 0.999), ε = 1e-8 and L2 weight decay.
    pub fn new(params: Vec<Tensor>, lr: f64, weight_decay: f64) -> Result<Adam> {
        check_lr(lr, weight_decay)?;
        let moments = vec![None; params.len()];
        Ok(Adam {
            params,
            moments,
            step: 0,
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay,
            decoupled: false,
        })
    }

    /// AdamW: the same with decoupled weight decay.
    pub fn adamw(params: Vec<Tensor>, lr: f64, weight_decay: f64) -> Result<Adam> {
        Ok(Adam {
            decoupled: true,
            ..Self::new(params, lr, weight_decay)?
        })
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }
}

impl Optimizer for Adam {
    fn step(&mut self) -> Result<()> {
        let _g = NoGradGuard::new();
        self.step += 1;
        for (p, mv) in self.params.iter().zip(self.moments.iter_mut()) {
            let Some(g) = p.grad() else { continue };
            if mv.is_none() {
                *mv = Some((p.zeros_like()?, p.zeros_like()?));
            }
            let Some((m, v)) = mv.as_ref() else { continue };
            let h = AdamStep {
                lr: self.lr,
                beta1: self.betas.0,
                beta2: self.betas.1,
                eps: self.eps,
                weight_decay: self.weight_decay,
                decoupled: self.decoupled,
                step: self.step,
            };
            ops::adam_update(p, &g, m, v, h)?;
        }
        Ok(())
    }

    fn zero_grad(&self) {
        self.params.iter().for_each(Tensor::zero_grad);
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn state_factor(&self) -> usize {
        2
    }

    fn state_dict(&self) -> (Vec<(String, Tensor)>, u64) {
        let mut out = Vec::new();
        for (i, mv) in self.moments.iter().enumerate() {
            if let Some((m, v)) = mv {
                out.push((format!("m.{i}"), m.clone()));
                out.push((format!("v.{i}"), v.clone()));
            }
        }
        (out, self.step)
    }

    fn load_state_dict(&mut self, state: &HashMap<String, Tensor>, step: u64) -> Result<()> {
        for (i, p) in self.params.iter().enumerate() {
            let m = state_entry(state, &format!("m.{i}"), p)?;
            let v = state_entry(state, &format!("v.{i}"), p)?;
            self.moments[i] = match (m, v) {
                (Some(m), Some(v)) => Some((m, v)),
                (None, None) => None,
                _ => {
                    return Err(Error::invalid(format!(
                        "optimizer state of parameter {i} is incomplete"
                    )))
                }
            };
        }
        self.step = step;
        Ok(())
    }
}
