//! Full-graph training in chunks (HongTu, SIGMOD'24): `espalier train --full-graph`.
//!
//! One exact full-batch step per epoch over every neighbour (`--fanouts=-1,...`), run
//! layer by layer in chunks of destination nodes ([`ChunkPlan`]) so that the device holds
//! one chunk's block and rows at a time, whatever the graph's size. Every layer's vertex
//! data (outputs `H^l` and their gradients `G^l`) lives in host memory:
//!
//! 1. **Forward**, layers `0 .. L-1` below the output layer: per chunk, upload the rows of
//!    `H^{l-1}` (the features for `l = 0`) its block reads, run the layer with ReLU and
//!    dropout (no autograd graph), read its rows of `H^l` back.
//! 2. **Loss**, the output layer: per chunk, the layer's input rows as an autograd leaf,
//!    forward, cross-entropy over the chunk's training nodes scaled by their share of all
//!    training nodes, backward: the parameter gradients accumulate on the device, the
//!    input rows' gradient is added into `G^{L-2}` on the host.
//! 3. **Backward**, layers `L-2 .. 0`: per chunk, recompute the layer's forward with
//!    autograd from its input rows (**recompute mode**: nothing but `H` is cached), then
//!    backward from the chunk's rows of `G^l`; the input gradient is added into `G^{l-1}`.
//! 4. One optimizer step.
//!
//! Dropout masks are keyed by global node ids (and GAT's attention dropout by global
//! edges), so the recomputation draws the forward's masks, and the chunked epoch computes
//! what unchunked full-neighbour training of the training nodes computes (K = 1,
//! `--fanouts=-1,...`), up to float summation order (`tests/full_graph.rs`).
//!
//! Before chunking, every layer's nodes are grouped part by part of a GREM or METIS
//! partition of the graph ([`NodeOrder`]), so that the nodes of a chunk share neighbours
//! and a chunk reads fewer rows than a range of ids would.
//!
//! With a memory budget, the chunk count is the smallest whose largest chunk, as the
//! memory estimator replays it ([`MemoryEstimator::chunk_activation_bytes`] on top of the
//! resident bytes), fits with the [`SAFETY_MARGIN`]; each chunk's measured peak is
//! reported beside its estimate.
//!
//! With deduplicated transfers (`--dedup-transfers`, on GPUs by default), a chunk takes
//! the input rows it shares with the previous chunk of the same pass from that chunk's
//! rows, kept on the device, and uploads only the rest ([`crate::train::row_reuse`]);
//! the JSON's `layers` give the rows read and uploaded per layer.
//!
//! The chunks of every layer run in HongTu's reorganised order
//! ([`ChunkPlan::reorder_chunks`]): each next chunk is the one sharing the most rows with
//! the chunk before it. It pays where transfers are deduplicated; it is the order without
//! them too, so that `--dedup-transfers` changes no bit of the results (the weight
//! gradients sum over the chunks in their order).
//!
//! In **hybrid mode** (`--hybrid`, [`hybrid`]), a layer below the output layer whose
//! aggregation has no weights (SAGE mean and sum, GCN) also writes its aggregation `A^l` to the
//! host in the forward pass, and its backward recomputes only the update from the chunk's
//! dst rows and `A^l`, then runs the aggregation's transpose for the src rows' gradient.
//!
//! With `--overlap` (by default on a GPU), a worker thread prepares the next chunk of a
//! pass while a chunk computes ([`prefetch`]): it slices the block, plans the deduplicated
//! transfer and gathers the rows from the host buffers (all of them complete before the
//! pass), so the compute waits only for the upload; the results are bit-identical. The
//! upload itself stays on the device's one stream: on CUDA it is already asynchronous
//! (pinned staging chunks, `cuMemcpyHtoDAsync`), and a second copy stream would wait
//! for the compute stream's pool anyway (`src/device/cuda/staging.rs`). Not run on a GPU yet.
//!
//! A chunk that runs out of memory anyway (the device refuses an allocation) is split in
//! two in the plan and run again, as a micro-batch is; the JSON counts `oom_splits`.

use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::autograd::no_grad;
use crate::bytes::format_bytes;
use crate::error::{Error, Result};
use crate::graph::{Block, BlockSizes, ChunkPlan};
use crate::nn::exec::Eager;
use crate::nn::{Forward, Module};
use crate::ops;
use crate::partition::grem::{grem_partition, GremOptions};
use crate::partition::kway::metis_graph_partition;
use crate::partition::{smallest_fitting, Found};
use crate::tensor::Tensor;
use crate::train::config::{FullGraphConfig, NodeOrder, SAFETY_MARGIN};
use crate::train::estimate::{ChunkPass, MemoryEstimator, Resident};
use crate::train::held::with_held_grads;
use crate::train::row_reuse::{assembly_peak_bytes, Dedup, KeptRows, Reuse};
use crate::train::state::State;
use crate::train::stats::Phases;
use crate::train::step::{self, Live};

mod chunk;
mod host;
mod hybrid;
mod pass;
mod prefetch;
mod row_counter;
pub use crate::train::stats::{ChunkStats, FullGraphStats, LayerRows};
use chunk::{by_id, chunk_done, chunk_estimate, chunk_input, input_bytes, ready};
use host::{add_input_grad, f32_bytes, host_rows, HostMatrix};
use hybrid::{check_hybrid, hybrid, hybrid_backward_chunk, HybridOut};
use pass::LayerPass;
use prefetch::{run_pass, upload, Rows, Source, Staged};
use row_counter::RowCounter;

/// Parts of the partition behind [`NodeOrder::Metis`] and [`NodeOrder::Grem`] when the
/// chunk count is not forced higher: independent of the chunk count, so that the budget's
/// search compares counts under one order.
pub const ORDER_PARTS: usize = 64;

/// The result of a full-graph epoch.
pub(crate) struct FullGraphOutcome {
    pub loss_sum: f64,
    pub correct: usize,
    pub seeds: usize,
    pub phases: Phases,
    pub stats: FullGraphStats,
}

/// The largest estimated chunk peak of `plan` (with the resident state `state`), over
/// every layer and the passes it runs in: forward and backward below the output layer
/// ([`ChunkPass::below_output`]: recomputing the layer, or its update where `hybrid`),
/// the loss pass at the output layer. `shared[l][c]` (missing: 0) are the rows chunk `c` of
/// layer `l` takes from chunk `c - 1` on the device ([`ChunkPlan::shared_with_previous`]
/// where transfers are deduplicated): their assembly's peak counts too.
pub fn largest_chunk_estimate(
    estimator: &MemoryEstimator,
    sizes: &[Vec<BlockSizes>],
    total: usize,
    state: Resident,
    shared: &[Vec<usize>],
    hybrid: bool,
) -> Result<u64> {
    let layers = sizes.len();
    let below = ChunkPass::below_output(hybrid);
    sizes
        .par_iter()
        .enumerate()
        .flat_map_iter(|(l, layer)| layer.iter().enumerate().map(move |(c, s)| (l, c, s)))
        .map(|(l, c, s)| {
            let passes: &[ChunkPass] = if l + 1 == layers {
                &[ChunkPass::Loss { total }]
            } else {
                &below
            };
            let reuse = reuse_bytes(estimator, l, c, &sizes[l], shared);
            let resident = estimator.resident_bytes(state);
            passes.iter().try_fold(0u64, |m, &pass| {
                let a = estimator.chunk_activation_bytes(l, s, pass)?;
                Ok(m.max(resident.saturating_add(a.max(reuse))))
            })
        })
        .try_reduce(|| 0, |a, b| Ok(a.max(b)))
}

/// Peak bytes of assembling chunk `c` of layer `l` from the previous chunk's rows
/// ([`assembly_peak_bytes`]); 0 without shared rows.
fn reuse_bytes(
    est: &MemoryEstimator,
    l: usize,
    c: usize,
    sizes: &[BlockSizes],
    shared: &[Vec<usize>],
) -> u64 {
    let n = shared.get(l).and_then(|s| s.get(c)).copied().unwrap_or(0);
    match (n, c.checked_sub(1)) {
        (0, _) | (_, None) => 0,
        (n, Some(p)) => assembly_peak_bytes(
            est,
            sizes[p].num_src,
            n,
            sizes[c].num_src,
            est.model.widths(l).0,
        ),
    }
}

/// A chunk ready to run: its block, its input rows on the device and its estimate (the
/// device tracker's peak reset just before its rows were assembled).
struct ChunkIn {
    block: Arc<Block>,
    x: Tensor,
    est: u64,
    /// Rows taken from the previous chunk's.
    shared: usize,
}

/// The chunk plan of the training nodes: cut as `--chunks` says, or into the fewest
/// chunks whose largest estimated peak fits the memory budget (with the safety margin;
/// [`smallest_fitting`]: doubling, then bisection).
pub(crate) fn full_graph_plan(tr: &State<'_>) -> Result<ChunkPlan> {
    let fg = tr.config.full_graph.clone().unwrap_or_default();
    let layers = tr.config.model.shape.layers;
    if fg.hybrid {
        check_hybrid(tr)?;
    }
    let train = &tr.data.split.train;
    let parts = node_parts(tr, &fg)?;
    let mut plan = ChunkPlan::with_parts(&tr.graph, train, layers, fg.chunks.unwrap_or(1), parts)?;
    // The chunks run in the reorganised order whether or not transfers are deduplicated,
    // so that `--dedup-transfers` moves bytes and changes no value: the weight gradients
    // sum over the chunks in their order. Inside the budget's search only the estimate of
    // a plan that reuses rows depends on the order.
    let reorder = (0..layers).any(|l| reuses_rows(tr, l));
    let (Some(budget), None) = (tr.config.micro.memory_budget, fg.chunks) else {
        plan.reorder_chunks(&tr.graph);
        return Ok(plan);
    };
    let most = plan.nodes.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let largest = |plan: &mut ChunkPlan, c: usize| -> Result<u64> {
        plan.rechunk(&tr.graph, c)?;
        if reorder {
            plan.reorder_chunks(&tr.graph);
        }
        let shared = shared_rows(tr, plan);
        let est = &tr.estimator;
        let sizes = plan.sizes();
        largest_chunk_estimate(
            est,
            sizes,
            train.len(),
            Resident::STEADY,
            &shared,
            fg.hybrid,
        )
    };
    let fits = |est: u64| est as f64 * (1.0 + SAFETY_MARGIN) <= budget as f64;
    let found = smallest_fitting(1, most, |c| {
        let est = largest(&mut plan, c)?;
        Ok((est, fits(est)))
    })?;
    let c = match found {
        Found::Fits { count, .. } => count,
        Found::NoneFits { value: est } => {
            return Err(Error::invalid(format!(
                "memory budget {} is too small for full-graph training: with one node \
                 per chunk the largest chunk still needs {} (with the {:.0}% safety \
                 margin, {})",
                format_bytes(budget),
                format_bytes(est),
                SAFETY_MARGIN * 100.0,
                format_bytes((est as f64 * (1.0 + SAFETY_MARGIN)).ceil() as u64)
            )))
        }
    };
    plan.rechunk(&tr.graph, c)?;
    plan.reorder_chunks(&tr.graph);
    Ok(plan)
}

/// The part labels that order the nodes before chunking ([`NodeOrder`]): at least
/// [`ORDER_PARTS`] parts or `--chunks`, at most one per node; none when the run has one
/// chunk for sure (`--chunks 1`, or no chunk count and no budget).
fn node_parts(tr: &State<'_>, fg: &FullGraphConfig) -> Result<Option<Arc<[u32]>>> {
    let n = tr.graph.num_nodes;
    let k = fg.chunks.unwrap_or(1).max(ORDER_PARTS).min(n);
    let seed = tr.config.seed;
    // One chunk whatever the order (forced, or no budget to search with): the
    // partition would order nodes for nothing.
    let one_chunk = fg.chunks.unwrap_or(1) == 1 && tr.config.micro.memory_budget.is_none();
    let parts = match fg.order {
        NodeOrder::Id => return Ok(None),
        _ if k < 2 || one_chunk => return Ok(None),
        NodeOrder::Metis => metis_graph_partition(&tr.graph, k, seed)?,
        NodeOrder::Grem => grem_partition(
            &tr.graph,
            k,
            &GremOptions {
                seed,
                ..GremOptions::default()
            },
        )?,
    };
    Ok(Some(parts.into()))
}

/// Whether chunks of layer `l` take shared rows from the previous chunk
/// ([`Dedup`]): on a GPU by default, and never for the input layer when its rows are
/// gathered on the device or converted from half precision.
fn reuses_rows(tr: &State<'_>, l: usize) -> bool {
    let dedup = tr.config.full_graph.as_ref().map(|f| f.dedup);
    let gpu = !matches!(tr.config.device, crate::device::Device::Cpu);
    let on = match dedup {
        Some(Dedup::On) => true,
        Some(Dedup::Auto) => gpu,
        _ => false,
    };
    on && (l > 0 || (tr.resident_features.is_none() && !tr.features.is_half()))
}

/// [`ChunkPlan::shared_with_previous`] for the layers that reuse rows (others: none).
fn shared_rows(tr: &State<'_>, plan: &ChunkPlan) -> Vec<Vec<usize>> {
    if !(0..plan.layers()).any(|l| reuses_rows(tr, l)) {
        return Vec::new();
    }
    let mut shared = plan.shared_with_previous(&tr.graph);
    for (l, s) in shared.iter_mut().enumerate() {
        if !reuses_rows(tr, l) {
            s.clear();
        }
    }
    shared
}

/// A pass of layer `l` over its chunks.
fn layer_pass(tr: &State<'_>, l: usize, pass: ChunkPass) -> LayerPass {
    LayerPass {
        l,
        pass,
        reuse: reuses_rows(tr, l),
        kept: None,
    }
}

/// Staged chunk `s` of `lp`'s layer ([`prefetch::stage`]): predicts its peak, resets the
/// tracker's peak and puts its input rows on the device, from the previous chunk's
/// where they are shared. Counts the time and the bytes moved.
fn chunk_in(
    tr: &State<'_>,
    lp: &mut LayerPass,
    plan: &ChunkPlan,
    s: Staged,
    ph: &mut Phases,
    st: &mut FullGraphStats,
) -> Result<ChunkIn> {
    let (l, c) = (lp.l, s.c);
    let block = s.block;
    let ids = &block.src_nodes;
    // Nothing to take: the rows were staged as they are uploaded without reuse.
    let reuse = s.reuse.filter(|r| r.shared() > 0);
    let shared = reuse.as_ref().map_or(0, Reuse::shared);
    if shared == 0 {
        // Nothing to take: the kept rows go before the peak is measured.
        lp.kept = None;
    }
    let prev_rows = lp.kept.as_ref().map_or(0, |(_, k)| k.rows());
    let assembly = assembly_peak_bytes(
        &tr.estimator,
        prev_rows,
        shared,
        ids.len(),
        tr.config.model.widths(l).0,
    );
    let est = chunk_estimate(tr, l, &plan.sizes()[l][c], lp.pass, assembly)?;
    tr.fold_peak();
    tr.config.device.memory()?.reset_peak();
    let t = Instant::now();
    let (rows, width) = (s.rows, s.width);
    let x = match (reuse, lp.kept.take()) {
        (Some(r), Some((_, kept))) => {
            let new = r.new_ids.len();
            st.rows_to_device_bytes += input_bytes(tr, l, new) + f32_bytes(shared + ids.len());
            r.assemble(kept, |new_ids| upload(tr, l, rows, width, new_ids))?
        }
        (Some(_), None) => {
            return Err(Error::invalid(format!(
                "full-graph: chunk {c} of layer {l} was planned against rows not kept"
            )))
        }
        (None, _) => {
            st.rows_to_device_bytes += input_bytes(tr, l, ids.len());
            upload(tr, l, rows, width, ids)?
        }
    };
    if lp.reuse {
        lp.kept = Some((block.clone(), KeptRows::new(ids, &x)));
    }
    ph.gather += t.elapsed().as_secs_f64();
    Ok(ChunkIn {
        block,
        x,
        est,
        shared,
    })
}

/// What preparing layer `l`'s chunks reads in a pass over its source rows: the features
/// for the input layer, else `prev` (`H^{l-1}`).
fn source<'a>(tr: &'a State<'_>, l: usize, prev: Option<&'a HostMatrix>) -> Source<'a> {
    Source {
        graph: &tr.graph,
        l,
        features: tr.host_features(),
        dim: tr.data.feat_dim,
        prev,
        g_out: None,
        agg: None,
        rows: Rows::Src,
    }
}

/// What every step of one full-graph epoch reads.
struct Epoch<'a, 'b> {
    tr: &'a State<'b>,
    /// Dropout on, with this epoch's masks.
    fwd: Forward,
    params: Vec<Tensor>,
    /// Hybrid mode: the aggregations are kept on the host (see [`hybrid`]).
    hybrid: bool,
    /// Nodes of the graph.
    n: usize,
    /// Training nodes: every chunk's loss is scaled by its share of them.
    total: usize,
}

/// What the output layer's step leaves: the summed loss, the correct predictions, and
/// the gradient of its input rows (`None` for a one-layer model).
struct OutputLayer {
    loss_sum: f64,
    correct: usize,
    grad_in: Option<HostMatrix>,
}

/// One full-graph epoch (see the module docs) with one optimizer step; `plan` holds
/// the training nodes' chunks. A chunk that runs out of memory is split in two in the
/// plan (so later passes and epochs run the halves) and run again: its failed attempt
/// left nothing behind (no rows written, no gradient held).
fn full_graph_epoch(
    tr: &State<'_>,
    epoch: usize,
    plan: &mut ChunkPlan,
) -> Result<FullGraphOutcome> {
    let e = Epoch {
        tr,
        fwd: Forward {
            training: true,
            seed: tr.config.seed,
            epoch: epoch as u64,
        },
        params: tr.model.parameters(),
        hybrid: hybrid(tr),
        n: tr.graph.num_nodes,
        total: tr.data.split.train.len(),
    };
    let mut ph = Phases::default();
    let mut st = FullGraphStats::default();
    let (h, aggs) = forward_below_output(&e, plan, &mut ph, &mut st)?;
    let out = output_layer(&e, plan, &h, &mut ph, &mut st)?;
    backward_below_output(&e, plan, h, aggs, out.grad_in, &mut ph, &mut st)?;
    st.chunks = plan.num_chunks();
    Ok(FullGraphOutcome {
        loss_sum: out.loss_sum,
        correct: out.correct,
        seeds: e.total,
        phases: ph,
        stats: st,
    })
}

/// Step 1, forward below the output layer: `H^0 .. H^{L-2}` on the host, and in hybrid
/// mode every layer's aggregation `A^l` (empty otherwise), by layer.
fn forward_below_output(
    e: &Epoch<'_, '_>,
    plan: &mut ChunkPlan,
    ph: &mut Phases,
    st: &mut FullGraphStats,
) -> Result<(Vec<HostMatrix>, Vec<Vec<f32>>)> {
    let (tr, fwd, n, hybrid) = (e.tr, &e.fwd, e.n, e.hybrid);
    let layers = plan.layers();
    let [forward, _] = ChunkPass::below_output(hybrid);
    let mut h: Vec<HostMatrix> = Vec::new();
    let mut aggs: Vec<Vec<f32>> = Vec::new();
    for l in 0..layers - 1 {
        let mut out = HostMatrix::zeros(&plan.nodes[l], tr.config.model.widths(l).1, n)?;
        let in_width = tr.config.model.widths(l).0;
        let mut agg = match hybrid {
            true => host_rows(plan.nodes[l].len(), in_width)?,
            false => Vec::new(),
        };
        let mut count = RowCounter::new(l, n);
        let mut lp = layer_pass(tr, l, forward);
        let src = source(tr, l, h.last());
        run_pass(tr, plan, &mut lp, &src, ph, st, |cx| {
            let (plan, s, lp, ph, st) = cx;
            let c = s.c;
            let range = plan.chunks[l][c].clone();
            let ci = chunk_in(tr, lp, plan, s, ph, st)?;
            let t = Instant::now();
            let live = Live {
                model: &tr.model,
                fwd,
            };
            let mut keep = |a_rows: Vec<f32>| -> Result<()> {
                st.rows_to_host_bytes += f32_bytes(a_rows.len());
                agg[range.start * in_width..range.end * in_width].copy_from_slice(&a_rows);
                Ok(())
            };
            let keep = hybrid.then_some(&mut keep as &mut dyn FnMut(Vec<f32>) -> Result<()>);
            let rows = step::forward_chunk(&mut Eager, &live, l, &ci.block, ci.x, keep)?;
            ph.forward += t.elapsed().as_secs_f64();
            st.rows_to_host_bytes += f32_bytes(rows.len());
            out.data[range.start * out.width..range.end * out.width].copy_from_slice(&rows);
            count.add(&ci.block.src_nodes, ci.shared);
            let src = &ci.block.src_nodes;
            chunk_done(tr, st, l, "forward", c, src, range.len(), ci.est);
            Ok(())
        })?;
        h.push(out);
        aggs.push(agg);
        st.layers.push(count.rows);
    }
    Ok((h, aggs))
}

/// Step 2, the output layer: the loss and its backward, chunk by chunk, on the rows `h`
/// the layers below computed.
fn output_layer(
    e: &Epoch<'_, '_>,
    plan: &mut ChunkPlan,
    h: &[HostMatrix],
    ph: &mut Phases,
    st: &mut FullGraphStats,
) -> Result<OutputLayer> {
    let (tr, fwd, params, n, total) = (e.tr, &e.fwd, &e.params[..], e.n, e.total);
    let layers = plan.layers();
    let last = layers - 1;
    let (mut loss_sum, mut correct) = (0.0f64, 0usize);
    let mut grad_in = match last {
        0 => None,
        _ => Some(HostMatrix::zeros(
            &plan.nodes[last - 1],
            tr.config.model.widths(last).0,
            n,
        )?),
    };
    let mut count = RowCounter::new(last, n);
    let mut lp = layer_pass(tr, last, ChunkPass::Loss { total });
    let src = source(tr, last, h.last());
    run_pass(tr, plan, &mut lp, &src, ph, st, |cx| {
        let (plan, s, lp, ph, st) = cx;
        let c = s.c;
        let range = plan.chunks[last][c].clone();
        let ChunkIn {
            block,
            x,
            est,
            shared,
        } = chunk_in(tr, lp, plan, s, ph, st)?;
        let t = Instant::now();
        let shape = (block.num_src, tr.config.model.widths(last).0);
        let x = step::chunk_input(&mut Eager, shape, by_id(tr, last), last > 0, ready(x))?;
        let seeds = block.dst_nodes();
        let y = tr.gather_labels(seeds)?;
        st.rows_to_device_bytes += f32_bytes(seeds.len());
        ph.gather += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let live = Live {
            model: &tr.model,
            fwd,
        };
        let (ce, pred) = with_held_grads(params, || {
            step::loss_chunk(&mut Eager, &live, last, &block, &x, ready(y), total)
        })?;
        ph.backward += t.elapsed().as_secs_f64();
        loss_sum += ce * seeds.len() as f64;
        correct += pred
            .iter()
            .zip(seeds)
            .filter(|(&p, &s)| p == tr.data.labels[s as usize])
            .count();
        let t = Instant::now();
        let rows = step::input_grad(&mut Eager, x)?;
        if let Some(g) = grad_in.as_mut() {
            st.rows_to_host_bytes += add_input_grad(rows, last, g, &block.src_nodes)?;
            ph.gather += t.elapsed().as_secs_f64();
        }
        count.add(&block.src_nodes, shared);
        let src = &block.src_nodes;
        chunk_done(tr, st, last, "loss", c, src, range.len(), est);
        Ok(())
    })?;
    // The kept rows of the output layer go before the layers below run.
    drop(lp);
    st.layers.push(count.rows);
    Ok(OutputLayer {
        loss_sum,
        correct,
        grad_in,
    })
}

/// Step 3, backward below the output layer, recomputing each chunk's forward: `h` and
/// `aggs` are what step 1 kept, `grad_in` the output layer's input gradient.
fn backward_below_output(
    e: &Epoch<'_, '_>,
    plan: &mut ChunkPlan,
    mut h: Vec<HostMatrix>,
    mut aggs: Vec<Vec<f32>>,
    mut grad_in: Option<HostMatrix>,
    ph: &mut Phases,
    st: &mut FullGraphStats,
) -> Result<()> {
    let (tr, fwd, params, n, hybrid) = (e.tr, &e.fwd, &e.params[..], e.n, e.hybrid);
    let [_, backward] = ChunkPass::below_output(hybrid);
    let last = plan.layers() - 1;
    for l in (0..last).rev() {
        let g_out = grad_in.take().ok_or_else(|| {
            Error::invalid(format!("full-graph: layer {l} has no output gradient"))
        })?;
        // H^l (this layer's output) is not read again.
        h.pop();
        grad_in = match l {
            0 => None,
            _ => Some(HostMatrix::zeros(
                &plan.nodes[l - 1],
                tr.config.model.widths(l).0,
                n,
            )?),
        };
        let agg = aggs.pop().unwrap_or_default();
        let mut lp = layer_pass(tr, l, backward);
        let mut src = source(tr, l, h.last());
        src.g_out = Some(&g_out);
        if hybrid {
            src.agg = Some(&agg);
            src.rows = match tr.model.hybrid_layer(l) {
                Some(split) if split.reads_dst_rows() => Rows::Dst,
                _ => Rows::Nothing,
            };
            run_pass(tr, plan, &mut lp, &src, ph, st, |cx| {
                let (plan, s, _, ph, st) = cx;
                let mut out = HybridOut {
                    grad_in: grad_in.as_mut(),
                    ph,
                    st,
                };
                hybrid_backward_chunk(tr, plan, l, s, fwd, &mut out)
            })?;
            continue;
        }
        run_pass(tr, plan, &mut lp, &src, ph, st, |cx| {
            let (plan, mut s, lp, ph, st) = cx;
            let c = s.c;
            let range = plan.chunks[l][c].clone();
            let w = g_out.width;
            let g_rows = s.g_rows.take().ok_or_else(|| {
                Error::invalid(format!(
                    "full-graph: layer {l}'s chunk {c} has no gradient rows"
                ))
            })?;
            let ChunkIn { block, x, est, .. } = chunk_in(tr, lp, plan, s, ph, st)?;
            let shape = (block.num_src, tr.config.model.widths(l).0);
            let x = step::chunk_input(&mut Eager, shape, by_id(tr, l), l > 0, ready(x))?;
            let t = Instant::now();
            let live = Live {
                model: &tr.model,
                fwd,
            };
            let device = tr.config.device;
            let rows = range.len();
            let g = Box::new(move || Tensor::from_f32(g_rows, &[rows, w], device));
            with_held_grads(params, || {
                step::backward_chunk(&mut Eager, &live, l, &block, &x, g)
            })?;
            st.rows_to_device_bytes += f32_bytes(range.len() * w);
            ph.backward += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let rows = step::input_grad(&mut Eager, x)?;
            if let Some(g) = grad_in.as_mut() {
                st.rows_to_host_bytes += add_input_grad(rows, l, g, &block.src_nodes)?;
                ph.gather += t.elapsed().as_secs_f64();
            }
            let src = &block.src_nodes;
            chunk_done(tr, st, l, "backward", c, src, range.len(), est);
            Ok(())
        })?;
    }
    Ok(())
}

/// The full-graph stage: chunked epochs over the [`State`], and the training nodes' chunk
/// plan, made at the first epoch and kept.
#[derive(Default)]
pub(crate) struct FullGraph {
    plan: Option<ChunkPlan>,
}

impl FullGraph {
    /// Chunks per layer of the kept plan (1 before the first epoch).
    pub(crate) fn chunks(&self) -> usize {
        self.plan.as_ref().map_or(1, ChunkPlan::num_chunks)
    }

    /// [`full_graph_epoch`] with the kept plan (made at the first call, its time counted
    /// as the partition phase): forward, loss and backward over the training nodes,
    /// without the optimizer step; afterwards every parameter holds the gradient of the
    /// mean cross-entropy over all training nodes. Needs
    /// [`TrainConfig::full_graph`](crate::train::TrainConfig::full_graph).
    pub(crate) fn run(&mut self, tr: &mut State<'_>, epoch: usize) -> Result<FullGraphOutcome> {
        if tr.config.full_graph.is_none() {
            return Err(Error::invalid(
                "full-graph gradients need TrainConfig::full_graph (--full-graph)",
            ));
        }
        let t = Instant::now();
        let (plan, made) = match self.plan.take() {
            Some(p) => (p, false),
            None => (full_graph_plan(tr)?, true),
        };
        let partition = if made { t.elapsed().as_secs_f64() } else { 0.0 };
        let mut plan = plan;
        let out = full_graph_epoch(tr, epoch, &mut plan);
        self.plan = Some(plan);
        let mut out = out?;
        out.phases.partition = partition;
        Ok(out)
    }

    /// Predicted classes of `targets` by chunked full-neighbour inference (no dropout),
    /// with `chunks` chunks per layer in the training plan's node order: the targets, in
    /// that order, and their classes. A pass that runs out of device memory is run again
    /// with twice the chunks (the training plan's count fits training, whose chunks also
    /// hold gradients, but inference over other nodes may read more rows per chunk).
    pub(crate) fn predict(
        &self,
        tr: &State<'_>,
        targets: &[u32],
        chunks: usize,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let mut chunks = chunks.max(1);
        loop {
            match self.predict_in(tr, targets, chunks) {
                Err(Error::OutOfMemory { .. }) if chunks < targets.len() => {
                    chunks = (chunks * 2).min(targets.len());
                }
                other => return other,
            }
        }
    }

    fn predict_in(
        &self,
        tr: &State<'_>,
        targets: &[u32],
        chunks: usize,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let layers = tr.config.model.shape.layers;
        let parts = self.plan.as_ref().and_then(|p| p.parts().cloned());
        let plan = ChunkPlan::with_parts(&tr.graph, targets, layers, chunks, parts)?;
        let n = tr.graph.num_nodes;
        let f = Forward::default();
        no_grad(|| {
            let mut prev: Option<HostMatrix> = None;
            let mut pred = Vec::with_capacity(targets.len());
            for l in 0..layers {
                let last = l + 1 == layers;
                let mut out = match last {
                    true => None,
                    false => Some(HostMatrix::zeros(
                        &plan.nodes[l],
                        tr.config.model.widths(l).1,
                        n,
                    )?),
                };
                for (c, range) in plan.chunks[l].iter().enumerate() {
                    let block = Arc::new(plan.block(&tr.graph, l, c)?);
                    let x = chunk_input(tr, l, prev.as_ref(), &block.src_nodes)?;
                    let y = tr.model.forward_layer(l, &block, x, &f)?;
                    match out.as_mut() {
                        Some(o) => {
                            let rows = y.to_vec_f32()?;
                            o.data[range.start * o.width..range.end * o.width]
                                .copy_from_slice(&rows);
                        }
                        None => pred.extend(ops::argmax_rows(&y)?.to_vec_u32()?),
                    }
                }
                prev = out;
            }
            Ok((plan.nodes[layers - 1].clone(), pred))
        })
    }
}
