//! The training loop: epochs over the training seeds, in mini-batches of a given size or
//! as one full batch; per batch, sample blocks once, split them into micro-batches
//! ([`crate::train::micro`]: K = 1 is plain training), forward, loss, backward per
//! micro-batch, one optimizer step; evaluation on validation and test nodes; per-phase
//! timing; memory budget and per-micro-batch memory statistics.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::autograd::no_grad;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::ChunkPlan;
use crate::graph::{sample_blocks, Block, Csr, Dataset};
use crate::nn::{Forward, Gnn, ModelConfig, Module};
use crate::ops;
use crate::partition::{
    self, format_bytes, MemoryEstimator, PartitionStats, Partitioner, Resident,
};
use crate::rng::{mix64, Rng};
use crate::tensor::Tensor;
use crate::train::checkpoint;
use crate::train::features::{
    gather_host, gather_on_device, FeatureDType, FeaturePlacement, FeatureStore,
};
use crate::train::full_graph::{FullGraphConfig, FullGraphStats};
use crate::train::micro::{MicroConfig, Pass, SAFETY_MARGIN};
use crate::train::optim::{Adam, Optimizer, Sgd};
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
    /// `in_dim` and `out_dim` are 0: [`Trainer::new`] takes them from the dataset.
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

/// Seconds per phase of an epoch, summed over its batches and micro-batches. `slice` and
/// `gather` (host work) run on a helper thread while the previous micro-batch computes,
/// so the phases can add up to more than the epoch. On a GPU without
/// [`TrainConfig::profile`], `forward`, `backward` and `optimizer` are the host's time to
/// enqueue the work; the device time lands in `backward` through the batch's closing read.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Phases {
    /// Sampling the full batch's blocks.
    pub sample: f64,
    /// Choosing K and partitioning the seeds.
    pub partition: f64,
    /// Slicing micro-batch blocks out of the full batch.
    pub slice: f64,
    /// Host feature gather.
    pub gather: f64,
    /// Upload, forward and loss.
    pub forward: f64,
    /// Backward of every micro-batch.
    pub backward: f64,
    /// Optimizer step.
    pub optimizer: f64,
    /// Summing the gradients over the ranks (`mpirun -np N`; 0 in one process).
    #[serde(default)]
    pub allreduce: f64,
    /// Waiting for a sampler rank's micro-batches and decoding them (`--sampler-ranks`;
    /// 0 otherwise): the trainer's idle time for want of input.
    #[serde(default)]
    pub feed: f64,
}

impl Phases {
    fn add(&mut self, o: &Phases) {
        self.sample += o.sample;
        self.partition += o.partition;
        self.slice += o.slice;
        self.gather += o.gather;
        self.forward += o.forward;
        self.backward += o.backward;
        self.optimizer += o.optimizer;
        self.allreduce += o.allreduce;
        self.feed += o.feed;
    }
}

/// One epoch's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EpochStats {
    /// 1-based, as on the console: `1` is the first epoch.
    pub epoch: usize,
    /// Mean training loss over the epoch's seeds (of the batches not skipped).
    pub loss: f64,
    /// Training accuracy (dropout on, as measured during training).
    pub train_acc: f64,
    /// Validation accuracy, at epochs that evaluate (`eval_every`).
    pub valid_acc: Option<f64>,
    /// Test accuracy, evaluated only at an epoch whose validation accuracy is the best so
    /// far (the OGB rule: report the test accuracy at the best validation epoch).
    #[serde(default)]
    pub test_acc: Option<f64>,
    /// Learning rate of the epoch (after the schedule).
    #[serde(default)]
    pub lr: f64,
    /// Wall-clock seconds of the epoch, evaluation included.
    pub seconds: f64,
    /// Seconds per phase.
    pub phases: Phases,
    /// Batches in the epoch.
    pub batches: usize,
    /// Batches whose loss was NaN or infinite and whose gradients were dropped
    /// (`OnNan::SkipBatch`).
    #[serde(default)]
    pub skipped_batches: usize,
    /// Micro-batches run over the epoch's batches.
    pub micro_batches: usize,
    /// Times the host blocked on the device during the epoch (evaluation included):
    /// synchronisations and device-to-host reads, see `Device::host_waits`. Always 0 on
    /// the CPU.
    #[serde(default)]
    pub host_waits: u64,
    /// Command submissions to the device's queue during the epoch (wgpu records ops and
    /// submits when the host needs a result, see `Device::submits`). Always 0 on the CPU
    /// and CUDA.
    #[serde(default)]
    pub submits: u64,
    /// Full-graph training (`--full-graph`): chunks, per-chunk peaks, rows moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_graph: Option<FullGraphStats>,
}

/// The result of a run (`--json`). Accuracies not measured (an interrupted run has no
/// final evaluation) are NaN, written as `null`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Dataset name.
    pub dataset: String,
    /// The run's configuration.
    pub config: TrainConfig,
    /// Trainable parameters of the model.
    pub num_parameters: usize,
    /// Test accuracy of the final model.
    pub test_acc: f64,
    /// Validation accuracy of the final model.
    pub valid_acc: f64,
    /// Mean training loss of the last epoch.
    pub final_loss: f64,
    /// The best validation accuracy of the evaluated epochs, the (1-based) epoch it was
    /// reached at, and the test accuracy then (the OGB leaderboard's figure).
    pub best_valid_acc: Option<f64>,
    /// Epoch (1-based) of the best validation accuracy.
    pub best_valid_epoch: Option<usize>,
    /// Test accuracy at that epoch.
    pub test_acc_at_best_valid: Option<f64>,
    /// Early stopping (`patience`) ended the run before its last epoch.
    pub stopped_early: bool,
    /// A stop request (Ctrl-C) ended the run: `epochs` holds the epochs finished so far.
    pub interrupted: bool,
    /// The resumed checkpoint had already finished the run: nothing was trained and the
    /// figures are the stored ones.
    pub already_finished: bool,
    /// Every epoch of the run, resumed ones included.
    pub epochs: Vec<EpochStats>,
    /// Highest bytes live on the training device during the run.
    pub peak_bytes: u64,
    /// Whether the feature matrix lived on the device (`--features`).
    #[serde(default)]
    pub features_on_device: bool,
    /// Seconds of training (evaluation included).
    pub train_seconds: f64,
    /// Processes that trained together (`mpirun -np N`; 1 without MPI; the trainer ranks
    /// with `--sampler-ranks`).
    pub ranks: usize,
    /// Ranks that sampled for them (`--sampler-ranks`; 0 without).
    #[serde(default)]
    pub sampler_ranks: usize,
    /// One entry per batch (per epoch in full-batch training): K, partitioner, redundancy,
    /// times, and per micro-batch seeds, input nodes, estimated and measured peaks.
    pub micro_batches: Vec<PartitionStats>,
}

/// A model, its optimizer and the data it trains on.
pub struct Trainer<'a> {
    /// The dataset trained on.
    pub data: &'a Dataset,
    /// The feature matrix in `config.feature_dtype`.
    pub features: FeatureStore<'a>,
    /// The feature matrix on the training device (stored precision), when
    /// `config.feature_placement` put it there: rows are gathered on the device.
    pub resident_features: Option<Tensor>,
    /// The graph sampled from (symmetrized or not, as configured).
    pub graph: Arc<Csr>,
    /// The model.
    pub model: Gnn,
    /// The optimizer and its state.
    pub optim: Box<dyn Optimizer>,
    /// The run's configuration (widths filled in from the data).
    pub config: TrainConfig,
    /// Epochs already completed (after a resume).
    pub start_epoch: usize,
    /// Splits batches into micro-batches.
    pub partitioner: Box<dyn Partitioner>,
    /// Predicts micro-batch peaks (budget planning, statistics).
    pub estimator: MemoryEstimator,
    /// K chosen for the previous batch under a budget (the next search starts there).
    pub(crate) last_k: usize,
    /// Highest tracker peak seen before the last peak reset.
    peak_seen: Cell<u64>,
    /// Partition statistics of the batches run so far.
    micro_log: Vec<PartitionStats>,
    /// Restores the device's previous budget when the trainer goes.
    _budget: Option<BudgetGuard>,
    /// Figures of the finished epochs (from a resumed checkpoint, then the run's).
    pub history: Vec<EpochStats>,
    /// The final figures stored in a resumed checkpoint of a finished run.
    stored_final: Option<FinalFigures>,
    /// Set from elsewhere (a signal handler) to stop after the current batch.
    stop: Option<Arc<AtomicBool>>,
    /// The ranks training together (one process unless [`Trainer::set_collective`]).
    pub dist: crate::dist::Dist,
    /// Full-graph training: the training nodes' chunks, made at the first epoch.
    pub(crate) full_plan: Option<ChunkPlan>,
}

/// A run's final figures, kept in its last checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct FinalFigures {
    valid_acc: f64,
    test_acc: f64,
    final_loss: f64,
    stopped_early: bool,
}

/// What identifies a dataset in a checkpoint: resuming on another is refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct DatasetId {
    name: String,
    nodes: usize,
    edges: usize,
    features: usize,
    classes: usize,
    train: usize,
}

impl DatasetId {
    fn of(d: &Dataset) -> DatasetId {
        DatasetId {
            name: d.name.clone(),
            nodes: d.num_nodes(),
            edges: d.graph.num_edges(),
            features: d.feat_dim,
            classes: d.num_classes,
            train: d.split.train.len(),
        }
    }
}

/// Whether the feature matrix goes on the device (see [`FeaturePlacement`]).
fn features_on_device(
    config: &TrainConfig,
    features: &FeatureStore<'_>,
    dim: usize,
    estimator: &MemoryEstimator,
) -> Result<bool> {
    if config.device == Device::Cpu || config.feature_placement == FeaturePlacement::Host {
        return Ok(false);
    }
    let explicit = config.feature_placement == FeaturePlacement::Device;
    let bytes = estimator.rounded(features.bytes() as u64);
    let refuse = |why: String| -> Result<bool> {
        if explicit {
            Err(Error::flag(
                "--features",
                format!("--features device: {why}"),
            ))
        } else {
            Ok(false)
        }
    };
    if features.is_half() && dim % 2 == 1 {
        return refuse(format!(
            "a half-precision matrix of odd width ({dim}) cannot be gathered on a GPU (rows \
             are gathered as pairs of values); use --features host or --feature-dtype f32"
        ));
    }
    if let Some(max) = config.device.max_buffer_bytes()? {
        if bytes > max {
            return refuse(format!(
                "the feature matrix takes {}, more than the largest buffer the device allows ({})",
                format_bytes(bytes),
                format_bytes(max)
            ));
        }
    }
    if let Some(budget) = config.micro.memory_budget {
        let resident = estimator.resident_bytes(Resident::STEADY);
        let room = budget.saturating_sub(resident);
        if !explicit && bytes > room / 2 {
            return Ok(false);
        }
        if bytes > room {
            return refuse(format!(
                "the feature matrix takes {}, and the memory budget {} leaves {} after the \
                 parameters, gradients and optimizer state",
                format_bytes(bytes),
                format_bytes(budget),
                format_bytes(room)
            ));
        }
    }
    Ok(true)
}

/// Configuration fields that may change when a run is resumed: they do not change what
/// the model computes (`epochs` is how a run is extended).
const RESUMABLE_CHANGES: &[&str] = &[
    "epochs",
    "device",
    "eval_every",
    "eval_batch_size",
    "patience",
    "on_nan",
    "profile",
    "feature_placement",
    "micro.micro_batches",
    "micro.partitioner",
    "micro.memory_budget",
    "full_graph.chunks",
    "full_graph.order",
    "full_graph.dedup",
    "full_graph.hybrid",
];

/// `value`'s leaves by dotted path.
fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, v, out);
            }
        }
        v => out.push((prefix.to_string(), v.to_string())),
    }
}

fn json<T: Serialize + ?Sized>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::invalid(e.to_string()))
}

/// How an epoch ended.
enum EpochEnd {
    Done(Box<EpochStats>),
    /// A stop request arrived before its last batch.
    Interrupted,
    /// A batch's loss was not finite under `OnNan::Stop`, or every batch's was.
    Diverged(String),
}

/// The best validation accuracy so far and the evaluations since it.
#[derive(Default)]
struct Best {
    acc: Option<f64>,
    epoch: Option<usize>,
    test: Option<f64>,
    since: usize,
}

impl Best {
    fn from_history(h: &[EpochStats]) -> Best {
        let mut b = Best::default();
        for e in h {
            if let Some(v) = e.valid_acc {
                if b.improves(v) {
                    b.acc = Some(v);
                    b.epoch = Some(e.epoch);
                    b.test = e.test_acc;
                    b.since = 0;
                } else {
                    b.since += 1;
                }
            }
        }
        b
    }

    fn improves(&self, v: f64) -> bool {
        self.acc.is_none_or(|b| v > b)
    }
}

/// Puts a device's previous memory budget back when dropped.
struct BudgetGuard {
    device: crate::device::Device,
    previous: Option<u64>,
}

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        // The device was usable when the guard was made; nothing to report if it is not.
        let _ = self.device.set_memory_budget(self.previous);
    }
}

impl<'a> Trainer<'a> {
    /// Builds the model and optimizer. `graph` is the graph to sample from (the dataset's,
    /// symmetrized or not).
    pub fn new(data: &'a Dataset, graph: Arc<Csr>, mut config: TrainConfig) -> Result<Self> {
        // 0 widths (ModelConfig::default()) mean: the dataset's.
        if config.model.shape.in_dim == 0 {
            config.model.shape.in_dim = data.feat_dim;
        }
        if config.model.shape.out_dim == 0 {
            config.model.shape.out_dim = data.num_classes;
        }
        config.model.validate()?;
        config.lr_schedule.validate()?;
        if config.patience == Some(0) {
            return Err(Error::invalid("patience must be at least 1 evaluation"));
        }
        if config.patience.is_some() && config.eval_every == 0 {
            return Err(Error::invalid(
                "early stopping (patience) needs validation during training: eval_every > 0",
            ));
        }
        if config.fanouts.len() != config.model.shape.layers {
            return Err(Error::invalid(format!(
                "{} fanouts for {} layers: give one fanout per layer",
                config.fanouts.len(),
                config.model.shape.layers
            )));
        }
        if config.epochs == 0 {
            return Err(Error::invalid("epochs must be at least 1"));
        }
        if data.split.train.is_empty() {
            return Err(Error::invalid("the split has no training nodes"));
        }
        if config.eval_batch_size == 0 {
            return Err(Error::invalid("the evaluation batch size must be positive"));
        }
        if let Some(&v) = data
            .split
            .train
            .iter()
            .find(|&&v| data.labels.get(v as usize).is_none_or(|&l| l == u32::MAX))
        {
            return Err(Error::invalid(format!("training node {v} has no label")));
        }
        if config.full_graph.is_some() {
            check_full_graph(&config)?;
        }
        let micro = &config.micro;
        let partitioner = partition::by_name(&micro.partitioner)?;
        let batch_seeds = match config.batch_size {
            BatchSize::Full => data.split.train.len(),
            BatchSize::Seeds(n) => n.min(data.split.train.len()),
        };
        partition::check_k(micro.micro_batches, batch_seeds)?;
        let degrees = graph.in_degrees();
        let model = Gnn::new(
            config.model.clone(),
            Some(&degrees),
            config.seed,
            config.device,
        )?;
        let params = model.parameters();
        let optim: Box<dyn Optimizer> = match config.optimizer {
            OptimizerKind::Adam => Box::new(Adam::new(params, config.lr, config.weight_decay)?),
            OptimizerKind::AdamW => Box::new(Adam::adamw(params, config.lr, config.weight_decay)?),
            OptimizerKind::Sgd => Box::new(Sgd::new(params, config.lr, 0.9, config.weight_decay)?),
        };
        let mut estimator =
            MemoryEstimator::new(config.model.clone(), config.device, optim.state_factor());
        let features = FeatureStore::new(&data.features, config.feature_dtype);
        let on_device = features_on_device(&config, &features, data.feat_dim, &estimator)?;
        if on_device {
            estimator.resident_features = estimator.rounded(features.bytes() as u64);
            estimator.device_gather = true;
        }
        let budget = match config.micro.memory_budget {
            None => None,
            Some(b) => {
                let resident = estimator.resident_bytes(Resident::STEADY);
                if resident as f64 * (1.0 + SAFETY_MARGIN) > b as f64 {
                    return Err(Error::invalid(format!(
                        "memory budget {} is too small: parameters, their gradients and the \
                         optimizer state{} alone take {} (with the {:.0}% safety margin, {}), \
                         before any activation",
                        format_bytes(b),
                        if on_device {
                            " and the feature matrix (--features device)"
                        } else {
                            ""
                        },
                        format_bytes(resident),
                        SAFETY_MARGIN * 100.0,
                        format_bytes((resident as f64 * (1.0 + SAFETY_MARGIN)).ceil() as u64)
                    )));
                }
                let previous = config.device.memory()?.stats().budget;
                config.device.set_memory_budget(Some(b))?;
                Some(BudgetGuard {
                    device: config.device,
                    previous,
                })
            }
        };
        let resident_features = if on_device {
            Some(features.upload_all(data.feat_dim, config.device)?)
        } else {
            None
        };
        Ok(Trainer {
            data,
            features,
            resident_features,
            graph,
            model,
            optim,
            start_epoch: 0,
            partitioner,
            estimator,
            last_k: config.micro.micro_batches,
            peak_seen: Cell::new(0),
            micro_log: Vec::new(),
            _budget: budget,
            history: Vec::new(),
            stored_final: None,
            stop: None,
            dist: crate::dist::Dist::default(),
            full_plan: None,
            config,
        })
    }

    /// Makes the run stop after the current batch once `flag` is set (e.g. by a Ctrl-C
    /// handler): [`Trainer::run`] then returns the finished epochs with `interrupted`.
    pub fn set_stop_flag(&mut self, flag: Arc<AtomicBool>) {
        self.stop = Some(flag);
    }

    /// Trains with other ranks (data-parallel, see [`crate::dist`]): this rank runs its
    /// share of each batch's micro-batches, and the gradients are summed over the ranks
    /// before each optimizer step (by NCCL on CUDA where every rank has it). Only rank 0
    /// writes checkpoints. A collective call: every rank makes it.
    pub fn set_collective(&mut self, collective: Arc<dyn crate::dist::Collective>) -> Result<()> {
        if collective.size() > 1 && self.config.full_graph.is_some() {
            // Full-graph chunks are not dealt to ranks: each would train the whole graph.
            return Err(Error::flag(
                "--full-graph",
                format!(
                    "--full-graph trains in one process; run it without mpirun (or drop \
                 --full-graph to share micro-batches among the {} ranks)",
                    collective.size()
                ),
            ));
        }
        self.dist = crate::dist::Dist::for_device(collective, self.config.device)?;
        Ok(())
    }

    /// Whether a stop was requested on any rank (so that all stop at the same batch).
    fn stop_requested(&self) -> Result<bool> {
        self.dist
            .any(self.stop.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)))
    }

    /// After [`Trainer::resume`]: the checkpoint had finished the run (all epochs done, or
    /// stopped early), so [`Trainer::run`] trains nothing and reports the stored figures.
    pub fn finished(&self) -> bool {
        self.start_epoch >= self.config.epochs
            || self.stored_final.as_ref().is_some_and(|f| f.stopped_early)
    }

    /// Restores the model, the optimizer and the finished epochs' figures from a
    /// checkpoint. Refuses one written for another dataset or another configuration (all
    /// fields but those that do not change the trained weights: epochs, device, evaluation
    /// frequency and batch size, patience, on-nan and micro-batching), naming the fields
    /// that differ.
    pub fn resume(&mut self, path: &Path) -> Result<()> {
        let ck = checkpoint::open(path)?;
        let parse = |key: &str, e: serde_json::Error| {
            Error::parse(path, 0, format!("checkpoint metadata `{key}`: {e}"))
        };
        if let Some(stored) = ck.meta.get("dataset") {
            let stored: DatasetId =
                serde_json::from_str(stored).map_err(|e| parse("dataset", e))?;
            let here = DatasetId::of(self.data);
            if stored != here {
                return Err(Error::invalid(format!(
                    "{} was trained on another dataset: {} ({} nodes, {} edges, {} features, \
                     {} classes, {} training nodes) there, {} ({} nodes, {} edges, {} \
                     features, {} classes, {} training nodes) here",
                    path.display(),
                    stored.name,
                    stored.nodes,
                    stored.edges,
                    stored.features,
                    stored.classes,
                    stored.train,
                    here.name,
                    here.nodes,
                    here.edges,
                    here.features,
                    here.classes,
                    here.train
                )));
            }
        }
        if let Some(stored) = ck.meta.get("config") {
            let stored: serde_json::Value =
                serde_json::from_str(stored).map_err(|e| parse("config", e))?;
            let here = serde_json::to_value(&self.config).map_err(|e| parse("config", e))?;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            flatten("", &stored, &mut a);
            flatten("", &here, &mut b);
            let stored: std::collections::HashMap<_, _> = a.into_iter().collect();
            let diffs: Vec<String> = b
                .iter()
                .filter(|(k, _)| !RESUMABLE_CHANGES.contains(&k.as_str()))
                // A field an older checkpoint lacks is not compared.
                .filter_map(|(k, v)| {
                    let s = stored.get(k)?;
                    (s != v).then(|| format!("{k} ({s} in the checkpoint, {v} now)"))
                })
                .collect();
            if !diffs.is_empty() {
                return Err(Error::invalid(format!(
                    "{} was written with another configuration: {}; resume with the same \
                     settings (only epochs, device, evaluation, patience, on-nan and \
                     micro-batching may change)",
                    path.display(),
                    diffs.join(", ")
                )));
            }
        }
        ck.restore(&self.model, self.optim.as_mut())?;
        self.start_epoch = ck.epoch;
        self.history = match ck.meta.get("history") {
            Some(h) => serde_json::from_str(h).map_err(|e| parse("history", e))?,
            None => Vec::new(),
        };
        self.stored_final = match ck.meta.get("final") {
            Some(f) => Some(serde_json::from_str(f).map_err(|e| parse("final", e))?),
            None => None,
        };
        Ok(())
    }

    /// Writes a checkpoint after `epochs_done` epochs, with the configuration, the
    /// dataset's identity and the figures of the epochs in [`Trainer::history`].
    pub fn save(&self, path: &Path, epochs_done: usize) -> Result<()> {
        self.save_with(path, epochs_done, None)
    }

    fn save_with(&self, path: &Path, epochs_done: usize, fin: Option<&FinalFigures>) -> Result<()> {
        let mut extra = vec![
            ("dataset", json(&DatasetId::of(self.data))?),
            ("history", json(&self.history)?),
        ];
        if let Some(f) = fin {
            extra.push(("final", json(f)?));
        }
        checkpoint::save(
            path,
            &self.model,
            self.optim.as_ref(),
            epochs_done,
            &json(&self.config)?,
            &extra,
        )
    }

    /// Gathers the rows of `ids` from the host feature matrix onto the training device
    /// (in the stored precision, widened to f32 there).
    pub fn gather_features(&self, ids: &[u32]) -> Result<Tensor> {
        if let Some(resident) = &self.resident_features {
            return gather_on_device(resident, ids);
        }
        let dim = self.data.feat_dim;
        self.features
            .gather(dim, ids)?
            .upload(ids.len(), dim, self.config.device)
    }

    /// Labels of `ids` as a u32 tensor on the training device.
    pub fn gather_labels(&self, ids: &[u32]) -> Result<Tensor> {
        let v: Vec<u32> = ids.iter().map(|&i| self.data.labels[i as usize]).collect();
        Tensor::from_u32(v, &[ids.len()], self.config.device)
    }

    /// The epoch's batches of training seeds (shuffled per epoch unless full).
    pub fn batches(&self, epoch: usize) -> Vec<Vec<u32>> {
        let train = &self.data.split.train;
        match self.config.batch_size {
            BatchSize::Full => vec![train.clone()],
            BatchSize::Seeds(n) => {
                let mut order = train.clone();
                let mut rng = Rng::fork(self.config.seed, mix64(epoch as u64 ^ 0xba7c));
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.below(i as u64 + 1) as usize);
                }
                order.chunks(n).map(<[u32]>::to_vec).collect()
            }
        }
    }

    /// Samples the blocks of `seeds` (one sample per batch and epoch).
    pub fn sample(&self, seeds: &[u32], key: u64) -> Result<Vec<Arc<Block>>> {
        let blocks = sample_blocks(
            &self.graph,
            seeds,
            &self.config.fanouts,
            mix64(self.config.seed ^ key),
        )?;
        Ok(blocks.into_iter().map(Arc::new).collect())
    }

    /// One epoch over the training seeds; `epoch` is 0-based (the stats' `epoch` is
    /// 1-based). A NaN or infinite loss is an error under `OnNan::Stop`.
    pub fn train_epoch(&mut self, epoch: usize) -> Result<EpochStats> {
        match self.train_epoch_inner(epoch, false)? {
            EpochEnd::Done(s) => Ok(*s),
            EpochEnd::Diverged(msg) => Err(Error::invalid(msg)),
            EpochEnd::Interrupted => Err(Error::invalid("interrupted")),
        }
    }

    fn train_epoch_inner(&mut self, epoch: usize, stoppable: bool) -> Result<EpochEnd> {
        let t0 = Instant::now();
        let waits0 = self.config.device.host_waits()?;
        let submits0 = self.config.device.submits()?;
        let mut ph = Phases::default();
        let (mut loss_sum, mut correct, mut seen, mut micro) = (0.0, 0usize, 0usize, 0usize);
        let mut skipped = 0usize;
        let mut full_graph = None;
        let batches = match self.config.full_graph {
            Some(_) => Vec::new(),
            None => self.batches(epoch),
        };
        if self.config.full_graph.is_some() {
            let out = self.full_graph_run(epoch)?;
            ph.add(&out.phases);
            if !out.loss_sum.is_finite() {
                self.optim.zero_grad();
                return Ok(EpochEnd::Diverged(format!(
                    "training diverged: the loss of epoch {} is {} (its gradients were not \
                     applied)",
                    epoch + 1,
                    out.loss_sum
                )));
            }
            let t = Instant::now();
            self.optim.step()?;
            self.optim.zero_grad();
            ph.optimizer = t.elapsed().as_secs_f64();
            loss_sum = out.loss_sum;
            correct = out.correct;
            seen = out.seeds;
            full_graph = Some(out.stats);
        }
        for (b, seeds) in batches.iter().enumerate() {
            let out = self.run_batch(epoch, b, seeds, Pass::Train)?;
            ph.add(&out.phases);
            micro += out.stats.k;
            self.micro_log.push(out.stats);
            if out.non_finite {
                let what = format!(
                    "the loss of epoch {} (batch {} of {}) is {}",
                    epoch + 1,
                    b + 1,
                    batches.len(),
                    out.loss_sum
                );
                if self.config.on_nan == OnNan::Stop {
                    return Ok(EpochEnd::Diverged(format!(
                        "training diverged: {what} (its gradients were not applied)"
                    )));
                }
                skipped += 1;
                if skipped == batches.len() {
                    return Ok(EpochEnd::Diverged(format!(
                        "training diverged: every batch of epoch {} had a NaN or infinite \
                         loss ({what})",
                        epoch + 1
                    )));
                }
                continue;
            }
            loss_sum += out.loss_sum;
            correct += out.correct;
            seen += out.seeds;
            if stoppable && b + 1 < batches.len() && self.stop_requested()? {
                return Ok(EpochEnd::Interrupted);
            }
        }
        let valid_acc = if self.config.eval_every > 0 && (epoch + 1) % self.config.eval_every == 0 {
            Some(self.evaluate(&self.data.split.valid)?)
        } else {
            None
        };
        Ok(EpochEnd::Done(Box::new(EpochStats {
            epoch: epoch + 1,
            loss: loss_sum / seen.max(1) as f64,
            train_acc: correct as f64 / seen.max(1) as f64,
            valid_acc,
            test_acc: None,
            lr: self.optim.lr(),
            seconds: t0.elapsed().as_secs_f64(),
            phases: ph,
            batches: batches.len().max(usize::from(full_graph.is_some())),
            skipped_batches: skipped,
            micro_batches: micro,
            host_waits: self.config.device.host_waits()? - waits0,
            submits: self.config.device.submits()? - submits0,
            full_graph,
        })))
    }

    /// Replaces the partitioner; a budget's K search starts afresh (from
    /// `micro_batches`), not from the K the previous partitioner needed.
    pub fn set_partitioner(&mut self, partitioner: Box<dyn Partitioner>) {
        self.partitioner = partitioner;
        self.last_k = self.config.micro.micro_batches;
    }

    /// Samples and partitions the batches of `epoch` without training: with `run`, every
    /// micro-batch also runs forward and backward (no optimizer step; gradients dropped)
    /// to measure its peak. Returns one entry per batch.
    pub fn partition_epoch(&mut self, epoch: usize, run: bool) -> Result<Vec<PartitionStats>> {
        let pass = if run { Pass::Measure } else { Pass::Plan };
        let batches = self.batches(epoch);
        let mut out = Vec::with_capacity(batches.len());
        for (b, seeds) in batches.iter().enumerate() {
            out.push(self.run_batch(epoch, b, seeds, pass)?.stats);
        }
        Ok(out)
    }

    /// Folds the tracker's peak into the run's before a reset.
    pub(crate) fn fold_peak(&self) {
        if let Ok(mem) = self.config.device.memory() {
            self.peak_seen.set(self.peak_seen.get().max(mem.peak()));
        }
    }

    /// Highest bytes live on the training device since the last call (or the trainer's
    /// start), then starts a new window: what `espalier bench` reports per measured run.
    pub fn take_peak(&self) -> u64 {
        self.fold_peak();
        let peak = self.peak_seen.replace(0);
        if let Ok(mem) = self.config.device.memory() {
            mem.reset_peak();
        }
        peak
    }

    /// Takes the partition statistics of the batches trained since the last call.
    pub fn take_micro_log(&mut self) -> Vec<PartitionStats> {
        std::mem::take(&mut self.micro_log)
    }

    /// Accuracy on `nodes` (labelled ones only), sampling with the training fanouts.
    pub fn evaluate(&self, nodes: &[u32]) -> Result<f64> {
        let labelled: Vec<u32> = nodes
            .iter()
            .copied()
            .filter(|&v| self.data.labels[v as usize] != u32::MAX)
            .collect();
        if labelled.is_empty() {
            return Ok(f64::NAN);
        }
        if self.config.full_graph.is_some() {
            let chunks = self.full_plan.as_ref().map_or(1, ChunkPlan::num_chunks);
            let (nodes, pred) = self.full_graph_predict(&labelled, chunks)?;
            let correct = nodes
                .iter()
                .zip(&pred)
                .filter(|(&v, &p)| p == self.data.labels[v as usize])
                .count();
            return Ok(correct as f64 / labelled.len() as f64);
        }
        let mut correct = 0usize;
        let mut size = self.config.eval_batch_size;
        let (mut at, mut i) = (0usize, 0u64);
        no_grad(|| -> Result<()> {
            while at < labelled.len() {
                let seeds = &labelled[at..(at + size).min(labelled.len())];
                match self.eval_batch(seeds, u64::MAX - i) {
                    Ok(c) => {
                        correct += c;
                        at += seeds.len();
                        i += 1;
                    }
                    // Under a budget an evaluation batch may not fit: halve and retry.
                    Err(Error::OutOfMemory { .. }) if size > 1 => size = size.div_ceil(2),
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })?;
        Ok(correct as f64 / labelled.len() as f64)
    }

    /// Correct predictions among `seeds` (forward only).
    fn eval_batch(&self, seeds: &[u32], key: u64) -> Result<usize> {
        let blocks = self.sample(seeds, key)?;
        let x = self.gather_features(&blocks[0].src_nodes)?;
        let logits = self.model.forward(&blocks, &x, &Forward::default())?;
        let pred = ops::argmax_rows(&logits)?.to_vec_u32()?;
        Ok(pred
            .iter()
            .zip(seeds)
            .filter(|(&p, &s)| p == self.data.labels[s as usize])
            .count())
    }

    /// Trains for the configured epochs (from `start_epoch`), calling `on_epoch` after
    /// each, and checkpointing every epoch to `checkpoint` if given (checked writable
    /// before the first epoch; a diverged epoch is never written, so the last checkpoint
    /// stays the last good one). The learning rate follows `lr_schedule`; with `patience`
    /// the run stops early; a stop flag ([`Trainer::set_stop_flag`]) ends it after the
    /// current batch with `interrupted` set. After resuming a finished run nothing is
    /// trained and the stored figures come back (`already_finished`).
    pub fn run(
        &mut self,
        checkpoint: Option<&Path>,
        on_epoch: &mut dyn FnMut(&EpochStats),
    ) -> Result<Summary> {
        // With several ranks, rank 0 alone writes (they hold the same weights).
        let checkpoint = checkpoint.filter(|_| self.dist.is_root());
        if let Some(path) = checkpoint {
            crate::atomic::check_writable(path)?;
        }
        let mem = self.config.device.memory()?;
        mem.reset_peak();
        self.peak_seen.set(0);
        let mut best = Best::from_history(&self.history);
        if self.finished() {
            self.release_samplers()?;
            let fin = match self.stored_final.clone() {
                Some(f) => f,
                // Finished but saved before the final evaluation: evaluate now.
                None => FinalFigures {
                    valid_acc: self.evaluate(&self.data.split.valid)?,
                    test_acc: self.evaluate(&self.data.split.test)?,
                    final_loss: self.history.last().map_or(f64::NAN, |e| e.loss),
                    stopped_early: false,
                },
            };
            return Ok(self.summary(fin, &best, 0.0, false, true));
        }
        let t0 = Instant::now();
        let (mut stopped_early, mut interrupted) = (false, false);
        for epoch in self.start_epoch..self.config.epochs {
            let lr = self
                .config
                .lr_schedule
                .lr_at(self.config.lr, epoch, self.config.epochs);
            self.optim.set_lr(lr);
            let mut stats = match self.train_epoch_inner(epoch, true)? {
                EpochEnd::Done(s) => *s,
                EpochEnd::Interrupted => {
                    interrupted = true;
                    break;
                }
                EpochEnd::Diverged(msg) => {
                    let kept = match (checkpoint, self.history.last()) {
                        (Some(p), Some(e)) => format!(
                            "; {} keeps the weights after epoch {}",
                            p.display(),
                            e.epoch
                        ),
                        _ => String::new(),
                    };
                    return Err(Error::invalid(format!(
                        "{msg}: stopped (try a lower learning rate){kept}"
                    )));
                }
            };
            if let Some(v) = stats.valid_acc {
                if best.improves(v) {
                    let test = no_grad(|| self.evaluate(&self.data.split.test))?;
                    stats.test_acc = Some(test);
                    best = Best {
                        acc: Some(v),
                        epoch: Some(stats.epoch),
                        test: Some(test),
                        since: 0,
                    };
                } else {
                    best.since += 1;
                }
            }
            on_epoch(&stats);
            self.history.push(stats);
            if let Some(path) = checkpoint {
                self.save(path, epoch + 1)?;
            }
            if self.config.patience.is_some_and(|p| best.since >= p) {
                stopped_early = epoch + 1 < self.config.epochs;
                break;
            }
            if self.stop_requested()? {
                interrupted = epoch + 1 < self.config.epochs;
                break;
            }
        }
        // No more batches: sampler ranks (if any) may stop.
        self.release_samplers()?;
        let train_seconds = t0.elapsed().as_secs_f64();
        let final_loss = self.history.last().map_or(f64::NAN, |e| e.loss);
        let fin = if interrupted {
            // Stop promptly: no final evaluation.
            FinalFigures {
                valid_acc: f64::NAN,
                test_acc: f64::NAN,
                final_loss,
                stopped_early,
            }
        } else {
            let fin = FinalFigures {
                valid_acc: self.evaluate(&self.data.split.valid)?,
                test_acc: self.evaluate(&self.data.split.test)?,
                final_loss,
                stopped_early,
            };
            if let Some(path) = checkpoint {
                let done = self.history.last().map_or(self.start_epoch, |e| e.epoch);
                self.save_with(path, done, Some(&fin))?;
            }
            fin
        };
        self.fold_peak();
        let mut s = self.summary(fin, &best, train_seconds, interrupted, false);
        s.micro_batches = std::mem::take(&mut self.micro_log);
        Ok(s)
    }

    fn summary(
        &self,
        fin: FinalFigures,
        best: &Best,
        train_seconds: f64,
        interrupted: bool,
        already_finished: bool,
    ) -> Summary {
        Summary {
            dataset: self.data.name.clone(),
            config: self.config.clone(),
            num_parameters: self.model.num_parameters(),
            test_acc: fin.test_acc,
            valid_acc: fin.valid_acc,
            final_loss: fin.final_loss,
            best_valid_acc: best.acc,
            best_valid_epoch: best.epoch,
            test_acc_at_best_valid: best.test,
            stopped_early: fin.stopped_early,
            interrupted,
            already_finished,
            epochs: self.history.clone(),
            peak_bytes: self.peak_seen.get(),
            features_on_device: self.resident_features.is_some(),
            train_seconds,
            ranks: self.dist.size(),
            sampler_ranks: self.dist.collective.samplers(),
            micro_batches: Vec::new(),
        }
    }

    /// Logits of `nodes` (`[nodes.len(), classes]`, on the CPU) from full-neighbour
    /// inference: every layer aggregates all neighbours (fanout -1), no dropout, in
    /// batches of `eval_batch_size` seeds (halved while one runs out of memory).
    pub fn predict(&self, nodes: &[u32]) -> Result<Tensor> {
        self.infer(&self.model, nodes, false)
    }

    /// Node embeddings: the last hidden layer's output (after its ReLU) for `nodes`
    /// (`[nodes.len(), hidden]`, on the CPU), from full-neighbour inference as in
    /// [`Trainer::predict`]. Needs a model of at least two layers; GAT is not supported
    /// (its truncated stack would change the last layer's heads).
    pub fn embeddings(&self, nodes: &[u32]) -> Result<Tensor> {
        let cfg = &self.config.model;
        if cfg.shape.layers < 2 {
            return Err(Error::invalid(
                "a one-layer model has no hidden layer to take embeddings from",
            ));
        }
        if cfg.settings().output_layer_differs() {
            return Err(Error::invalid(format!(
                "embeddings of {} models are not supported: its output layer is not one of its \
                 hidden layers (use predict for logits)",
                cfg.kind().name().to_uppercase()
            )));
        }
        // The first layers - 1 layers of the model, sharing its weights' values.
        let mut head = cfg.clone();
        head.shape.layers -= 1;
        head.shape.out_dim = cfg.widths(cfg.shape.layers - 2).1;
        let degrees = self.graph.in_degrees();
        let trunk = Gnn::new(head, Some(&degrees), 0, self.config.device)?;
        let full: std::collections::HashMap<String, Tensor> =
            self.model.named_parameters("m").into_iter().collect();
        for (name, p) in trunk.named_parameters("m") {
            let src = full
                .get(&name)
                .filter(|t| t.shape() == p.shape())
                .ok_or_else(|| {
                    Error::invalid(format!("embeddings: parameter `{name}` has no counterpart"))
                })?;
            ops::assign(&p, src)?;
        }
        self.infer(&trunk, nodes, true)
    }

    fn infer(&self, model: &Gnn, nodes: &[u32], relu: bool) -> Result<Tensor> {
        let n = self.data.num_nodes();
        if let Some(&v) = nodes.iter().find(|&&v| v as usize >= n) {
            return Err(Error::invalid(format!(
                "node {v} is out of range: the graph has {n} nodes"
            )));
        }
        let fanouts = vec![-1i64; model.config.shape.layers];
        let width = model.config.widths(model.config.shape.layers - 1).1;
        let mut out: Vec<f32> = Vec::with_capacity(nodes.len() * width);
        let mut size = self.config.eval_batch_size.max(1);
        let (mut at, mut i) = (0usize, 0u64);
        no_grad(|| -> Result<()> {
            while at < nodes.len() {
                let seeds = &nodes[at..(at + size).min(nodes.len())];
                let run = || -> Result<Vec<f32>> {
                    let blocks: Vec<Arc<Block>> = sample_blocks(
                        &self.graph,
                        seeds,
                        &fanouts,
                        mix64(self.config.seed ^ (u64::MAX - i)),
                    )?
                    .into_iter()
                    .map(Arc::new)
                    .collect();
                    let x = self.gather_features(&blocks[0].src_nodes)?;
                    let mut h = model.forward(&blocks, &x, &Forward::default())?;
                    if relu {
                        h = ops::relu(&h)?;
                    }
                    h.to_vec_f32()
                };
                match run() {
                    Ok(rows) => {
                        out.extend_from_slice(&rows);
                        at += seeds.len();
                        i += 1;
                    }
                    Err(Error::OutOfMemory { .. }) if size > 1 => size = size.div_ceil(2),
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })?;
        Tensor::from_f32(out, &[nodes.len(), width], Device::Cpu)
    }
}

/// Rows `ids` of a row-major `[n, dim]` host matrix, as a tensor on `device`.
pub fn gather_rows(features: &[f32], dim: usize, ids: &[u32], device: Device) -> Result<Tensor> {
    let out = gather_host(features, dim, ids)?;
    Tensor::from_f32(out, &[ids.len(), dim], device)
}

/// What `--full-graph` needs of the rest of the configuration.
fn check_full_graph(config: &TrainConfig) -> Result<()> {
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
