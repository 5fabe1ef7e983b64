//! The local [`MicroSource`]: samples each batch in this process and cuts it into
//! micro-batches (the planner: `micro_batches` of them, or with a memory budget the
//! smallest K that fits); with several ranks, hands over this rank's share of them. The
//! sampler ranks (`crate::train::feed`) plan their batches with the same [`plan`].

use std::time::Instant;

use rayon::prelude::*;

use crate::bytes::format_bytes;
use crate::error::{Error, Result};
use crate::graph::Slicer;
use crate::partition::{self, Batch, Found, PartitionStats};
use crate::train::config::{Loader, SAFETY_MARGIN};
use crate::train::estimate::{MemoryEstimator, Resident};
use crate::train::state::State;
use crate::train::stats::Phases;

use super::{MicroBatches, MicroSource, Pass, Preparer, SourcedBatch};

/// Samples and partitions each batch here (one process, or every rank of a world without
/// sampler ranks: all sample the same batch and keep their share of it).
pub(crate) struct Local;

impl MicroSource for Local {
    fn next_batch(
        &mut self,
        tr: &mut State<'_>,
        epoch: usize,
        b: usize,
        seeds: &[u32],
        pass: Pass,
    ) -> Result<SourcedBatch> {
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
        let stats = PartitionStats {
            epoch: epoch + 1,
            batch: b,
            k: parts.len(),
            partitioner: tr.partitioner.name().to_string(),
            partition_s: phases.partition,
            ..Default::default()
        };
        let full_inputs = slicer.as_ref().map_or(0, |s| s.blocks()[0].num_src);
        Ok(SourcedBatch {
            stats,
            phases,
            full_inputs,
            made: None,
            micro: MicroBatches::Seeds {
                prep: Preparer::new(tr, slicer, key),
                parts,
                whole,
            },
        })
    }

    fn release(self: Box<Self>, _: &State<'_>) -> Result<()> {
        Ok(())
    }
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

/// This rank's micro-batches of a batch, dealt by estimated cost ([`crate::dist::deal`]);
/// all of them in one process.
fn my_parts(tr: &State<'_>, slicer: &Slicer, parts: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>> {
    if tr.dist.size() == 1 {
        return Ok(parts);
    }
    let costs = crate::dist::part_costs(slicer, &parts, &tr.config.model)?;
    Ok(tr.dist.my_parts(parts, &costs))
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
