//! A training run's configuration: [`TrainConfig`] and the choices it is made of (batch
//! size, optimizer, what to do on a non-finite loss), with the micro-batch
//! ([`MicroConfig`]) and full-graph ([`FullGraphConfig`]) stages' settings.

use serde::{Deserialize, Serialize};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::ModelConfig;
use crate::train::features::{FeatureDType, FeaturePlacement};
use crate::train::row_reuse::Dedup;
use crate::train::schedule::LrSchedule;

/// How many seeds one batch holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BatchSize {
    /// Every training seed in one batch.
    Full,
    /// At most this many seeds per batch.
    Seeds(usize),
}

impl std::str::FromStr for BatchSize {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "full" {
            return Ok(BatchSize::Full);
        }
        match s.parse::<usize>() {
            Ok(n) if n > 0 => Ok(BatchSize::Seeds(n)),
            _ => Err(Error::invalid(format!(
                "batch size `{s}`: expected a positive number or `full`"
            ))),
        }
    }
}

/// Which optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Adam with L2 weight decay (`torch.optim.Adam`).
    Adam,
    /// Adam with decoupled weight decay (`torch.optim.AdamW`).
    AdamW,
    /// SGD with momentum 0.9.
    Sgd,
}

impl std::str::FromStr for OptimizerKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "adam" => Ok(OptimizerKind::Adam),
            "adamw" => Ok(OptimizerKind::AdamW),
            "sgd" => Ok(OptimizerKind::Sgd),
            _ => Err(Error::invalid(format!(
                "unknown optimizer `{s}`: expected adam, adamw or sgd"
            ))),
        }
    }
}

/// What a batch whose loss is NaN or infinite (a diverging run) does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnNan {
    /// Stop the run with an error; the last checkpoint (of a finite epoch) is kept.
    #[default]
    Stop,
    /// Drop the batch's gradients (no optimizer step), count it in the epoch's
    /// `skipped_batches`, and go on; an epoch whose every batch is skipped still stops.
    SkipBatch,
}

impl std::str::FromStr for OnNan {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "stop" => Ok(OnNan::Stop),
            "skip-batch" => Ok(OnNan::SkipBatch),
            _ => Err(Error::invalid(format!(
                "unknown --on-nan `{s}`: expected stop or skip-batch"
            ))),
        }
    }
}

/// Everything a training run needs besides the data. `TrainConfig::default()` is what
/// `espalier train` runs with no flags; the setters change one field each:
///
/// ```
/// use espalier::train::TrainConfig;
/// let c = TrainConfig::default().epochs(20).lr(0.005).fanouts(vec![10, 10, 5]);
/// assert_eq!(c.model.shape.layers, 3);
/// ```
#[derive(Clone, Debug, Serialize)]
pub struct TrainConfig {
    /// The model to train.
    pub model: ModelConfig,
    /// One fanout per layer, input layer first; -1 = all neighbours.
    pub fanouts: Vec<i64>,
    /// Seeds per batch.
    pub batch_size: BatchSize,
    /// Epochs to train (a resume continues to this count).
    pub epochs: usize,
    /// Which optimizer.
    pub optimizer: OptimizerKind,
    /// Learning rate (before any schedule).
    pub lr: f64,
    /// Weight decay.
    pub weight_decay: f64,
    /// Seed of initialisation, sampling, dropout and partitioning.
    pub seed: u64,
    #[serde(serialize_with = "serialize_display")]
    /// Device the model trains on.
    pub device: Device,
    /// Evaluate on the validation nodes every this many epochs (0: only at the end).
    pub eval_every: usize,
    /// Seeds per evaluation batch (halved while an evaluation batch runs out of memory).
    pub eval_batch_size: usize,
    /// Micro-batches per batch, partitioner, memory budget.
    pub micro: MicroConfig,
    /// Precision of the host feature matrix and of its uploads (f32, f16 or bf16).
    pub feature_dtype: FeatureDType,
    /// What a batch with a NaN or infinite loss does.
    pub on_nan: OnNan,
    /// How the learning rate changes over the epochs (from `lr`).
    pub lr_schedule: LrSchedule,
    /// Early stopping: stop after this many evaluations in a row without a better
    /// validation accuracy (`None`: train all epochs).
    pub patience: Option<usize>,
    /// On a GPU, wait for the device after each micro-batch's forward and backward and after
    /// the optimizer step, so that each phase in the statistics is charged its own device
    /// time. Off, nothing inside a batch waits for the device (the phases then show the
    /// host's time to enqueue the work, and the batch's closing read carries the rest); the
    /// CPU is the same either way.
    #[serde(default)]
    pub profile: bool,
    /// Where the feature matrix lives on a GPU (`--features auto|host|device`); on the CPU
    /// host and device are one and this changes nothing.
    #[serde(default)]
    pub feature_placement: FeaturePlacement,
    /// Full-graph training in chunks (`--full-graph`, HongTu): one full-neighbour step
    /// over all training nodes per epoch, layer by layer in chunks of destination nodes
    /// (see [`crate::train::full_graph`]); `None`: sampled (micro-)batches.
    #[serde(default)]
    pub full_graph: Option<FullGraphConfig>,
}

impl Default for TrainConfig {
    /// The CLI's defaults (the PyG peer's): SAGE-mean, 2 layers of 256, fanouts 25,10, full
    /// batch, 50 epochs of Adam at 0.01 with weight decay 5e-4, on the CPU. The model's
    /// `in_dim` and `out_dim` are 0: [`Trainer::new`](crate::train::Trainer::new) takes them from the dataset.
    fn default() -> Self {
        TrainConfig {
            model: ModelConfig::default(),
            fanouts: vec![25, 10],
            batch_size: BatchSize::Full,
            epochs: 50,
            optimizer: OptimizerKind::Adam,
            lr: 0.01,
            weight_decay: 5e-4,
            seed: 0,
            device: Device::Cpu,
            eval_every: 1,
            eval_batch_size: 4096,
            micro: MicroConfig::default(),
            feature_dtype: FeatureDType::default(),
            on_nan: OnNan::default(),
            lr_schedule: LrSchedule::default(),
            patience: None,
            profile: false,
            feature_placement: FeaturePlacement::Auto,
            full_graph: None,
        }
    }
}

impl TrainConfig {
    /// Sets the model.
    pub fn model(mut self, model: ModelConfig) -> Self {
        self.model = model;
        self
    }
    /// Sets the fanouts, input layer first, and the model's layer count to match.
    pub fn fanouts(mut self, fanouts: Vec<i64>) -> Self {
        self.model.shape.layers = fanouts.len();
        self.fanouts = fanouts;
        self
    }
    /// Sets the batch size.
    pub fn batch_size(mut self, b: BatchSize) -> Self {
        self.batch_size = b;
        self
    }
    /// Sets the number of epochs.
    pub fn epochs(mut self, n: usize) -> Self {
        self.epochs = n;
        self
    }
    /// Sets the optimizer.
    pub fn optimizer(mut self, o: OptimizerKind) -> Self {
        self.optimizer = o;
        self
    }
    /// Sets the (initial) learning rate.
    pub fn lr(mut self, lr: f64) -> Self {
        self.lr = lr;
        self
    }
    /// Sets the weight decay.
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.weight_decay = wd;
        self
    }
    /// Sets the seed of initialisation, sampling, dropout and partitioning.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Sets the training device.
    pub fn device(mut self, d: Device) -> Self {
        self.device = d;
        self
    }
    /// Evaluates on the validation nodes every `n` epochs (0: only at the end).
    pub fn eval_every(mut self, n: usize) -> Self {
        self.eval_every = n;
        self
    }
    /// Sets the seeds per evaluation (and prediction) batch.
    pub fn eval_batch_size(mut self, n: usize) -> Self {
        self.eval_batch_size = n;
        self
    }
    /// Sets micro-batching (K, partitioner, memory budget).
    pub fn micro(mut self, m: MicroConfig) -> Self {
        self.micro = m;
        self
    }
    /// Sets the precision of the host features.
    pub fn feature_dtype(mut self, d: FeatureDType) -> Self {
        self.feature_dtype = d;
        self
    }
    /// Sets what a batch with a NaN or infinite loss does.
    pub fn on_nan(mut self, o: OnNan) -> Self {
        self.on_nan = o;
        self
    }
    /// Sets the learning-rate schedule.
    pub fn lr_schedule(mut self, s: LrSchedule) -> Self {
        self.lr_schedule = s;
        self
    }
    /// Sets early stopping's patience (evaluations without a better validation accuracy).
    pub fn patience(mut self, p: Option<usize>) -> Self {
        self.patience = p;
        self
    }
    /// Sets where the feature matrix lives on a GPU.
    pub fn feature_placement(mut self, p: FeaturePlacement) -> Self {
        self.feature_placement = p;
        self
    }
    /// Sets whether phases are timed with device waits (see [`TrainConfig::profile`]).
    pub fn full_graph(mut self, f: Option<FullGraphConfig>) -> Self {
        self.full_graph = f;
        self
    }
    /// Sets whether GPU phases are timed with a wait after each.
    pub fn profile(mut self, on: bool) -> Self {
        self.profile = on;
        self
    }
}

fn serialize_display<S: serde::Serializer>(
    d: &Device,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// A budget plan must leave this fraction of the budget free: the estimator is validated to
/// be within 10% of the measured peak (`tests/budget.rs`), so a micro-batch estimated at
/// `budget / 1.1` or less fits unless the estimate is off by more than that. A micro-batch
/// that still runs out of memory is split at run time.
pub const SAFETY_MARGIN: f64 = 0.10;

/// Where a micro-batch's blocks come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Loader {
    /// Sliced out of the full batch's sample: every micro-batch keeps the full batch's
    /// sampled in-edges of its seeds, so the accumulated gradients equal the full batch's.
    #[default]
    Slice,
    /// Sampled afresh from the micro-batch's own seeds (Cherry's loaders): each
    /// micro-batch draws its own neighbours, so the gradients are those of K independent
    /// samples, not of one full-batch sample (same fanouts, same expectation). The full
    /// batch is still sampled once, for the partitioner; K = 1 uses that sample. A
    /// micro-batch's sampling time is counted in the `slice` phase.
    PerMicroBatch,
}

impl std::str::FromStr for Loader {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "slice" => Ok(Loader::Slice),
            "per-micro-batch" => Ok(Loader::PerMicroBatch),
            _ => Err(Error::flag(
                "--loader",
                format!("--loader `{s}`: expected slice or per-micro-batch"),
            )),
        }
    }
}

/// How a batch is split into micro-batches.
#[derive(Clone, Debug, Serialize)]
pub struct MicroConfig {
    /// Micro-batches per batch; with a budget, the least K the search starts from.
    pub micro_batches: usize,
    /// A name from [`crate::partition::REGISTRY`].
    pub partitioner: String,
    /// Device memory budget in bytes: K is chosen so that every micro-batch fits.
    pub memory_budget: Option<u64>,
    /// Where each micro-batch's blocks come from (`--loader`).
    #[serde(default)]
    pub loader: Loader,
}

impl Default for MicroConfig {
    fn default() -> Self {
        MicroConfig {
            micro_batches: 1,
            partitioner: "random".into(),
            memory_budget: None,
            loader: Loader::Slice,
        }
    }
}
/// `--full-graph`: how full-graph training is chunked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FullGraphConfig {
    /// Chunks per layer (`--chunks`); `None`: the fewest that fit the memory budget (1
    /// without a budget).
    pub chunks: Option<usize>,
    /// How nodes are ordered before they are cut into chunks (`--node-order`).
    #[serde(default)]
    pub order: NodeOrder,
    /// Whether consecutive chunks share their input rows on the device
    /// (`--dedup-transfers`, [`crate::train::row_reuse`]).
    #[serde(default)]
    pub dedup: Dedup,
    /// HongTu's hybrid mode (`--hybrid`): the layers below the output layer cache their
    /// aggregation on the host in the forward pass, and their backward recomputes only
    /// the update ([`crate::nn::HybridLayer`]; SAGE mean and sum, GCN).
    #[serde(default)]
    pub hybrid: bool,
    /// Whether the next chunk is prepared (its block sliced, its rows gathered on the
    /// host) on a worker thread while a chunk computes (`--overlap`); `None`: on a GPU,
    /// not on the CPU, whose compute already keeps every core busy.
    #[serde(default)]
    pub overlap: Option<bool>,
}

/// `--node-order`: the order of every layer's nodes before they are cut into chunks
/// (HongTu chunks after a METIS renumbering). A chunk reads the rows of its nodes'
/// neighbours; when its nodes come from few parts of a min-edge-cut partition they share
/// more neighbours, so a chunk reads (and the device holds) fewer rows. The math does not
/// change: only the order in which input gradients are summed, so float rounding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeOrder {
    /// Node ids as they are.
    Id,
    /// Part by part of a METIS k-way partition of the graph.
    Metis,
    /// Part by part of a GREM partition (streaming, cheaper than METIS).
    #[default]
    Grem,
}

impl std::str::FromStr for NodeOrder {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "id" => Ok(NodeOrder::Id),
            "metis" => Ok(NodeOrder::Metis),
            "grem" => Ok(NodeOrder::Grem),
            _ => Err(Error::invalid(format!(
                "unknown --node-order `{s}`: expected id, metis or grem"
            ))),
        }
    }
}

/// What `--full-graph` needs of the rest of the configuration.
pub(crate) fn check_full_graph(config: &TrainConfig) -> Result<()> {
    if config.fanouts.iter().any(|&f| f != -1) {
        return Err(Error::invalid(format!(
            "full-graph training uses every neighbour: fanouts {:?} must all be -1 \
             (--fanouts=-1,-1, or leave --fanouts out)",
            config.fanouts
        )));
    }
    if config.batch_size != BatchSize::Full {
        return Err(Error::invalid(
            "full-graph training takes all training nodes as one batch: --batch-size must be \
             full",
        ));
    }
    if config.micro.micro_batches != 1 {
        return Err(Error::invalid(format!(
            "full-graph training splits layers into chunks, not the batch into micro-batches: \
             use --chunks {} instead of --micro-batches",
            config.micro.micro_batches
        )));
    }
    if config.full_graph.as_ref().and_then(|f| f.chunks) == Some(0) {
        return Err(Error::flag("--chunks", "--chunks must be at least 1"));
    }
    Ok(())
}
