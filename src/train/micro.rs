//! Micro-batch training of one batch with exact gradient accumulation: a stage of the
//! trainer, functions over the [`State`] it owns (`run_batch`, the planner `plan`).
//!
//! The batch is sampled once. A [`Partitioner`](crate::partition::Partitioner) splits its seeds into K micro-batches
//! (with a memory budget, the smallest K whose largest estimated micro-batch fits, see
//! `plan`); each micro-batch's blocks are sliced from the full batch's, so its
//! logits equal the full batch's rows for its seeds. Per micro-batch: upload its features
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
//! A helper thread prepares the next micro-batch (slicing and the host feature gather)
//! while the current one computes; a rendezvous channel keeps it exactly one ahead. It
//! produces host vectors only, so the device's memory tracker sees nothing of it.
//!
//! Gradients of earlier micro-batches are taken out of the parameters before a micro-batch
//! runs and added back after its backward succeeds. A micro-batch that runs out of memory
//! (`Error::OutOfMemory`) therefore leaves no partial gradient behind: it is split in two
//! halves, which run in its place. With K = 1 and no budget the steps are exactly those of
//! plain full-batch training (the same blocks, the same ops in the same order, the loss
//! unscaled), so the losses agree bit for bit.

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::bytes::format_bytes;
use crate::error::{Error, Result};
use crate::graph::Prepared;
use crate::graph::{Block, BlockSizes, Csr, Dataset, Slicer};
use crate::nn::{Forward, Module};
use crate::ops;
use crate::partition::{self, Batch, Found, MicroBatchStats, PartitionStats};
use crate::rng::mix64;
use crate::tensor::Tensor;
use crate::train::config::{Loader, SAFETY_MARGIN};
use crate::train::estimate::{MemoryEstimator, Resident};
use crate::train::features::FeatureStore;
use crate::train::held::with_held_grads;
use crate::train::state::State;
use crate::train::stats::Phases;
use crate::work::Work;

/// What `run_batch` does with each micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Forward, backward, then one optimizer step for the batch.
    Train,
    /// Forward and backward (measured peaks), no step; gradients are dropped.
    Measure,
    /// Partition and estimate only.
    Plan,
}

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

/// Where a batch's micro-batches get their blocks: sliced from the full batch's sample, or
/// (`sampler`) sampled from their own seeds.
pub(crate) struct Source<'s> {
    /// The full batch's sample; `None` when it was skipped (every micro-batch samples).
    slicer: Option<&'s Slicer>,
    sampler: Option<MicroSampler>,
}

/// Samples a micro-batch's blocks from its own seeds (Loader::PerMicroBatch).
struct MicroSampler {
    graph: Arc<Csr>,
    fanouts: Vec<i64>,
    /// The batch's sampling key; each micro-batch mixes in its seeds.
    key: u64,
}

impl MicroSampler {
    fn sample(&self, seeds: &[u32]) -> Result<Vec<Arc<Block>>> {
        let first = seeds.first().copied().unwrap_or(0) as u64;
        let key = mix64(self.key ^ mix64(((seeds.len() as u64) << 32) | first));
        let blocks = crate::graph::sample_blocks(&self.graph, seeds, &self.fanouts, key)?;
        Ok(blocks.into_iter().map(Arc::new).collect())
    }
}

/// Host-side preparation: slice or sample (unless the micro-batch is the whole batch),
/// gather (unless `features` is `None`: the matrix lives on the device).
pub(crate) fn prepare(
    source: &Source,
    data: &Dataset,
    features: Option<&FeatureStore>,
    seeds: Vec<u32>,
    whole: bool,
) -> Result<Prepared> {
    let t = Instant::now();
    let blocks = match (&source.sampler, source.slicer) {
        (_, Some(slicer)) if whole => slicer.blocks().to_vec(),
        (Some(s), _) => s.sample(&seeds)?,
        (None, Some(slicer)) => slicer.slice(&seeds)?.into_iter().map(Arc::new).collect(),
        (None, None) => {
            return Err(Error::invalid(
                "a micro-batch has neither the full batch's sample nor a sampler",
            ))
        }
    };
    let slice_s = if whole {
        0.0
    } else {
        t.elapsed().as_secs_f64()
    };
    let t = Instant::now();
    let features = features
        .map(|f| f.gather(data.feat_dim, &blocks[0].src_nodes))
        .transpose()?;
    let labels = seeds.iter().map(|&s| data.labels[s as usize]).collect();
    Ok(Prepared {
        seeds,
        blocks,
        features,
        labels,
        slice_s,
        gather_s: t.elapsed().as_secs_f64(),
    })
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

impl<'s> Run<'s> {
    pub(crate) fn new(
        source: Option<&'s Source<'s>>,
        total: usize,
        epoch: usize,
        phases: Phases,
    ) -> Self {
        Run {
            source,
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
pub(crate) struct InputUnion {
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
pub(crate) struct Run<'s> {
    /// Where an out-of-memory micro-batch's halves come from; `None` for micro-batches
    /// received from a sampler rank.
    source: Option<&'s Source<'s>>,
    total: usize,
    epoch: usize,
    out: BatchOutcome,
    /// Device readouts not read yet, with their micro-batch's seeds.
    pending: Vec<(Tensor, Tensor, Vec<u32>)>,
    /// The input nodes run so far, when micro-batches sample their own seeds.
    union: Option<InputUnion>,
}

/// Samples batch `b` of `epoch` (`seeds`), partitions it and runs its micro-batches.
pub(crate) fn run_batch(
    tr: &mut State<'_>,
    epoch: usize,
    b: usize,
    seeds: &[u32],
    pass: Pass,
) -> Result<BatchOutcome> {
    let mut phases = Phases::default();
    let key = ((epoch as u64) << 32) | b as u64;
    // The partitioner's cached answer lets micro-batches that sample their own seeds
    // skip the full-batch sample.
    let t = Instant::now();
    let cached = cached_parts(tr, seeds, pass);
    let skipped = cached.is_some();
    phases.partition = t.elapsed().as_secs_f64();
    let slicer = match cached {
        Some(_) => None,
        None => {
            let t = Instant::now();
            let blocks = tr.sample(seeds, key)?;
            phases.sample = t.elapsed().as_secs_f64();
            Some(Slicer::new(&blocks)?)
        }
    };
    let source = source(tr, slicer.as_ref(), key);

    let t = Instant::now();
    // The batch's micro-batches, and how many the plan cut it into (with several
    // ranks, this rank runs only its share of them: see crate::dist).
    let (parts, planned) = match (cached, &slicer) {
        (Some(parts), _) => {
            let n = parts.len();
            (parts, n)
        }
        (None, Some(slicer)) => {
            let parts = plan(tr, slicer, seeds, epoch)?;
            let n = parts.len();
            match pass {
                Pass::Train => (my_parts(tr, slicer, parts)?, n),
                _ => (parts, n),
            }
        }
        (None, None) => return Err(Error::invalid("a batch without its sample")),
    };
    // One micro-batch for the whole batch runs on the full sample itself; a rank's
    // single share of several does not.
    let whole = planned == 1 && !skipped;
    phases.partition += t.elapsed().as_secs_f64();
    let mut stats = PartitionStats {
        epoch: epoch + 1,
        batch: b,
        k: parts.len(),
        partitioner: tr.partitioner.name().to_string(),
        partition_s: phases.partition,
        ..Default::default()
    };
    let full_inputs = slicer.as_ref().map_or(0, |s| s.blocks()[0].num_src);
    let mut run = Run::new(Some(&source), seeds.len(), epoch, phases);
    if source.sampler.is_some() && tr.dist.size() == 1 {
        run.union = Some(InputUnion::new(tr.graph.num_nodes));
    }

    if let (Pass::Plan, Some(slicer)) = (pass, &slicer) {
        let state = tr.resident_now();
        let t = Instant::now();
        let all = slicer.sizes_all(&parts)?;
        stats.slice_s += t.elapsed().as_secs_f64();
        let lens: Vec<usize> = parts.iter().map(Vec::len).collect();
        if tr.keep_parts {
            stats.parts = parts.clone();
        }
        for (i, (part, sizes)) in parts.iter().zip(all).enumerate() {
            let held = tr.estimator.held_bytes(&lens[..i]);
            stats.batches.push(MicroBatchStats {
                seeds: part.len(),
                input_nodes: sizes[0].num_src,
                est_peak_bytes: tr.estimator.peak_bytes(&sizes, seeds.len(), held, state)?,
                peak_bytes: None,
                compute_s: 0.0,
            });
        }
    } else {
        let data = tr.data;
        let features = tr.host_features();
        let this = &*tr;
        let source_ref = &source;
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = sync_channel::<Result<Prepared>>(0);
            scope.spawn(move || {
                for part in parts {
                    let p = prepare(source_ref, data, features, part, whole);
                    let failed = p.is_err();
                    if tx.send(p).is_err() || failed {
                        break;
                    }
                }
            });
            for p in rx {
                run_micro(this, p?, &mut run, &mut stats)?;
            }
            Ok(())
        })?;
    }
    finish_batch(tr, run, stats, pass, full_inputs)
}

/// The micro-batches of `seeds` when the full-batch sample is not needed: micro-batches
/// sample their own seeds (`--loader per-micro-batch`), K > 1 (one micro-batch uses
/// the full sample, so that it trains exactly as `slice` does), no budget (the
/// planner estimates from the sample), one process (ranks share by sliced sizes), a
/// pass that runs, and a partitioner that answers from its cache (Cherry after its
/// first cut, `metis`).
fn cached_parts(tr: &State<'_>, seeds: &[u32], pass: Pass) -> Option<Vec<Vec<u32>>> {
    let k = tr.config.micro.micro_batches.min(seeds.len());
    let skip = tr.config.micro.loader == Loader::PerMicroBatch
        && k > 1
        && tr.config.micro.memory_budget.is_none()
        && tr.dist.size() == 1
        && pass != Pass::Plan;
    if !skip {
        return None;
    }
    let parts = tr.partitioner.cached(seeds, &tr.graph, k, tr.config.seed)?;
    partition::check_parts(tr.partitioner.name(), seeds, k, &parts).ok()?;
    Some(parts)
}

/// The source of batch `key`'s micro-batches: slices of `slicer`'s sample, or fresh
/// samples of their own seeds (`--loader per-micro-batch`).
pub(crate) fn source<'s>(tr: &State<'_>, slicer: Option<&'s Slicer>, key: u64) -> Source<'s> {
    Source {
        slicer,
        sampler: (tr.config.micro.loader == Loader::PerMicroBatch).then(|| MicroSampler {
            graph: tr.graph.clone(),
            fanouts: tr.config.fanouts.clone(),
            key: mix64(tr.config.seed ^ key ^ 0x6c6f_6164_6572),
        }),
    }
}

/// Runs micro-batches prepared elsewhere (received from a sampler rank) in order.
pub(crate) fn run_prepared(
    tr: &State<'_>,
    parts: Vec<Prepared>,
    run: &mut Run<'_>,
    stats: &mut PartitionStats,
) -> Result<()> {
    for p in parts {
        run_micro(tr, p, run, stats)?;
    }
    Ok(())
}

/// Ends a batch whose micro-batches have run: reads their figures, sums over the
/// ranks and steps the optimizer (`Pass::Train`), or drops the gradients.
pub(crate) fn finish_batch(
    tr: &mut State<'_>,
    mut run: Run<'_>,
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
    run: &mut Run<'_>,
    stats: &mut PartitionStats,
) -> Result<()> {
    let mut todo = vec![first];
    while let Some(p) = todo.pop() {
        run.out.phases.gather += p.gather_s;
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
                let Some(source) = run.source else {
                    return Err(Error::invalid(format!(
                        "a micro-batch of {} seeds received from a sampler rank ran out \
                         of memory on this trainer (received micro-batches are not split): \
                         give --memory-budget so that the sampler ranks choose a K that \
                         fits, or more --micro-batches",
                        seeds.len()
                    )));
                };
                let f = tr.host_features();
                todo.push(prepare(source, tr.data, f, b.to_vec(), false)?);
                todo.push(prepare(source, tr.data, f, a.to_vec(), false)?);
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
fn settle(tr: &State<'_>, run: &mut Run<'_>) -> Result<()> {
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
fn compute(tr: &State<'_>, p: Prepared, run: &Run<'_>) -> Result<Computed> {
    with_held_grads(&tr.model.parameters(), || forward_backward(tr, p, run))
}

fn forward_backward(tr: &State<'_>, p: Prepared, run: &Run<'_>) -> Result<Computed> {
    let device = tr.config.device;
    let n = p.seeds.len();
    let t = Instant::now();
    let w = Work::now();
    let x = match p.features {
        Some(rows) => rows.upload(p.blocks[0].num_src, tr.data.feat_dim, device)?,
        None => tr.gather_features(&p.blocks[0].src_nodes)?,
    };
    let y = Tensor::from_u32(p.labels, &[n], device)?;
    let fwd = Forward {
        training: true,
        seed: tr.config.seed,
        epoch: run.epoch as u64,
    };
    let logits = tr.model.forward(&p.blocks, &x, &fwd)?;
    let ce = ops::cross_entropy(&logits, &y, None)?;
    let pred = ops::argmax_rows(&logits.detach())?;
    // The CPU reads the predictions at once (nothing to wait for), so they hold no
    // memory during backward: the estimator's replay assumes so.
    let (pred, pred_host) = if device == crate::Device::Cpu {
        let host = pred.to_vec_u32()?;
        drop(pred);
        (None, Some(host))
    } else {
        (Some(pred), None)
    };
    let loss = if n != run.total {
        ops::mul_scalar(&ce, n as f64 / run.total as f64)?
    } else {
        ce.clone()
    };
    drop(logits);
    // GPU ops return once queued: only a profiling run waits, so that each phase is
    // charged its own device time.
    if tr.config.profile {
        device.sync()?;
    }
    let forward_s = t.elapsed().as_secs_f64();
    let (forward_work, w) = (Work::now() - w, Work::now());
    let t = Instant::now();
    loss.backward()?;
    if tr.config.profile {
        device.sync()?;
    }
    let backward_s = t.elapsed().as_secs_f64();
    let backward_work = Work::now() - w;
    let readout = match (pred, pred_host) {
        (Some(pred), _) => Readout::Device {
            ce: ce.detach(),
            pred,
        },
        (None, pred) => Readout::Host {
            ce: ce.item()?,
            pred: pred.unwrap_or_default(),
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

/// The micro-batches of one batch. Without a budget: `micro_batches` of them (fewer
/// for a trailing batch with fewer seeds). With one: the smallest K at or above both
/// `micro_batches` and the K of the previous batch such that every micro-batch's
/// estimated peak, with the resident state of a steady run (parameters, held
/// gradients, optimizer state), plus the [`SAFETY_MARGIN`], fits the budget
/// ([`partition::smallest_fitting`]: doubling, then bisection).
pub(crate) fn plan(
    tr: &mut State<'_>,
    slicer: &Slicer,
    seeds: &[u32],
    epoch: usize,
) -> Result<Vec<Vec<u32>>> {
    let n = seeds.len();
    let k_min = tr.config.micro.micro_batches.min(n);
    let batch = Batch {
        seeds,
        slicer,
        graph: &tr.graph,
        seed: tr.config.seed,
        epoch: epoch as u64,
        estimator: Some(&tr.estimator),
    };
    let part = &mut *tr.partitioner;
    let Some(budget) = tr.config.micro.memory_budget else {
        return partition::partition(part, &batch, k_min);
    };
    let estimator = &tr.estimator;
    // Each micro-batch with the readouts of those before it.
    let largest = |parts: &[Vec<u32>]| -> Result<u64> {
        let lens: Vec<usize> = parts.iter().map(Vec::len).collect();
        slicer
            .sizes_all(parts)?
            .iter()
            .enumerate()
            .try_fold(0, |a, (i, s)| {
                let held = estimator.held_bytes(&lens[..i]);
                Ok(a.max(estimator.peak_bytes(s, n, held, Resident::STEADY)?))
            })
    };
    let fits = |est: u64| est as f64 * (1.0 + SAFETY_MARGIN) <= budget as f64;

    let start = k_min.max(tr.last_k.min(n));
    let found = partition::smallest_fitting(start, n, |k| {
        let parts = partition::partition(part, &batch, k)?;
        let fit = fits(largest(&parts)?);
        Ok((parts, fit))
    })?;
    let (k, parts) = match found {
        Found::Fits { count, value } => (count, value),
        Found::NoneFits { .. } => return Err(too_small(estimator, slicer, seeds, budget)),
    };
    tr.last_k = k;
    Ok(parts)
}

/// This rank's micro-batches of a batch, dealt by estimated cost ([`crate::dist::deal`]);
/// all of them in one process.
fn my_parts(tr: &State<'_>, slicer: &Slicer, parts: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>> {
    if tr.dist.size() == 1 {
        return Ok(parts);
    }
    let costs = crate::dist::part_costs(slicer, &parts, &tr.config.model)?;
    Ok(tr.dist.my_parts(parts, &costs))
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

/// The error for a budget that not even single-seed micro-batches fit.
fn too_small(estimator: &MemoryEstimator, slicer: &Slicer, seeds: &[u32], budget: u64) -> Error {
    let n = seeds.len();
    // The last of n single-seed micro-batches, with the readouts of the others.
    let held = estimator
        .held_bytes(&[1])
        .saturating_mul(n.saturating_sub(1) as u64);
    let worst = seeds
        .par_iter()
        .map(|&s| {
            let sizes = slicer.sizes(&[s])?;
            Ok((estimator.peak_bytes(&sizes, n, held, Resident::STEADY)?, s))
        })
        .try_reduce(|| (0, 0), |a, b| Ok(a.max(b)));
    let resident = estimator.resident_bytes(Resident::STEADY);
    match worst {
        Ok((need, seed)) => Error::invalid(format!(
            "memory budget {} is too small: a micro-batch of one seed needs up to {} \
             (seed {seed}), {} of it resident (parameters, gradients, optimizer state); \
             with the {:.0}% safety margin give at least {}",
            format_bytes(budget),
            format_bytes(need),
            format_bytes(resident),
            SAFETY_MARGIN * 100.0,
            format_bytes((need as f64 * (1.0 + SAFETY_MARGIN)).ceil() as u64)
        )),
        Err(e) => e,
    }
}
