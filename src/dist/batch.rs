//! The trainer's two data-parallel steps, kept here so that the micro-batch loop
//! (`crate::train::micro`) only calls them: deal a batch's micro-batches to the ranks, and
//! sum the batch's gradients and figures over the ranks before the optimizer step.

use std::time::Instant;

use rayon::prelude::*;

use crate::error::Result;
use crate::graph::Slicer;
use crate::nn::Module;
use crate::partition::PartitionStats;
use crate::train::micro::BatchOutcome;
use crate::train::Trainer;

impl Trainer<'_> {
    /// This rank's micro-batches of a batch, dealt by estimated cost ([`super::deal`]);
    /// all of them in one process.
    pub(crate) fn my_parts(&self, slicer: &Slicer, parts: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>> {
        if self.dist.size() == 1 {
            return Ok(parts);
        }
        let model = &self.config.model;
        let costs: Vec<f64> = parts
            .par_iter()
            .map(|p| Ok(super::micro_cost(&slicer.sizes(p)?, model)))
            .collect::<Result<_>>()?;
        Ok(self.dist.my_parts(parts, &costs))
    }

    /// Sums the gradients, the loss, the correct predictions, the seeds and the
    /// micro-batch count over the ranks (nothing in one process), so that every rank
    /// steps with the batch's gradient and reports the batch's figures.
    pub(crate) fn reduce_batch(
        &self,
        out: &mut BatchOutcome,
        stats: &mut PartitionStats,
    ) -> Result<()> {
        if self.dist.size() == 1 {
            return Ok(());
        }
        let t = Instant::now();
        let mut figures = [
            out.loss_sum,
            out.correct as f64,
            out.seeds as f64,
            stats.k as f64,
        ];
        self.dist
            .all_reduce_batch(&self.model.parameters(), &mut figures)?;
        out.loss_sum = figures[0];
        out.correct = figures[1].round() as usize;
        out.seeds = figures[2].round() as usize;
        stats.k = figures[3].round() as usize;
        out.phases.allreduce += t.elapsed().as_secs_f64();
        Ok(())
    }
}
