//! `espalier partition`: sample batches, partition them into micro-batches and report
//! K, redundancy, times and per micro-batch sizes and peaks, without training. Measured
//! peaks come from one forward and backward per micro-batch (no optimizer step), or are
//! left out with `--no-run`. `--compare` runs every partitioner on the same batches and
//! prints one table; `--graph-only` cuts the whole graph instead (see `partition_graph`).

use std::sync::Arc;

use clap::Args;
use serde::Serialize;

use espalier::error::{Error, Result};
use espalier::partition::{self, format_bytes, PartitionStats};
use espalier::train::{TrainConfig, Trainer};

use crate::cli::common::{write_json, CommonArgs, TrainOnly};
use crate::cli::partition_graph;

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
    /// Write `{"micro_batches": [...]}` (as in `train --json`) to this file, or `-`; with
    /// --graph-only, `{"graph_cuts": [...]}`.
    #[arg(long)]
    pub json: Option<String>,
    /// Run every partitioner on the same batches and print one table (with --graph-only:
    /// both grem and metis). Splits each batch into K = 8 micro-batches unless
    /// --micro-batches or --memory-budget is given (with K = 1 every partitioner would
    /// return the whole batch).
    #[arg(long)]
    pub compare: bool,
    /// Partition the whole graph (grem or metis) instead of sampled batches: edge cut,
    /// balance, seconds and working memory.
    #[arg(long)]
    pub graph_only: bool,
    /// Parts of a --graph-only partition.
    #[arg(long, default_value_t = 8)]
    pub parts: usize,
}

/// What `--json` writes.
#[derive(Serialize)]
struct Report<'a> {
    dataset: &'a str,
    config: &'a TrainConfig,
    micro_batches: &'a [PartitionStats],
}

/// What `--graph-only --json` writes.
#[derive(Serialize)]
struct GraphReport<'a> {
    dataset: &'a str,
    graph_cuts: &'a [partition_graph::GraphCut],
}

/// K of `--compare` when neither `--micro-batches` nor `--memory-budget` is given.
pub const COMPARE_K: usize = 8;

pub fn run(a: &PartitionArgs) -> Result<()> {
    if a.graph_only {
        return run_graph(a);
    }
    let mut common = a.common.clone();
    if a.compare && common.micro_batches.is_none() && common.memory_budget.is_none() {
        common.micro_batches = Some(COMPARE_K);
        eprintln!(
            "--compare: K = {COMPARE_K} micro-batches per batch (set --micro-batches to change it)"
        );
    }
    let c = &common;
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
    trainer.model.set_lstm_split(c.lstm_split)?;
    trainer.estimator.lstm_split = c.lstm_split;
    let names: Vec<&str> = if a.compare {
        partition::names()
    } else {
        vec![c.partitioner.as_str()]
    };
    let mut all = Vec::new();
    for name in names {
        // Sampling is keyed by the run's seed, epoch and batch: every partitioner sees
        // the same batches.
        trainer.set_partitioner(partition::by_name(name)?);
        trainer.config.micro.partitioner = name.to_string();
        for epoch in 0..a.epochs {
            for s in trainer.partition_epoch(epoch, !a.no_run)? {
                if !a.compare {
                    print_stats(&s);
                }
                all.push(s);
            }
        }
        if let Some(note) = trainer.partitioner.note() {
            eprintln!("{name}: {note}");
        }
    }
    if a.compare {
        print_compare(&all);
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

/// `--graph-only`: cut the whole graph with grem and/or metis.
fn run_graph(a: &PartitionArgs) -> Result<()> {
    let c = &a.common;
    if a.parts == 0 {
        return Err(Error::flag("--parts", "--parts must be at least 1"));
    }
    let names: Vec<&str> = if a.compare {
        partition_graph::GRAPH_NAMES.to_vec()
    } else {
        partition_graph::check_name(&c.partitioner)?;
        vec![c.partitioner.as_str()]
    };
    let (data, graph) = c.load()?;
    let cuts = names
        .iter()
        .map(|name| partition_graph::cut(&graph, name, a.parts, c.seed))
        .collect::<Result<Vec<_>>>()?;
    partition_graph::print(&cuts);
    if let Some(path) = &a.json {
        write_json(
            path,
            &GraphReport {
                dataset: &data.name,
                graph_cuts: &cuts,
            },
        )?;
    }
    Ok(())
}

/// Largest and mean of `values` (0 and 0 when empty).
fn max_mean(values: impl Iterator<Item = u64>) -> (u64, f64) {
    let (mut max, mut sum, mut n) = (0u64, 0f64, 0usize);
    for v in values {
        max = max.max(v);
        sum += v as f64;
        n += 1;
    }
    (max, sum / n.max(1) as f64)
}

/// One row per partitioner and batch.
fn print_compare(all: &[PartitionStats]) {
    println!(
        "{:<8} {:>5} {:>3} {:>10} {:>11} {:>11} {:>11} {:>11} {:>10} {:>9} {:>10}",
        "name",
        "ep/b",
        "K",
        "redundancy",
        "est. max",
        "est. mean",
        "peak max",
        "peak mean",
        "partition",
        "slice",
        "compute"
    );
    for s in all {
        let (est_max, est_mean) = max_mean(s.batches.iter().map(|b| b.est_peak_bytes));
        let measured: Vec<u64> = s.batches.iter().filter_map(|b| b.peak_bytes).collect();
        let (peak_max, peak_mean) = if measured.is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            let (m, avg) = max_mean(measured.into_iter());
            (format_bytes(m), format_bytes(avg.round() as u64))
        };
        let compute: f64 = s.batches.iter().map(|b| b.compute_s).sum();
        println!(
            "{:<8} {:>5} {:>3} {:>10.3} {:>11} {:>11} {:>11} {:>11} {:>9.4}s {:>8.4}s {:>9.3}s",
            s.partitioner,
            format!("{}/{}", s.epoch, s.batch),
            s.k,
            s.redundancy,
            format_bytes(est_max),
            format_bytes(est_mean.round() as u64),
            peak_max,
            peak_mean,
            s.partition_s,
            s.slice_s,
            compute
        );
    }
}

fn print_stats(s: &PartitionStats) {
    println!(
        "epoch {} batch {}: k {}  partitioner {}  redundancy {:.3}  partition {:.4}s  slice {:.4}s{}",
        s.epoch,
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
