//! Overlapping a chunk's preparation with the previous chunk's compute (`--overlap`; by
//! default on a GPU, off on the CPU): while chunk `c` of a layer pass runs on the main thread, a worker thread
//! prepares chunk `c + 1` on the host ([`stage`]): it slices the chunk's block, plans its
//! deduplicated transfer against chunk `c`'s source nodes, and gathers the rows it reads
//! from the host buffers into staging vectors. The main thread then only uploads them.
//!
//! Everything a preparation reads was finished before its pass began ([`Source`]): the
//! features or `H^{l-1}` (complete before layer `l` runs), and in the backward passes
//! `G^l` (complete before layer `l`'s backward runs) and hybrid mode's `A^l`. What a chunk
//! writes (`H^l`, `G^{l-1}`) no preparation of the same pass reads, so the prepared rows
//! are those the serial order would gather, and the results are bit-identical either way.
//!
//! A prepared chunk is used only if it was planned against the rows the device keeps now
//! ([`LayerPass::kept`]); a chunk that runs out of memory changes the plan, so the chunk
//! prepared after it is dropped and prepared again.

use std::sync::Arc;
use std::time::Instant;

use super::host::HostMatrix;
use super::pass::{split_on_oom, LayerPass};
use crate::error::{Error, Result};
use crate::graph::{Block, ChunkPlan, Csr};
use crate::tensor::Tensor;
use crate::train::features::{FeatureStore, HostRows};
use crate::train::row_reuse::Reuse;
use crate::train::state::State;
use crate::train::stats::Phases;

use crate::train::stats::FullGraphStats;

/// Which input rows a chunk uploads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rows {
    /// One per source node of its block (every pass but hybrid mode's backward).
    Src,
    /// One per destination node (hybrid mode's backward, where the update reads them).
    Dst,
    /// None (hybrid mode's backward of GCN).
    Nothing,
}

/// What preparing the chunks of one layer pass reads: all of it complete before the pass.
#[derive(Clone, Copy)]
pub(super) struct Source<'a> {
    pub graph: &'a Csr,
    /// The layer.
    pub l: usize,
    /// The features on the host (for `l = 0`); `None` where they live on the device and
    /// are gathered there at upload.
    pub features: Option<&'a FeatureStore<'a>>,
    /// Features per node.
    pub dim: usize,
    /// `H^{l-1}` (for `l > 0`).
    pub prev: Option<&'a HostMatrix>,
    /// `G^l`, whose chunk rows a backward pass uploads.
    pub g_out: Option<&'a HostMatrix>,
    /// Hybrid mode's `A^l` (rows of `width` floats in the plan's order), for its backward.
    pub agg: Option<&'a [f32]>,
    pub rows: Rows,
}

/// A chunk prepared on the host, ready to upload.
pub(super) struct Staged {
    pub c: usize,
    pub block: Arc<Block>,
    /// The previous chunk whose kept rows `reuse` was planned against.
    pub against: Option<Arc<Block>>,
    pub reuse: Option<Reuse>,
    /// The input rows to upload (the new ones where `reuse`), row-major; `None` where the
    /// features are gathered on the device.
    pub rows: Option<HostRows>,
    /// Floats per input row.
    pub width: usize,
    /// The chunk's rows of `G^l` (backward passes).
    pub g_rows: Option<Vec<f32>>,
    /// The chunk's rows of `A^l` (hybrid mode's backward).
    pub agg_rows: Option<Vec<f32>>,
    pub slice_s: f64,
    pub gather_s: f64,
}

/// What [`run_pass`] gives the body that runs a staged chunk: the plan, the chunk, its
/// pass and the epoch's figures.
pub(super) type ChunkCx<'c> = (
    &'c ChunkPlan,
    Staged,
    &'c mut LayerPass,
    &'c mut Phases,
    &'c mut FullGraphStats,
);

/// Prepares chunk `c` of `src`'s layer: its block, its transfer planned against the
/// source nodes of `against` (the previous chunk, whose rows the device keeps), and the
/// host rows it uploads; `pos` is [`Reuse::plan`]'s scratch.
pub(super) fn stage(
    src: &Source<'_>,
    plan: &ChunkPlan,
    c: usize,
    against: Option<Arc<Block>>,
    pos: &mut [u32],
) -> Result<Staged> {
    let l = src.l;
    let t = Instant::now();
    let block = Arc::new(plan.block(src.graph, l, c)?);
    let reuse = match (&against, src.rows) {
        (Some(p), Rows::Src) => Some(Reuse::plan(&p.src_nodes, &block.src_nodes, pos)?),
        _ => None,
    };
    let slice_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let ids: &[u32] = match (src.rows, &reuse) {
        (Rows::Src, Some(r)) => &r.new_ids,
        (Rows::Src, None) => &block.src_nodes,
        (Rows::Dst, _) => block.dst_nodes(),
        (Rows::Nothing, _) => &[],
    };
    let (rows, width) = match (l, src.prev) {
        _ if src.rows == Rows::Nothing => (None, 0),
        (0, _) => (
            src.features.map(|f| f.gather(src.dim, ids)).transpose()?,
            src.dim,
        ),
        (_, Some(h)) => (Some(HostRows::F32(h.gather(ids)?)), h.width),
        (_, None) => {
            return Err(Error::invalid(format!(
                "full-graph: layer {l} has no input rows"
            )))
        }
    };
    let range = plan.chunks[l][c].clone();
    let g_rows = src
        .g_out
        .map(|g| {
            g.data
                .get(range.start * g.width..range.end * g.width)
                .map(<[f32]>::to_vec)
                .ok_or_else(|| {
                    Error::invalid(format!("full-graph: layer {l} has no gradient rows"))
                })
        })
        .transpose()?;
    let agg_rows = match src.agg {
        Some(a) => Some(
            a.get(range.start * src_width(src)..range.end * src_width(src))
                .ok_or_else(|| Error::invalid(format!("--hybrid: layer {l} has no cached rows")))?
                .to_vec(),
        ),
        None => None,
    };
    Ok(Staged {
        c,
        block,
        against,
        reuse,
        rows,
        width,
        g_rows,
        agg_rows,
        slice_s,
        gather_s: t.elapsed().as_secs_f64(),
    })
}

/// Floats per row of the layer's input (and of hybrid mode's `A^l`).
fn src_width(src: &Source<'_>) -> usize {
    match (src.l, src.prev) {
        (0, _) | (_, None) => src.dim,
        (_, Some(h)) => h.width,
    }
}

/// Puts a staged chunk's input rows of `ids` on the training device: uploads them, or
/// gathers them there from the resident features.
pub(super) fn upload(
    tr: &State<'_>,
    l: usize,
    rows: Option<HostRows>,
    width: usize,
    ids: &[u32],
) -> Result<Tensor> {
    match (rows, l) {
        (Some(r), _) => r.upload(ids.len(), width, tr.config.device),
        (None, 0) => tr.gather_features(ids),
        (None, _) => Err(Error::invalid(format!(
            "full-graph: layer {l} has no input rows"
        ))),
    }
}

/// Whether chunks are prepared ahead (`--overlap`; by default on a GPU, where the host's
/// cores wait for the device, and not on the CPU, where the compute keeps them busy).
fn overlaps(tr: &State<'_>) -> bool {
    let gpu = !matches!(tr.config.device, crate::device::Device::Cpu);
    tr.config
        .full_graph
        .as_ref()
        .and_then(|f| f.overlap)
        .unwrap_or(gpu)
}

/// Whether `s` was planned against the rows the device keeps now.
fn fresh(s: &Staged, lp: &LayerPass) -> bool {
    match (&s.against, &lp.kept) {
        (None, None) => true,
        (Some(a), Some((b, _))) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// Runs the chunks of `lp`'s layer pass in order, `body` running each staged chunk on
/// this thread while a worker prepares the next one (`--overlap`; otherwise each chunk is
/// prepared just before it runs). A chunk that runs out of memory is split in the plan
/// and run again ([`split_on_oom`]). The time `body`'s end waited for the next chunk's
/// preparation adds to `prep_wait_s`.
pub(super) fn run_pass<F>(
    tr: &State<'_>,
    plan: &mut ChunkPlan,
    lp: &mut LayerPass,
    src: &Source<'_>,
    ph: &mut Phases,
    st: &mut FullGraphStats,
    mut body: F,
) -> Result<()>
where
    F: FnMut(ChunkCx<'_>) -> Result<()>,
{
    let l = src.l;
    let overlap = overlaps(tr);
    let planned = lp.reuse && src.rows == Rows::Src;
    let mut pos = match planned {
        true => vec![u32::MAX; src.graph.num_nodes],
        false => Vec::new(),
    };
    let mut next: Option<Result<Staged>> = None;
    let mut c = 0;
    while c < plan.chunks[l].len() {
        let staged = match next.take().transpose()? {
            Some(s) if fresh(&s, lp) => s,
            _ => {
                let against = lp.kept.as_ref().map(|(b, _)| b.clone());
                stage(src, plan, c, against, &mut pos)?
            }
        };
        ph.slice += staged.slice_s;
        ph.gather += staged.gather_s;
        let ahead = overlap && c + 1 < plan.chunks[l].len();
        let against = planned.then(|| staged.block.clone());
        let plan_now: &ChunkPlan = plan;
        let pos_now = &mut pos;
        let (run, ready) = std::thread::scope(|s| {
            let worker =
                ahead.then(|| s.spawn(move || stage(src, plan_now, c + 1, against, pos_now)));
            let run = body((plan_now, staged, lp, ph, st));
            let ready = worker.map(|w| {
                let t = Instant::now();
                let ready = w.join().unwrap_or_else(|_| {
                    Err(Error::invalid(
                        "full-graph: the thread preparing the next chunk panicked",
                    ))
                });
                st.prep_wait_s += t.elapsed().as_secs_f64();
                ready
            });
            (run, ready)
        });
        let step = split_on_oom(tr, run, plan, l, c, lp, st)?;
        if step == 1 {
            next = ready;
        }
        c += step;
    }
    Ok(())
}
