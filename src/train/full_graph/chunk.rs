//! What every full-graph pass does around a chunk: its input rows, the bytes they take to
//! the device, its estimate, and its figures once it ran (shared by the recompute and
//! hybrid passes).

use crate::error::{Error, Result};
use crate::graph::BlockSizes;
use crate::nn::Module;
use crate::tensor::Tensor;
use crate::train::estimate::{ChunkPass, Resident};
use crate::train::state::State;

use super::host::{f32_bytes, HostMatrix};
use crate::train::stats::{ChunkStats, FullGraphStats};

/// The rows layer `l` reads for `ids` (its block's src nodes) on the training device:
/// the features for the input layer, else the previous layer's host rows.
pub(super) fn chunk_input(
    tr: &State<'_>,
    l: usize,
    prev: Option<&HostMatrix>,
    ids: &[u32],
) -> Result<Tensor> {
    match (l, prev) {
        (0, _) => tr.gather_features(ids),
        (_, Some(h)) => Tensor::from_f32(h.gather(ids)?, &[ids.len(), h.width], tr.config.device),
        (_, None) => Err(Error::invalid(format!(
            "full-graph: layer {l} has no input rows"
        ))),
    }
}

/// Bytes a chunk of layer `l` uploads for `rows` input rows.
pub(super) fn input_bytes(tr: &State<'_>, l: usize, rows: usize) -> u64 {
    let width = tr.config.model.widths(l).0;
    match (l, &tr.resident_features) {
        (0, Some(_)) => f32_bytes(rows),
        (0, None) => (rows as u64)
            .saturating_mul(width as u64)
            .saturating_mul(if tr.features.is_half() { 2 } else { 4 }),
        _ => f32_bytes(rows.saturating_mul(width)),
    }
}

/// Records a finished chunk's figures.
#[allow(clippy::too_many_arguments)]
pub(super) fn chunk_done(
    tr: &State<'_>,
    st: &mut FullGraphStats,
    layer: usize,
    pass: &str,
    chunk: usize,
    src: &[u32],
    num_dst: usize,
    est: u64,
) {
    let peak = tr
        .config
        .device
        .memory()
        .map(|m| m.peak())
        .unwrap_or_default();
    st.est_peak_bytes = st.est_peak_bytes.max(est);
    st.peak_bytes = st.peak_bytes.max(peak);
    st.chunk_runs.push(ChunkStats {
        layer,
        pass: pass.to_string(),
        chunk,
        num_dst,
        num_src: src.len(),
        est_peak_bytes: est,
        peak_bytes: peak,
    });
}

/// A chunk's predicted peak with what is resident now: the parameters, the optimizer
/// state once it exists, and the gradients held so far (only the layers whose
/// backward has run have any).
pub(super) fn chunk_estimate(
    tr: &State<'_>,
    l: usize,
    sizes: &BlockSizes,
    pass: ChunkPass,
    assembly: u64,
) -> Result<u64> {
    let est = &tr.estimator;
    let state = Resident {
        grads: false,
        optimizer_state: !tr.optim.state_dict().0.is_empty(),
    };
    let held: u64 = tr
        .model
        .parameters()
        .iter()
        .filter(|p| p.grad().is_some())
        .map(|p| est.rounded(p.bytes() as u64))
        .sum();
    Ok(est
        .resident_bytes(state)
        .saturating_add(held)
        .saturating_add(est.chunk_activation_bytes(l, sizes, pass)?.max(assembly)))
}

/// A value already on the device, as a step's upload of it
/// ([`crate::nn::exec::Exec::upload`]).
pub(super) fn ready<'b>(x: Tensor) -> Box<dyn FnOnce() -> Result<Tensor> + 'b> {
    Box::new(move || Ok(x))
}

/// Whether layer `l`'s input rows are gathered on the device by their ids (the input
/// layer's, from features resident there).
pub(super) fn by_id(tr: &State<'_>, l: usize) -> bool {
    l == 0 && tr.resident_features.is_some()
}
