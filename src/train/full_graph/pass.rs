//! A layer pass's state across its chunks (the rows kept on the device for the next
//! chunk) and what a chunk that runs out of memory does to it: shared by the epoch's
//! passes (`full_graph.rs`) and the chunk preparation that runs ahead of them
//! (`prefetch.rs`), which would otherwise import each other.

use std::sync::Arc;

use crate::bytes::format_bytes;
use crate::error::{Error, Result};
use crate::graph::{Block, ChunkPlan};
use crate::train::estimate::ChunkPass;
use crate::train::row_reuse::KeptRows;
use crate::train::state::State;
use crate::train::stats::FullGraphStats;

/// One layer pass's chunk inputs: the previous chunk's rows kept on the device (with
/// its block) when transfers are deduplicated at this layer.
pub(super) struct LayerPass {
    pub(super) l: usize,
    pub(super) pass: ChunkPass,
    pub(super) reuse: bool,
    pub(super) kept: Option<(Arc<Block>, KeptRows)>,
}

/// After chunk `c` of layer `l` ran: 1 (go on to the next chunk) when it succeeded; 0
/// (run chunk `c` again) when it ran out of memory and was split in two in `plan`;
/// otherwise the error (a single-node chunk that runs out of memory: the budget is too
/// small).
pub(super) fn split_on_oom(
    tr: &State<'_>,
    run: Result<()>,
    plan: &mut ChunkPlan,
    l: usize,
    c: usize,
    lp: &mut LayerPass,
    st: &mut FullGraphStats,
) -> Result<usize> {
    match run {
        Ok(()) => Ok(1),
        Err(Error::OutOfMemory {
            requested,
            live,
            budget,
            ..
        }) if plan.chunks[l][c].len() < 2 => Err(Error::invalid(format!(
            "{} is too small for full-graph training: a chunk of the single \
             node {} (layer {l}) ran out of memory ({} live, {} requested)",
            tr.memory_limit(budget),
            plan.dst(l, c)[0],
            format_bytes(live),
            format_bytes(requested)
        ))),
        Err(Error::OutOfMemory { .. }) => {
            plan.split_chunk(&tr.graph, l, c)?;
            st.oom_splits += 1;
            // Whatever the failed attempt kept is not the previous chunk's any more.
            lp.kept = None;
            Ok(0)
        }
        Err(e) => Err(e),
    }
}
