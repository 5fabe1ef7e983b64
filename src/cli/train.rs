//! `espalier train`: train a GNN and report loss, accuracy, time per phase and memory.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use espalier::error::{Error, Result};
use espalier::partition::format_bytes;
use espalier::train::{EpochStats, Trainer};

use crate::cli::common::{write_json, CommonArgs, TrainOnly};

/// Flags of `espalier train`. Defaults follow the PyTorch Geometric reference script
/// (`pyg_peer.py`, which `scripts/compare_pyg.sh` runs beside espalier).
#[derive(Parser, Debug, Clone)]
#[command(name = "train")]
pub struct TrainArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Training epochs.
    #[arg(long, default_value_t = 50)]
    pub epochs: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f64,
    /// Weight decay (added to the gradient for adam and sgd; decoupled for adamw).
    #[arg(long, default_value_t = 5e-4)]
    pub weight_decay: f64,
    /// Write a checkpoint (safetensors) here after every epoch.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Resume from this checkpoint (continues with the epochs it had not done).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Write the JSON summary to this file, or `-` for standard output.
    #[arg(long)]
    pub json: Option<String>,
    /// Evaluate on the validation nodes every N epochs (0: only at the end).
    #[arg(long, default_value_t = 1)]
    pub eval_every: usize,
    /// Seeds per evaluation batch.
    #[arg(long, default_value_t = 4096)]
    pub eval_batch_size: usize,
}

impl TrainArgs {
    /// The defaults: what `espalier` or `espalier train` with no flags runs.
    pub fn default_args() -> TrainArgs {
        TrainArgs::parse_from(["train"])
    }
}

fn epoch_line(e: &EpochStats, total: usize) -> String {
    let valid = e
        .valid_acc
        .map_or("   -  ".to_string(), |v| format!("{v:.4}"));
    let p = &e.phases;
    format!(
        "epoch {:>4}/{total}  loss {:.4}  train {:.4}  valid {valid}  {:.3}s (sample {:.3} part {:.3} slice {:.3} gather {:.3} fwd {:.3} bwd {:.3} opt {:.3})  micro-batches {}",
        e.epoch + 1,
        e.loss,
        e.train_acc,
        e.seconds,
        p.sample,
        p.partition,
        p.slice,
        p.gather,
        p.forward,
        p.backward,
        p.optimizer,
        e.micro_batches
    )
}

pub fn run(a: &TrainArgs) -> Result<()> {
    let c = &a.common;
    let (data, graph) = c.load()?;
    let config = c.config(
        &data,
        TrainOnly {
            epochs: a.epochs,
            lr: a.lr,
            weight_decay: a.weight_decay,
            eval_every: a.eval_every,
            eval_batch_size: a.eval_batch_size,
        },
    )?;
    let device = config.device;
    let mut trainer = Trainer::new(&data, Arc::new(graph), config)?;
    trainer.model.set_lstm_split(a.common.lstm_split)?;
    trainer.estimator.lstm_split = a.common.lstm_split;
    if let Some(path) = &a.resume {
        trainer.resume(path)?;
        eprintln!(
            "resumed from {} after epoch {}",
            path.display(),
            trainer.start_epoch
        );
    }
    let micro = &trainer.config.micro;
    eprintln!(
        "model {}: {} layers, hidden {}, {} parameters, fanouts {:?}, batch {}, device {device}, micro-batches {} ({}){}",
        trainer.config.model.label(),
        trainer.config.model.layers,
        c.hidden,
        espalier::nn::Module::num_parameters(&trainer.model),
        trainer.config.fanouts,
        c.batch_size,
        micro.micro_batches,
        micro.partitioner,
        micro
            .memory_budget
            .map_or(String::new(), |b| format!(", budget {}", format_bytes(b)))
    );

    let total = a.epochs;
    let pb = ProgressBar::new(total.saturating_sub(trainer.start_epoch) as u64);
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} epochs  {msg}  [{elapsed} < {eta}]")
            .map_err(|e| Error::invalid(e.to_string()))?,
    );
    let every = (total / 25).max(1);
    let summary = trainer.run(a.checkpoint.as_deref(), &mut |e| {
        pb.inc(1);
        pb.set_message(format!("loss {:.4}", e.loss));
        if (e.epoch + 1) % every == 0 || e.epoch + 1 == total || e.epoch == 0 {
            let line = epoch_line(e, total);
            if pb.is_hidden() {
                eprintln!("{line}");
            } else {
                pb.println(line);
            }
        }
    })?;
    pb.finish_and_clear();
    println!(
        "test accuracy {:.4}  valid accuracy {:.4}  final loss {:.4}  peak {:.1} MiB  {:.2}s training",
        summary.test_acc,
        summary.valid_acc,
        summary.final_loss,
        summary.peak_bytes as f64 / (1u64 << 20) as f64,
        summary.train_seconds
    );
    if let Some(path) = &a.json {
        write_json(path, &summary)?;
    }
    Ok(())
}
