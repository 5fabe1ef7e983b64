//! The run loop: epochs with the learning-rate schedule, early stopping on the validation
//! accuracy, a checkpoint after every epoch, a stop request honoured after the current
//! batch, and the run's summary.

use std::path::Path;
use std::time::Instant;

use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::train::stats::{EpochStats, Summary};

use super::epoch::EpochEnd;
use super::{FinalFigures, SoFar, Trainer};

/// The best validation accuracy so far and the evaluations since it.
#[derive(Default)]
struct Best {
    acc: Option<f64>,
    epoch: Option<usize>,
    test: Option<f64>,
    since: usize,
}

impl Best {
    fn from_history(h: &[EpochStats]) -> Best {
        let mut b = Best::default();
        for e in h {
            if let Some(v) = e.valid_acc {
                if b.improves(v) {
                    b.acc = Some(v);
                    b.epoch = Some(e.epoch);
                    b.test = e.test_acc;
                    b.since = 0;
                } else {
                    b.since += 1;
                }
            }
        }
        b
    }

    /// Whether `v` beats the best so far (NaN, an accuracy over no node, never does).
    fn improves(&self, v: f64) -> bool {
        !v.is_nan() && self.acc.is_none_or(|b| v > b)
    }
}

impl Trainer<'_> {
    /// Trains for the configured epochs (from `start_epoch`), calling `on_epoch` after
    /// each, and checkpointing every epoch to `checkpoint` if given (checked writable
    /// before the first epoch; a diverged epoch is never written, so the last checkpoint
    /// stays the last good one). The learning rate follows `lr_schedule`; with `patience`
    /// the run stops early; a stop flag ([`Trainer::set_stop_flag`]) ends it after the
    /// current batch with `interrupted` set. After resuming a finished run nothing is
    /// trained and the stored figures come back (`already_finished`).
    pub fn run(
        &mut self,
        checkpoint: Option<&Path>,
        on_epoch: &mut dyn FnMut(&EpochStats),
    ) -> Result<Summary> {
        // With several ranks, rank 0 alone writes (they hold the same weights).
        let checkpoint = checkpoint.filter(|_| self.state.dist.is_root());
        self.check_run(checkpoint)?;
        let mem = self.state.config.device.memory()?;
        mem.reset_peak();
        self.state.peak_seen.set(0);
        let mut best = Best::from_history(&self.history);
        if self.finished() {
            return self.stored_summary(&best);
        }
        let t0 = Instant::now();
        self.seconds_here = 0.0;
        let (mut stopped_early, mut interrupted) = (false, false);
        for epoch in self.state.start_epoch..self.state.config.epochs {
            let lr = self.state.config.lr_schedule.lr_at(
                self.state.config.lr,
                epoch,
                self.state.config.epochs,
            );
            self.state.optim.set_lr(lr);
            let stats = match self.train_epoch_inner(epoch, true)? {
                EpochEnd::Done(s) => *s,
                EpochEnd::Interrupted => {
                    interrupted = true;
                    break;
                }
                EpochEnd::Diverged(msg) => return Err(self.diverged(&msg, checkpoint)),
            };
            self.record_epoch(stats, &mut best, on_epoch)?;
            self.seconds_here = t0.elapsed().as_secs_f64();
            if let Some(path) = checkpoint {
                self.save(path, epoch + 1)?;
            }
            self.keep_partial(&best);
            if self.state.config.patience.is_some_and(|p| best.since >= p) {
                stopped_early = epoch + 1 < self.state.config.epochs;
                break;
            }
            if self.stop_requested()? {
                interrupted = epoch + 1 < self.state.config.epochs;
                break;
            }
        }
        // No more batches: sampler ranks (if any) may stop.
        self.release_samplers()?;
        self.seconds_here = t0.elapsed().as_secs_f64();
        let fin = self.final_figures(interrupted, stopped_early, checkpoint)?;
        let so_far = self.so_far();
        self.micro_log.clear();
        Ok(self.summary(fin, &best, so_far, interrupted, false))
    }

    /// Refuses a run that cannot start: a checkpoint that cannot be written, or
    /// `patience` without a labelled validation node to watch.
    fn check_run(&self, checkpoint: Option<&Path>) -> Result<()> {
        if let Some(path) = checkpoint {
            crate::atomic::check_writable(path)?;
        }
        if self.state.config.patience.is_some() && !self.has_validation_nodes() {
            return Err(Error::flag(
                "--patience",
                format!(
                    "--patience watches the validation accuracy, but the validation split of \
                     dataset {} has no labelled node",
                    self.state.data.name
                ),
            ));
        }
        Ok(())
    }

    /// The summary of a resumed run that had already finished: nothing is trained.
    fn stored_summary(&mut self, best: &Best) -> Result<Summary> {
        self.release_samplers()?;
        let fin = match self.stored_final.clone() {
            Some(f) => f,
            // Finished but saved before the final evaluation: evaluate now.
            None => FinalFigures {
                valid_acc: self.evaluate(&self.state.data.split.valid)?,
                test_acc: self.evaluate(&self.state.data.split.test)?,
                final_loss: self.history.last().map_or(f64::NAN, |e| e.loss),
                stopped_early: false,
            },
        };
        Ok(self.summary(fin, best, self.earlier.clone(), false, true))
    }

    /// The error that ends a run whose epoch diverged (`msg`), naming the checkpoint that
    /// keeps the last good weights.
    fn diverged(&self, msg: &str, checkpoint: Option<&Path>) -> Error {
        let kept = match (checkpoint, self.history.last()) {
            (Some(p), Some(e)) => format!(
                "; {} keeps the weights after epoch {}",
                p.display(),
                e.epoch
            ),
            _ => String::new(),
        };
        Error::invalid(format!("{msg}: stopped (try a lower learning rate){kept}"))
    }

    /// Adds a finished epoch to the history, after `on_epoch`: when its validation
    /// accuracy is the best so far, it also gets the test accuracy.
    fn record_epoch(
        &mut self,
        mut stats: EpochStats,
        best: &mut Best,
        on_epoch: &mut dyn FnMut(&EpochStats),
    ) -> Result<()> {
        if let Some(v) = stats.valid_acc {
            if best.improves(v) {
                let test = no_grad(|| self.evaluate(&self.state.data.split.test))?;
                stats.test_acc = Some(test);
                *best = Best {
                    acc: Some(v),
                    epoch: Some(stats.epoch),
                    test: Some(test),
                    since: 0,
                };
            } else {
                best.since += 1;
            }
        }
        on_epoch(&stats);
        self.history.push(stats);
        Ok(())
    }

    /// With [`Trainer::keep_partial_summary`]: leaves the summary of the epochs so far,
    /// marked interrupted and without final figures, where the caller can take it.
    fn keep_partial(&self, best: &Best) {
        if let Some(sink) = &self.partial {
            let partial = self.summary(
                FinalFigures {
                    valid_acc: f64::NAN,
                    test_acc: f64::NAN,
                    final_loss: self.history.last().map_or(f64::NAN, |e| e.loss),
                    stopped_early: false,
                },
                best,
                self.so_far(),
                true,
                false,
            );
            *sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(partial);
        }
    }

    /// The run's final figures: after an interruption none is measured (the run stops
    /// promptly); otherwise the validation and test accuracies, kept in a last
    /// checkpoint.
    fn final_figures(
        &self,
        interrupted: bool,
        stopped_early: bool,
        checkpoint: Option<&Path>,
    ) -> Result<FinalFigures> {
        let final_loss = self.history.last().map_or(f64::NAN, |e| e.loss);
        if interrupted {
            return Ok(FinalFigures {
                valid_acc: f64::NAN,
                test_acc: f64::NAN,
                final_loss,
                stopped_early,
            });
        }
        let fin = FinalFigures {
            valid_acc: self.evaluate(&self.state.data.split.valid)?,
            test_acc: self.evaluate(&self.state.data.split.test)?,
            final_loss,
            stopped_early,
        };
        if let Some(path) = checkpoint {
            let done = self
                .history
                .last()
                .map_or(self.state.start_epoch, |e| e.epoch);
            self.save_with(path, done, Some(&fin))?;
        }
        Ok(fin)
    }

    fn summary(
        &self,
        fin: FinalFigures,
        best: &Best,
        so_far: SoFar,
        interrupted: bool,
        already_finished: bool,
    ) -> Summary {
        Summary {
            dataset: self.state.data.name.clone(),
            config: self.state.config.clone(),
            num_parameters: self.state.model.num_parameters(),
            test_acc: fin.test_acc,
            valid_acc: fin.valid_acc,
            final_loss: fin.final_loss,
            best_valid_acc: best.acc,
            best_valid_epoch: best.epoch,
            test_acc_at_best_valid: best.test,
            stopped_early: fin.stopped_early,
            interrupted,
            already_finished,
            epochs: self.history.clone(),
            peak_bytes: so_far.peak_bytes,
            features_on_device: self.state.resident_features.is_some(),
            train_seconds: so_far.train_seconds,
            ranks: self.state.dist.size(),
            sampler_ranks: self.state.dist.collective.samplers(),
            micro_batches: so_far.micro_batches,
        }
    }
}
