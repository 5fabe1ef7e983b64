//! Command-line interface: argument definitions and dispatch.

mod bench;
mod bench_peak;
mod cache;
pub mod check;
pub mod common;
pub mod devices;
mod gen;
pub mod log;
pub mod partition;
mod partition_graph;
mod plot;
pub mod train;

use clap::{Parser, Subcommand};

use espalier::error::{Error, Result};

/// espalier: train graph neural networks in micro-batches.
#[derive(Parser, Debug)]
#[command(name = "espalier", version, about, long_about = None)]
pub struct Cli {
    /// Worker threads for CPU work (default: all cores).
    #[arg(long, global = true)]
    pub threads: Option<usize>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a GNN (with no flags: GraphSAGE on an embedded synthetic Cora-sized graph).
    Train(Box<train::TrainArgs>),
    /// Sample and partition batches into micro-batches; report redundancy, estimated and
    /// measured peak memory per micro-batch, without training.
    Partition(Box<partition::PartitionArgs>),
    /// Benchmark a named workload (`--list`) or the given flags: median time per phase,
    /// epoch time, seeds per second, peak device bytes and K, as a table and JSON.
    Bench(Box<bench::BenchArgs>),
    /// Write a synthetic graph in OGB's raw layout, so other tools read the same graph.
    Gen(gen::GenArgs),
    /// See or clear the dataset cache: `espalier cache ls`, `espalier cache clear`.
    Cache(cache::CacheArgs),
    /// Chart the JSON of `train --json`, `partition --json` and `bench --json` as SVG or
    /// PNG: loss and accuracy per epoch, peak memory per micro-batch against the budget,
    /// time per phase.
    Plot(plot::PlotArgs),
    /// List the devices this build can use: wgpu adapters with their limits, then CUDA.
    #[command(after_help = devices::HELP)]
    Devices(devices::DevicesArgs),
    /// Check each GPU device against the CPU reference: every op, training, memory
    /// estimates, transfers, out-of-memory splits, and its speed per op.
    #[command(after_help = check::HELP)]
    Check(check::CheckArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    if let Some(n) = cli.threads {
        if n == 0 {
            return Err(Error::flag("--threads", "--threads must be at least 1"));
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| Error::flag("--threads", format!("--threads: {e}")))?;
    }
    let several_ranks = espalier::dist::launched_size()?.is_some_and(|n| n > 1);
    if several_ranks && !matches!(cli.command, None | Some(Command::Train(_))) {
        // Each rank would run the whole command alone and write the same files.
        return Err(Error::invalid(
            "only `espalier train` runs over several MPI ranks; start this command as one \
             process",
        ));
    }
    match cli.command {
        None => train::run(&train::TrainArgs::default_args()),
        Some(Command::Train(a)) => train::run(&a),
        Some(Command::Partition(a)) => partition::run(&a),
        Some(Command::Bench(mut a)) => {
            a.argv = bench::args_after_subcommand(
                std::env::args_os().map(|s| s.to_string_lossy().into_owned()),
            );
            bench::run(&a)
        }
        Some(Command::Gen(a)) => gen::run(&a),
        Some(Command::Cache(a)) => cache::run(&a),
        Some(Command::Plot(a)) => plot::run(&a),
        Some(Command::Devices(a)) => devices::run(&a),
        Some(Command::Check(a)) => check::run(&a),
    }
}
