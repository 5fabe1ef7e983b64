//! `espalier bench`: train a named workload (or the given flags) for `--warmup` plus
//! `--epochs` epochs and report the median of each phase, the epoch time, seeds per second,
//! the peak device bytes and K, as a table and as JSON. Workloads are named after the
//! papers' experiments and the rows of the PyTorch Geometric reference script
//! (`pyg_peer.py`, which `scripts/compare_pyg.sh` runs beside espalier); explicit flags
//! override a workload's.
//!
//! On the CPU it also measures the machine's limits first, in the same process
//! ([`bench_peak`]: a GEMM and a stream microbenchmark), and reports for forward and
//! backward the arithmetic done (multiply-adds of the matrix products), the bytes the ops
//! moved, the achieved GFLOP/s and GB/s and their share of those limits.

use std::collections::HashSet;
use std::sync::Arc;

use clap::parser::ValueSource;
use clap::{CommandFactory, Parser};
use serde::Serialize;

use espalier::bytes::format_bytes;
use espalier::error::{Error, Result};
use espalier::graph::synth::SynthSpec;
use espalier::train::{EpochStats, Phases, TrainConfig, Trainer};

use crate::bench_peak::{self, median, Peak, WorkReport};
use crate::common::{write_json, CommonArgs, TrainOnly};

/// Flags of `espalier bench`.
#[derive(Parser, Debug, Clone)]
#[command(name = "bench")]
pub struct BenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// A named workload (`--list` prints them); explicit flags override its settings.
    #[arg(long)]
    pub workload: Option<String>,
    /// Print the workloads and exit.
    #[arg(long)]
    pub list: bool,
    /// Multiplies the scale of a synthetic dataset (`synthetic:PRESET[,scale=X]`).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Epochs run before measuring (not reported).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Measured epochs: the report gives their medians.
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.01, allow_negative_numbers = true)]
    pub lr: f64,
    /// Weight decay (as `espalier train`).
    #[arg(long, default_value_t = 5e-4, allow_negative_numbers = true)]
    pub weight_decay: f64,
    /// Write the JSON report to this file, or `-` for standard output (the table then goes
    /// to standard error).
    #[arg(long)]
    pub json: Option<String>,
    /// The command line after `bench`, filled in by the dispatcher (workload merging).
    #[arg(skip)]
    pub argv: Vec<String>,
}

/// A named benchmark: flags as on the command line, and the K values it sweeps.
pub struct Workload {
    pub name: &'static str,
    pub about: &'static str,
    pub flags: &'static [(&'static str, &'static str)],
    /// Micro-batch counts run one after the other (empty: the flags' own K or budget).
    pub ks: &'static [usize],
}

const BETTY: &str = "Betty's ogbn-products experiment (synthetic stand-in): all training \
                     seeds as one batch, K chosen for a 24GiB budget";

/// The workloads `--workload` accepts.
pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "betty-products-lstm",
        about: BETTY,
        flags: &[
            ("--dataset", "synthetic:products-like"),
            ("--model", "sage"),
            ("--aggr", "lstm"),
            ("--fanouts", "10,25"),
            ("--hidden", "256"),
            ("--batch-size", "full"),
            ("--memory-budget", "24GiB"),
        ],
        ks: &[],
    },
    Workload {
        name: "betty-products-mean",
        about: BETTY,
        flags: &[
            ("--dataset", "synthetic:products-like"),
            ("--model", "sage"),
            ("--aggr", "mean"),
            ("--fanouts", "10,25"),
            ("--hidden", "256"),
            ("--batch-size", "full"),
            ("--memory-budget", "24GiB"),
        ],
        ks: &[],
    },
    Workload {
        name: "betty-products-gat",
        about: BETTY,
        flags: &[
            ("--dataset", "synthetic:products-like"),
            ("--model", "gat"),
            ("--fanouts", "10,25"),
            ("--hidden", "256"),
            ("--batch-size", "full"),
            ("--memory-budget", "24GiB"),
        ],
        ks: &[],
    },
    Workload {
        name: "cora-sage-mean",
        about: "the Cora row of the PyTorch Geometric reference script (pyg_peer.py, run \
                by scripts/compare_pyg.sh): SAGE-mean 25,10, full batch, K 1 and 4; pass \
                --dataset DIR/cora for the real graph",
        flags: &[
            ("--dataset", "synthetic:cora-like"),
            ("--model", "sage"),
            ("--aggr", "mean"),
            ("--fanouts", "25,10"),
            ("--hidden", "256"),
            ("--batch-size", "full"),
        ],
        ks: &[1, 4],
    },
    Workload {
        name: "enron-sage-mean",
        about: "the email-enron row of the PyTorch Geometric reference script \
                (pyg_peer.py): SAGE-mean 10,25, full batch, K 1 and 4; the default is a \
                synthetic graph of enron's node count: pass --dataset DIR/email-enron for \
                the real one",
        flags: &[
            ("--dataset", "synthetic:arxiv-like,scale=0.2167"),
            ("--model", "sage"),
            ("--aggr", "mean"),
            ("--fanouts", "10,25"),
            ("--hidden", "256"),
            ("--batch-size", "full"),
        ],
        ks: &[1, 4],
    },
    Workload {
        name: "syn100k-sage-mean",
        about: "the synthetic 100k-node row of the PyTorch Geometric reference script \
                (pyg_peer.py): SAGE-mean 10,25, K 1 and 4, on our products-like generator \
                at 100k nodes / 2.5M edges, not that script's graph (write it with \
                pyg_peer.py --write-ogb and pass --dataset DIR for that)",
        flags: &[
            ("--dataset", "synthetic:products-like,scale=0.0408"),
            ("--model", "sage"),
            ("--aggr", "mean"),
            ("--fanouts", "10,25"),
            ("--hidden", "256"),
            ("--batch-size", "full"),
        ],
        ks: &[1, 4],
    },
];

/// The workload called `name`.
pub fn workload(name: &str) -> Result<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name).ok_or_else(|| {
        let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
        Error::invalid(format!(
            "unknown workload `{name}`: expected one of {}",
            names.join(", ")
        ))
    })
}

/// The command line after the `bench` subcommand, without the global `--threads`.
pub fn args_after_subcommand(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut it = args.skip(1);
    let (mut out, mut seen) = (Vec::new(), false);
    while let Some(a) = it.next() {
        if a == "--threads" {
            it.next();
        } else if seen {
            if !a.starts_with("--threads=") {
                out.push(a);
            }
        } else if a == "bench" {
            seen = true;
        }
    }
    out
}

/// clap's message without its own `error: ` (main adds one).
fn clap_error(e: clap::Error) -> Error {
    let text = e.to_string();
    Error::invalid(text.strip_prefix("error: ").unwrap_or(&text).trim_end())
}

fn parse(argv: &[String]) -> Result<BenchArgs> {
    let it = std::iter::once("bench".to_string()).chain(argv.iter().cloned());
    BenchArgs::try_parse_from(it).map_err(clap_error)
}

/// The workload's flags, then the explicit ones, each flag given once; returns the merged
/// arguments and the workload's K sweep (dropped when K or a budget is given explicitly).
fn merge(a: &BenchArgs, w: &Workload) -> Result<(BenchArgs, Vec<usize>)> {
    let it = std::iter::once("bench".to_string()).chain(a.argv.iter().cloned());
    let m = BenchArgs::command()
        .try_get_matches_from(it)
        .map_err(clap_error)?;
    let explicit: HashSet<String> = m
        .ids()
        .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
        .map(|id| id.as_str().to_string())
        .collect();
    let k_given = explicit.contains("micro_batches") || explicit.contains("memory_budget");
    // Another model drops the workload's flags for its own (an aggregator means nothing
    // to GAT, and such a flag is an error).
    let model_given = explicit.contains("model");
    let mut argv = Vec::new();
    for (flag, value) in w.flags {
        let id = flag.trim_start_matches('-').replace('-', "_");
        let k_flag = id == "micro_batches" || id == "memory_budget";
        let model_flag = model_only(flag);
        let overridden =
            explicit.contains(&id) || (k_given && k_flag) || (model_given && model_flag);
        if !overridden {
            argv.push(flag.to_string());
            argv.push(value.to_string());
        }
    }
    argv.extend(a.argv.iter().cloned());
    let ks = if k_given { Vec::new() } else { w.ks.to_vec() };
    Ok((parse(&argv)?, ks))
}

/// Whether only some models read `flag` (those of the registry of model kinds, and
/// SAGE-LSTM's `--lstm-split`): a workload's are dropped when `--model` is given.
fn model_only(flag: &str) -> bool {
    flag == "--lstm-split" || espalier::nn::model_flags().iter().any(|(f, _)| *f == flag)
}

/// One measured configuration.
#[derive(Serialize)]
struct RunReport {
    dataset: String,
    device: String,
    config: TrainConfig,
    warmup: usize,
    epochs: usize,
    /// Training seeds per epoch.
    seeds: usize,
    /// Largest K of a measured batch (after any out-of-memory split).
    k: usize,
    micro_batches_per_epoch: usize,
    /// Mean redundancy over the measured batches.
    redundancy: f64,
    epoch_median_s: f64,
    seeds_per_s: f64,
    /// Median of each phase over the measured epochs. `gather` is the host feature gather;
    /// the host-to-device upload is timed in `forward` (on the CPU it moves the gathered
    /// buffer, no copy).
    phase_median_s: Phases,
    /// Highest bytes live on the device during the measured epochs.
    peak_bytes: u64,
    /// Work of forward and backward per epoch (medians over the measured epochs), the
    /// achieved rates, and on the CPU their share of the limits measured in `peak`.
    work: WorkReport,
    epoch_s: Vec<f64>,
    loss: Vec<f64>,
}

/// What `--json` writes.
#[derive(Serialize)]
struct Report {
    workload: Option<String>,
    scale: Option<f64>,
    /// The CPU's limits measured before the runs (`null` on a GPU).
    peak: Option<Peak>,
    runs: Vec<RunReport>,
}

fn medians(e: &[EpochStats]) -> Phases {
    let m = |f: fn(&Phases) -> f64| median(e.iter().map(|s| f(&s.phases)).collect());
    Phases {
        sample: m(|p| p.sample),
        partition: m(|p| p.partition),
        slice: m(|p| p.slice),
        gather: m(|p| p.gather),
        wait: m(|p| p.wait),
        forward: m(|p| p.forward),
        backward: m(|p| p.backward),
        optimizer: m(|p| p.optimizer),
        allreduce: m(|p| p.allreduce),
        feed: m(|p| p.feed),
        // The work is reported on its own (`RunReport::work`); zeros are not written.
        forward_work: Default::default(),
        backward_work: Default::default(),
    }
}

/// Prints the workloads; a closed pipe (`espalier bench --list | head`) ends it quietly.
fn list() {
    let mut text = String::new();
    for w in WORKLOADS {
        let flags: Vec<String> = w.flags.iter().map(|(f, v)| format!("{f} {v}")).collect();
        let ks = if w.ks.is_empty() {
            String::new()
        } else {
            let k: Vec<String> = w.ks.iter().map(usize::to_string).collect();
            format!(" (K = {})", k.join(", "))
        };
        text.push_str(&format!(
            "{}\n    {}{ks}\n    {}\n",
            w.name,
            flags.join(" "),
            w.about
        ));
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
}

pub fn run(a: &BenchArgs) -> Result<()> {
    if a.list {
        list();
        return Ok(());
    }
    let (mut a, ks) = match &a.workload {
        Some(name) => merge(a, workload(name)?)?,
        None => (a.clone(), Vec::new()),
    };
    if a.epochs == 0 {
        return Err(Error::flag("--epochs", "--epochs must be at least 1"));
    }
    crate::train::check_optimizer_numbers(a.lr, a.weight_decay)?;
    if let Some(x) = a.scale {
        let spec = a.common.dataset.strip_prefix("synthetic:").ok_or_else(|| {
            Error::flag(
                "--scale",
                format!(
                    "--scale multiplies a synthetic dataset's scale; `{}` is not synthetic",
                    a.common.dataset
                ),
            )
        })?;
        let mut spec = SynthSpec::parse(spec)?;
        spec.scale *= x;
        if !(spec.scale.is_finite() && spec.scale > 0.0) {
            return Err(Error::flag(
                "--scale",
                format!("--scale {x} must be positive"),
            ));
        }
        a.common.dataset = format!("synthetic:{}", spec.name());
    }
    let (data, graph) = a.common.load()?;
    let graph = Arc::new(graph);
    let ks: Vec<Option<usize>> = if ks.is_empty() {
        vec![None]
    } else {
        ks.into_iter().map(Some).collect()
    };
    let peak = if a.common.device.parse::<espalier::Device>()? == espalier::Device::Cpu {
        eprintln!("bench: measuring the CPU's GEMM and stream peaks");
        Some(bench_peak::measure()?)
    } else {
        None
    };
    let mut runs = Vec::new();
    for k in ks {
        let mut c: CommonArgs = a.common.clone();
        if let Some(k) = k {
            c.micro_batches = Some(k);
        }
        runs.push(measure(&a, &c, &data, &graph, peak.as_ref())?);
    }
    let to_stdout = a.json.as_deref() == Some("-");
    let table = table(&runs, peak.as_ref());
    if to_stdout {
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if let Some(path) = &a.json {
        let report = Report {
            workload: a.workload.clone(),
            scale: a.scale,
            peak,
            runs,
        };
        write_json(path, &report)?;
    }
    Ok(())
}

fn measure(
    a: &BenchArgs,
    c: &CommonArgs,
    data: &espalier::graph::Dataset,
    graph: &Arc<espalier::graph::Csr>,
    peak: Option<&Peak>,
) -> Result<RunReport> {
    let config = c.config(
        data,
        TrainOnly {
            epochs: a.warmup + a.epochs,
            lr: a.lr,
            weight_decay: a.weight_decay,
            eval_every: 0,
            eval_batch_size: 4096,
        },
    )?;
    // The report is per phase: each must be charged its own device time.
    let config = TrainConfig {
        profile: true,
        ..config
    };
    let device = config.device;
    let model = config.model.label();
    let mut trainer = Trainer::new(data, graph.clone(), config)?;
    trainer.state.model.set_lstm_split(c.lstm_split)?;
    trainer.state.estimator.lstm_split = c.lstm_split;
    eprintln!(
        "bench: {} on {model}, device {device}, {} warm-up + {} measured epochs, {}",
        data.name,
        a.warmup,
        a.epochs,
        match &c.memory_budget {
            Some(b) => format!("budget {b}"),
            None => format!("K {}", c.micro_batches()),
        }
    );
    for e in 0..a.warmup {
        trainer.train_epoch(e)?;
    }
    trainer.state.take_peak();
    trainer.take_micro_log();
    let mut stats = Vec::with_capacity(a.epochs);
    for e in a.warmup..a.warmup + a.epochs {
        let s = trainer.train_epoch(e)?;
        eprintln!(
            "  epoch {}: {:.3}s loss {:.4}",
            e + 1 - a.warmup,
            s.seconds,
            s.loss
        );
        stats.push(s);
    }
    let peak_bytes = trainer.state.take_peak();
    let log = trainer.take_micro_log();
    let seeds = data.split.train.len();
    let epoch_median_s = median(stats.iter().map(|s| s.seconds).collect());
    Ok(RunReport {
        dataset: data.name.clone(),
        device: device.to_string(),
        config: trainer.state.config.clone(),
        warmup: a.warmup,
        epochs: a.epochs,
        seeds,
        k: log.iter().map(|s| s.k).max().unwrap_or(0),
        micro_batches_per_epoch: stats.last().map_or(0, |s| s.micro_batches),
        redundancy: log.iter().map(|s| s.redundancy).sum::<f64>() / log.len().max(1) as f64,
        epoch_median_s,
        seeds_per_s: seeds as f64 / epoch_median_s,
        phase_median_s: medians(&stats),
        peak_bytes,
        work: bench_peak::report(
            &stats
                .iter()
                .map(|s| {
                    let p = &s.phases;
                    (p.forward_work, p.forward, p.backward_work, p.backward)
                })
                .collect::<Vec<_>>(),
            peak,
        ),
        epoch_s: stats.iter().map(|s| s.seconds).collect(),
        loss: stats.iter().map(|s| s.loss).collect(),
    })
}

/// A table row: its label and how a run fills its cell.
type Row = (&'static str, Box<dyn Fn(&RunReport) -> String>);

/// One column per run, one row per figure (times in milliseconds).
fn table(runs: &[RunReport], peak: Option<&Peak>) -> String {
    let ms = |v: f64| format!("{:.1}", v * 1e3);
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}%", v * 100.0));
    let rows: Vec<Row> = vec![
        ("K", Box::new(|r| r.k.to_string())),
        ("redundancy", Box::new(|r| format!("{:.3}", r.redundancy))),
        ("sample ms", Box::new(move |r| ms(r.phase_median_s.sample))),
        (
            "partition ms",
            Box::new(move |r| ms(r.phase_median_s.partition)),
        ),
        ("slice ms", Box::new(move |r| ms(r.phase_median_s.slice))),
        ("gather ms¹", Box::new(move |r| ms(r.phase_median_s.gather))),
        ("waited ms³", Box::new(move |r| ms(r.phase_median_s.wait))),
        (
            "forward ms¹",
            Box::new(move |r| ms(r.phase_median_s.forward)),
        ),
        (
            "backward ms",
            Box::new(move |r| ms(r.phase_median_s.backward)),
        ),
        (
            "optimizer ms",
            Box::new(move |r| ms(r.phase_median_s.optimizer)),
        ),
        ("epoch ms", Box::new(move |r| ms(r.epoch_median_s))),
        ("seeds/s", Box::new(|r| format!("{:.0}", r.seeds_per_s))),
        ("peak", Box::new(|r| format_bytes(r.peak_bytes))),
        (
            "fwd GFLOP/s²",
            Box::new(|r| format!("{:.1}", r.work.forward.gflops)),
        ),
        (
            "bwd GFLOP/s²",
            Box::new(|r| format!("{:.1}", r.work.backward.gflops)),
        ),
        (
            "f+b of GEMM",
            Box::new(move |r| pct(r.work.forward_backward.gemm_peak_share)),
        ),
        (
            "f+b GB/s²",
            Box::new(|r| format!("{:.1}", r.work.forward_backward.gbps)),
        ),
        (
            "f+b of stream",
            Box::new(move |r| pct(r.work.forward_backward.stream_peak_share)),
        ),
    ];
    let mut out = String::new();
    if let Some(r) = runs.first() {
        out.push_str(&format!(
            "{} on {}: medians of {} epochs after {} warm-up\n",
            r.dataset, r.device, r.epochs, r.warmup
        ));
    }
    for (name, f) in &rows {
        out.push_str(&format!("{name:<14}"));
        for r in runs {
            out.push_str(&format!(" {:>12}", f(r)));
        }
        out.push('\n');
    }
    out.push_str(
        "¹ gather is the host feature gather; the upload to the device is timed in forward \
         (on the CPU it moves the gathered buffer: no copy)\n",
    );
    out.push_str(
        "² two operations per multiply-add of the matrix products; bytes are each op's inputs \
         read and output written once (a lower bound)\n",
    );
    out.push_str(
        "³ slice and gather run on a helper thread while the micro-batch before computes; \
         waited is the time the trainer spent waiting for them (what the compute did not hide)\n",
    );
    if let Some(p) = peak {
        out.push_str(&format!(
            "limits measured in this run on {} threads: GEMM {:.1} GFLOP/s ({n}x{n}x{n}), \
             stream triad {:.1} GB/s\n",
            p.threads,
            p.gemm_gflops,
            p.stream_gbps,
            n = p.gemm_side
        ));
    }
    out
}
