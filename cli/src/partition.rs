//! `espalier partition`: sample batches, partition them into micro-batches and report
//! K, redundancy, times and per micro-batch sizes and peaks, without training. Measured
//! peaks come from one forward and backward per micro-batch (no optimizer step), or are
//! left out with `--no-run`. `--compare` runs every partitioner on the same batches and
//! prints one table; `--graph-only` cuts the whole graph instead (see `partition_graph`).

use clap::Args;
use serde::Serialize;

use espalier::bytes::format_bytes;
use espalier::error::{Error, Result};
use espalier::graph::Dataset;
use espalier::partition::{self, PartitionStats};
use espalier::train::TrainConfig;

use crate::common::{write_json, CommonArgs, TrainOnly};
use crate::partition_graph;

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
    let mut trainer = c.trainer(&data, graph, config(c, &data, a.epochs)?)?;
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
        trainer.state.config.micro.partitioner = name.to_string();
        for epoch in 0..a.epochs {
            for s in trainer.partition_epoch(epoch, !a.no_run)? {
                if !a.compare {
                    print_stats(&s);
                }
                all.push(s);
            }
        }
        if let Some(note) = trainer.state.partitioner.note() {
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
                config: &trainer.state.config,
                micro_batches: &all,
            },
        )?;
    }
    Ok(())
}

/// The configuration batches are sampled and partitioned with: the common flags' over
/// `epochs` epochs (what only training reads does not change a partition).
pub fn config(c: &CommonArgs, data: &Dataset, epochs: usize) -> Result<TrainConfig> {
    c.config(
        data,
        TrainOnly {
            epochs: epochs.max(1),
            lr: 0.01,
            weight_decay: 0.0,
            eval_every: 0,
            eval_batch_size: 4096,
        },
    )
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

/// Largest, smallest and mean of a batch's micro-batch peaks.
struct Spread {
    max: u64,
    min: u64,
    mean: f64,
}

impl Spread {
    /// `None` when `values` is empty.
    fn of(values: impl Iterator<Item = u64>) -> Option<Spread> {
        let (mut max, mut min, mut sum, mut n) = (0u64, u64::MAX, 0f64, 0usize);
        for v in values {
            max = max.max(v);
            min = min.min(v);
            sum += v as f64;
            n += 1;
        }
        (n > 0).then(|| Spread {
            max,
            min,
            mean: sum / n as f64,
        })
    }

    /// Largest over smallest (1 = every micro-batch alike).
    fn ratio(&self) -> f64 {
        self.max as f64 / self.min.max(1) as f64
    }
}

/// One row per partitioner and batch: K (the K a `--memory-budget` needs when one is
/// given), redundancy, the estimated and measured largest and smallest micro-batch peaks
/// and their ratios, and the seconds.
fn print_compare(all: &[PartitionStats]) {
    println!(
        "{:<8} {:>5} {:>3} {:>10} {:>11} {:>11} {:>7} {:>8} {:>11} {:>11} {:>7} {:>10} {:>9} {:>10}",
        "name",
        "ep/b",
        "K",
        "redundancy",
        "est. max",
        "est. min",
        "max/min",
        "max/mean",
        "peak max",
        "peak min",
        "max/min",
        "partition",
        "slice",
        "compute"
    );
    let bytes = |s: &Option<Spread>, f: fn(&Spread) -> u64| {
        s.as_ref().map_or("-".to_string(), |s| format_bytes(f(s)))
    };
    let ratio = |s: &Option<Spread>, f: fn(&Spread) -> f64| {
        s.as_ref()
            .map_or("-".to_string(), |s| format!("{:.3}", f(s)))
    };
    for s in all {
        let est = Spread::of(s.batches.iter().map(|b| b.est_peak_bytes));
        let peak = Spread::of(s.batches.iter().filter_map(|b| b.peak_bytes));
        let compute: f64 = s.batches.iter().map(|b| b.compute_s).sum();
        println!(
            "{:<8} {:>5} {:>3} {:>10.3} {:>11} {:>11} {:>7} {:>8} {:>11} {:>11} {:>7} {:>9.4}s {:>8.4}s {:>9.3}s",
            s.partitioner,
            format!("{}/{}", s.epoch, s.batch),
            s.k,
            s.redundancy,
            bytes(&est, |s| s.max),
            bytes(&est, |s| s.min),
            ratio(&est, Spread::ratio),
            ratio(&est, |s| s.max as f64 / s.mean.max(1.0)),
            bytes(&peak, |s| s.max),
            bytes(&peak, |s| s.min),
            ratio(&peak, Spread::ratio),
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
