//! One training epoch: a full-graph pass or the epoch's batches of micro-batches (run
//! here or fed by sampler ranks), one optimizer step per batch, then the validation
//! accuracy when it is due.

use std::time::Instant;

use crate::error::{Error, Result};
use crate::train::config::OnNan;
use crate::train::micro::{self, Pass};
use crate::train::stats::{EpochStats, Phases};

use super::Trainer;

/// How an epoch ended.
pub(super) enum EpochEnd {
    Done(Box<EpochStats>),
    /// A stop request arrived before its last batch.
    Interrupted,
    /// A batch's loss was not finite under `OnNan::Stop`, or every batch's was.
    Diverged(String),
}

impl Trainer<'_> {
    /// 1-based). A NaN or infinite loss is an error under `OnNan::Stop`.
    pub fn train_epoch(&mut self, epoch: usize) -> Result<EpochStats> {
        match self.train_epoch_inner(epoch, false)? {
            EpochEnd::Done(s) => Ok(*s),
            EpochEnd::Diverged(msg) => Err(Error::invalid(msg)),
            EpochEnd::Interrupted => Err(Error::invalid("interrupted")),
        }
    }

    pub(super) fn train_epoch_inner(&mut self, epoch: usize, stoppable: bool) -> Result<EpochEnd> {
        let t0 = Instant::now();
        let waits0 = self.state.config.device.host_waits()?;
        let submits0 = self.state.config.device.submits()?;
        let mut ph = Phases::default();
        let (mut loss_sum, mut correct, mut seen, mut micro) = (0.0, 0usize, 0usize, 0usize);
        let mut skipped = 0usize;
        let mut full_graph = None;
        let batches = match self.state.config.full_graph {
            Some(_) => Vec::new(),
            None => self.state.batches(epoch),
        };
        if self.state.config.full_graph.is_some() {
            let out = self.full.run(&mut self.state, epoch)?;
            ph.add(&out.phases);
            if !out.loss_sum.is_finite() {
                self.state.optim.zero_grad();
                return Ok(EpochEnd::Diverged(format!(
                    "training diverged: the loss of epoch {} is {} (its gradients were not \
                     applied)",
                    epoch + 1,
                    out.loss_sum
                )));
            }
            let t = Instant::now();
            self.state.optim.step()?;
            self.state.optim.zero_grad();
            ph.optimizer = t.elapsed().as_secs_f64();
            loss_sum = out.loss_sum;
            correct = out.correct;
            seen = out.seeds;
            full_graph = Some(out.stats);
        }
        for (b, seeds) in batches.iter().enumerate() {
            let source = &mut *self.source;
            let out = micro::run_batch(&mut self.state, source, epoch, b, seeds, Pass::Train)?;
            ph.add(&out.phases);
            micro += out.stats.k;
            self.micro_log.push(out.stats);
            if out.non_finite {
                let what = format!(
                    "the loss of epoch {} (batch {} of {}) is {}",
                    epoch + 1,
                    b + 1,
                    batches.len(),
                    out.loss_sum
                );
                if self.state.config.on_nan == OnNan::Stop {
                    return Ok(EpochEnd::Diverged(format!(
                        "training diverged: {what} (its gradients were not applied)"
                    )));
                }
                skipped += 1;
                if skipped == batches.len() {
                    return Ok(EpochEnd::Diverged(format!(
                        "training diverged: every batch of epoch {} had a NaN or infinite \
                         loss ({what})",
                        epoch + 1
                    )));
                }
                continue;
            }
            loss_sum += out.loss_sum;
            correct += out.correct;
            seen += out.seeds;
            if stoppable && b + 1 < batches.len() && self.stop_requested()? {
                return Ok(EpochEnd::Interrupted);
            }
        }
        let valid_acc = if self.state.config.eval_every > 0
            && (epoch + 1) % self.state.config.eval_every == 0
            && self.has_validation_nodes()
        {
            Some(self.evaluate(&self.state.data.split.valid)?)
        } else {
            None
        };
        Ok(EpochEnd::Done(Box::new(EpochStats {
            epoch: epoch + 1,
            loss: loss_sum / seen.max(1) as f64,
            train_acc: correct as f64 / seen.max(1) as f64,
            valid_acc,
            test_acc: None,
            lr: self.state.optim.lr(),
            seconds: t0.elapsed().as_secs_f64(),
            phases: ph,
            batches: batches.len().max(usize::from(full_graph.is_some())),
            skipped_batches: skipped,
            micro_batches: micro,
            host_waits: self.state.config.device.host_waits()? - waits0,
            submits: self.state.config.device.submits()? - submits0,
            full_graph,
        })))
    }
}
