//! Micro-batch training of one batch with exact gradient accumulation: a stage of the
//! trainer, functions over the [`State`] it owns (`run_batch`).
//!
//! The batch comes from a [`MicroSource`] ([`crate::train::source`]), which the run
//! takes as `&mut dyn` without knowing which one it has: the local one samples the batch
//! once and a [`Partitioner`](crate::partition::Partitioner) splits its seeds into K
//! micro-batches (with a memory budget, the smallest K whose largest estimated micro-batch
//! fits: the planner, `source/local.rs`), each sliced from the full batch's blocks, so its
//! logits equal the full batch's rows for its seeds; a trainer fed by sampler ranks
//! receives them prepared ([`crate::train::feed`]). Per micro-batch: upload its features
//! and labels, forward, cross-entropy scaled by `|seeds_k| / |seeds|`, backward. Only
//! parameter gradients survive a micro-batch; after all K, one optimizer step, so the step
//! sees the full batch's gradient (up to float summation order).
//!
//! On a GPU nothing in the micro-batch loop waits for the device: each micro-batch's loss
//! and predictions stay on the device and the batch reads them all at its end (two reads,
//! after the last backward: `settle`), so the host enqueues micro-batch k + 1 while the
//! device still runs k. With `TrainConfig::profile` the host also waits after forward,
//! backward and the optimizer step, so that each phase is charged its own device time. On
//! the CPU ops finish before they return and the values are read at once.
//!
//! Micro-batches prepared here (slicing and the host feature gather) are prepared on a
//! helper thread while the ones before compute: one ahead on the CPU, up to four at once
//! in parallel on a GPU ([`prep_ahead`], [`crate::train::source::MicroBatches::for_each`]).
//!
//! Gradients of earlier micro-batches are taken out of the parameters before a micro-batch
//! runs and added back after its backward succeeds. A micro-batch that runs out of memory
//! (`Error::OutOfMemory`) therefore leaves no partial gradient behind: it is split in two
//! halves, which run in its place (not one received prepared: nothing here can slice it).
//! With K = 1 and no budget the steps are exactly those of plain full-batch training (the
//! same blocks, the same ops in the same order, the loss unscaled), so the losses agree
//! bit for bit.

use std::time::Instant;

use crate::bytes::format_bytes;
use crate::error::{Error, Result};
use crate::graph::{BlockSizes, Prepared, Slicer};
use crate::nn::exec::Eager;
use crate::nn::{Forward, Module};
use crate::ops;
use crate::partition::{MicroBatchStats, PartitionStats};
use crate::tensor::Tensor;
use crate::train::held::with_held_grads;
pub use crate::train::source::Pass;
use crate::train::source::{MicroSource, Preparer, SourcedBatch};
use crate::train::state::State;
use crate::train::stats::Phases;
use crate::train::step::{self, Live};
use crate::work::Work;

/// The result of one batch.
pub(crate) struct BatchOutcome {
    /// Σ over micro-batches of mean cross-entropy × seeds.
    pub loss_sum: f64,
    pub correct: usize,
    pub seeds: usize,
    pub phases: Phases,
    pub stats: PartitionStats,
    /// The batch's loss was not finite (NaN or infinite): its gradients were dropped and
    /// no optimizer step was taken; the caller decides whether to stop or go on.
    pub non_finite: bool,
}

/// One micro-batch's forward and backward, as run.
struct Computed {
    readout: Readout,
    forward_s: f64,
    backward_s: f64,
    forward_work: Work,
    backward_work: Work,
}

/// A micro-batch's mean cross-entropy and predicted classes.
enum Readout {
    /// Read at once (the CPU: nothing to wait for).
    Host { ce: f64, pred: Vec<u32> },
    /// Still on the device: `ce` of shape `[1]`, `pred` of `[n]`; read at the batch's end.
    Device { ce: Tensor, pred: Tensor },
}

impl Run {
    fn new(total: usize, epoch: usize, phases: Phases) -> Self {
        Run {
            total,
            epoch,
            out: BatchOutcome {
                loss_sum: 0.0,
                correct: 0,
                seeds: 0,
                phases,
                stats: PartitionStats::default(),
                non_finite: false,
            },
            pending: Vec::new(),
            union: None,
        }
    }
}

/// The distinct input nodes of the micro-batches run so far (a bitmap over the graph's
/// nodes): the redundancy's denominator when micro-batches sample their own seeds, where
/// no one full sample holds them all.
struct InputUnion {
    bits: Vec<u64>,
    count: usize,
}

impl InputUnion {
    fn new(num_nodes: usize) -> Self {
        InputUnion {
            bits: vec![0; num_nodes.div_ceil(64)],
            count: 0,
        }
    }

    fn add(&mut self, nodes: &[u32]) {
        for &v in nodes {
            if let Some(w) = self.bits.get_mut(v as usize / 64) {
                let bit = 1u64 << (v % 64);
                if *w & bit == 0 {
                    *w |= bit;
                    self.count += 1;
                }
            }
        }
    }
}

/// State of one batch's run shared by its micro-batches.
struct Run {
    total: usize,
    epoch: usize,
    out: BatchOutcome,
    /// Device readouts not read yet, with their micro-batch's seeds.
    pending: Vec<(Tensor, Tensor, Vec<u32>)>,
    /// The input nodes run so far, when micro-batches sample their own seeds.
    union: Option<InputUnion>,
}

/// Runs batch `b` of `epoch` (`seeds`) as `source` hands it over: its micro-batches in
/// order, then (`Pass::Train`) the sum over the ranks and one optimizer step.
pub(crate) fn run_batch(
    tr: &mut State<'_>,
    source: &mut dyn MicroSource,
    epoch: usize,
    b: usize,
    seeds: &[u32],
    pass: Pass,
) -> Result<BatchOutcome> {
    let SourcedBatch {
        mut stats,
        phases,
        full_inputs,
        made,
        micro,
    } = source.next_batch(tr, epoch, b, seeds, pass)?;
    let mut run = Run::new(seeds.len(), epoch, phases);
    if micro.samples_own_seeds() && tr.dist.size() == 1 {
        run.union = Some(InputUnion::new(tr.graph.num_nodes));
    }
    match (pass, micro.planned()) {
        (Pass::Plan, Some((slicer, parts))) => {
            estimate(tr, slicer, parts, seeds.len(), &mut stats)?
        }
        (Pass::Plan, None) => {
            return Err(Error::invalid(
                "a batch to plan came without its sample (planning runs on the local source)",
            ))
        }
        _ => {
            let this = &*tr;
            micro.for_each(tr.data, tr.host_features(), prep_ahead(tr), |p, prep| {
                run_micro(this, p, prep, &mut run, &mut stats)
            })?
        }
    }
    let out = finish_batch(tr, run, stats, pass, full_inputs)?;
    match made {
        Some(k) if out.stats.k != k => Err(Error::invalid(format!(
            "batch {b} of epoch {}: the trainers ran {} micro-batches of the {k} the \
             sampler made",
            epoch + 1,
            out.stats.k,
        ))),
        _ => Ok(out),
    }
}

/// The most micro-batches prepared at once on a GPU ([`prep_ahead`]).
const PREP_AHEAD: usize = 4;

/// Micro-batches the helper thread prepares at once: one on the CPU, whose compute keeps
/// every core busy already; on a GPU [`PREP_AHEAD`], in parallel, since slicing (serial
/// within a micro-batch) takes longer than the device's compute of one: on an H200,
/// products-like 0.1 at K 4, 74 ms of slicing against 14 ms of forward and backward left
/// the trainer waiting 61 ms an epoch (docs/BENCHMARKS.md, "On an H200"). The host then
/// holds up to 5 prepared micro-batches instead of 2: each is one that fits the device.
fn prep_ahead(tr: &State<'_>) -> usize {
    match tr.config.device {
        crate::Device::Cpu => 1,
        _ => PREP_AHEAD,
    }
}

/// `Pass::Plan`: each micro-batch's estimated peak, with the readouts of those before it
/// and the resident state of now.
fn estimate(
    tr: &State<'_>,
    slicer: &Slicer,
    parts: &[Vec<u32>],
    total: usize,
    stats: &mut PartitionStats,
) -> Result<()> {
    let state = tr.resident_now();
    let t = Instant::now();
    let all = slicer.sizes_all(parts)?;
    stats.slice_s += t.elapsed().as_secs_f64();
    let lens: Vec<usize> = parts.iter().map(Vec::len).collect();
    if tr.keep_parts {
        stats.parts = parts.to_vec();
    }
    for (i, (part, sizes)) in parts.iter().zip(all).enumerate() {
        let held = tr.estimator.held_bytes(&lens[..i]);
        stats.batches.push(MicroBatchStats {
            seeds: part.len(),
            input_nodes: sizes[0].num_src,
            est_peak_bytes: tr.estimator.peak_bytes(&sizes, total, held, state)?,
            peak_bytes: None,
            compute_s: 0.0,
        });
    }
    Ok(())
}

/// Ends a batch whose micro-batches have run: reads their figures, sums over the
/// ranks and steps the optimizer (`Pass::Train`), or drops the gradients.
fn finish_batch(
    tr: &mut State<'_>,
    mut run: Run,
    mut stats: PartitionStats,
    pass: Pass,
    full_inputs: usize,
) -> Result<BatchOutcome> {
    if pass != Pass::Plan {
        stats.k = stats.batches.len();
        settle(tr, &mut run)?;
        if pass == Pass::Train {
            reduce_batch(tr, &mut run.out, &mut stats)?;
        }
    }
    stats.set_redundancy(run.union.as_ref().map_or(full_inputs, |u| u.count));
    run.out.phases.slice = stats.slice_s;
    if pass == Pass::Train && !run.out.loss_sum.is_finite() {
        // A diverged batch: its gradients are not applied (they would spread NaN into
        // every parameter and the optimizer state).
        run.out.non_finite = true;
        tr.optim.zero_grad();
    } else if pass == Pass::Train {
        let t = Instant::now();
        tr.optim.step()?;
        tr.optim.zero_grad();
        if tr.config.profile {
            tr.config.device.sync()?;
        }
        run.out.phases.optimizer = t.elapsed().as_secs_f64();
    } else {
        tr.optim.zero_grad();
    }
    run.out.stats = stats;
    Ok(run.out)
}

/// Runs one prepared micro-batch; one that runs out of memory is split in halves,
/// which run in its place (recursively).
fn run_micro(
    tr: &State<'_>,
    first: Prepared,
    prep: Option<&Preparer>,
    run: &mut Run,
    stats: &mut PartitionStats,
) -> Result<()> {
    let mut todo = vec![first];
    while let Some(p) = todo.pop() {
        run.out.phases.gather += p.gather_s;
        run.out.phases.wait += p.wait_s;
        stats.slice_s += p.slice_s;
        let seeds = p.seeds.clone();
        let sizes: Vec<BlockSizes> = p.blocks.iter().map(|b| BlockSizes::of(b)).collect();
        let inputs = run.union.is_some().then(|| p.blocks[0].clone());
        let state = tr.resident_now();
        let held: Vec<usize> = run.pending.iter().map(|(_, _, s)| s.len()).collect();
        let held = tr.estimator.held_bytes(&held);
        let est = tr.estimator.peak_bytes(&sizes, run.total, held, state)?;
        let mem = tr.config.device.memory()?;
        tr.fold_peak();
        mem.reset_peak();
        let t = Instant::now();
        match compute(tr, p, run) {
            Ok(c) => {
                let compute_s = t.elapsed().as_secs_f64();
                run.out.phases.forward += c.forward_s;
                run.out.phases.backward += c.backward_s;
                run.out.phases.forward_work.add(&c.forward_work);
                run.out.phases.backward_work.add(&c.backward_work);
                let n = seeds.len();
                if tr.keep_parts {
                    stats.parts.push(seeds.clone());
                }
                match c.readout {
                    Readout::Host { ce, pred } => count(tr, &mut run.out, ce, &pred, &seeds),
                    Readout::Device { ce, pred } => run.pending.push((ce, pred, seeds)),
                }
                if let (Some(union), Some(b)) = (&mut run.union, inputs) {
                    union.add(&b.src_nodes);
                }
                stats.batches.push(MicroBatchStats {
                    seeds: n,
                    input_nodes: sizes[0].num_src,
                    est_peak_bytes: est,
                    peak_bytes: Some(mem.peak()),
                    compute_s,
                });
            }
            Err(Error::OutOfMemory { .. }) if seeds.len() > 1 => {
                stats.oom_splits += 1;
                let half = seeds.len().div_ceil(2);
                let (a, b) = seeds.split_at(half);
                // The second half runs after the first: push it first.
                let Some(prep) = prep else {
                    return Err(Error::invalid(format!(
                        "a micro-batch of {} seeds received from a sampler rank ran out \
                         of memory on this trainer (received micro-batches are not split): \
                         give --memory-budget so that the sampler ranks choose a K that \
                         fits, or more --micro-batches",
                        seeds.len()
                    )));
                };
                // Prepared here, on the trainer's thread: nothing hides their preparation.
                let f = tr.host_features();
                for half in [b, a] {
                    let mut p = prep.prepare(tr.data, f, half.to_vec(), false)?;
                    p.wait_s = p.slice_s + p.gather_s;
                    todo.push(p);
                }
            }
            Err(Error::OutOfMemory {
                requested,
                live,
                budget,
                ..
            }) => {
                return Err(Error::invalid(format!(
                    "{} is too small: a micro-batch of the single seed {} \
                     ran out of memory ({} live, {} requested); the estimator puts its \
                     peak at {}",
                    tr.memory_limit(budget),
                    seeds[0],
                    format_bytes(live),
                    format_bytes(requested),
                    format_bytes(est)
                )));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Adds one micro-batch's loss and correct predictions to the batch's.
fn count(tr: &State<'_>, out: &mut BatchOutcome, ce: f64, pred: &[u32], seeds: &[u32]) {
    out.loss_sum += ce * seeds.len() as f64;
    out.correct += pred
        .iter()
        .zip(seeds)
        .filter(|(&p, &s)| p == tr.data.labels[s as usize])
        .count();
    out.seeds += seeds.len();
}

/// Reads the device readouts of the batch's micro-batches: their losses in one read,
/// their predictions in another (the batch's only host waits on a GPU without
/// `profile`, charged to the backward phase, whose device work they wait for).
fn settle(tr: &State<'_>, run: &mut Run) -> Result<()> {
    if run.pending.is_empty() {
        return Ok(());
    }
    let t = Instant::now();
    let pending = std::mem::take(&mut run.pending);
    let ces: Vec<Tensor> = pending
        .iter()
        .map(|(ce, _, _)| ce.view(&[1, 1]))
        .collect::<Result<_>>()?;
    let preds: Vec<Tensor> = pending
        .iter()
        .map(|(_, pred, seeds)| pred.view(&[seeds.len(), 1]))
        .collect::<Result<_>>()?;
    let ce = ops::concat(&ces.iter().collect::<Vec<_>>(), 0)?.to_vec_f32()?;
    let pred = ops::concat(&preds.iter().collect::<Vec<_>>(), 0)?.to_vec_u32()?;
    let mut at = 0;
    for ((_, _, seeds), ce) in pending.iter().zip(ce) {
        let n = seeds.len();
        count(tr, &mut run.out, ce as f64, &pred[at..at + n], seeds);
        at += n;
    }
    run.out.phases.backward += t.elapsed().as_secs_f64();
    Ok(())
}

/// Forward and backward of one micro-batch, keeping the gradients of earlier
/// micro-batches apart until it has succeeded.
fn compute(tr: &State<'_>, p: Prepared, run: &Run) -> Result<Computed> {
    with_held_grads(&tr.model.parameters(), || forward_backward(tr, p, run))
}

fn forward_backward(tr: &State<'_>, p: Prepared, run: &Run) -> Result<Computed> {
    let device = tr.config.device;
    let n = p.seeds.len();
    let t = Instant::now();
    let w = Work::now();
    let (ns, dim, src) = (
        p.blocks[0].num_src,
        tr.data.feat_dim,
        &p.blocks[0].src_nodes,
    );
    let by_id = p.features.is_none() && tr.resident_features.is_some();
    let features = p.features;
    let x = Box::new(move || match features {
        Some(rows) => rows.upload(ns, dim, device),
        None => tr.gather_features(src),
    });
    let labels = p.labels;
    let y = Box::new(move || Tensor::from_u32(labels, &[n], device));
    let fwd = Forward {
        training: true,
        seed: tr.config.seed,
        epoch: run.epoch as u64,
    };
    let live = Live {
        model: &tr.model,
        fwd: &fwd,
    };
    // The CPU reads the predictions at once (nothing to wait for), so they hold no
    // memory during backward; a GPU holds them to the batch's end.
    let hold_pred = device != crate::Device::Cpu;
    let blocks = &p.blocks;
    let mb = step::micro_forward(
        &mut Eager,
        &live,
        blocks,
        (dim, by_id),
        x,
        y,
        run.total,
        hold_pred,
    )?;
    // GPU ops return once queued: only a profiling run waits, so that each phase is
    // charged its own device time.
    if tr.config.profile {
        device.sync()?;
    }
    let forward_s = t.elapsed().as_secs_f64();
    let (forward_work, w) = (Work::now() - w, Work::now());
    let t = Instant::now();
    let (ce, pred, pred_host) = step::micro_backward(&mut Eager, mb)?;
    if tr.config.profile {
        device.sync()?;
    }
    let backward_s = t.elapsed().as_secs_f64();
    let backward_work = Work::now() - w;
    let readout = match pred {
        Some(pred) => Readout::Device {
            ce: ce.detach(),
            pred,
        },
        None => Readout::Host {
            ce: ce.item()?,
            pred: pred_host,
        },
    };
    Ok(Computed {
        readout,
        forward_s,
        backward_s,
        forward_work,
        backward_work,
    })
}

/// Sums the gradients, the loss, the correct predictions, the seeds and the micro-batch
/// count over the ranks (nothing in one process), so that every rank steps with the
/// batch's gradient and reports the batch's figures.
fn reduce_batch(tr: &State<'_>, out: &mut BatchOutcome, stats: &mut PartitionStats) -> Result<()> {
    if tr.dist.size() == 1 {
        return Ok(());
    }
    let t = Instant::now();
    let mut figures = [
        out.loss_sum,
        out.correct as f64,
        out.seeds as f64,
        stats.k as f64,
    ];
    tr.dist
        .all_reduce_batch(&tr.model.parameters(), &mut figures)?;
    out.loss_sum = figures[0];
    out.correct = figures[1].round() as usize;
    out.seeds = figures[2].round() as usize;
    stats.k = figures[3].round() as usize;
    out.phases.allreduce += t.elapsed().as_secs_f64();
    Ok(())
}
