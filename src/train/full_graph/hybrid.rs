//! HongTu's hybrid mode (`--hybrid`): a layer whose aggregation has no weights
//! ([`crate::nn::HybridLayer`]: SAGE mean and sum, GCN) caches its aggregation `A^l` on the host
//! in the forward pass, so that its backward recomputes only the update, from the chunk's
//! dst rows of `H^{l-1}` (SAGE's self term; GCN reads none) and of `A^l`, instead of the
//! whole layer from every src row: the chunk uploads `2 · num_dst` rows (GCN: `num_dst`)
//! instead of `num_src`, and skips the aggregation's forward. The aggregation's backward (its transpose over the block) still gives every
//! src row its gradient, which goes back to the host as in recompute mode.

use std::time::Instant;

use super::chunk::{by_id, chunk_done, chunk_estimate, input_bytes, ready};
use super::host::{add_input_grad, f32_bytes, HostMatrix};
use super::prefetch::{upload, Staged};
use crate::error::{Error, Result};
use crate::graph::ChunkPlan;
use crate::nn::exec::{Eager, Exec};
use crate::nn::{Forward, Module};
use crate::tensor::Tensor;
use crate::train::estimate::ChunkPass;
use crate::train::held::with_held_grads;
use crate::train::state::State;
use crate::train::stats::FullGraphStats;
use crate::train::stats::Phases;
use crate::train::step::{self, Live};

/// What a hybrid backward chunk writes.
pub(super) struct HybridOut<'a> {
    /// `G^{l-1}` (`None` for the input layer).
    pub grad_in: Option<&'a mut HostMatrix>,
    pub ph: &'a mut Phases,
    pub st: &'a mut FullGraphStats,
}

/// Whether this run is full-graph training in hybrid mode.
pub(super) fn hybrid(tr: &State<'_>) -> bool {
    tr.config.full_graph.as_ref().is_some_and(|f| f.hybrid)
}

/// Errors unless every layer below the output layer has a hybrid split.
pub(super) fn check_hybrid(tr: &State<'_>) -> Result<()> {
    let below = tr.config.model.shape.layers.saturating_sub(1);
    match (0..below).find(|&l| tr.model.hybrid_layer(l).is_none()) {
        None => Ok(()),
        Some(l) => Err(Error::invalid(format!(
            "--hybrid caches aggregations without weights ({}); layer {l} of {} \
             aggregates with weights: train it without --hybrid (recompute mode)",
            crate::nn::hybrid_models(),
            tr.config.model.label()
        ))),
    }
}

/// Staged chunk `s` of layer `l` in hybrid mode's backward pass ([`super::prefetch::Rows::Dst`] where the
/// update reads its dst rows): uploads its dst rows of `H^{l-1}` (where the update reads
/// them), of `A^l` and of `G^l`, recomputes the update (and the ReLU and dropout after it)
/// with autograd, runs its backward from the chunk's rows of `G^l`, and adds the
/// gradients of the aggregation's src rows and of the dst rows into `G^{l-1}`.
pub(super) fn hybrid_backward_chunk(
    tr: &State<'_>,
    plan: &ChunkPlan,
    l: usize,
    s: Staged,
    fwd: &Forward,
    out: &mut HybridOut<'_>,
) -> Result<()> {
    let c = s.c;
    let block = s.block;
    let nd = block.num_dst;
    let width = tr.config.model.widths(l).0;
    let est = chunk_estimate(tr, l, &plan.sizes()[l][c], ChunkPass::HybridBackward, 0)?;
    tr.fold_peak();
    tr.config.device.memory()?.reset_peak();
    let split = tr
        .model
        .hybrid_layer(l)
        .ok_or_else(|| Error::invalid(format!("--hybrid: layer {l} has no hybrid split")))?;
    let t = Instant::now();
    let dst = block.dst_nodes();
    let device = tr.config.device;
    let x = match split.reads_dst_rows() {
        true => {
            let x = upload(tr, l, s.rows, s.width, dst)?;
            out.st.rows_to_device_bytes += input_bytes(tr, l, nd);
            let x = step::chunk_input(&mut Eager, (nd, width), by_id(tr, l), l > 0, ready(x))?;
            Some(x)
        }
        false => None,
    };
    let missing = |what: &str| Error::invalid(format!("--hybrid: layer {l} has no {what} rows"));
    let a = s.agg_rows.ok_or_else(|| missing("cached"))?;
    let g_rows = s.g_rows.ok_or_else(|| missing("gradient"))?;
    let a = Box::new(move || Tensor::from_f32(a, &[nd, width], device));
    let a = step::chunk_input(&mut Eager, (nd, width), false, l > 0, a)?;
    out.st.rows_to_device_bytes += f32_bytes(nd * width);
    out.ph.gather += t.elapsed().as_secs_f64();
    let t = Instant::now();
    let params = tr.model.parameters();
    let w = tr.config.model.widths(l).1;
    let (ph, st) = (&mut *out.ph, &mut *out.st);
    let grad_in = out.grad_in.as_deref_mut();
    let live = Live {
        model: &tr.model,
        fwd,
    };
    let g = Box::new(move || Tensor::from_f32(g_rows, &[nd, w], device));
    // The aggregation's backward runs before the held parameter gradients are merged
    // back, as the estimate assumes (both copies of them are live at its peak).
    with_held_grads(&params, || -> Result<()> {
        let e = &mut Eager;
        step::hybrid_backward_chunk(e, &live, l, &block, x.as_ref(), &a, g)?;
        st.rows_to_device_bytes += f32_bytes(nd * w);
        ph.backward += t.elapsed().as_secs_f64();
        let Some(grad_in) = grad_in else {
            return Ok(());
        };
        let t = Instant::now();
        let src = step::aggregation_grad(e, &live, l, &block, &a)?.ok_or_else(|| {
            Error::invalid(format!("--hybrid: layer {l}'s aggregation got no gradient"))
        })?;
        grad_in.scatter_add(&block.src_nodes, &src)?;
        st.rows_to_host_bytes += f32_bytes(src.len());
        drop(src);
        if let Some(x) = &x {
            let x = e.share(x);
            let rows = step::input_grad(e, x)?;
            st.rows_to_host_bytes += add_input_grad(rows, l, grad_in, dst)?;
        }
        ph.gather += t.elapsed().as_secs_f64();
        Ok(())
    })?;
    drop(a);
    drop(x);
    let src = &block.src_nodes;
    chunk_done(tr, out.st, l, "backward", c, src, nd, est);
    Ok(())
}
