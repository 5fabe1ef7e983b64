//! Flags shared by `espalier train` and `espalier partition`: dataset, model, sampling,
//! micro-batching, device. Defaults follow the PyTorch Geometric reference script
//! (`pyg_peer.py`, which `scripts/compare_pyg.sh` runs beside espalier).
//!
//! Model flags that only one model reads (`--aggr`, `--heads`, `--attn-dropout`,
//! `--self-loops`: the registry's `nn::ModelEntry::flags`, which parses them; and
//! `--lstm-split`) are optional: their defaults apply per model, and giving one to a model
//! that does not use it is an error naming the flag (`Error::InvalidFlag`) rather than
//! silently ignored.

use std::sync::Arc;

use clap::Args;

use espalier::bytes::{format_bytes, parse_bytes};
use espalier::error::{Error, Result};
use espalier::graph::{self, Csr, Dataset, LoadOptions};
use espalier::nn::{
    model_flags, KindConfig, ModelConfig, ModelFlags, ModelKind, ModelShape, MODELS,
};
use espalier::partition;
use espalier::train::{
    BatchSize, FeatureDType, FeaturePlacement, Loader, MicroConfig, OptimizerKind, TrainConfig,
    Trainer,
};
use espalier::Device;

/// Dataset, model, sampling, micro-batching and device flags.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// A folder in OGB's raw layout, an edge-list file, a name under --data-root
    /// (ogbn-arxiv, ogbn-products, ogbn-papers100M, cora, email-enron...), or
    /// `synthetic:PRESET[,scale=X][,seed=N]` with PRESET one of cora-like, arxiv-like,
    /// products-like, papers-like, as-like, road-like (--seed, --feat-dim and --classes
    /// apply to it).
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
    /// Model: one of the registry `espalier::nn::MODELS` (its help lists them).
    #[arg(long, default_value = "sage", help = model_help(), long_help = model_help())]
    pub model: String,
    /// SAGE only: the aggregator (the help reads the registry of model kinds, as for the
    /// other flags only one kind reads: `nn::ModelEntry::flags`).
    #[arg(long, help = flag_help("--aggr"), long_help = flag_help("--aggr"))]
    pub aggr: Option<String>,
    /// GAT only: attention heads of the hidden layers.
    #[arg(long, help = flag_help("--heads"), long_help = flag_help("--heads"))]
    pub heads: Option<String>,
    /// GAT only: dropout on attention weights.
    #[arg(long, help = flag_help("--attn-dropout"), long_help = flag_help("--attn-dropout"))]
    pub attn_dropout: Option<String>,
    /// GAT only: add a self-loop to every dst node without one.
    #[arg(long, help = flag_help("--self-loops"), long_help = flag_help("--self-loops"))]
    pub self_loops: Option<String>,
    /// SAGE-LSTM only: split the explosion bucket into pieces of at most this many dst
    /// nodes.
    #[arg(long)]
    pub lstm_split: Option<usize>,
    /// Number of layers (default: one per fanout).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Hidden width.
    #[arg(long, default_value_t = 256)]
    pub hidden: usize,
    /// Neighbours sampled per layer, input layer first (DGL order), each at least 1 or -1
    /// for all (`--fanouts -1,-1` and `--fanouts=-1,-1` alike). Default 25,10; with
    /// --layers N alone, 10 per layer.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub fanouts: Option<Vec<i64>>,
    /// Seeds per batch, or `full` for all training seeds in one batch.
    #[arg(long, default_value = "full")]
    pub batch_size: String,
    /// Dropout between layers.
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub dropout: f64,
    /// Optimizer: adam (L2 weight decay, as torch.optim.Adam), adamw or sgd (momentum 0.9).
    /// Its state counts in the memory a micro-batch must leave room for.
    #[arg(long, default_value = "adam")]
    pub optimizer: String,
    /// Micro-batches per batch, K (gradients accumulate, one optimizer step per batch); with
    /// --memory-budget, the least number tried. Default 1 (`partition --compare`: 8).
    #[arg(long)]
    pub micro_batches: Option<usize>,
    /// How seeds are split into micro-batches (the help lists `partition::REGISTRY`).
    #[arg(long, default_value = "random", help = espalier::partition::help())]
    pub partitioner: String,
    /// Where each micro-batch's blocks come from: slice (cut out of the full batch's
    /// sample: the accumulated gradients equal the full batch's) or per-micro-batch
    /// (Cherry's loaders: each micro-batch samples its own neighbours from its seeds, so
    /// the gradients are those of K independent samples, not of one full-batch sample;
    /// with cherry or metis, K > 1 and no --memory-budget, the full batch is sampled only
    /// for the first cut).
    #[arg(long, default_value = "slice")]
    pub loader: String,
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
    /// Where the feature matrix lives on a GPU: auto (on the device when it fits: within
    /// the adapter's largest buffer and half of what --memory-budget leaves after the
    /// model's state), host (rows gathered on the host and uploaded per micro-batch) or
    /// device (uploaded once, rows gathered there by id). No effect on the CPU.
    #[arg(long, default_value = "auto")]
    pub features: String,
    /// Do not write the binary cache of a loaded dataset.
    #[arg(long)]
    pub no_cache: bool,
}

/// `--model`'s help, from the registry of model kinds: each name and what it is.
fn model_help() -> String {
    let kinds: Vec<String> = MODELS
        .iter()
        .map(|m| format!("{}: {}", m.name(), m.help))
        .collect();
    format!("Model: {}. {}", ModelKind::names(), kinds.join("; "))
}

/// The help of `flag`, one of the flags only some model kinds read, from the registry.
fn flag_help(flag: &str) -> String {
    model_flags()
        .into_iter()
        .find(|(f, _)| *f == flag)
        .map(|(_, help)| help.to_string())
        .unwrap_or_default()
}

impl CommonArgs {
    /// The model flags only some kinds read, as given (each kind's registry entry parses
    /// its own).
    pub fn model_flags(&self) -> ModelFlags {
        [
            ("--aggr", &self.aggr),
            ("--heads", &self.heads),
            ("--attn-dropout", &self.attn_dropout),
            ("--self-loops", &self.self_loops),
        ]
        .into_iter()
        .fold(ModelFlags::new(), |flags, (flag, value)| match value {
            Some(v) => flags.with(flag, v.clone()),
            None => flags,
        })
    }

    /// Fanouts, input layer first.
    pub fn fanouts(&self) -> Result<Vec<i64>> {
        if self.layers == Some(0) {
            return Err(Error::flag("--layers", "--layers must be at least 1"));
        }
        let f = match (&self.fanouts, self.layers) {
            (Some(f), Some(l)) if f.len() != l => {
                return Err(Error::flag(
                    "--layers",
                    format!(
                        "--layers {l} but {} fanouts: give one fanout per layer",
                        f.len()
                    ),
                ))
            }
            (Some(f), _) => f.clone(),
            (None, Some(l)) => vec![10; l],
            (None, None) => vec![25, 10],
        };
        if f.is_empty() {
            return Err(Error::flag(
                "--fanouts",
                "--fanouts needs at least one layer",
            ));
        }
        if let Some(bad) = f.iter().find(|&&x| x != -1 && x < 1) {
            return Err(Error::flag(
                "--fanouts",
                format!(
                "--fanouts: {bad} is not a fanout: give a neighbour count of at least 1, or -1 \
                 for all neighbours"
            ),
            ));
        }
        Ok(f)
    }

    /// The model's settings (which say its kind), after checking that every model flag
    /// given explicitly is one the model reads: a flag the model would ignore is an error
    /// naming both.
    pub fn model_settings(&self) -> Result<Arc<dyn KindConfig>> {
        let kind = self.model.parse::<ModelKind>()?;
        let settings = kind.settings(&self.model_flags())?;
        if self.lstm_split.is_some() && !settings.splits_buckets() {
            return Err(Error::flag(
                "--lstm-split",
                format!(
                    "--lstm-split does not apply to {}: only sage with --aggr lstm reads it \
                     (drop --lstm-split)",
                    settings.label()
                ),
            ));
        }
        if self.lstm_split == Some(0) {
            return Err(Error::flag(
                "--lstm-split",
                "--lstm-split must be at least 1",
            ));
        }
        if self.hidden == 0 {
            return Err(Error::flag("--hidden", "--hidden must be at least 1"));
        }
        if self.classes == Some(0) {
            return Err(Error::flag("--classes", "--classes must be at least 1"));
        }
        Ok(settings)
    }

    /// The model these flags describe for `in_dim` input features and `classes` classes,
    /// validated (on the CPU, against the memory the machine has available); a model too
    /// large to build names the flag to lower.
    pub fn model_config(&self, in_dim: usize, classes: usize) -> Result<ModelConfig> {
        self.checked_model(Some(in_dim), classes)
    }

    /// [`CommonArgs::model_config`]; with `in_dim` unknown (before the dataset is loaded),
    /// the widths that do not depend on it are checked with a single input feature.
    fn checked_model(&self, in_dim: Option<usize>, classes: usize) -> Result<ModelConfig> {
        let before_load = in_dim.is_none();
        let in_dim = in_dim.unwrap_or(1);
        let settings = self.model_settings()?;
        let shape = ModelShape {
            in_dim,
            hidden: self.hidden,
            out_dim: classes,
            layers: self.fanouts()?.len(),
            dropout: self.dropout,
        };
        let model = ModelConfig::with_settings(shape, settings.clone());
        let on_cpu = matches!(self.device.parse::<Device>(), Ok(Device::Cpu));
        let host = if on_cpu && !before_load {
            host_available_bytes()
        } else {
            None
        };
        let state = match self.optimizer.parse::<OptimizerKind>() {
            Ok(OptimizerKind::Sgd) => 1,
            _ => 2,
        };
        let check = |m: &ModelConfig| -> Result<()> {
            m.validate()?;
            if let Some(avail) = host {
                // Parameters, their gradients and the optimizer state, before any
                // activation: past what the machine has, the system would kill the run.
                let need = m
                    .num_parameters()?
                    .saturating_mul(4)
                    .saturating_mul(2 + state);
                if need > avail {
                    return Err(Error::invalid(format!(
                        "the model's {} parameters, their gradients and the optimizer state \
                         alone need {}, more than the {} of memory this machine has available",
                        m.num_parameters()?,
                        format_bytes(need),
                        format_bytes(avail)
                    )));
                }
            }
            Ok(())
        };
        let Err(e) = check(&model) else {
            return Ok(model);
        };
        // Name the flag whose value makes the model too large: the first one that, set to
        // 1, lets the model pass (the kind's own, such as GAT's --heads, from its settings).
        let with = |m: ModelConfig| check(&m).is_ok();
        let classes_flag = match self.classes {
            Some(c) => format!("--classes {c}"),
            None => format!("the dataset's {classes} classes"),
        };
        let own = settings.width_flags();
        let hidden1 = ModelShape {
            hidden: 1,
            ..model.shape.clone()
        };
        let blame = if with(model.clone().out_dim(1)) {
            classes_flag
        } else if let Some(f) = own.iter().find(|f| {
            with(ModelConfig::with_settings(
                model.shape.clone(),
                f.lowered.clone(),
            ))
        }) {
            format!("{} {}", f.flag, f.value)
        } else if with(model.clone().hidden(1)) {
            format!("--hidden {}", self.hidden)
        } else if let Some(f) = own.iter().find(|f| {
            with(ModelConfig::with_settings(
                hidden1.clone(),
                f.lowered.clone(),
            ))
        }) {
            format!("--hidden {} with {} {}", self.hidden, f.flag, f.value)
        } else {
            return Err(e);
        };
        let why = match e {
            Error::InvalidArgument(m) | Error::InvalidFlag { msg: m, .. } => m,
            other => other.to_string(),
        };
        let even = if before_load {
            "even with a single input feature, "
        } else {
            ""
        };
        Err(Error::invalid(format!("{blame} is too large: {even}{why}")))
    }

    /// Checks the flags that need no dataset (the model's widths with a single input
    /// feature: they are checked again once the dataset's are known).
    pub fn check(&self) -> Result<()> {
        let device: Device = self.device.parse()?;
        device.memory()?;
        self.fanouts()?;
        partition::by_name(&self.partitioner)?;
        partition::check_k(self.micro_batches(), usize::MAX)?;
        self.budget()?;
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::flag(
                "--dropout",
                format!("--dropout {} must be in [0, 1)", self.dropout),
            ));
        }
        // The model flags, before loading anything: the sizes that do not depend on the
        // dataset are checked again once its widths are known.
        self.checked_model(None, self.classes.unwrap_or(1))?;
        self.batch_size.parse::<BatchSize>()?;
        self.optimizer.parse::<OptimizerKind>()?;
        self.feature_dtype.parse::<FeatureDType>()?;
        self.features.parse::<FeaturePlacement>()?;
        self.loader.parse::<Loader>()?;
        Ok(())
    }

    /// How `--dataset` is loaded: split, widths, seed and cache.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            split: self.split.clone(),
            feat_dim: self.feat_dim,
            classes: self.classes,
            seed: self.seed,
            cache: !self.no_cache,
            cache_dir: self.cache_dir.clone(),
            data_root: self.data_root.clone(),
        }
    }

    /// The graph to sample from: `data`'s, symmetrized under `--symmetrize` (mapped from
    /// the cache's symmetrized copy beside `entry`, the dataset's cache entry, where there
    /// is one), with the line that says what the cache did.
    pub fn graph_of(
        &self,
        data: &Dataset,
        entry: Option<&std::path::Path>,
    ) -> Result<(Csr, Option<String>)> {
        Ok(match (self.symmetrize, entry) {
            // From the cache: the symmetrized graph is cached beside the entry and mapped,
            // so a graph larger than RAM is not rebuilt in memory on every run.
            (true, Some(entry)) => {
                let (g, line) = graph::io::cache::symmetrized(&data.graph, entry)?;
                (g, Some(line))
            }
            (true, None) => {
                espalier::admission::admit(data.graph.symmetrize_bytes(), || {
                    format!("dataset {}: the symmetrized graph", data.name)
                })?;
                (data.graph.symmetrize(), None)
            }
            (false, _) => (data.graph.clone(), None),
        })
    }

    /// Checks the cheap flags, then loads the dataset and the graph to sample from.
    pub fn load(&self) -> Result<(Dataset, Csr)> {
        self.check()?;
        let opts = self.load_options();
        let t = std::time::Instant::now();
        let (data, status) = graph::load_with_status(&self.dataset, &opts)?;
        if let Some(line) = status.message() {
            if crate::log::enabled(crate::log::Level::Info) {
                eprintln!("{line}");
            }
        }
        for note in &data.notes {
            if crate::log::enabled(crate::log::Level::Warn) {
                eprintln!("note: {note}");
            }
        }
        let (graph, line) = self.graph_of(&data, status.entry())?;
        if let Some(line) = line {
            if crate::log::enabled(crate::log::Level::Info) {
                eprintln!("{line}");
            }
        }
        if crate::log::enabled(crate::log::Level::Info) {
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
        }
        Ok((data, graph))
    }

    /// K: `--micro-batches`, or 1.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches.unwrap_or(1)
    }

    /// The memory budget in bytes, if one is given.
    pub fn budget(&self) -> Result<Option<u64>> {
        self.memory_budget
            .as_deref()
            .map(|s| {
                parse_bytes(s)
                    .map_err(|e| Error::flag("--memory-budget", format!("--memory-budget: {e}")))
            })
            .transpose()
    }

    /// The training configuration for `data`; `train` supplies what only training reads
    /// (epochs, learning rate, weight decay, evaluation).
    pub fn config(&self, data: &Dataset, train: TrainOnly) -> Result<TrainConfig> {
        let fanouts = self.fanouts()?;
        let model = self.model_config(data.feat_dim, data.num_classes)?;
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
                micro_batches: self.micro_batches(),
                partitioner: self.partitioner.clone(),
                memory_budget: self.budget()?,
                loader: self.loader.parse()?,
            },
            feature_dtype: self.feature_dtype.parse()?,
            feature_placement: self.features.parse()?,
            ..Default::default()
        })
    }

    /// The trainer of `config` on `data`, sampling from `graph`, with the flags the
    /// trainer reads beside its configuration (`--lstm-split`).
    pub fn trainer<'a>(
        &self,
        data: &'a Dataset,
        graph: impl Into<Arc<Csr>>,
        config: TrainConfig,
    ) -> Result<Trainer<'a>> {
        let mut trainer = Trainer::new(data, graph.into(), config)?;
        trainer.state.model.set_lstm_split(self.lstm_split)?;
        trainer.state.estimator.lstm_split = self.lstm_split;
        Ok(trainer)
    }
}

/// Bytes of memory the system can still give this process (available memory, cgroup and
/// `ulimit` limits: [`espalier::admission`]); `None` where that is unknown.
fn host_available_bytes() -> Option<u64> {
    espalier::admission::available().map(|a| a.bytes)
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

/// Writes `value` as pretty JSON to `path` (atomically, creating its parent folder), or
/// to standard output for `-`.
pub fn write_json(path: &str, value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::invalid(e.to_string()))?;
    if path == "-" {
        println!("{text}");
        Ok(())
    } else {
        espalier::atomic::write(std::path::Path::new(path), (text + "\n").as_bytes())
    }
}

/// Checks before long work that `--json PATH` can be written (`-` always can).
pub fn check_json_path(path: &str) -> Result<()> {
    if path == "-" {
        return Ok(());
    }
    espalier::atomic::check_writable(std::path::Path::new(path))
        .map_err(|e| Error::flag("--json", format!("--json {path}: {e}")))
}
