//! `espalier train`: train a GNN and report loss, accuracy, time per phase and memory.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use espalier::error::{Error, Result};
use espalier::graph::{self, LoadOptions};
use espalier::nn::{Aggregator, ModelConfig, ModelKind};
use espalier::train::{BatchSize, EpochStats, OptimizerKind, TrainConfig, Trainer};
use espalier::Device;

/// Flags of `espalier train`. Defaults follow the PyG peer (`shared/bench/pyg_peer.py`).
#[derive(Parser, Debug, Clone)]
#[command(name = "train")]
pub struct TrainArgs {
    /// A folder in OGB's raw layout, an edge-list file, or `synthetic:PRESET[,scale=X][,seed=N]`
    /// with PRESET one of cora-like, arxiv-like, products-like, papers-like.
    #[arg(long, default_value = "synthetic:cora-like")]
    pub dataset: String,
    /// Split folder name under DATASET/split/ (default: the only or first one).
    #[arg(long)]
    pub split: Option<String>,
    /// Add reverse edges (then drop duplicates) before sampling.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub symmetrize: bool,
    /// Width of the random features given to a graph that has none.
    #[arg(long, default_value_t = 100)]
    pub feat_dim: usize,
    /// Number of classes: random labels for a graph without labels get this many (default
    /// 10); for a labelled graph a label at or above it is an error.
    #[arg(long)]
    pub classes: Option<usize>,
    /// Model: sage, gcn or gat.
    #[arg(long, default_value = "sage")]
    pub model: String,
    /// SAGE aggregator: mean, sum, pool or lstm (DGL semantics, run per degree bucket).
    #[arg(long, default_value = "mean")]
    pub aggr: String,
    /// GAT: attention heads of the hidden layers (concatenated; the output layer has one),
    /// as the PyG peer's --heads. --hidden is the width per head.
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// GAT: dropout on attention weights (the peer has none).
    #[arg(long, default_value_t = 0.0)]
    pub attn_dropout: f64,
    /// GAT: add a self-loop to every dst node without one (PyG's default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub self_loops: bool,
    /// SAGE-LSTM: split the explosion bucket into pieces of at most this many dst nodes.
    #[arg(long)]
    pub lstm_split: Option<usize>,
    /// Number of layers (default: one per fanout).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Hidden width.
    #[arg(long, default_value_t = 256)]
    pub hidden: usize,
    /// Neighbours sampled per layer, input layer first (DGL order); -1 = all.
    /// Default 25,10; with --layers N alone, 10 per layer.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub fanouts: Option<Vec<i64>>,
    /// Seeds per batch, or `full` for all training seeds in one batch.
    #[arg(long, default_value = "full")]
    pub batch_size: String,
    /// Training epochs.
    #[arg(long, default_value_t = 50)]
    pub epochs: usize,
    /// Optimizer: adam (L2 weight decay, as torch.optim.Adam), adamw or sgd (momentum 0.9).
    #[arg(long, default_value = "adam")]
    pub optimizer: String,
    /// Learning rate.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f64,
    /// Weight decay (added to the gradient for adam and sgd; decoupled for adamw).
    #[arg(long, default_value_t = 5e-4)]
    pub weight_decay: f64,
    /// Dropout between layers.
    #[arg(long, default_value_t = 0.5)]
    pub dropout: f64,
    /// Seed of initialisation, sampling, dropout and synthesized data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Device: cpu, wgpu[:N] or cuda[:N].
    #[arg(long, default_value = "cpu")]
    pub device: String,
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
    /// Do not write the binary cache of a loaded dataset.
    #[arg(long)]
    pub no_cache: bool,
}

impl TrainArgs {
    /// The defaults: what `espalier` or `espalier train` with no flags runs.
    pub fn default_args() -> TrainArgs {
        TrainArgs::parse_from(["train"])
    }

    fn fanouts(&self) -> Result<Vec<i64>> {
        let f = match (&self.fanouts, self.layers) {
            (Some(f), Some(l)) if f.len() != l => {
                return Err(Error::invalid(format!(
                    "--layers {l} but {} fanouts: give one fanout per layer",
                    f.len()
                )))
            }
            (Some(f), _) => f.clone(),
            (None, Some(l)) => vec![10; l],
            (None, None) => vec![25, 10],
        };
        if f.is_empty() {
            return Err(Error::invalid("--fanouts needs at least one layer"));
        }
        Ok(f)
    }
}

fn epoch_line(e: &EpochStats, total: usize) -> String {
    let valid = e
        .valid_acc
        .map_or("   -  ".to_string(), |v| format!("{v:.4}"));
    let p = &e.phases;
    format!(
        "epoch {:>4}/{total}  loss {:.4}  train {:.4}  valid {valid}  {:.3}s (sample {:.3} gather {:.3} fwd {:.3} bwd {:.3} opt {:.3})",
        e.epoch + 1,
        e.loss,
        e.train_acc,
        e.seconds,
        p.sample,
        p.gather,
        p.forward,
        p.backward,
        p.optimizer
    )
}

pub fn run(a: &TrainArgs) -> Result<()> {
    let device: Device = a.device.parse()?;
    device.memory()?;
    let fanouts = a.fanouts()?;
    let opts = LoadOptions {
        split: a.split.clone(),
        feat_dim: a.feat_dim,
        classes: a.classes,
        seed: a.seed,
        cache: !a.no_cache,
    };
    let t = std::time::Instant::now();
    let data = graph::load(&a.dataset, &opts)?;
    for note in &data.notes {
        eprintln!("note: {note}");
    }
    let graph = if a.symmetrize {
        data.graph.symmetrize()
    } else {
        data.graph.clone()
    };
    eprintln!(
        "dataset {}: {} nodes, {} edges{}, {} features, {} classes, split {}/{}/{} ({:.2}s)",
        data.name,
        data.num_nodes(),
        graph.num_edges(),
        if a.symmetrize { " (symmetrized)" } else { "" },
        data.feat_dim,
        data.num_classes,
        data.split.train.len(),
        data.split.valid.len(),
        data.split.test.len(),
        t.elapsed().as_secs_f64()
    );
    let model = ModelConfig {
        kind: a.model.parse::<ModelKind>()?,
        aggr: a.aggr.parse::<Aggregator>()?,
        in_dim: data.feat_dim,
        hidden: a.hidden,
        out_dim: data.num_classes,
        layers: fanouts.len(),
        dropout: a.dropout,
        heads: a.heads,
        attn_dropout: a.attn_dropout,
        self_loops: a.self_loops,
    };
    let config = TrainConfig {
        model,
        fanouts,
        batch_size: a.batch_size.parse::<BatchSize>()?,
        epochs: a.epochs,
        optimizer: a.optimizer.parse::<OptimizerKind>()?,
        lr: a.lr,
        weight_decay: a.weight_decay,
        seed: a.seed,
        device,
        eval_every: a.eval_every,
        eval_batch_size: a.eval_batch_size,
    };
    let mut trainer = Trainer::new(&data, Arc::new(graph), config)?;
    trainer.model.set_lstm_split(a.lstm_split)?;
    if let Some(path) = &a.resume {
        trainer.resume(path)?;
        eprintln!(
            "resumed from {} after epoch {}",
            path.display(),
            trainer.start_epoch
        );
    }
    eprintln!(
        "model {:?}/{:?}: {} layers, hidden {}, {} parameters, fanouts {:?}, batch {}, device {device}",
        trainer.config.model.kind,
        trainer.config.model.aggr,
        trainer.config.model.layers,
        a.hidden,
        espalier::nn::Module::num_parameters(&trainer.model),
        trainer.config.fanouts,
        a.batch_size
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
        let text =
            serde_json::to_string_pretty(&summary).map_err(|e| Error::invalid(e.to_string()))?;
        if path == "-" {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))?;
        }
    }
    Ok(())
}
