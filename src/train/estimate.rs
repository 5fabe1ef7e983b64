//! Peak device memory of one micro-batch, predicted before it runs.
//!
//! # What is predicted
//!
//! The highest value the device's [`MemoryTracker`](crate::device::MemoryTracker) reaches
//! between the start of a micro-batch (features uploaded) and the end of its backward pass:
//!
//! `peak = R + A`, where `R` is what stays **resident** across micro-batches and `A` the
//! highest **activation** bytes the micro-batch adds on top.
//!
//! - `R = P · (1 + s·[optimizer has state] + [gradients accumulated])`, with `P` the
//!   parameter bytes (each tensor rounded to the device's allocation unit), `s` the
//!   optimizer's state factor (2 for Adam's moments, 1 for SGD with momentum), and the
//!   accumulated gradients of earlier micro-batches of the batch, which the trainer keeps
//!   apart from the in-flight micro-batch's (so a micro-batch that runs out of memory can be
//!   retried without double counting).
//! - `A` comes from replaying the engine's allocation pattern symbolically (below). It is
//!   derived from the code of the layers, ops and autograd, not fitted: on the CPU, whose
//!   tracker counts exact bytes, it reproduces the measured peak up to what the model leaves
//!   out (nothing, for the layers below; see `tests/budget.rs` and `tests/estimator_aggr.rs`).
//!
//! # The engine's allocation pattern
//!
//! What each op allocates, keeps and frees, and how autograd's backward walks the graph,
//! is replayed by [`crate::meta`]. The layers are not replayed by hand: each layer
//! kind writes its forward once, generic over [`crate::nn::exec::Exec`], and the
//! estimator runs that same function on the symbolic buffers through the layer's spec
//! ([`crate::nn::LayerSpec::trace`]: the parameters, then the forward), walking the same
//! layer specs the trainer builds its model from ([`ModelConfig::layer_specs`]); the
//! ReLU and dropout between layers are one function too ([`crate::nn::model::finish`]).
//! Around the layers:
//!
//! - **Between layers**: `relu` (keeps its `[nd, o]` output), then dropout with the dst
//!   nodes' global ids as a u32 `[nd]` tensor (keeps the ids). The layer's input `h` is
//!   dropped when the next layer's output replaces it, so a dropout output survives only
//!   if the next layer saved it.
//! - **Trainer** ([`crate::train::micro`]): features `[ns₀, in]` and labels `[n]` are
//!   uploaded, the model runs, `cross_entropy`, `argmax` (a transient u32 `[n]`), the loss
//!   is scaled by `|seeds_k|/|seeds|` when that is not 1, the logits are dropped and the
//!   backward runs; the features and the blocks live until the end. On a GPU the loss and
//!   predictions stay until the batch's end, beside those of its earlier micro-batches.
//!
//! [`MemoryEstimator`] replays exactly this sequence on symbolic buffers (sizes and
//! reference counts, no data) and returns the highest live total. With `L` layers the
//! replay costs `O(L)`, so a budget search can estimate thousands of candidate
//! micro-batches.
//!
//! Where the peak falls: for wide inputs it is usually the first backward steps (all saved
//! activations plus the logits' gradient) or, for pool, the `[ns, i]` transients of the
//! first layer; the replay finds it either way.
//!
//! On a GPU every buffer is rounded up to its pool size class
//! ([`size_class`](crate::device::size_class)), and the replay counts what the GPU arms of
//! the ops upload or add (the blocks' index arrays, see [`crate::meta`]) and the
//! readouts of the batch's earlier micro-batches that the device still holds
//! ([`MemoryEstimator::held_bytes`]): equal to the measured peak on lavapipe and on the
//! emulated CUDA device (`tests/estimator_gpu.rs`); never compared with a real GPU's peak.
//!
//! # Adding a layer
//!
//! A new model kind is one file in `src/nn/`: its layer ([`crate::nn::Layer`]) whose
//! forward is a function generic over [`crate::nn::exec::Exec`] (called with
//! [`crate::nn::exec::Eager`] by the layer), its spec ([`crate::nn::LayerSpec`]) whose
//! `trace` declares the parameters and calls the same function, its configuration
//! ([`crate::nn::KindConfig`]) and its registry entry in [`crate::nn::MODELS`]. A new
//! primitive is its meta arm in its op file and one method of `Exec` whose arms call the op
//! and its meta arm. The estimator needs no edit.

use crate::device::{AllocPolicy, Device};
use crate::error::{Error, Result};
use crate::graph::BlockSizes;
use crate::meta::{Replay, SymBlock, Val, WORD};
use crate::nn::{HybridSpec, LayerSpec, ModelConfig};
use crate::ops;
use crate::partition::PeakModel;

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

/// Which pass of full-graph training a chunk runs ([`MemoryEstimator::chunk_peak_bytes`]).
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
    /// GPUs).
    pub fn rounded(&self, bytes: u64) -> u64 {
        self.round()(bytes)
    }

    fn round(&self) -> fn(u64) -> u64 {
        if self.device.is_gpu() {
            crate::device::size_class
        } else {
            |b| b
        }
    }

    /// A replay with the device's rules: on a GPU, pool size classes and the uploads of
    /// index arrays; on the CPU, exact bytes and no uploads.
    fn symbolic(&self) -> Replay {
        match self.device.alloc_policy() {
            AllocPolicy { gpu: false, .. } => Replay::new(self.round()),
            AllocPolicy {
                lstm_rows_in_kernel: true,
                ..
            } => Replay::gpu().lstm_rows_in_kernel(),
            _ => Replay::gpu(),
        }
    }

    /// Bytes of the parameters on the device (each tensor rounded to the allocation unit).
    pub fn param_bytes(&self) -> u64 {
        let params = self.declared_params(self.symbolic());
        params.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Number of parameter values the replay declares (checked against the model).
    pub fn num_parameters(&self) -> usize {
        let params = self.declared_params(Replay::new(|b| b));
        params
            .iter()
            .fold(0usize, |a, &b| a.saturating_add((b / WORD) as usize))
    }

    /// The bytes of each parameter `r` sees declared by a forward over one-node blocks
    /// (the layers' traces declare their parameters whatever the block sizes).
    fn declared_params(&self, mut r: Replay) -> Vec<u64> {
        let one = BlockSizes {
            num_src: 1,
            num_dst: 1,
            num_edges: 1,
            degree_hist: vec![0, 1],
            self_loops: 0,
        };
        let sizes = vec![one; self.model.shape.layers];
        let x = r.input(1, self.model.shape.in_dim);
        let _ = self.forward(&mut r, &sizes, x);
        r.params
    }

    /// `R`: parameters, plus held gradients and optimizer state as `state` says.
    pub fn resident_bytes(&self, state: Resident) -> u64 {
        let p = self.param_bytes();
        let factor =
            1 + if state.optimizer_state {
                self.state_factor as u64
            } else {
                0
            } + u64::from(state.grads);
        p.saturating_mul(factor)
            .saturating_add(self.resident_features)
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
    pub fn activation_bytes(
        &self,
        sizes: &[BlockSizes],
        total_seeds: usize,
        held: u64,
    ) -> Result<u64> {
        if sizes.len() != self.model.shape.layers {
            return Err(Error::invalid(format!(
                "memory estimate: {} blocks for a {}-layer model",
                sizes.len(),
                self.model.shape.layers
            )));
        }
        for w in sizes.windows(2) {
            if w[0].num_dst != w[1].num_src {
                return Err(Error::invalid(
                    "memory estimate: block sizes do not chain (dst of one = src of the next)",
                ));
            }
        }
        let n = sizes[sizes.len() - 1].num_dst;
        let mut r = self.symbolic();
        // Trainer: features (gathered on the device by id, or uploaded), labels, forward,
        // loss, prediction, scaling, backward.
        // On a GPU the losses and predictions of the batch's earlier micro-batches are
        // still held (read at the batch's end).
        let gpu = self.device.is_gpu();
        let held = (held > 0).then(|| r.alloc_bytes(held));
        let ids = self.device_gather.then(|| r.input(sizes[0].num_src, 1));
        let x = r.input(sizes[0].num_src, self.model.shape.in_dim);
        if let Some(ids) = ids {
            r.release(ids.buf);
        }
        let y = r.input(n, 1);
        let h = x.clone_in(&mut r);
        let logits = self.forward(&mut r, sizes, h)?;
        // The CPU reads its predictions at once; a GPU holds them to the batch's end.
        trace_loss(&mut r, logits, y, total_seeds, gpu);
        r.release(x.buf);
        if let Some(held) = held {
            r.release(held);
        }
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

    /// Replay of [`crate::nn::Gnn::forward`] in training mode: every layer's own replay
    /// ([`crate::nn::LayerSpec::trace`]) chained by [`ModelConfig::trace_layer`].
    /// The trainer holds the micro-batch's blocks until its backward has run, so the index
    /// arrays the ops upload stay to the end of the replay.
    fn forward(&self, r: &mut Replay, sizes: &[BlockSizes], x: Val) -> Result<Val> {
        let specs = self.model.layer_specs();
        let mut h = x;
        for (l, (s, spec)) in sizes.iter().zip(&specs).enumerate() {
            let block = r.block(s);
            h = self.forward_layer(r, spec.as_ref(), l, &block, h)?;
        }
        Ok(h)
    }

    /// Replay of [`crate::nn::Gnn::forward_layer`]: layer `l` (`spec`), then ReLU and
    /// dropout except after the output layer.
    fn forward_layer(
        &self,
        r: &mut Replay,
        spec: &dyn LayerSpec,
        l: usize,
        block: &SymBlock<'_>,
        h: Val,
    ) -> Result<Val> {
        self.model
            .trace_layer(spec, r, l, block, h, self.lstm_split)
    }

    /// `A` of one chunk of full-graph training ([`crate::train::full_graph`]): layer
    /// `layer` run on a chunk whose block has `sizes`, in `pass`. The layer's input rows are
    /// uploaded from the host (the input layer's: the features, as a micro-batch's are);
    /// in the loss and backward passes a deeper layer's input is a leaf whose gradient is
    /// read back to the host.
    pub fn chunk_activation_bytes(
        &self,
        layer: usize,
        sizes: &BlockSizes,
        pass: ChunkPass,
    ) -> Result<u64> {
        let m = &self.model;
        if layer >= m.shape.layers {
            return Err(Error::invalid(format!(
                "memory estimate: layer {layer} of a {}-layer model",
                m.shape.layers
            )));
        }
        let last = layer + 1 == m.shape.layers;
        if last != matches!(pass, ChunkPass::Loss { .. }) {
            return Err(Error::invalid(format!(
                "memory estimate: the loss pass runs the output layer only (layer {layer} of {})",
                m.shape.layers
            )));
        }
        let (i, _) = m.widths(layer);
        let specs = m.layer_specs();
        let spec = specs[layer].as_ref();
        let hybrid = matches!(pass, ChunkPass::HybridForward | ChunkPass::HybridBackward);
        let split = match (hybrid, spec.hybrid()) {
            (false, _) => None,
            (true, Some(split)) => Some(split),
            (true, None) => {
                return Err(Error::invalid(format!(
                    "memory estimate: layer {layer} of {} has no hybrid split",
                    m.label()
                )))
            }
        };
        let mut r = self.symbolic();
        // The chunk's block lives through the pass.
        let block = r.block(sizes);
        if let Some(split) = split {
            self.trace_hybrid(&mut r, split, layer, &block, pass)?;
            return Ok(r.peak);
        }
        let leaf = pass != ChunkPass::Forward;
        let x = self.trace_input(&mut r, layer, sizes.num_src, i, leaf);
        match pass {
            ChunkPass::HybridForward | ChunkPass::HybridBackward => unreachable!("replayed above"),
            ChunkPass::Forward => {
                r.no_grad = true;
                let out = self.forward_layer(&mut r, spec, layer, &block, x)?;
                // Read back to the host.
                r.release(out.buf);
                return Ok(r.peak);
            }
            ChunkPass::Loss { total } => {
                let y = r.input(sizes.num_dst, 1);
                let h = x.clone_in(&mut r);
                let logits = self.forward_layer(&mut r, spec, layer, &block, h)?;
                // The predictions are read at once.
                trace_loss(&mut r, logits, y, total, false);
            }
            ChunkPass::Backward => {
                let h = x.clone_in(&mut r);
                let out = self.forward_layer(&mut r, spec, layer, &block, h)?;
                let g = r.input(out.rows, out.cols);
                r.backward(&out, Some(g.buf));
                r.release(g.buf);
                r.release(out.buf);
            }
        }
        // The input's gradient is read back to the host, then the input goes.
        if let Some(g) = x.leaf.and_then(|l| r.leaf_grads[l]) {
            r.release(g);
        }
        r.release(x.buf);
        Ok(r.peak)
    }

    /// `rows` input rows of layer `layer` uploaded for a chunk: the input layer's features
    /// (gathered on the device by id, or uploaded), a deeper layer's rows from the host, a
    /// leaf where `leaf` (their gradient goes back to the host).
    fn trace_input(&self, r: &mut Replay, layer: usize, rows: usize, i: usize, leaf: bool) -> Val {
        if layer == 0 {
            let ids = self.device_gather.then(|| r.input(rows, 1));
            let x = r.input(rows, i);
            if let Some(ids) = ids {
                r.release(ids.buf);
            }
            x
        } else if leaf {
            r.leaf_input(rows, i)
        } else {
            r.input(rows, i)
        }
    }

    /// Hybrid mode's passes of layer `layer` (below the output layer) in the order
    /// [`crate::train::full_graph`] runs them: forward from every src row; backward from
    /// the dst rows (where the update reads them) and the cached aggregation.
    fn trace_hybrid(
        &self,
        r: &mut Replay,
        split: &dyn HybridSpec,
        layer: usize,
        block: &SymBlock<'_>,
        pass: ChunkPass,
    ) -> Result<()> {
        let sizes = block.sizes;
        let (nd, i) = (sizes.num_dst, self.model.widths(layer).0);
        if pass == ChunkPass::HybridForward {
            let x = self.trace_input(r, layer, sizes.num_src, i, false);
            r.no_grad = true;
            let a = split.trace_aggregate(r, &x, block)?;
            let out = split.trace_update(r, Some(&x), &a, block)?;
            r.release(x.buf);
            // The aggregation is read back to the host, then the output rows.
            r.release(a.buf);
            let out = self.model.trace_finish(r, layer, block, out)?;
            r.release(out.buf);
            return Ok(());
        }
        let x = split
            .reads_dst_rows()
            .then(|| self.trace_input(r, layer, nd, i, true));
        // The cached aggregation, a leaf when its gradient flows on to a lower layer.
        let a = match layer {
            0 => r.input(nd, i),
            _ => r.leaf_input(nd, i),
        };
        let out = split.trace_update(r, x.as_ref(), &a, block)?;
        let out = self.model.trace_finish(r, layer, block, out)?;
        let g = r.input(out.rows, out.cols);
        r.backward(&out, Some(g.buf));
        r.release(g.buf);
        r.release(out.buf);
        if let Some(a_grad) = a.leaf.and_then(|l| r.leaf_grads[l]) {
            let grad = Val {
                buf: a_grad,
                rows: nd,
                cols: i,
                grad: false,
                node: None,
                leaf: None,
            };
            // The src rows' gradient is read back to the host, then goes.
            let src = split.trace_aggregate_backward(r, &grad, block)?;
            r.release(src.buf);
            r.release(a_grad);
        }
        r.release(a.buf);
        // The dst rows' own gradient is read back, then the rows go.
        if let Some(x) = x {
            if let Some(g) = x.leaf.and_then(|l| r.leaf_grads[l]) {
                r.release(g);
            }
            r.release(x.buf);
        }
        Ok(())
    }

    /// `R + A` of one chunk of full-graph training (see
    /// [`MemoryEstimator::chunk_activation_bytes`]).
    pub fn chunk_peak_bytes(
        &self,
        layer: usize,
        sizes: &BlockSizes,
        pass: ChunkPass,
        state: Resident,
    ) -> Result<u64> {
        Ok(self
            .resident_bytes(state)
            .saturating_add(self.chunk_activation_bytes(layer, sizes, pass)?))
    }
}

/// The trainer's loss over `logits` and labels `y`, and its backward: `cross_entropy`, the
/// predictions (u32, one per row: held to the batch's end where `hold_pred`, else read at
/// once), the loss scaled by the rows' share of `total` unless that is 1, the logits
/// dropped, the backward; then the loss, its parts and the labels go.
fn trace_loss(r: &mut Replay, logits: Val, y: Val, total: usize, hold_pred: bool) {
    let n = logits.rows;
    let ce = ops::meta_cross_entropy(r, &logits, &y);
    let pred = r.alloc(n, 1);
    if !hold_pred {
        r.release(pred);
    }
    let loss = match n != total {
        true => ops::meta_unary(r, &ce),
        false => ce.clone_in(r),
    };
    r.release(logits.buf);
    r.backward(&loss, None);
    for v in [loss, ce, y] {
        r.release(v.buf);
    }
}

impl PeakModel for MemoryEstimator {
    fn activation_bytes(&self, sizes: &[BlockSizes], batch_seeds: usize) -> Result<u64> {
        MemoryEstimator::activation_bytes(self, sizes, batch_seeds, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{Aggregator, ModelKind};

    #[test]
    fn parameter_count_matches_the_model() {
        use crate::nn::{Gnn, Module};
        for (kind, aggr) in [
            (ModelKind::Sage, Aggregator::Mean),
            (ModelKind::Sage, Aggregator::Pool),
            (ModelKind::Sage, Aggregator::Max),
            (ModelKind::Sage, Aggregator::Lstm),
            (ModelKind::Gcn, Aggregator::Mean),
            (ModelKind::Gat, Aggregator::Mean),
        ] {
            let shape = crate::nn::ModelShape {
                in_dim: 7,
                hidden: 5,
                out_dim: 3,
                layers: 3,
                dropout: 0.5,
            };
            let settings: std::sync::Arc<dyn crate::nn::KindConfig> = match kind {
                ModelKind::Sage => std::sync::Arc::new(crate::nn::SageConfig { aggr }),
                ModelKind::Gcn => std::sync::Arc::new(crate::nn::GcnConfig),
                ModelKind::Gat => std::sync::Arc::new(crate::nn::GatConfig {
                    heads: 2,
                    ..Default::default()
                }),
            };
            let config = ModelConfig::with_settings(shape, settings);
            let model = Gnn::new(config.clone(), Some(&[1, 2, 3]), 0, Device::Cpu).unwrap();
            let e = MemoryEstimator::new(config, Device::Cpu, 2);
            assert_eq!(
                e.num_parameters(),
                model.num_parameters(),
                "{kind:?}/{aggr:?}"
            );
            assert_eq!(e.param_bytes(), 4 * model.num_parameters() as u64);
        }
    }
}
