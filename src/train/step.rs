//! The trainer's device steps around the model's layers, written once over [`Exec`]: a
//! micro-batch's forward and loss ([`crate::train::micro`]), and full-graph training's
//! chunk passes ([`crate::train::full_graph`]). The trainer runs them on tensors
//! ([`crate::nn::exec::Eager`]), the memory estimator on symbolic buffers
//! ([`crate::meta::Replay`], [`crate::train::MemoryEstimator`]), so the estimate follows
//! these steps rather than a copy of them. What the host does between them (timing,
//! labels, the rows' assembly and their scatter into host matrices, counting the
//! readouts) stays with the callers.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::graph::Block;
use crate::nn::exec::{Eager, Exec};
use crate::nn::{Forward, Gnn, HybridLayer};
use crate::tensor::Tensor;

/// The model's layers as the steps run them, on one executor.
pub(crate) trait Layers<'b, E: Exec<'b>> {
    /// Layers of the model.
    fn layers(&self) -> usize;

    /// Layer `l` on `block` from `h` (freed once the layer has run), then, below the output
    /// layer, the ReLU and dropout ([`Gnn::forward_layer`]).
    fn layer(&self, e: &mut E, l: usize, block: &E::Block, h: E::T) -> Result<E::T>;

    /// What follows layer `l`'s own output `out` ([`Gnn::finish_layer`]).
    fn finish(&self, e: &mut E, l: usize, block: &E::Block, out: E::T) -> Result<E::T>;

    /// Hybrid mode: layer `l`'s split into its weight-free aggregation and its update.
    fn split(&self, l: usize) -> Result<&dyn HybridLayer<'b, E>>;
}

/// The trainer's model in the pass `fwd`, on tensors.
pub(crate) struct Live<'a> {
    pub model: &'a Gnn,
    pub fwd: &'a Forward,
}

impl<'b> Layers<'b, Eager> for Live<'_> {
    fn layers(&self) -> usize {
        self.model.config.shape.layers
    }

    fn layer(&self, _: &mut Eager, l: usize, block: &Arc<Block>, h: Tensor) -> Result<Tensor> {
        self.model.forward_layer(l, block, h, self.fwd)
    }

    fn finish(&self, _: &mut Eager, l: usize, block: &Arc<Block>, out: Tensor) -> Result<Tensor> {
        self.model.finish_layer(l, block, out, self.fwd)
    }

    fn split(&self, l: usize) -> Result<&dyn HybridLayer<'b, Eager>> {
        self.model
            .hybrid_layer(l)
            .ok_or_else(|| Error::invalid(format!("--hybrid: layer {l} has no hybrid split")))
    }
}

/// A loss over logits, before its backward.
pub(crate) struct Scored<T> {
    /// The mean cross-entropy `[1]`.
    pub ce: T,
    /// The predictions, held on the device (`hold_pred`), else `None`.
    pub pred: Option<T>,
    /// The predictions read at once (empty where held, and on the replay).
    pub pred_host: Vec<u32>,
    /// What the backward starts from: `ce` scaled by the rows' share of the loss's targets.
    pub loss: T,
}

/// The loss of `logits` against the labels `y`: `cross_entropy`, the predictions (held on
/// the device where `hold_pred`, else read at once), the loss scaled by the rows' share of
/// `total` unless that is 1; the logits are freed.
pub(crate) fn score<'b, E: Exec<'b>>(
    e: &mut E,
    logits: E::T,
    y: &E::T,
    total: usize,
    hold_pred: bool,
) -> Result<Scored<E::T>> {
    let n = E::dims(&logits).0;
    let ce = e.cross_entropy(&logits, y)?;
    let pred = e.argmax_rows(&logits)?;
    let (pred, pred_host) = match hold_pred {
        true => (Some(pred), Vec::new()),
        false => (None, e.read_u32(pred)?),
    };
    let loss = match n != total {
        true => e.scale(&ce, n as f64 / total as f64)?,
        false => e.share(&ce),
    };
    e.free(logits);
    Ok(Scored {
        ce,
        pred,
        pred_host,
        loss,
    })
}

/// A micro-batch's readouts after its backward: its cross-entropy, its predictions where
/// held on the device, else as read at once.
pub(crate) type Readouts<T> = (T, Option<T>, Vec<u32>);

/// A micro-batch on the device: its features, labels and loss.
pub(crate) struct Micro<T> {
    pub x: T,
    pub y: T,
    pub scored: Scored<T>,
}

/// A micro-batch's forward ([`crate::train::micro`]): its features `x` (`[num_src of the
/// first block, in]`, gathered on the device by id where `by_id`) and its labels `y` (u32
/// `[n]`) uploaded, the model over `blocks`, then [`score`] against `total` seeds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn micro_forward<'b, E: Exec<'b>>(
    e: &mut E,
    m: &impl Layers<'b, E>,
    blocks: &[E::Block],
    (in_dim, by_id): (usize, bool),
    x: E::Host,
    y: E::Host,
    total: usize,
    hold_pred: bool,
) -> Result<Micro<E::T>> {
    if blocks.len() != m.layers() {
        return Err(Error::invalid(format!(
            "model has {} layers but the sample has {} blocks (one fanout per layer)",
            m.layers(),
            blocks.len()
        )));
    }
    let (ns, n) = (
        E::block_rows(&blocks[0]).0,
        E::block_rows(&blocks[m.layers() - 1]).1,
    );
    let x = e.upload(ns, in_dim, by_id, x)?;
    let y = e.upload(n, 1, false, y)?;
    let mut h = e.share(&x);
    for (l, block) in blocks.iter().enumerate() {
        h = m.layer(e, l, block, h)?;
    }
    let scored = score(e, h, &y, total, hold_pred)?;
    Ok(Micro { x, y, scored })
}

/// A micro-batch's backward after [`micro_forward`]; then its loss, labels and features
/// go. Returns its cross-entropy and held predictions.
pub(crate) fn micro_backward<'b, E: Exec<'b>>(
    e: &mut E,
    mb: Micro<E::T>,
) -> Result<Readouts<E::T>> {
    let Micro { x, y, scored } = mb;
    e.backward_from(&scored.loss, None)?;
    for v in [scored.loss, y, x] {
        e.free(v);
    }
    Ok((scored.ce, scored.pred, scored.pred_host))
}

/// A chunk's input rows: `[rows, cols]` uploaded (by id where `by_id`), a leaf whose
/// gradient goes back to the host where `leaf`.
pub(crate) fn chunk_input<'b, E: Exec<'b>>(
    e: &mut E,
    (rows, cols): (usize, usize),
    by_id: bool,
    leaf: bool,
    host: E::Host,
) -> Result<E::T> {
    let x = e.upload(rows, cols, by_id, host)?;
    Ok(if leaf { e.leaf(x) } else { x })
}

/// A chunk's forward of layer `l` below the output layer, without an autograd graph: the
/// layer (with ReLU and dropout) on the input rows `x`, its output read back. In hybrid
/// mode (`agg`), the aggregation first, read back and handed to `agg`, then the update.
pub(crate) fn forward_chunk<'b, E: Exec<'b>>(
    e: &mut E,
    m: &impl Layers<'b, E>,
    l: usize,
    block: &E::Block,
    x: E::T,
    agg: Option<&mut dyn FnMut(Vec<f32>) -> Result<()>>,
) -> Result<Vec<f32>> {
    e.no_grad(|e| {
        let Some(agg) = agg else {
            let out = m.layer(e, l, block, x)?;
            return e.read_f32(out);
        };
        let split = m.split(l)?;
        let a = split.aggregate(e, block, &x)?;
        let y = split.update(e, block, Some(&x), &a)?;
        e.free(x);
        agg(e.read_f32(a)?)?;
        let out = m.finish(e, l, block, y)?;
        e.read_f32(out)
    })
}

/// The output layer's chunk: the layer on the input rows `x` (a leaf below the input layer)
/// with the labels `y` (u32 `[num_dst]`) uploaded, the loss over `total` targets
/// ([`score`], predictions read at once), its backward. Returns the cross-entropy and the
/// predictions.
pub(crate) fn loss_chunk<'b, E: Exec<'b>>(
    e: &mut E,
    m: &impl Layers<'b, E>,
    l: usize,
    block: &E::Block,
    x: &E::T,
    y: E::Host,
    total: usize,
) -> Result<(f64, Vec<u32>)> {
    let y = e.upload(E::block_rows(block).1, 1, false, y)?;
    let h = e.share(x);
    let logits = m.layer(e, l, block, h)?;
    let s = score(e, logits, &y, total, false)?;
    e.backward_from(&s.loss, None)?;
    e.free(s.loss);
    let ce = e.item(&s.ce)?;
    e.free(s.ce);
    e.free(y);
    Ok((ce, s.pred_host))
}

/// Layer `l`'s chunk recomputed with autograd from its input rows `x`, then its backward
/// from the output rows' gradient, uploaded from the host (`g`).
pub(crate) fn backward_chunk<'b, E: Exec<'b>>(
    e: &mut E,
    m: &impl Layers<'b, E>,
    l: usize,
    block: &E::Block,
    x: &E::T,
    g: E::Host,
) -> Result<()> {
    let h = e.share(x);
    let out = m.layer(e, l, block, h)?;
    backward_from_host(e, out, g)
}

/// `out`'s backward from its gradient uploaded from the host; both go after.
fn backward_from_host<'b, E: Exec<'b>>(e: &mut E, out: E::T, g: E::Host) -> Result<()> {
    let (rows, cols) = E::dims(&out);
    let g = e.upload(rows, cols, false, g)?;
    e.backward_from(&out, Some(&g))?;
    e.free(g);
    e.free(out);
    Ok(())
}

/// Hybrid mode's backward chunk of layer `l`: the update recomputed from the dst rows `x`
/// (where it reads them) and the cached aggregation `a`, the ReLU and dropout after it,
/// then its backward from the output rows' gradient, uploaded from the host (`g`).
pub(crate) fn hybrid_backward_chunk<'b, E: Exec<'b>>(
    e: &mut E,
    m: &impl Layers<'b, E>,
    l: usize,
    block: &E::Block,
    x: Option<&E::T>,
    a: &E::T,
    g: E::Host,
) -> Result<()> {
    let y = m.split(l)?.update(e, block, x, a)?;
    let y = m.finish(e, l, block, y)?;
    backward_from_host(e, y, g)
}

/// Hybrid mode, after [`hybrid_backward_chunk`]: the aggregation's backward from the
/// gradient of `a` (taken from it) into the src rows' gradient, read back to the host
/// (`None` where `a` got no gradient).
pub(crate) fn aggregation_grad<'b, E: Exec<'b>>(
    e: &mut E,
    m: &impl Layers<'b, E>,
    l: usize,
    block: &E::Block,
    a: &E::T,
) -> Result<Option<Vec<f32>>> {
    let Some(a_grad) = e.take_grad(a) else {
        return Ok(None);
    };
    let src = m.split(l)?.aggregate_backward(e, block, &a_grad)?;
    let rows = e.read_f32(src)?;
    e.free(a_grad);
    Ok(Some(rows))
}

/// The gradient of a chunk's input rows `x` read back to the host (`None` where it has
/// none); then `x` goes.
pub(crate) fn input_grad<'b, E: Exec<'b>>(e: &mut E, x: E::T) -> Result<Option<Vec<f32>>> {
    let rows = match e.take_grad(&x) {
        Some(g) => Some(e.read_f32(g)?),
        None => None,
    };
    e.free(x);
    Ok(rows)
}
