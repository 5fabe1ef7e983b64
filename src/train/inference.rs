//! Inference over the trained model, a stage over the trainer's [`State`]: sampled
//! evaluation with the training fanouts (accuracy), and full-neighbour inference (logits,
//! hidden-layer embeddings) in batches of `eval_batch_size` seeds, halved while one runs
//! out of memory.

use std::sync::Arc;

use crate::autograd::no_grad;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{sample_blocks, Block};
use crate::nn::{Forward, Gnn, Module};
use crate::ops;
use crate::rng::mix64;
use crate::tensor::Tensor;
use crate::train::state::State;

/// The sampling key of every evaluation batch. The sampler draws each (layer, node)'s
/// neighbours from a stream of its own ([`crate::graph::sample`]), so with one key for all
/// batches a node's sampled neighbourhood, and so its prediction, does not depend on which
/// batch it falls in: the accuracy is the same whatever `eval_batch_size` is and however a
/// memory budget halves the batches (were the key the batch's index, the best epoch and
/// `--patience` would change with `--memory-budget`).
const EVAL_KEY: u64 = u64::MAX;

/// Correct predictions among `labelled` (labelled nodes) from sampled forward passes with
/// the training fanouts, in batches of `eval_batch_size` seeds (halved while one runs
/// out of memory under a budget); the same count for any batch size.
pub(crate) fn correct_sampled(tr: &State<'_>, labelled: &[u32]) -> Result<usize> {
    let counts = in_batches(labelled, tr.config.eval_batch_size, |seeds, _| {
        eval_batch(tr, seeds, EVAL_KEY)
    })?;
    Ok(counts.into_iter().sum())
}

/// `run(seeds, i)` over consecutive batches of `nodes` (the `i`-th batch's), without an
/// autograd graph, each at most `size` nodes; a batch that runs out of memory is halved
/// and run again (down to one node). The batches' results, in order.
fn in_batches<T>(
    nodes: &[u32],
    size: usize,
    mut run: impl FnMut(&[u32], u64) -> Result<T>,
) -> Result<Vec<T>> {
    let mut size = size.max(1);
    let (mut at, mut i, mut out) = (0usize, 0u64, Vec::new());
    no_grad(|| -> Result<()> {
        while at < nodes.len() {
            let seeds = &nodes[at..(at + size).min(nodes.len())];
            match run(seeds, i) {
                Ok(r) => {
                    out.push(r);
                    at += seeds.len();
                    i += 1;
                }
                Err(Error::OutOfMemory { .. }) if size > 1 => size = size.div_ceil(2),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// Correct predictions among `seeds` (forward only).
fn eval_batch(tr: &State<'_>, seeds: &[u32], key: u64) -> Result<usize> {
    let blocks = tr.sample(seeds, key)?;
    let x = tr.gather_features(&blocks[0].src_nodes)?;
    let logits = tr.model.forward(&blocks, &x, &Forward::default())?;
    let pred = ops::argmax_rows(&logits)?.to_vec_u32()?;
    Ok(pred
        .iter()
        .zip(seeds)
        .filter(|(&p, &s)| p == tr.data.labels[s as usize])
        .count())
}

/// Logits of `nodes` (`[nodes.len(), classes]`, on the CPU) from full-neighbour
/// inference: every layer aggregates all neighbours (fanout -1), no dropout, in
/// batches of `eval_batch_size` seeds (halved while one runs out of memory).
pub(crate) fn predict(tr: &State<'_>, nodes: &[u32]) -> Result<Tensor> {
    infer(tr, &tr.model, nodes, false)
}

/// Node embeddings: the last hidden layer's output (after its ReLU) for `nodes`
/// (`[nodes.len(), hidden]`, on the CPU), from full-neighbour inference as in
/// [`predict`]. Needs a model of at least two layers; GAT is not supported
/// (its truncated stack would change the last layer's heads).
pub(crate) fn embeddings(tr: &State<'_>, nodes: &[u32]) -> Result<Tensor> {
    let cfg = &tr.config.model;
    if cfg.shape.layers < 2 {
        return Err(Error::invalid(
            "a one-layer model has no hidden layer to take embeddings from",
        ));
    }
    if cfg.settings().output_layer_differs() {
        return Err(Error::invalid(format!(
            "embeddings of {} models are not supported: its output layer is not one of its \
             hidden layers (use predict for logits)",
            cfg.kind().name().to_uppercase()
        )));
    }
    // The first layers - 1 layers of the model, sharing its weights' values.
    let mut head = cfg.clone();
    head.shape.layers -= 1;
    head.shape.out_dim = cfg.widths(cfg.shape.layers - 2).1;
    let degrees = tr.graph.in_degrees();
    let trunk = Gnn::new(head, Some(&degrees), 0, tr.config.device)?;
    let full: std::collections::HashMap<String, Tensor> =
        tr.model.named_parameters("m").into_iter().collect();
    for (name, p) in trunk.named_parameters("m") {
        let src = full
            .get(&name)
            .filter(|t| t.shape() == p.shape())
            .ok_or_else(|| {
                Error::invalid(format!("embeddings: parameter `{name}` has no counterpart"))
            })?;
        ops::assign(&p, src)?;
    }
    infer(tr, &trunk, nodes, true)
}

fn infer(tr: &State<'_>, model: &Gnn, nodes: &[u32], relu: bool) -> Result<Tensor> {
    let n = tr.data.num_nodes();
    if let Some(&v) = nodes.iter().find(|&&v| v as usize >= n) {
        return Err(Error::invalid(format!(
            "node {v} is out of range: the graph has {n} nodes"
        )));
    }
    let fanouts = vec![-1i64; model.config.shape.layers];
    let width = model.config.widths(model.config.shape.layers - 1).1;
    let mut out: Vec<f32> = Vec::with_capacity(nodes.len() * width);
    in_batches(nodes, tr.config.eval_batch_size, |seeds, i| {
        let blocks: Vec<Arc<Block>> = sample_blocks(
            &tr.graph,
            seeds,
            &fanouts,
            mix64(tr.config.seed ^ (u64::MAX - i)),
        )?
        .into_iter()
        .map(Arc::new)
        .collect();
        let x = tr.gather_features(&blocks[0].src_nodes)?;
        let mut h = model.forward(&blocks, &x, &Forward::default())?;
        if relu {
            h = ops::relu(&h)?;
        }
        out.extend_from_slice(&h.to_vec_f32()?);
        Ok(())
    })?;
    Tensor::from_f32(out, &[nodes.len(), width], Device::Cpu)
}
