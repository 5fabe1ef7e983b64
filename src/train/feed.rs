//! Sampler ranks (`--sampler-ranks S`, Armada's disaggregated sampling): the last S ranks
//! of the world sample each batch, partition it, deal its micro-batches to the trainer
//! ranks by estimated cost (as [`crate::dist::deal`] does among trainers without samplers),
//! slice them, gather their input rows and send each trainer its share in one message
//! ([`crate::dist::wire`]); trainers only compute and sum gradients among themselves.
//! On a trainer, [`Feed`] is the [`MicroSource`] the micro-batch run takes its batches
//! from; on a sampler, [`serve_trainers`] plans with the local source's planner.
//!
//! Batches are counted over the run (`g`, from the resumed epoch on) and batch `g` is
//! sampler `g mod S`'s. Protocol, per trainer and sampler, in order (MPI keeps the order
//! of messages between two ranks): the trainer says once whether it wants gathered rows
//! (`HELLO`: no when its features live on its device); then per batch of that sampler it
//! asks for batch `g` (`REQUEST`) and receives it (`BATCH`); at the end of its run it sends
//! `STOP` instead of a request. A sampler prepares its next batch before it waits for the
//! requests, so each sampler is at most one batch ahead of the trainers (S batches in
//! all): the backpressure is the request.

use std::time::Instant;

use rayon::prelude::*;

use crate::dist::wire::{self, FedBatch};
use crate::dist::{deal, is_sampler, part_costs};
use crate::error::{Error, Result};
use crate::graph::{Prepared, Slicer};
use crate::partition::PartitionStats;
use crate::train::source::local::plan;
use crate::train::source::{MicroBatches, MicroSource, Pass, Preparer, SourcedBatch};
use crate::train::state::State;
use crate::train::stats::Phases;

const HELLO: i32 = 20;
const REQUEST: i32 = 21;
const BATCH: i32 = 22;
/// A request for this "batch" ends the trainer's run.
const STOP: u64 = u64::MAX;

/// A trainer rank's sampler ranks: where its micro-batches come from.
pub(crate) struct Feed {
    /// World ranks of the samplers.
    samplers: Vec<usize>,
    /// The next batch of the run.
    next: u64,
}

fn read_u64(bytes: &[u8], what: &str) -> Result<u64> {
    let b: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::invalid(format!(
            "a {what} message of {} bytes (expected 8)",
            bytes.len()
        ))
    })?;
    Ok(u64::from_le_bytes(b))
}

/// On a trainer rank of a world with sampler ranks: tells each sampler whether to gather
/// the input rows, and returns the feed this trainer takes its micro-batches from from now
/// on. `None` otherwise (one process, or a sampler rank).
pub(crate) fn join(tr: &State<'_>) -> Result<Option<Feed>> {
    let c = tr.dist.collective.clone();
    if c.samplers() == 0 || is_sampler(&*c) {
        return Ok(None);
    }
    if tr.config.full_graph.is_some() {
        return Err(Error::flag(
            "--sampler-ranks",
            "--sampler-ranks: full-graph training has no micro-batches to sample",
        ));
    }
    let wants_rows = u64::from(tr.host_features().is_some());
    let trainers = c.world_size() - c.samplers();
    let samplers: Vec<usize> = (trainers..c.world_size()).collect();
    for &s in &samplers {
        c.send_bytes(s, HELLO, &wants_rows.to_le_bytes())?;
    }
    Ok(Some(Feed { samplers, next: 0 }))
}

impl MicroSource for Feed {
    /// A trainer's batch `b` of `epoch`, received from its sampler rank: the same
    /// micro-batches, in the same order, as this rank would have made (`made`: the run
    /// checks that the trainers ran all of them).
    fn next_batch(
        &mut self,
        tr: &mut State<'_>,
        epoch: usize,
        b: usize,
        _seeds: &[u32],
        pass: Pass,
    ) -> Result<SourcedBatch> {
        if pass != Pass::Train {
            return Err(Error::invalid(
                "sampler ranks feed training batches only (partition and measure here)",
            ));
        }
        let c = tr.dist.collective.clone();
        let g = self.next;
        self.next += 1;
        let src = self.samplers[(g % self.samplers.len() as u64) as usize];
        let t = Instant::now();
        c.send_bytes(src, REQUEST, &g.to_le_bytes())?;
        let fed = wire::decode(&c.recv_bytes(src, BATCH)?)?;
        if (fed.epoch, fed.batch) != (epoch as u64, b as u64) {
            return Err(Error::invalid(format!(
                "sampler rank {src} sent batch {} of epoch {} for batch {b} of epoch {}: the \
                 ranks disagree on the batches (same flags and data on every rank?)",
                fed.batch,
                fed.epoch + 1,
                epoch + 1
            )));
        }
        let phases = Phases {
            feed: t.elapsed().as_secs_f64(),
            ..Default::default()
        };
        let stats = PartitionStats {
            epoch: epoch + 1,
            batch: b,
            k: fed.parts.len(),
            partitioner: tr.partitioner.name().to_string(),
            partition_s: fed.partition_s,
            ..Default::default()
        };
        Ok(SourcedBatch {
            stats,
            phases,
            full_inputs: fed.full_inputs as usize,
            made: Some(fed.k as usize),
            micro: MicroBatches::Prepared(fed.parts),
        })
    }

    /// Tells the sampler ranks that this trainer has finished.
    fn release(self: Box<Self>, tr: &State<'_>) -> Result<()> {
        for &s in &self.samplers {
            tr.dist
                .collective
                .send_bytes(s, REQUEST, &STOP.to_le_bytes())?;
        }
        Ok(())
    }
}

/// A sampler rank's run: serves every batch of the run that is its own to the trainer
/// ranks, until each trainer has said it stopped.
pub(crate) fn serve_trainers(tr: &mut State<'_>) -> Result<()> {
    let c = tr.dist.collective.clone();
    let (samplers, world) = (c.samplers() as u64, c.world_size());
    let trainers = world - c.samplers();
    let me = (c.world_rank() - trainers) as u64;
    let wants_rows = (0..trainers)
        .map(|t| Ok(read_u64(&c.recv_bytes(t, HELLO)?, "hello")? == 1))
        .collect::<Result<Vec<bool>>>()?;
    let mut open = vec![true; trainers];
    let mut g = 0u64;
    for epoch in tr.start_epoch..tr.config.epochs {
        for (b, seeds) in tr.batches(epoch).iter().enumerate() {
            let batch = g;
            g += 1;
            if batch % samplers != me {
                continue;
            }
            if !open.contains(&true) {
                return Ok(());
            }
            let messages = prepare_for_trainers(tr, epoch, b, seeds, &wants_rows)?;
            for (t, msg) in messages.iter().enumerate() {
                if !open[t] {
                    continue;
                }
                match read_u64(&c.recv_bytes(t, REQUEST)?, "request")? {
                    STOP => open[t] = false,
                    r if r == batch => c.send_bytes(t, BATCH, msg)?,
                    r => {
                        return Err(Error::invalid(format!(
                            "trainer rank {t} asked sampler rank {} for batch {r}; its \
                             next batch is {batch}",
                            c.world_rank()
                        )))
                    }
                }
            }
        }
    }
    // Out of batches: wait for the trainers that have not said they stopped.
    for t in (0..trainers).filter(|&t| open[t]) {
        let r = read_u64(&c.recv_bytes(t, REQUEST)?, "request")?;
        if r != STOP {
            return Err(Error::invalid(format!(
                "trainer rank {t} asked for batch {r} after the run's last batch"
            )));
        }
    }
    Ok(())
}

/// Samples batch `b` of `epoch`, partitions and deals it, and prepares each trainer's
/// message (input rows gathered for those that want them).
fn prepare_for_trainers(
    tr: &mut State<'_>,
    epoch: usize,
    b: usize,
    seeds: &[u32],
    wants_rows: &[bool],
) -> Result<Vec<Vec<u8>>> {
    let key = ((epoch as u64) << 32) | b as u64;
    let blocks = tr.sample(seeds, key)?;
    let slicer = Slicer::new(&blocks)?;
    let t = Instant::now();
    let parts = plan(tr, &slicer, seeds, epoch)?;
    let costs = part_costs(&slicer, &parts, &tr.config.model)?;
    let owner = deal(&costs, wants_rows.len());
    let partition_s = t.elapsed().as_secs_f64();
    let (k, whole) = (parts.len(), parts.len() == 1);
    let prep = Preparer::new(tr, Some(slicer), key);
    let (data, features) = (tr.data, &tr.features);
    let prepared: Vec<Prepared> = parts
        .into_par_iter()
        .zip(owner.par_iter())
        .map(|(p, &o)| prep.prepare(data, wants_rows[o].then_some(features), p, whole))
        .collect::<Result<_>>()?;
    let mut shares: Vec<Vec<Prepared>> = wants_rows.iter().map(|_| Vec::new()).collect();
    for (p, o) in prepared.into_iter().zip(owner) {
        shares[o].push(p);
    }
    Ok(shares
        .into_par_iter()
        .map(|parts| {
            wire::encode(&FedBatch {
                epoch: epoch as u64,
                batch: b as u64,
                k: k as u64,
                full_inputs: blocks[0].num_src as u64,
                partition_s,
                parts,
            })
        })
        .collect())
}
