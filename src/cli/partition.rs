//! `espalier partition`: sample batches, partition them into micro-batches and report
//! K, redundancy, times and per micro-batch sizes and peaks, without training. Measured
//! peaks come from one forward and backward per micro-batch (no optimizer step), or are
//! left out with `--no-run`.

use std::sync::Arc;

use clap::Args;
use serde::Serialize;

use espalier::error::Result;
use espalier::partition::{format_bytes, PartitionStats};
use espalier::train::{TrainConfig, Trainer};

use crate::cli::common::{write_json, CommonArgs, TrainOnly};

/// Flags of `espalier partition`.
#[derive(Args, Debug, Clone)]
pub struct PartitionArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Epochs to sample and partition (each samples its batches afresh).
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    /// Only estimate: do not run forward and backward to measure peaks.
    #[arg(long)]
    pub no_run: bool,
    /// Write `{"micro_batches": [...]}` (as in `train --json`) to this file, or `-`.
    #[arg(long)]
    pub json: Option<String>,
}

/// What `--json` writes.
#[derive(Serialize)]
struct Report<'a> {
    dataset: &'a str,
    config: &'a TrainConfig,
    micro_batches: &'a [PartitionStats],
}

pub fn run(a: &PartitionArgs) -> Result<()> {
    let c = &a.common;
    let (data, graph) = c.load()?;
    let config = c.config(
        &data,
        TrainOnly {
            epochs: a.epochs.max(1),
            lr: 0.01,
            weight_decay: 0.0,
            eval_every: 0,
            eval_batch_size: 4096,
        },
    )?;
    let mut trainer = Trainer::new(&data, Arc::new(graph), config)?;
    trainer.model.set_lstm_split(a.common.lstm_split)?;
    trainer.estimator.lstm_split = a.common.lstm_split;
    let mut all = Vec::new();
    for epoch in 0..a.epochs {
        for s in trainer.partition_epoch(epoch, !a.no_run)? {
            print_stats(&s);
            all.push(s);
        }
    }
    if let Some(path) = &a.json {
        write_json(
            path,
            &Report {
                dataset: &data.name,
                config: &trainer.config,
                micro_batches: &all,
            },
        )?;
    }
    Ok(())
}

fn print_stats(s: &PartitionStats) {
    println!(
        "epoch {} batch {}: k {}  partitioner {}  redundancy {:.3}  partition {:.4}s  slice {:.4}s{}",
        s.epoch + 1,
        s.batch,
        s.k,
        s.partitioner,
        s.redundancy,
        s.partition_s,
        s.slice_s,
        if s.oom_splits > 0 {
            format!("  ({} split after running out of memory)", s.oom_splits)
        } else {
            String::new()
        }
    );
    println!(
        "  {:>4} {:>8} {:>11} {:>12} {:>12} {:>8} {:>9}",
        "mb", "seeds", "input nodes", "est. peak", "peak", "error", "compute"
    );
    for (i, b) in s.batches.iter().enumerate() {
        let (peak, err) = match b.peak_bytes {
            Some(p) => (
                format_bytes(p),
                format!(
                    "{:+.1}%",
                    (b.est_peak_bytes as f64 - p as f64) / p.max(1) as f64 * 100.0
                ),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "  {:>4} {:>8} {:>11} {:>12} {:>12} {:>8} {:>8.4}s",
            i,
            b.seeds,
            b.input_nodes,
            format_bytes(b.est_peak_bytes),
            peak,
            err,
            b.compute_s
        );
    }
}
