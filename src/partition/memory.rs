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
//! Every tensor is f32 or u32 (4 bytes a value). A buffer is freed when its last holder
//! drops it; holders are the caller's variables and the backward closures, which keep
//! exactly what their rule reads. With `[r, c]` the output's shape:
//!
//! | op | forward allocates | backward rule keeps | backward allocates |
//! |---|---|---|---|
//! | `slice` rows | `[n, c]` | nothing | `[rows of x, c]` (zeros + ḡ) |
//! | `matmul(a, W)` | `[r, c]` | `a` and `W` | `ā` `[r, k]` if `a` needs it, then `W̄` |
//! | `matmul_rows(a, n, W)` | `[n, c]` | `a` and `W` | `[n, k]`, then `ā` `[rows of a, k]` (the first goes), then `W̄` |
//! | `add(a, b)` | `[r, c]` | nothing | `ā = ḡ` shared; `b̄ = ḡ`, or `[c]` for a bias row |
//! | `mul(a, col)` | `[r, c]` | `col` (and `a` if `col` needs a gradient) | `ā` `[r, c]` |
//! | `segment_mean/sum` | `[num_dst, c]` | the block (host) | `[num_src, c]` |
//! | `segment_max` | `[num_dst, c]` + argmax u32 `[num_dst, c]` | argmax | `[num_src, c]` |
//! | `relu`, `mul_scalar` | `[r, c]` | their output | `[r, c]` |
//! | `dropout` | `[r, c]` | the u32 row ids `[r]` | `[r, c]` (mask recomputed) |
//! | `reshape` | nothing (a view) | nothing | nothing (a view of ḡ) |
//! | `sum_dim(x, 1)` | `[r]` | nothing | `[r, c]` |
//! | `index_select(x, idx)` | `[m, c]` | `idx` | `[rows of x, c]` (scatter) |
//! | `leaky_relu`, `segment_softmax` | `[r, c]` | their output | `[r, c]` |
//! | `segment_weighted_sum(z, α)` | `[nd, H·D]` | `z` and `α` | `z̄` `[ns, H·D]`, then `ᾱ` `[E, H]` |
//! | `lstm_aggregate` | `[nd, F]`, gates `[R, 4F]`, cells `[R, F]`; per step `h·W_hh` `[m, 4F]` and the next `h` `[m, F]` | gates, cells | `x̄g` `[R, 4F]`; per step `z̄` `[m, 4F]` and `h̄` `[m, F]`; `Hprev` `[R, F]`; gates and cells go before `W̄_hh` |
//! | `cross_entropy` | `[n, 2]` scratch, `lse [n]`, the loss | logits, `lse`, labels | `[n, classes]` |
//!
//! Autograd's backward allocates the scalar seed, then visits nodes in the topological
//! order of [`crate::autograd`] (depth-first from the loss, first input first, reversed
//! post-order). After a node's rule it frees the node's saved tensors and its incoming
//! gradient; a gradient flowing into a tensor that already has one is merged with `add`
//! (a new buffer, then both parts freed); a parameter's first gradient is kept.
//!
//! The layers ([`crate::nn`]) put these ops together as follows, `i`/`o` the layer's
//! input/output widths, `ns`/`nd` the block's src/dst counts:
//!
//! - **SAGE mean/sum**: the self term is `matmul_rows(h, nd, W_self)` when `h` is kept
//!   anyway (projecting first, or `h` without gradient: the features), else
//!   `h_dst = slice(h)` `[nd, i]` first, kept by `matmul(h_dst, W_self)`, computed after
//!   the neighbours. Neighbours, projecting first when that takes fewer multiply-adds
//!   ([`crate::nn::sage::projects_first`]): `segment(matmul(h, W_neigh))` (keeps `h`, a
//!   transient `[ns, o]`) else `matmul(segment(h), W_neigh)` (keeps the aggregate
//!   `[nd, i]`). Then `(self + neigh) + bias`: three `[nd, o]` outputs, the first two
//!   transient.
//! - **SAGE pool**: `relu(matmul(h, W_pool) + b_pool)` `[ns, i]` (kept by relu),
//!   `segment_max` `[nd, i]` + argmax, `matmul(max, W_neigh)`, then as above.
//! - **GCN**: norms `[ns, 1]`, `[nd, 1]`; `x = matmul(h, W)` when `i > o` (projection
//!   first), `xs = x ⊙ norm_src`, `agg = segment_sum(xs) + xs[..nd]`, `agg ⊙ norm_dst`,
//!   then `matmul(·, W)` when not projected, `+ bias`.
//! - **SAGE-LSTM**: `xw = matmul(h, W_ih) + b` `[ns, 4F]` (the product transient), the
//!   per-(node, step) rows `xg = index_select(xw, idx)` `[R, 4F]` (`R = Σ` nodes × degree over
//!   the buckets of `degree_hist`, the explosion bucket cut by `lstm_split`; `idx` u32 `[R]`
//!   kept by the gather), then `lstm_aggregate`; `xw` and `xg` go after it, and
//!   `matmul(agg, W_neigh)` keeps the aggregate. Then as mean.
//! - **GAT** (`H` heads, 1 in the output layer; `E` = edges plus one self-loop per dst node
//!   without one): `z = matmul(h, W)`; per side `headwise_dot` (`z ⊙ a` `[n, H·D]` keeping
//!   `z`, viewed `[n·H, D]`, `sum_dim`, viewed `[n, H]`; the dst side on the copy `z[..nd]`,
//!   kept by its product); two u32 `[E]` edge index tensors; both sides gathered to `[E, H]`,
//!   `add`, `leaky_relu`, `segment_softmax`, attention dropout (u32 `[E]` edge ids),
//!   `segment_weighted_sum`, `+ bias`.
//! - **Between layers**: `relu` (keeps its `[nd, o]` output), then dropout with the dst
//!   nodes' global ids as a u32 `[nd]` tensor (keeps the ids). The layer's input `h` is
//!   dropped when the next layer's output replaces it, so a dropout output survives only
//!   if the next layer saved it.
//! - **Trainer** ([`crate::train::micro`]): features `[ns₀, in]` and labels `[n]` are
//!   uploaded, the model runs, `cross_entropy`, `argmax` (a transient u32 `[n]`), the loss
//!   is scaled by `|seeds_k|/|seeds|` when that is not 1, the logits are dropped and the
//!   backward runs; the features live until the end.
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
//! On wgpu every buffer is rounded up to its pool size class
//! ([`size_class`](crate::device::size_class)); the replay rounds each buffer the
//! same way. CUDA is counted in exact bytes until its allocator exists.
//!
//! # Adding a layer
//!
//! A new layer kind is one replay function with the signature of `sage_mean_sum`
//! mirroring its forward code with the `Replay` ops (add a `Replay` op for a new
//! primitive: its forward allocations, what its closure keeps, what its rule allocates),
//! plus one arm in `MemoryEstimator::layer`. Layers that need more than widths read the
//! block's [`BlockSizes`]: the LSTM its per-degree histogram, GAT `num_edges` and
//! `self_loops`.

use std::collections::{HashMap, HashSet};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::BlockSizes;
use crate::nn::{Aggregator, ModelConfig, ModelKind};

/// Bytes of one value (f32 and u32 alike).
const WORD: u64 = 4;

/// Bytes of a `[rows, cols]` buffer of 4-byte values, saturating: widths from user input
/// can be absurd, and an estimate that saturates simply fits no budget.
fn bytes_of(rows: usize, cols: usize) -> u64 {
    (rows as u64)
        .saturating_mul(cols as u64)
        .saturating_mul(WORD)
}

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
        match self.device {
            Device::Wgpu(_) | Device::Cuda(_) => crate::device::size_class,
            _ => |b| b,
        }
    }

    /// Bytes of the parameters on the device (each tensor rounded to the allocation unit).
    pub fn param_bytes(&self) -> u64 {
        // The layer replays declare the parameters; one-node blocks are enough to see them.
        let one = BlockSizes {
            num_src: 1,
            num_dst: 1,
            num_edges: 1,
            degree_hist: vec![0, 1],
            self_loops: 0,
        };
        let sizes = vec![one; self.model.layers];
        let mut r = Replay::new(self.round());
        let x = r.input(1, self.model.in_dim);
        let _ = self.forward(&mut r, &sizes, x);
        r.params.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Number of parameter values the replay declares (checked against the model).
    pub fn num_parameters(&self) -> usize {
        let one = BlockSizes {
            num_src: 1,
            num_dst: 1,
            num_edges: 1,
            degree_hist: vec![0, 1],
            self_loops: 0,
        };
        let sizes = vec![one; self.model.layers];
        let mut r = Replay::new(|b| b);
        let x = r.input(1, self.model.in_dim);
        let _ = self.forward(&mut r, &sizes, x);
        r.params
            .iter()
            .fold(0usize, |a, &b| a.saturating_add((b / WORD) as usize))
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

    /// `A`: the highest bytes a training micro-batch adds on top of the resident ones.
    /// `sizes` are its blocks' (input layer first); `total_seeds` the batch's seeds (the
    /// loss is scaled unless the micro-batch holds them all).
    pub fn activation_bytes(&self, sizes: &[BlockSizes], total_seeds: usize) -> Result<u64> {
        if sizes.len() != self.model.layers {
            return Err(Error::invalid(format!(
                "memory estimate: {} blocks for a {}-layer model",
                sizes.len(),
                self.model.layers
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
        let mut r = Replay::new(self.round());
        // Trainer: features (gathered on the device by id, or uploaded), labels, forward,
        // loss, prediction, scaling, backward.
        // On a GPU the predictions (and losses) of the batch's earlier micro-batches are
        // still held (read at the batch's end): at most the other seeds' predictions.
        let gpu = matches!(self.device, Device::Wgpu(_) | Device::Cuda(_));
        let held = (gpu && total_seeds > n).then(|| r.input(total_seeds - n, 1));
        let ids = self.device_gather.then(|| r.input(sizes[0].num_src, 1));
        let x = r.input(sizes[0].num_src, self.model.in_dim);
        if let Some(ids) = ids {
            r.release(ids.buf);
        }
        let y = r.input(n, 1);
        let h = x.clone_in(&mut r);
        let logits = self.forward(&mut r, sizes, h);
        let ce = r.cross_entropy(&logits, &y);
        let pred = r.alloc(n, 1);
        if !gpu {
            // The CPU reads its predictions at once; a GPU holds them to the batch's end.
            r.release(pred);
        }
        let loss = if n != total_seeds {
            r.mul_scalar(&ce)
        } else {
            ce.clone_in(&mut r)
        };
        r.release(logits.buf);
        r.backward(&loss, None);
        for v in [loss, ce, y, x] {
            r.release(v.buf);
        }
        if let Some(held) = held {
            r.release(held.buf);
        }
        Ok(r.peak)
    }

    /// `R + A`: the predicted peak of a training micro-batch.
    pub fn peak_bytes(
        &self,
        sizes: &[BlockSizes],
        total_seeds: usize,
        state: Resident,
    ) -> Result<u64> {
        Ok(self
            .resident_bytes(state)
            .saturating_add(self.activation_bytes(sizes, total_seeds)?))
    }

    /// Mirror of [`crate::nn::Gnn::forward`] in training mode.
    fn forward(&self, r: &mut Replay, sizes: &[BlockSizes], x: Val) -> Val {
        let mut h = x;
        for (l, s) in sizes.iter().enumerate() {
            h = self.forward_layer(r, l, s, h);
        }
        h
    }

    /// Mirror of [`crate::nn::Gnn::forward_layer`] in training mode: the layer, its input
    /// released, then ReLU and dropout except after the output layer.
    fn forward_layer(&self, r: &mut Replay, l: usize, s: &BlockSizes, h: Val) -> Val {
        let m = &self.model;
        let (i, o) = m.widths(l);
        let shape = LayerShape {
            num_src: s.num_src,
            num_dst: s.num_dst,
            in_dim: i,
            out_dim: o,
            last: l + 1 == m.layers,
        };
        let mut h2 = self.layer(r, &h, &shape, s);
        r.release(h.buf);
        if l + 1 < m.layers {
            let a = r.relu(&h2);
            r.release(h2.buf);
            h2 = a;
            if m.dropout > 0.0 {
                let ids = r.input(s.num_dst, 1);
                let d = r.dropout(&h2, &ids);
                r.release(h2.buf);
                r.release(ids.buf);
                h2 = d;
            }
        }
        h2
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
        if layer >= m.layers {
            return Err(Error::invalid(format!(
                "memory estimate: layer {layer} of a {}-layer model",
                m.layers
            )));
        }
        let last = layer + 1 == m.layers;
        if last != matches!(pass, ChunkPass::Loss { .. }) {
            return Err(Error::invalid(format!(
                "memory estimate: the loss pass runs the output layer only (layer {layer} of {})",
                m.layers
            )));
        }
        let (i, _) = m.widths(layer);
        let ns = sizes.num_src;
        let mut r = Replay::new(self.round());
        let x = if layer == 0 {
            let ids = self.device_gather.then(|| r.input(ns, 1));
            let x = r.input(ns, i);
            if let Some(ids) = ids {
                r.release(ids.buf);
            }
            x
        } else if pass == ChunkPass::Forward {
            r.input(ns, i)
        } else {
            r.leaf_input(ns, i)
        };
        match pass {
            ChunkPass::Forward => {
                r.no_grad = true;
                let out = self.forward_layer(&mut r, layer, sizes, x);
                // Read back to the host.
                r.release(out.buf);
                return Ok(r.peak);
            }
            ChunkPass::Loss { total } => {
                let n = sizes.num_dst;
                let y = r.input(n, 1);
                let h = x.clone_in(&mut r);
                let logits = self.forward_layer(&mut r, layer, sizes, h);
                let ce = r.cross_entropy(&logits, &y);
                // The predictions are read at once.
                let pred = r.alloc(n, 1);
                r.release(pred);
                let loss = if n != total {
                    r.mul_scalar(&ce)
                } else {
                    ce.clone_in(&mut r)
                };
                r.release(logits.buf);
                r.backward(&loss, None);
                for v in [loss, ce, y] {
                    r.release(v.buf);
                }
            }
            ChunkPass::Backward => {
                let h = x.clone_in(&mut r);
                let out = self.forward_layer(&mut r, layer, sizes, h);
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

    /// One layer: the only place that knows which layer kinds exist.
    fn layer(&self, r: &mut Replay, h: &Val, shape: &LayerShape, sizes: &BlockSizes) -> Val {
        match (self.model.kind, self.model.aggr) {
            (ModelKind::Sage, Aggregator::Mean | Aggregator::Sum) => {
                sage_mean_sum(r, h, shape, sizes)
            }
            (ModelKind::Sage, Aggregator::Pool) => sage_pool(r, h, shape),
            (ModelKind::Sage, Aggregator::Max) => sage_max(r, h, shape),
            (ModelKind::Sage, Aggregator::Lstm) => sage_lstm(r, h, shape, sizes, self.lstm_split),
            (ModelKind::Gcn, _) => gcn(r, h, shape),
            (ModelKind::Gat, _) => {
                let m = &self.model;
                let opts = GatOpts {
                    heads: if shape.last { 1 } else { m.heads },
                    attn_dropout: m.attn_dropout > 0.0,
                    self_loops: m.self_loops,
                };
                gat(r, h, shape, sizes, opts)
            }
        }
    }
}

/// Sizes one layer's replay reads (the full [`BlockSizes`] are there for layers that need
/// degree histograms or edge counts).
#[derive(Clone, Copy, Debug)]
pub struct LayerShape {
    /// Source (input) nodes of the layer's block.
    pub num_src: usize,
    /// Destination (output) nodes of the layer's block.
    pub num_dst: usize,
    /// Input feature width.
    pub in_dim: usize,
    /// Output feature width.
    pub out_dim: usize,
    /// The model's output layer (GAT: one head).
    pub last: bool,
}

/// Mirror of [`crate::nn::sage::SageLayer::forward`] with `mean` or `sum`.
fn sage_mean_sum(r: &mut Replay, h: &Val, s: &LayerShape, sizes: &BlockSizes) -> Val {
    let (i, o) = (s.in_dim, s.out_dim);
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let bias = r.param(1, o);
    let project = crate::nn::sage::projects_first(s.num_src, s.num_dst, sizes.num_edges, i, o);
    let h_dst = if project || !h.grad {
        None
    } else {
        Some(r.slice_rows(h, s.num_dst))
    };
    let neigh = if project {
        let t = r.matmul(h, &w_neigh);
        let n = r.segment(&t, s.num_dst, false);
        r.release(t.buf);
        n
    } else {
        let t = r.segment(h, s.num_dst, false);
        let n = r.matmul(&t, &w_neigh);
        r.release(t.buf);
        n
    };
    let own = match &h_dst {
        Some(x) => r.matmul(x, &w_self),
        None => r.matmul_rows(h, s.num_dst, &w_self),
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

/// Mirror of the `max` arm of [`crate::nn::sage::SageLayer::forward`].
fn sage_max(r: &mut Replay, h: &Val, s: &LayerShape) -> Val {
    let (i, o) = (s.in_dim, s.out_dim);
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let bias = r.param(1, o);
    let h_dst = r.slice_rows(h, s.num_dst);
    let mx = r.segment(h, s.num_dst, true);
    let neigh = r.matmul(&mx, &w_neigh);
    r.release(mx.buf);
    finish_sage(r, h_dst, neigh, &w_self, &bias)
}

/// Mirror of the `pool` arm of [`crate::nn::sage::SageLayer::forward`].
fn sage_pool(r: &mut Replay, h: &Val, s: &LayerShape) -> Val {
    let (i, o) = (s.in_dim, s.out_dim);
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let w_pool = r.param(i, i);
    let b_pool = r.param(1, i);
    let bias = r.param(1, o);
    let h_dst = r.slice_rows(h, s.num_dst);
    let m = r.matmul(h, &w_pool);
    let z1 = r.add(&m, &b_pool);
    r.release(m.buf);
    let z = r.relu(&z1);
    r.release(z1.buf);
    let mx = r.segment(&z, s.num_dst, true);
    let neigh = r.matmul(&mx, &w_neigh);
    r.release(mx.buf);
    r.release(z.buf);
    finish_sage(r, h_dst, neigh, &w_self, &bias)
}

/// `(fc_self(h_dst) + neigh) + bias`, then the layer's locals go.
fn finish_sage(r: &mut Replay, h_dst: Val, neigh: Val, w_self: &Val, bias: &Val) -> Val {
    let s = r.matmul(&h_dst, w_self);
    let a1 = r.add(&s, &neigh);
    let out = r.add(&a1, bias);
    r.release(s.buf);
    r.release(a1.buf);
    r.release(neigh.buf);
    r.release(h_dst.buf);
    out
}

/// Mirror of [`crate::nn::gcn::GcnLayer::forward`].
fn gcn(r: &mut Replay, h: &Val, s: &LayerShape) -> Val {
    let (i, o) = (s.in_dim, s.out_dim);
    let w = r.param(i, o);
    let bias = r.param(1, o);
    let n_src = r.input(s.num_src, 1);
    let n_dst = r.input(s.num_dst, 1);
    let project_first = i > o;
    let x = if project_first {
        r.matmul(h, &w)
    } else {
        h.clone_in(r)
    };
    let xs = r.mul(&x, &n_src);
    let seg = r.segment(&xs, s.num_dst, false);
    let sl = r.slice_rows(&xs, s.num_dst);
    let agg = r.add(&seg, &sl);
    r.release(seg.buf);
    r.release(sl.buf);
    let agg2 = r.mul(&agg, &n_dst);
    let out = if project_first {
        agg2.clone_in(r)
    } else {
        r.matmul(&agg2, &w)
    };
    let res = r.add(&out, &bias);
    for v in [out, agg2, agg, xs, x, n_dst, n_src] {
        r.release(v.buf);
    }
    res
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

/// Mirror of the `lstm` arm of [`crate::nn::sage::SageLayer::forward`]
/// ([`crate::nn::sage::LstmParams::aggregate`]).
fn sage_lstm(
    r: &mut Replay,
    h: &Val,
    s: &LayerShape,
    sizes: &BlockSizes,
    split: Option<usize>,
) -> Val {
    let (i, o) = (s.in_dim, s.out_dim);
    let w_self = r.param(i, o);
    let w_neigh = r.param(i, o);
    let w_ih = r.param(i, i.saturating_mul(4));
    let w_hh = r.param(i, i.saturating_mul(4));
    let b = r.param(1, i.saturating_mul(4));
    let bias = r.param(1, o);
    let h_dst = r.slice_rows(h, s.num_dst);
    let buckets = lstm_buckets(&sizes.degree_hist, split);
    let rows = buckets.iter().map(|&(m, k)| m * k).sum();
    let mm = r.matmul(h, &w_ih);
    let xw = r.add(&mm, &b);
    r.release(mm.buf);
    let idx = r.input(rows, 1);
    let xg = r.gather(&xw, &idx);
    r.release(xw.buf);
    let agg = r.lstm(&xg, &w_hh, s.num_dst, buckets);
    r.release(xg.buf);
    r.release(idx.buf);
    let neigh = r.matmul(&agg, &w_neigh);
    r.release(agg.buf);
    finish_sage(r, h_dst, neigh, &w_self, &bias)
}

/// What a GAT layer's replay reads besides its shape.
#[derive(Clone, Copy, Debug)]
struct GatOpts {
    heads: usize,
    attn_dropout: bool,
    self_loops: bool,
}

/// Mirror of [`crate::nn::gat::GatLayer::forward`] (`s.out_dim` = heads × width).
fn gat(r: &mut Replay, h: &Val, s: &LayerShape, sizes: &BlockSizes, g: GatOpts) -> Val {
    let (i, o, heads) = (s.in_dim, s.out_dim, g.heads.max(1));
    let w = r.param(i, o);
    let attn_src = r.param(1, o);
    let attn_dst = r.param(1, o);
    let bias = r.param(1, o);
    // `Block::with_self_loops` adds one edge to every dst node without a self-loop.
    let e = if g.self_loops {
        sizes.num_edges + s.num_dst - sizes.self_loops.min(s.num_dst)
    } else {
        sizes.num_edges
    };
    let z = r.matmul(h, &w);
    let el = headwise_dot(r, &z, &attn_src, heads);
    let z_dst = r.slice_rows(&z, s.num_dst);
    let er = headwise_dot(r, &z_dst, &attn_dst, heads);
    r.release(z_dst.buf);
    let src = r.input(e, 1);
    let dst = r.input(e, 1);
    let sl = r.gather(&el, &src);
    let sr = r.gather(&er, &dst);
    let sum = r.add(&sl, &sr);
    let score = r.unary_saving_output(&sum);
    for v in [sum, sr, sl] {
        r.release(v.buf);
    }
    let mut alpha = r.segment_softmax(&score);
    if g.attn_dropout {
        let ids = r.input(e, 1);
        let d = r.dropout(&alpha, &ids);
        r.release(alpha.buf);
        r.release(ids.buf);
        alpha = d;
    }
    let out = r.segment_weighted_sum(&z, &alpha, s.num_dst);
    let res = r.add(&out, &bias);
    for v in [out, alpha, score, dst, src, er, el, z] {
        r.release(v.buf);
    }
    res
}

/// Mirror of [`crate::nn::gat::headwise_dot`]: `z ⊙ a`, viewed `[n·H, D]`, summed per row,
/// viewed `[n, H]`.
fn headwise_dot(r: &mut Replay, z: &Val, a: &Val, heads: usize) -> Val {
    let n = z.rows;
    let prod = r.mul(z, a);
    let flat = r.view(&prod, n * heads, z.cols / heads);
    let sums = r.sum_rows(&flat);
    r.release(flat.buf);
    let out = r.view(&sums, n, heads);
    r.release(sums.buf);
    r.release(prod.buf);
    out
}

/// A symbolic tensor: a buffer, its shape, and its autograd link.
#[derive(Clone, Copy, Debug)]
struct Val {
    buf: usize,
    rows: usize,
    cols: usize,
    grad: bool,
    node: Option<usize>,
    leaf: Option<usize>,
}

impl Val {
    /// A second holder of the same buffer (a `Tensor::clone`).
    fn clone_in(&self, r: &mut Replay) -> Val {
        r.share(self.buf);
        *self
    }
}

/// Where a node's input gradient goes.
enum Par {
    None,
    Node(usize),
    Leaf(usize),
}

type Rule = Box<dyn FnOnce(&mut Replay, usize) -> Vec<Option<usize>>>;

struct SymNode {
    parents: Vec<Par>,
    saved: Vec<usize>,
    rule: Option<Rule>,
}

/// Symbolic buffers with reference counts, and a symbolic autograd graph.
struct Replay {
    round: fn(u64) -> u64,
    /// Rounded bytes and holders of each buffer.
    bytes: Vec<u64>,
    refs: Vec<u32>,
    live: u64,
    peak: u64,
    nodes: Vec<SymNode>,
    /// Rounded bytes of each parameter (resident: not in `live`).
    params: Vec<u64>,
    /// The gradient buffer each parameter received in this backward.
    leaf_grads: Vec<Option<usize>>,
    /// Recording is off (`autograd::no_grad`): ops record no node.
    no_grad: bool,
}

impl Replay {
    fn new(round: fn(u64) -> u64) -> Self {
        Replay {
            round,
            bytes: Vec::new(),
            refs: Vec::new(),
            live: 0,
            peak: 0,
            nodes: Vec::new(),
            params: Vec::new(),
            leaf_grads: Vec::new(),
            no_grad: false,
        }
    }

    fn alloc(&mut self, rows: usize, cols: usize) -> usize {
        let b = (self.round)(bytes_of(rows, cols));
        self.bytes.push(b);
        self.refs.push(1);
        self.live = self.live.saturating_add(b);
        self.peak = self.peak.max(self.live);
        self.bytes.len() - 1
    }

    fn share(&mut self, buf: usize) -> usize {
        self.refs[buf] += 1;
        buf
    }

    fn release(&mut self, buf: usize) {
        self.refs[buf] -= 1;
        if self.refs[buf] == 0 {
            self.live = self.live.saturating_sub(self.bytes[buf]);
        }
    }

    /// A tensor that needs no gradient (features, labels, ids, norms).
    fn input(&mut self, rows: usize, cols: usize) -> Val {
        Val {
            buf: self.alloc(rows, cols),
            rows,
            cols,
            grad: false,
            node: None,
            leaf: None,
        }
    }

    /// An uploaded input that is a leaf of the autograd graph (`requires_grad_leaf`): live
    /// like an input; its first gradient is kept in `leaf_grads` (not resident: no bytes in
    /// `params`).
    fn leaf_input(&mut self, rows: usize, cols: usize) -> Val {
        let buf = self.alloc(rows, cols);
        self.params.push(0);
        self.leaf_grads.push(None);
        Val {
            buf,
            rows,
            cols,
            grad: true,
            node: None,
            leaf: Some(self.params.len() - 1),
        }
    }

    /// A parameter: resident, so its buffer adds nothing to `live`.
    fn param(&mut self, rows: usize, cols: usize) -> Val {
        self.params.push((self.round)(bytes_of(rows, cols)));
        self.leaf_grads.push(None);
        self.bytes.push(0);
        self.refs.push(1);
        Val {
            buf: self.bytes.len() - 1,
            rows,
            cols,
            grad: true,
            node: None,
            leaf: Some(self.params.len() - 1),
        }
    }

    /// `autograd::record`: a node if an input needs a gradient; otherwise the saved
    /// buffers go at once.
    fn record(
        &mut self,
        buf: usize,
        shape: (usize, usize),
        inputs: &[&Val],
        saved: Vec<usize>,
        rule: Rule,
    ) -> Val {
        let mut out = Val {
            buf,
            rows: shape.0,
            cols: shape.1,
            grad: false,
            node: None,
            leaf: None,
        };
        if self.no_grad || !inputs.iter().any(|v| v.grad) {
            for b in saved {
                self.release(b);
            }
            return out;
        }
        let parents = inputs
            .iter()
            .map(|v| match (v.grad, v.node, v.leaf) {
                (false, _, _) => Par::None,
                (true, Some(n), _) => Par::Node(n),
                (true, None, Some(p)) => Par::Leaf(p),
                (true, None, None) => Par::None,
            })
            .collect();
        self.nodes.push(SymNode {
            parents,
            saved,
            rule: Some(rule),
        });
        out.grad = true;
        out.node = Some(self.nodes.len() - 1);
        out
    }

    fn slice_rows(&mut self, x: &Val, n: usize) -> Val {
        let out = self.alloc(n, x.cols);
        let (rows, cols) = (x.rows, x.cols);
        self.record(
            out,
            (n, cols),
            &[x],
            vec![],
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    fn matmul(&mut self, a: &Val, b: &Val) -> Val {
        let out = self.alloc(a.rows, b.cols);
        let saved = vec![self.share(a.buf), self.share(b.buf)];
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            (a.rows, b.cols),
            &[a, b],
            saved,
            Box::new(move |r, _| {
                let ga = a2.grad.then(|| r.alloc(a2.rows, a2.cols));
                let gb = b2.grad.then(|| r.alloc(b2.rows, b2.cols));
                vec![ga, gb]
            }),
        )
    }

    /// `matmul_rows(a, rows, b)`: keeps `a` itself; its rule gives `a` the product's
    /// `[rows, k]` padded to `a`'s rows (a new buffer, then the product goes), then `b̄`.
    fn matmul_rows(&mut self, a: &Val, rows: usize, b: &Val) -> Val {
        let out = self.alloc(rows, b.cols);
        let saved = vec![self.share(a.buf), self.share(b.buf)];
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            (rows, b.cols),
            &[a, b],
            saved,
            Box::new(move |r, _| {
                let ga = a2.grad.then(|| {
                    let small = r.alloc(rows, a2.cols);
                    let full = r.alloc(a2.rows, a2.cols);
                    r.release(small);
                    full
                });
                let gb = b2.grad.then(|| r.alloc(b2.rows, b2.cols));
                vec![ga, gb]
            }),
        )
    }

    fn add(&mut self, a: &Val, b: &Val) -> Val {
        let out = self.alloc(a.rows, a.cols);
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            (a.rows, a.cols),
            &[a, b],
            vec![],
            Box::new(move |r, g| {
                let ga = a2.grad.then(|| r.share(g));
                let same = (a2.rows, a2.cols) == (b2.rows, b2.cols);
                let gb = b2.grad.then(|| {
                    if same {
                        r.share(g)
                    } else {
                        r.alloc(b2.rows, b2.cols)
                    }
                });
                vec![ga, gb]
            }),
        )
    }

    /// `a ⊙ b`, `b` the same shape or a column.
    fn mul(&mut self, a: &Val, b: &Val) -> Val {
        let out = self.alloc(a.rows, a.cols);
        let mut saved = Vec::new();
        if b.grad {
            saved.push(self.share(a.buf));
        }
        if a.grad {
            saved.push(self.share(b.buf));
        }
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            (a.rows, a.cols),
            &[a, b],
            saved,
            Box::new(move |r, _| {
                let ga = a2.grad.then(|| r.alloc(a2.rows, a2.cols));
                let gb = b2.grad.then(|| {
                    let full = r.alloc(a2.rows, a2.cols);
                    if (a2.rows, a2.cols) == (b2.rows, b2.cols) {
                        full
                    } else {
                        let red = r.alloc(b2.rows, b2.cols);
                        r.release(full);
                        red
                    }
                });
                vec![ga, gb]
            }),
        )
    }

    /// `segment_mean`/`segment_sum`, or `segment_max` (with its saved argmax).
    fn segment(&mut self, x: &Val, num_dst: usize, max: bool) -> Val {
        let out = self.alloc(num_dst, x.cols);
        let saved = if max {
            vec![self.alloc(num_dst, x.cols)]
        } else {
            vec![]
        };
        let (rows, cols) = (x.rows, x.cols);
        self.record(
            out,
            (num_dst, cols),
            &[x],
            saved,
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    /// `reshape`: the same buffer under another shape; its rule reshapes the gradient.
    fn view(&mut self, x: &Val, rows: usize, cols: usize) -> Val {
        let out = self.share(x.buf);
        self.record(
            out,
            (rows, cols),
            &[x],
            vec![],
            Box::new(move |r, g| vec![Some(r.share(g))]),
        )
    }

    /// `sum_dim(x, 1)`: `[r, c]` to `[r]`; its rule expands the gradient to `[r, c]`.
    fn sum_rows(&mut self, x: &Val) -> Val {
        let out = self.alloc(x.rows, 1);
        let (rows, cols) = (x.rows, x.cols);
        self.record(
            out,
            (rows, 1),
            &[x],
            vec![],
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    /// `index_select(x, idx)` (keeps `idx`); its rule scatters into `[rows of x, c]`.
    fn gather(&mut self, x: &Val, idx: &Val) -> Val {
        let out = self.alloc(idx.rows, x.cols);
        let saved = vec![self.share(idx.buf)];
        let (rows, cols) = (x.rows, x.cols);
        self.record(
            out,
            (idx.rows, cols),
            &[x],
            saved,
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    /// `segment_softmax` over `[E, H]` scores (keeps its output).
    fn segment_softmax(&mut self, x: &Val) -> Val {
        self.unary_saving_output(x)
    }

    /// `segment_weighted_sum(x, a)`: keeps both; its rule allocates `x̄` then `ā`.
    fn segment_weighted_sum(&mut self, x: &Val, a: &Val, num_dst: usize) -> Val {
        let out = self.alloc(num_dst, x.cols);
        let saved = vec![self.share(x.buf), self.share(a.buf)];
        let (x2, a2) = (*x, *a);
        self.record(
            out,
            (num_dst, x.cols),
            &[x, a],
            saved,
            Box::new(move |r, _| {
                let gx = x2.grad.then(|| r.alloc(x2.rows, x2.cols));
                let ga = a2.grad.then(|| r.alloc(a2.rows, a2.cols));
                vec![gx, ga]
            }),
        )
    }

    /// [`crate::ops::lstm_aggregate`] over dense `(nodes, degree)` buckets, run as the packs
    /// of [`crate::ops::lstm_packs`]: the output, 5 saved values per (row, unit) (gates and
    /// cell state) and, per step of a pack, `h·W_hh` `[n_t, 4F]` and the next `h` `[n_t, F]`
    /// beside the previous one. Backward: `x̄g` `[rows, 4F]`, per step `z̄` `[n_t, 4F]` and
    /// `h̄` `[n_t, F]` beside the previous one, then `Hprev` `[rows, F]`; the saved values
    /// go before `W̄_hh = Hprevᵀ·x̄g`.
    fn lstm(&mut self, xg: &Val, w_hh: &Val, num_dst: usize, buckets: Vec<(usize, usize)>) -> Val {
        let f = w_hh.rows;
        let rows = xg.rows;
        let out = self.alloc(num_dst, f);
        let acts = self.alloc(rows, f.saturating_mul(4));
        let cs = self.alloc(rows, f);
        // The CPU arm runs the buckets as packed sequences: step t over the pack's n_t
        // nodes still running.
        let packs = crate::ops::lstm_packs(&buckets);
        for steps in &packs {
            let mut hb: Option<usize> = None;
            for &m in steps {
                let hw = hb.map(|_| self.alloc(m, f.saturating_mul(4)));
                let next = self.alloc(m, f);
                if let Some(prev) = hb.replace(next) {
                    self.release(prev);
                }
                if let Some(hw) = hw {
                    self.release(hw);
                }
            }
            if let Some(hb) = hb {
                self.release(hb);
            }
        }
        let w_grad = w_hh.grad;
        self.record(
            out,
            (num_dst, f),
            &[xg, w_hh],
            vec![],
            Box::new(move |r, _| {
                let dxg = r.alloc(rows, f.saturating_mul(4));
                for steps in &packs {
                    let mut dh: Option<usize> = None;
                    for (t, &m) in steps.iter().enumerate().rev() {
                        let dz = r.alloc(m, f.saturating_mul(4));
                        let next = (t > 0).then(|| r.alloc(m, f));
                        if t > 0 {
                            r.release(dz);
                        }
                        if let Some(prev) = dh {
                            r.release(prev);
                        }
                        if t == 0 {
                            r.release(dz);
                        }
                        dh = next;
                    }
                }
                let hprev = w_grad.then(|| r.alloc(rows, f));
                r.release(acts);
                r.release(cs);
                let dw = hprev.map(|hp| {
                    let dw = r.alloc(f, f.saturating_mul(4));
                    r.release(hp);
                    dw
                });
                vec![Some(dxg), dw]
            }),
        )
    }

    /// A unary op whose rule reads its output (`relu`, `mul_scalar`).
    fn unary_saving_output(&mut self, x: &Val) -> Val {
        let out = self.alloc(x.rows, x.cols);
        let saved = vec![self.share(out)];
        let (rows, cols) = (x.rows, x.cols);
        self.record(
            out,
            (rows, cols),
            &[x],
            saved,
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    fn relu(&mut self, x: &Val) -> Val {
        self.unary_saving_output(x)
    }

    fn mul_scalar(&mut self, x: &Val) -> Val {
        self.unary_saving_output(x)
    }

    fn dropout(&mut self, x: &Val, ids: &Val) -> Val {
        let out = self.alloc(x.rows, x.cols);
        let saved = vec![self.share(ids.buf)];
        let (rows, cols) = (x.rows, x.cols);
        self.record(
            out,
            (rows, cols),
            &[x],
            saved,
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    fn cross_entropy(&mut self, logits: &Val, labels: &Val) -> Val {
        let n = logits.rows;
        let scratch = self.alloc(n, 2);
        let lse = self.alloc(n, 1);
        let loss = self.alloc(1, 1);
        self.release(scratch);
        let saved = vec![self.share(logits.buf), lse, self.share(labels.buf)];
        let (rows, cols) = (logits.rows, logits.cols);
        self.record(
            loss,
            (1, 1),
            &[logits],
            saved,
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    /// Mirror of [`crate::autograd::backward`] from the scalar `root` (`seed: None`), or of
    /// [`crate::autograd::backward_with`] with the buffer `seed` as its gradient (shared
    /// for the pass, as the detached copy shares it).
    fn backward(&mut self, root: &Val, seed: Option<usize>) {
        let seed = match seed {
            Some(b) => self.share(b),
            None => self.alloc(1, 1),
        };
        let Some(root_node) = root.node else {
            self.release(seed);
            return;
        };
        let order = self.topological_order(root_node);
        let mut grads: HashMap<usize, usize> = HashMap::new();
        grads.insert(root_node, seed);
        for id in order {
            let Some(g) = grads.remove(&id) else { continue };
            let Some(rule) = self.nodes[id].rule.take() else {
                continue;
            };
            let outs = rule(self, g);
            for b in std::mem::take(&mut self.nodes[id].saved) {
                self.release(b);
            }
            self.release(g);
            let parents = std::mem::take(&mut self.nodes[id].parents);
            for (p, o) in parents.iter().zip(outs) {
                let Some(o) = o else { continue };
                match *p {
                    Par::None => self.release(o),
                    Par::Leaf(l) => match self.leaf_grads[l] {
                        None => self.leaf_grads[l] = Some(o),
                        // Accumulated in place.
                        Some(_) => self.release(o),
                    },
                    Par::Node(n) => {
                        let merged = match grads.remove(&n) {
                            Some(prev) => {
                                let m = self.alloc_like(prev);
                                self.release(prev);
                                self.release(o);
                                m
                            }
                            None => o,
                        };
                        grads.insert(n, merged);
                    }
                }
            }
        }
    }

    /// A new buffer of `buf`'s size.
    fn alloc_like(&mut self, buf: usize) -> usize {
        let b = self.bytes[buf];
        self.bytes.push(b);
        self.refs.push(1);
        self.live = self.live.saturating_add(b);
        self.peak = self.peak.max(self.live);
        self.bytes.len() - 1
    }

    /// The order of [`crate::autograd`]: iterative depth-first search over inputs in
    /// order, reversed post-order.
    fn topological_order(&self, root: usize) -> Vec<usize> {
        let mut seen = HashSet::from([root]);
        let mut post = Vec::new();
        let mut stack = vec![(root, 0usize)];
        while let Some((n, next)) = stack.pop() {
            if let Some(p) = self.nodes[n].parents.get(next) {
                stack.push((n, next + 1));
                if let Par::Node(pn) = *p {
                    if seen.insert(pn) {
                        stack.push((pn, 0));
                    }
                }
            } else {
                post.push(n);
            }
        }
        post.reverse();
        post
    }
}

/// Parses a byte size: a number with an optional unit `B`, `KB`/`KiB`, `MB`/`MiB`,
/// `GB`/`GiB` or `TB`/`TiB` (decimal and binary multiples; case-insensitive, spaces
/// allowed), e.g. `24GiB`, `1.5 GB`, `4096`.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        Error::invalid(format!(
            "byte size `{s}`: expected a number and a unit among B, KB, KiB, MB, MiB, GB, GiB, TB, TiB (e.g. 24GiB)"
        ))
    };
    let value: f64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" => 1 << 10,
        "mb" => 1_000_000,
        "mib" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

/// A byte count for people: `512 B`, `1.50 KiB`, `24.00 GiB`.
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse() {
        assert_eq!(parse_bytes("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_bytes("1.5 GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("7b").unwrap(), 7);
        assert_eq!(parse_bytes("2kib").unwrap(), 2048);
        assert_eq!(parse_bytes("3MB").unwrap(), 3_000_000);
        assert_eq!(parse_bytes("1TiB").unwrap(), 1 << 40);
        for bad in ["", "GiB", "12 parsecs", "-1GB", "1e3"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(24 << 30), "24.00 GiB");
    }

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
            let config = ModelConfig {
                kind,
                aggr,
                in_dim: 7,
                hidden: 5,
                out_dim: 3,
                layers: 3,
                dropout: 0.5,
                heads: 2,
                attn_dropout: 0.0,
                self_loops: true,
            };
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
