//! Peak device memory of one micro-batch or full-graph chunk, predicted before it runs:
//! `R + A`, the bytes resident across micro-batches (parameters, accumulated gradients,
//! optimizer state, resident features) and the highest activation bytes it adds on top.
//!
//! `A` is the highest live total of the trainer's own device steps
//! (`train/step.rs`) run on the meta device's symbolic buffers ([`crate::meta`]):
//! the same functions the trainer runs on tensors, with the model's layers traced through
//! their specs ([`crate::nn::LayerSpec::trace`]), so nothing here mirrors the trainer, the
//! layers or the ops. On a GPU every buffer is rounded to its pool size class and the
//! readouts of the batch's earlier micro-batches the device still holds count
//! ([`MemoryEstimator::held_bytes`]).
//!
//! What is predicted, how, where it equals the measured peak, and what adding a layer, an
//! op or a trainer step means for it: `docs/guide/memory-estimate.md`.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::BlockSizes;
use crate::meta::{Replay, SymBlock, Val, WORD};
use crate::nn::{HybridLayer, LayerSpec, ModelConfig};
use crate::partition::PeakModel;
use crate::train::step::{self, Layers};

/// What stays on the device between micro-batches besides the parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resident {
    /// Gradients accumulated by earlier micro-batches of the batch are held.
    pub grads: bool,
    /// The optimizer's state (e.g. Adam's moments) exists (after its first step).
    pub optimizer_state: bool,
}

impl Resident {
    /// The most that can be resident: what a budget must plan for.
    pub const STEADY: Resident = Resident {
        grads: true,
        optimizer_state: true,
    };
}

/// Which pass of full-graph training a chunk runs
/// ([`MemoryEstimator::chunk_activation_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkPass {
    /// A layer below the output layer, forward only (no autograd graph): the output rows
    /// go back to the host.
    Forward,
    /// The output layer: forward, loss over the chunk's targets (scaled by their share of
    /// `total`), backward.
    Loss {
        /// Targets of the whole loss.
        total: usize,
    },
    /// A layer below the output layer recomputed with autograd, then its backward from
    /// the output rows' gradient uploaded from the host.
    Backward,
    /// Hybrid mode's forward of a layer below the output layer (no autograd graph): the
    /// aggregation, read back to the host, then the update; the output rows go back to
    /// the host.
    HybridForward,
    /// Hybrid mode's backward of a layer below the output layer: the update alone,
    /// recomputed from the dst rows and the cached aggregation (both uploaded), then its
    /// backward, and the aggregation's backward into the src rows' gradient.
    HybridBackward,
}

impl ChunkPass {
    /// The passes a layer below the output layer runs: forward and backward, recomputing
    /// the whole layer or, in hybrid mode, only its update.
    pub fn below_output(hybrid: bool) -> [ChunkPass; 2] {
        match hybrid {
            true => [ChunkPass::HybridForward, ChunkPass::HybridBackward],
            false => [ChunkPass::Forward, ChunkPass::Backward],
        }
    }
}

/// Predicts a micro-batch's peak device bytes from its block sizes and the model.
#[derive(Clone, Debug)]
pub struct MemoryEstimator {
    /// The model whose forward and backward are replayed.
    pub model: ModelConfig,
    /// The device whose allocation rules (alignment, pool size classes) apply.
    pub device: Device,
    /// Optimizer state bytes per parameter byte ([`crate::train::Optimizer::state_factor`]).
    pub state_factor: usize,
    /// SAGE-LSTM: the model's explosion-bucket split
    /// ([`crate::nn::Gnn::set_lstm_split`]); `None` (the default): no split.
    pub lstm_split: Option<usize>,
    /// Bytes of a feature matrix kept on the device (`--features device`), resident like
    /// the parameters; 0 when features live on the host.
    pub resident_features: u64,
    /// Rows are gathered on the device from the resident matrix: each micro-batch uploads
    /// its input nodes' ids (u32) instead of their rows.
    pub device_gather: bool,
}

impl MemoryEstimator {
    /// An estimator for `model` trained on `device` with an optimizer of `state_factor`.
    pub fn new(model: ModelConfig, device: Device, state_factor: usize) -> Self {
        MemoryEstimator {
            model,
            device,
            state_factor,
            lstm_split: None,
            resident_features: 0,
            device_gather: false,
        }
    }

    /// `bytes` as one allocation takes them on the estimator's device (pool size classes on
    /// GPUs, [`Replay::round`]).
    pub fn rounded(&self, bytes: u64) -> u64 {
        self.symbolic().round(bytes)
    }

    /// A replay with the device's rules: on a GPU, pool size classes and the uploads of
    /// index arrays; on the CPU, exact bytes and no uploads.
    fn symbolic(&self) -> Replay {
        Replay::of(self.device.alloc_policy())
    }

    /// Bytes of the parameters on the device (each tensor rounded to the allocation unit);
    /// saturated where the model is too large to count.
    pub fn param_bytes(&self) -> u64 {
        let Ok(shapes) = self.model.parameter_shapes() else {
            return u64::MAX;
        };
        shapes.iter().fold(0u64, |a, (_, _, s)| {
            let values = s.iter().fold(1u64, |n, &d| n.saturating_mul(d));
            a.saturating_add(self.rounded(values.saturating_mul(WORD)))
        })
    }

    /// `R`: parameters, plus held gradients and optimizer state as `state` says.
    pub fn resident_bytes(&self, state: Resident) -> u64 {
        let state_factor = self.state_factor as u64 * u64::from(state.optimizer_state);
        let factor = 1 + state_factor + u64::from(state.grads);
        let p = self.param_bytes().saturating_mul(factor);
        p.saturating_add(self.resident_features)
    }

    /// Bytes a GPU holds, during a micro-batch, for the readouts of the batch's micro-batches
    /// that ran before it with `seeds` seeds each (read at the batch's end): per micro-batch
    /// its loss `[1]` and its predictions u32 `[n]`, each rounded to its size class. 0 on
    /// the CPU, which reads them at once.
    pub fn held_bytes(&self, seeds: &[usize]) -> u64 {
        if !self.device.is_gpu() {
            return 0;
        }
        seeds.iter().fold(0u64, |a, &n| {
            a.saturating_add(self.rounded(WORD))
                .saturating_add(self.rounded(crate::meta::bytes_of(n, 1)))
        })
    }

    /// `A`: the highest bytes a training micro-batch adds on top of the resident ones.
    /// `sizes` are its blocks' (input layer first); `total_seeds` the batch's seeds (the
    /// loss is scaled unless the micro-batch holds them all); `held` the readouts of the
    /// batch's earlier micro-batches still on the device ([`MemoryEstimator::held_bytes`]).
    /// The trainer's own steps (`step::micro_forward`, `step::micro_backward`) run on
    /// the replay; the blocks live to the end, as the trainer holds them.
    pub fn activation_bytes(
        &self,
        sizes: &[BlockSizes],
        total_seeds: usize,
        held: u64,
    ) -> Result<u64> {
        if sizes.windows(2).any(|w| w[0].num_dst != w[1].num_src) {
            return Err(Error::invalid(
                "memory estimate: block sizes do not chain (dst of one = src of the next)",
            ));
        }
        let mut r = self.symbolic();
        // The readouts held (none: a buffer of no bytes).
        r.alloc_bytes(held);
        let blocks: Vec<SymBlock> = sizes.iter().map(|s| r.block(s)).collect();
        let input = (self.model.shape.in_dim, self.device_gather);
        let gpu = self.device.is_gpu();
        let m = &self.traced();
        let mb = step::micro_forward(&mut r, m, &blocks, input, (), (), total_seeds, gpu)?;
        // What stays live after the backward cannot raise the peak.
        step::micro_backward(&mut r, mb)?;
        Ok(r.peak)
    }

    /// `R + A`: the predicted peak of a training micro-batch (arguments as
    /// [`MemoryEstimator::activation_bytes`]).
    pub fn peak_bytes(
        &self,
        sizes: &[BlockSizes],
        total_seeds: usize,
        held: u64,
        state: Resident,
    ) -> Result<u64> {
        Ok(self
            .resident_bytes(state)
            .saturating_add(self.activation_bytes(sizes, total_seeds, held)?))
    }

    /// The model's layer specs as the trainer's steps run them on the replay.
    fn traced(&self) -> Traced<'_> {
        Traced(self, self.model.layer_specs())
    }

    /// `A` of one chunk of full-graph training ([`crate::train::full_graph`]): layer
    /// `layer` run on a chunk whose block has `sizes`, in `pass`, by the trainer's chunk
    /// steps (`train/step.rs`). The layer's input rows are uploaded from the host (the input
    /// layer's: the features, as a micro-batch's are); in the loss and backward passes a
    /// deeper layer's input is a leaf whose gradient is read back to the host.
    pub fn chunk_activation_bytes(
        &self,
        layer: usize,
        sizes: &BlockSizes,
        pass: ChunkPass,
    ) -> Result<u64> {
        let layers = self.model.shape.layers;
        if layer >= layers || (layer + 1 == layers) != matches!(pass, ChunkPass::Loss { .. }) {
            return Err(Error::invalid(format!(
                "memory estimate: no {pass:?} pass for layer {layer} of a {layers}-layer \
                 model (the loss pass runs the output layer only)"
            )));
        }
        let (m, mut r) = (&self.traced(), self.symbolic());
        let r = &mut r;
        // The chunk's block lives through the pass.
        let block = r.block(sizes);
        let (ns, nd, i) = (sizes.num_src, sizes.num_dst, self.model.widths(layer).0);
        let (by_id, leaf) = (layer == 0 && self.device_gather, layer > 0);
        match pass {
            ChunkPass::Forward | ChunkPass::HybridForward => {
                let x = step::chunk_input(r, (ns, i), by_id, false, ())?;
                let mut agg = |_| Ok(());
                let agg = (pass == ChunkPass::HybridForward).then_some(&mut agg as _);
                step::forward_chunk(r, m, layer, &block, x, agg)?;
            }
            ChunkPass::Loss { total } => {
                let x = step::chunk_input(r, (ns, i), by_id, leaf, ())?;
                step::loss_chunk(r, m, layer, &block, &x, (), total)?;
                step::input_grad(r, x)?;
            }
            ChunkPass::Backward => {
                let x = step::chunk_input(r, (ns, i), by_id, leaf, ())?;
                step::backward_chunk(r, m, layer, &block, &x, ())?;
                step::input_grad(r, x)?;
            }
            ChunkPass::HybridBackward => {
                let dst = m.split(layer)?.reads_dst_rows();
                let x = dst
                    .then(|| step::chunk_input(r, (nd, i), by_id, leaf, ()))
                    .transpose()?;
                let a = step::chunk_input(r, (nd, i), false, leaf, ())?;
                step::hybrid_backward_chunk(r, m, layer, &block, x.as_ref(), &a, ())?;
                step::aggregation_grad(r, m, layer, &block, &a)?;
                if let Some(x) = x {
                    step::input_grad(r, x)?;
                }
            }
        }
        Ok(r.peak)
    }
}

/// The estimator's model on the replay: each layer's spec (of
/// [`ModelConfig::layer_specs`]; [`LayerSpec::trace`]) chained by
/// [`ModelConfig::trace_layer`], as [`crate::nn::Gnn::forward_layer`] runs them.
struct Traced<'a>(&'a MemoryEstimator, Vec<Box<dyn LayerSpec>>);

impl<'b> Layers<'b, Replay> for Traced<'_> {
    fn layers(&self) -> usize {
        self.1.len()
    }

    fn layer(&self, r: &mut Replay, l: usize, block: &SymBlock<'b>, h: Val) -> Result<Val> {
        let Traced(est, specs) = self;
        est.model
            .trace_layer(specs[l].as_ref(), r, l, block, h, est.lstm_split)
    }

    fn finish(&self, r: &mut Replay, l: usize, block: &SymBlock<'b>, out: Val) -> Result<Val> {
        self.0.model.trace_finish(r, l, block, out)
    }

    fn split(&self, l: usize) -> Result<&dyn HybridLayer<'b, Replay>> {
        self.1[l].hybrid().ok_or_else(|| {
            Error::invalid(format!(
                "memory estimate: layer {l} of {} has no hybrid split",
                self.0.model.label()
            ))
        })
    }
}

impl PeakModel for MemoryEstimator {
    fn activation_bytes(&self, sizes: &[BlockSizes], batch_seeds: usize) -> Result<u64> {
        MemoryEstimator::activation_bytes(self, sizes, batch_seeds, 0)
    }
}
