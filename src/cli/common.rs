//! Flags shared by `espalier train` and `espalier partition`: dataset, model, sampling,
//! micro-batching, device. Defaults follow the PyG peer (`shared/bench/pyg_peer.py`).

use clap::Args;

use espalier::error::{Error, Result};
use espalier::graph::{self, Csr, Dataset, LoadOptions};
use espalier::nn::{Aggregator, ModelConfig, ModelKind};
use espalier::partition::{self, parse_bytes};
use espalier::train::{BatchSize, FeatureDType, MicroConfig, OptimizerKind, TrainConfig};
use espalier::Device;

/// Dataset, model, sampling, micro-batching and device flags.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// A folder in OGB's raw layout, an edge-list file, a name under --data-root
    /// (ogbn-arxiv, ogbn-products, ogbn-papers100M, cora, email-enron...), or
    /// `synthetic:PRESET[,scale=X][,seed=N]` with PRESET one of cora-like, arxiv-like,
    /// products-like, papers-like (--seed, --feat-dim and --classes apply to it).
    #[arg(long, default_value = "synthetic:cora-like")]
    pub dataset: String,
    /// Root of named datasets (OGB's layout: ROOT/ogbn_arxiv/raw/...). Default:
    /// $ESPALIER_DATA, else ./dataset.
    #[arg(long)]
    pub data_root: Option<std::path::PathBuf>,
    /// Folder of the dataset cache. Default: $ESPALIER_CACHE, else espalier-cache/ beside
    /// the data (a user cache folder when the data is read-only).
    #[arg(long)]
    pub cache_dir: Option<std::path::PathBuf>,
    /// Split folder name under DATASET/split/ (default: the only or first one).
    #[arg(long)]
    pub split: Option<String>,
    /// Add reverse edges (then drop duplicates) before sampling.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub symmetrize: bool,
    /// Width of the random features given to a graph that has none (default 100), or of a
    /// synthetic preset's features (default: the preset's).
    #[arg(long)]
    pub feat_dim: Option<usize>,
    /// Number of classes: random labels for a graph without labels get this many (default
    /// 10); for a labelled graph a label at or above it is an error; a synthetic preset
    /// gets this many planted classes.
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
    /// Dropout between layers.
    #[arg(long, default_value_t = 0.5)]
    pub dropout: f64,
    /// Optimizer: adam (L2 weight decay, as torch.optim.Adam), adamw or sgd (momentum 0.9).
    /// Its state counts in the memory a micro-batch must leave room for.
    #[arg(long, default_value = "adam")]
    pub optimizer: String,
    /// Micro-batches per batch (gradients accumulate, one optimizer step per batch); with
    /// --memory-budget, the least number tried.
    #[arg(long, default_value_t = 1)]
    pub micro_batches: usize,
    /// How seeds are split into micro-batches: random, range, metis, betty, cherry,
    /// buffalo or grem (`docs/PARTITIONING.md`).
    #[arg(long, default_value = "random")]
    pub partitioner: String,
    /// Device memory budget, e.g. 24GiB (units B, KB, KiB, MB, MiB, GB, GiB, TB, TiB): the
    /// number of micro-batches is chosen so that each fits, with a 10% margin.
    #[arg(long)]
    pub memory_budget: Option<String>,
    /// Seed of initialisation, sampling, dropout, partitioning and synthesized data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Device: cpu, wgpu (ESPALIER_WGPU_ADAPTER or adapter 0), wgpu:N, wgpu:NAME (part of
    /// an adapter's name) or cuda[:N]; `espalier devices` lists them.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Precision of the host feature matrix and of its uploads: f32, f16 or bf16. Half
    /// precision halves host-to-device traffic; rows are widened to f32 on the device.
    #[arg(long, default_value = "f32")]
    pub feature_dtype: String,
    /// Do not write the binary cache of a loaded dataset.
    #[arg(long)]
    pub no_cache: bool,
}

impl CommonArgs {
    /// Fanouts, input layer first.
    pub fn fanouts(&self) -> Result<Vec<i64>> {
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

    /// Checks the cheap flags, then loads the dataset and the graph to sample from.
    pub fn load(&self) -> Result<(Dataset, Csr)> {
        let device: Device = self.device.parse()?;
        device.memory()?;
        self.fanouts()?;
        partition::by_name(&self.partitioner)?;
        partition::check_k(self.micro_batches, usize::MAX)?;
        self.budget()?;
        self.model.parse::<ModelKind>()?;
        self.aggr.parse::<Aggregator>()?;
        self.batch_size.parse::<BatchSize>()?;
        self.optimizer.parse::<OptimizerKind>()?;
        self.feature_dtype.parse::<FeatureDType>()?;
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::invalid(format!(
                "--dropout {} must be in [0, 1)",
                self.dropout
            )));
        }
        let opts = LoadOptions {
            split: self.split.clone(),
            feat_dim: self.feat_dim,
            classes: self.classes,
            seed: self.seed,
            cache: !self.no_cache,
            cache_dir: self.cache_dir.clone(),
            data_root: self.data_root.clone(),
        };
        let t = std::time::Instant::now();
        let (data, status) = graph::load_with_status(&self.dataset, &opts)?;
        if let Some(line) = status.message() {
            eprintln!("{line}");
        }
        for note in &data.notes {
            eprintln!("note: {note}");
        }
        let graph = if self.symmetrize {
            data.graph.symmetrize()
        } else {
            data.graph.clone()
        };
        eprintln!(
            "dataset {}: {} nodes, {} edges{}, {} features, {} classes, split {}/{}/{} ({:.2}s)",
            data.name,
            data.num_nodes(),
            graph.num_edges(),
            if self.symmetrize {
                " (symmetrized)"
            } else {
                ""
            },
            data.feat_dim,
            data.num_classes,
            data.split.train.len(),
            data.split.valid.len(),
            data.split.test.len(),
            t.elapsed().as_secs_f64()
        );
        Ok((data, graph))
    }

    /// The memory budget in bytes, if one is given.
    pub fn budget(&self) -> Result<Option<u64>> {
        self.memory_budget
            .as_deref()
            .map(|s| parse_bytes(s).map_err(|e| Error::invalid(format!("--memory-budget: {e}"))))
            .transpose()
    }

    /// The training configuration for `data`; `train` supplies what only training reads
    /// (epochs, learning rate, weight decay, evaluation).
    pub fn config(&self, data: &Dataset, train: TrainOnly) -> Result<TrainConfig> {
        let fanouts = self.fanouts()?;
        let model = ModelConfig {
            kind: self.model.parse::<ModelKind>()?,
            aggr: self.aggr.parse::<Aggregator>()?,
            in_dim: data.feat_dim,
            hidden: self.hidden,
            out_dim: data.num_classes,
            layers: fanouts.len(),
            dropout: self.dropout,
            heads: self.heads,
            attn_dropout: self.attn_dropout,
            self_loops: self.self_loops,
        };
        Ok(TrainConfig {
            model,
            fanouts,
            batch_size: self.batch_size.parse::<BatchSize>()?,
            epochs: train.epochs,
            optimizer: self.optimizer.parse::<OptimizerKind>()?,
            lr: train.lr,
            weight_decay: train.weight_decay,
            seed: self.seed,
            device: self.device.parse()?,
            eval_every: train.eval_every,
            eval_batch_size: train.eval_batch_size,
            micro: MicroConfig {
                micro_batches: self.micro_batches,
                partitioner: self.partitioner.clone(),
                memory_budget: self.budget()?,
            },
            feature_dtype: self.feature_dtype.parse()?,
        })
    }
}

/// Settings only training reads.
#[derive(Clone, Copy, Debug)]
pub struct TrainOnly {
    pub epochs: usize,
    pub lr: f64,
    pub weight_decay: f64,
    pub eval_every: usize,
    pub eval_batch_size: usize,
}

/// Writes `value` as pretty JSON to `path`, or to standard output for `-`.
pub fn write_json(path: &str, value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::invalid(e.to_string()))?;
    if path == "-" {
        println!("{text}");
        Ok(())
    } else {
        std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
    }
}
