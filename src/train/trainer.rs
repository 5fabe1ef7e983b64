//! The training loop: epochs over the training seeds, in mini-batches of a given size or
//! as one full batch; per batch, sample blocks once, split them into micro-batches
//! ([`crate::train::micro`]: K = 1 is plain training), forward, loss, backward per
//! micro-batch, one optimizer step; evaluation on validation and test nodes; per-phase
//! timing; memory budget and per-micro-batch memory statistics.

use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::autograd::no_grad;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{sample_blocks, Block, Csr, Dataset};
use crate::nn::{Forward, Gnn, ModelConfig, Module};
use crate::ops;
use crate::partition::{
    self, format_bytes, MemoryEstimator, PartitionStats, Partitioner, Resident,
};
use crate::rng::{mix64, Rng};
use crate::tensor::Tensor;
use crate::train::checkpoint;
use crate::train::features::{gather_host, FeatureDType, FeatureStore};
use crate::train::micro::{MicroConfig, Pass, SAFETY_MARGIN};
use crate::train::optim::{Adam, Optimizer, Sgd};

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
    Adam,
    AdamW,
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

/// Everything a training run needs besides the data.
#[derive(Clone, Debug, Serialize)]
pub struct TrainConfig {
    pub model: ModelConfig,
    /// One fanout per layer, input layer first; -1 = all neighbours.
    pub fanouts: Vec<i64>,
    pub batch_size: BatchSize,
    pub epochs: usize,
    pub optimizer: OptimizerKind,
    pub lr: f64,
    pub weight_decay: f64,
    pub seed: u64,
    #[serde(serialize_with = "serialize_display")]
    pub device: Device,
    /// Evaluate on the validation nodes every this many epochs (0: only at the end).
    pub eval_every: usize,
    /// Seeds per evaluation batch (halved while an evaluation batch runs out of memory).
    pub eval_batch_size: usize,
    /// Micro-batches per batch, partitioner, memory budget.
    pub micro: MicroConfig,
    /// Precision of the host feature matrix and of its uploads (f32, f16 or bf16).
    pub feature_dtype: FeatureDType,
}

fn serialize_display<S: serde::Serializer>(
    d: &Device,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// Seconds per phase of an epoch, summed over its batches and micro-batches. `slice` and
/// `gather` (host work) run on a helper thread while the previous micro-batch computes,
/// so the phases can add up to more than the epoch.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Phases {
    pub sample: f64,
    /// Choosing K and partitioning the seeds.
    pub partition: f64,
    /// Slicing micro-batch blocks out of the full batch.
    pub slice: f64,
    /// Host feature gather.
    pub gather: f64,
    /// Upload, forward and loss.
    pub forward: f64,
    pub backward: f64,
    pub optimizer: f64,
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
    }
}

/// One epoch's figures.
#[derive(Clone, Debug, Serialize)]
pub struct EpochStats {
    pub epoch: usize,
    /// Mean training loss over the epoch's seeds.
    pub loss: f64,
    /// Training accuracy (dropout on, as measured during training).
    pub train_acc: f64,
    pub valid_acc: Option<f64>,
    pub seconds: f64,
    pub phases: Phases,
    pub batches: usize,
    /// Micro-batches run over the epoch's batches.
    pub micro_batches: usize,
}

/// The result of a run (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub dataset: String,
    pub config: TrainConfig,
    pub num_parameters: usize,
    pub test_acc: f64,
    pub valid_acc: f64,
    pub final_loss: f64,
    pub epochs: Vec<EpochStats>,
    /// Highest bytes live on the training device during the run.
    pub peak_bytes: u64,
    pub train_seconds: f64,
    /// One entry per batch (per epoch in full-batch training): K, partitioner, redundancy,
    /// times, and per micro-batch seeds, input nodes, estimated and measured peaks.
    pub micro_batches: Vec<PartitionStats>,
}

/// A model, its optimizer and the data it trains on.
pub struct Trainer<'a> {
    pub data: &'a Dataset,
    /// The feature matrix in `config.feature_dtype`.
    pub features: FeatureStore<'a>,
    pub graph: Arc<Csr>,
    pub model: Gnn,
    pub optim: Box<dyn Optimizer>,
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
    pub fn new(data: &'a Dataset, graph: Arc<Csr>, config: TrainConfig) -> Result<Self> {
        config.model.validate()?;
        if config.fanouts.len() != config.model.layers {
            return Err(Error::invalid(format!(
                "{} fanouts for {} layers: give one fanout per layer",
                config.fanouts.len(),
                config.model.layers
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
        let estimator =
            MemoryEstimator::new(config.model.clone(), config.device, optim.state_factor());
        let budget = match config.micro.memory_budget {
            None => None,
            Some(b) => {
                let resident = estimator.resident_bytes(Resident::STEADY);
                if resident as f64 * (1.0 + SAFETY_MARGIN) > b as f64 {
                    return Err(Error::invalid(format!(
                        "memory budget {} is too small: parameters, their gradients and the \
                         optimizer state alone take {} (with the {:.0}% safety margin, {}), \
                         before any activation",
                        format_bytes(b),
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
        Ok(Trainer {
            data,
            features: FeatureStore::new(&data.features, config.feature_dtype),
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
            config,
        })
    }

    /// Restores the model and optimizer from a checkpoint.
    pub fn resume(&mut self, path: &Path) -> Result<()> {
        self.start_epoch = checkpoint::load(path, &self.model, self.optim.as_mut())?;
        Ok(())
    }

    /// Writes a checkpoint after `epochs_done` epochs.
    pub fn save(&self, path: &Path, epochs_done: usize) -> Result<()> {
        let json =
            serde_json::to_string(&self.config).map_err(|e| Error::invalid(e.to_string()))?;
        checkpoint::save(path, &self.model, self.optim.as_ref(), epochs_done, &json)
    }

    /// Gathers the rows of `ids` from the host feature matrix onto the training device
    /// (in the stored precision, widened to f32 there).
    pub fn gather_features(&self, ids: &[u32]) -> Result<Tensor> {
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

    /// One epoch over the training seeds.
    pub fn train_epoch(&mut self, epoch: usize) -> Result<EpochStats> {
        let t0 = Instant::now();
        let mut ph = Phases::default();
        let (mut loss_sum, mut correct, mut seen, mut micro) = (0.0, 0usize, 0usize, 0usize);
        let batches = self.batches(epoch);
        for (b, seeds) in batches.iter().enumerate() {
            let out = self.run_batch(epoch, b, seeds, Pass::Train)?;
            ph.add(&out.phases);
            loss_sum += out.loss_sum;
            correct += out.correct;
            seen += out.seeds;
            micro += out.stats.batches.len();
            self.micro_log.push(out.stats);
        }
        let valid_acc = if self.config.eval_every > 0 && (epoch + 1) % self.config.eval_every == 0 {
            Some(self.evaluate(&self.data.split.valid)?)
        } else {
            None
        };
        Ok(EpochStats {
            epoch,
            loss: loss_sum / seen.max(1) as f64,
            train_acc: correct as f64 / seen.max(1) as f64,
            valid_acc,
            seconds: t0.elapsed().as_secs_f64(),
            phases: ph,
            batches: batches.len(),
            micro_batches: micro,
        })
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
    /// each, and checkpointing every epoch to `checkpoint` if given.
    pub fn run(
        &mut self,
        checkpoint: Option<&Path>,
        on_epoch: &mut dyn FnMut(&EpochStats),
    ) -> Result<Summary> {
        let mem = self.config.device.memory()?;
        mem.reset_peak();
        self.peak_seen.set(0);
        let t0 = Instant::now();
        let mut epochs = Vec::new();
        for epoch in self.start_epoch..self.config.epochs {
            let stats = self.train_epoch(epoch)?;
            on_epoch(&stats);
            epochs.push(stats);
            if let Some(path) = checkpoint {
                self.save(path, epoch + 1)?;
            }
        }
        let train_seconds = t0.elapsed().as_secs_f64();
        let valid_acc = self.evaluate(&self.data.split.valid)?;
        let test_acc = self.evaluate(&self.data.split.test)?;
        self.fold_peak();
        Ok(Summary {
            dataset: self.data.name.clone(),
            config: self.config.clone(),
            num_parameters: self.model.num_parameters(),
            test_acc,
            valid_acc,
            final_loss: epochs.last().map_or(f64::NAN, |e| e.loss),
            epochs,
            peak_bytes: self.peak_seen.get(),
            train_seconds,
            micro_batches: std::mem::take(&mut self.micro_log),
        })
    }
}

/// Rows `ids` of a row-major `[n, dim]` host matrix, as a tensor on `device`.
pub fn gather_rows(features: &[f32], dim: usize, ids: &[u32], device: Device) -> Result<Tensor> {
    let out = gather_host(features, dim, ids)?;
    Tensor::from_f32(out, &[ids.len(), dim], device)
}
