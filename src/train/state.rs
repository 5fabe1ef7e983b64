//! The state every stage of training reads: the dataset and its features, the graph, the
//! configuration, the model and its optimizer, the partitioner and the memory estimator,
//! the ranks, and the device's peak tracking. The stages (the micro-batch run in
//! [`crate::train::micro`], the micro-batch sources and the planner in
//! [`crate::train::source`], sampler ranks in [`crate::train::feed`], full-graph epochs in
//! [`crate::train::full_graph`], evaluation and prediction in [`crate::train::inference`])
//! take it as `&State` or `&mut State`; [`crate::train::Trainer`] owns it and composes
//! them. This file imports no stage.

use std::cell::Cell;
use std::sync::Arc;

use crate::bytes::format_bytes;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{sample_blocks, Block, Csr, Dataset};
use crate::nn::{Gnn, Module};
use crate::partition::{self, Partitioner};
use crate::rng::{mix64, Rng};
use crate::tensor::Tensor;
use crate::train::config::{
    check_full_graph, BatchSize, OptimizerKind, TrainConfig, SAFETY_MARGIN,
};
use crate::train::estimate::{MemoryEstimator, Resident};
use crate::train::features::{gather_on_device, FeatureDType, FeaturePlacement, FeatureStore};
use crate::train::optim::{Adam, Optimizer, Sgd};

/// A model, its optimizer and the data it trains on: what every stage reads.
pub struct State<'a> {
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
    pub(crate) peak_seen: Cell<u64>,
    /// Record each micro-batch's seeds in its batch's [`crate::partition::PartitionStats`]
    /// (`parts`): only while [`crate::train::Trainer::partition_seeds`] runs, since a
    /// training run would keep every epoch's seeds.
    pub(crate) keep_parts: bool,
    /// The ranks training together (one process unless the trainer is given a collective).
    pub dist: crate::dist::Dist,
    /// Restores the device's previous budget when the state goes.
    _budget: Option<BudgetGuard>,
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
    // Without a budget, the device's free memory is the room (where the driver says): the
    // model's state and every batch's activations still have to fit beside the matrix.
    let room = match config.micro.memory_budget {
        Some(budget) => Some((budget, "the memory budget")),
        None => config
            .device
            .free_memory()?
            .map(|free| (free, "the device's free memory")),
    };
    if let Some((limit, what)) = room {
        let resident = estimator.resident_bytes(Resident::STEADY);
        let room = limit.saturating_sub(resident);
        if !explicit && bytes > room / 2 {
            return Ok(false);
        }
        if bytes > room {
            return refuse(format!(
                "the feature matrix takes {}, and {what} ({}) leaves {} after the \
                 parameters, gradients and optimizer state",
                format_bytes(bytes),
                format_bytes(limit),
                format_bytes(room)
            ));
        }
    }
    Ok(true)
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

impl BudgetGuard {
    /// Sets `budget` on `device`, keeping the budget it had.
    fn set(device: crate::device::Device, budget: u64) -> Result<BudgetGuard> {
        let previous = device.memory()?.stats().budget;
        device.set_memory_budget(Some(budget))?;
        Ok(BudgetGuard { device, previous })
    }
}

impl State<'_> {
    /// Puts the device's memory budget back as it was before this state set
    /// `config.micro.memory_budget` on it. A device has one budget per process: a caller
    /// that keeps states alive after their work (the Python package keeps every trained
    /// run) releases it, or states dropped out of the order they were made in would restore
    /// each other's budgets.
    pub fn release_budget(&mut self) {
        self._budget = None;
    }

    /// Sets `config.micro.memory_budget` on the device again after
    /// [`State::release_budget`], until the next release (or the state's end).
    pub fn hold_budget(&mut self) -> Result<()> {
        if let (None, Some(b)) = (&self._budget, self.config.micro.memory_budget) {
            self._budget = Some(BudgetGuard::set(self.config.device, b)?);
        }
        Ok(())
    }

    /// What ran out in an out-of-memory error whose limit was `limit` bytes: the memory
    /// budget when one is set, else the device's own memory (the driver refused).
    pub(crate) fn memory_limit(&self, limit: u64) -> String {
        match self.config.micro.memory_budget {
            Some(_) => format!("memory budget {}", format_bytes(limit)),
            None => format!(
                "the memory of {} ({})",
                self.config.device,
                format_bytes(limit)
            ),
        }
    }
}

/// Fills the model's widths that are 0 (`ModelConfig::default()`) with the dataset's, and
/// refuses a configuration that cannot train on `data`, saying why.
fn check_config(data: &Dataset, config: &mut TrainConfig) -> Result<()> {
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
        check_full_graph(config)?;
    }
    Ok(())
}

impl<'a> State<'a> {
    /// Builds the model and optimizer. `graph` is the graph to sample from (the dataset's,
    /// symmetrized or not).
    pub fn new(data: &'a Dataset, graph: Arc<Csr>, mut config: TrainConfig) -> Result<Self> {
        check_config(data, &mut config)?;
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
        if config.feature_dtype != FeatureDType::F32 {
            // A half-precision copy of the matrix is kept in host memory.
            crate::admission::admit(data.features.len() as u128 * 2, || {
                format!(
                    "dataset {}: the {:?} copy of its features (--feature-dtype)",
                    data.name, config.feature_dtype
                )
            })?;
        }
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
                Some(BudgetGuard::set(config.device, b)?)
            }
        };
        let resident_features = if on_device {
            Some(features.upload_all(data.feat_dim, config.device)?)
        } else {
            None
        };
        Ok(State {
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
            keep_parts: false,
            dist: crate::dist::Dist::default(),
            _budget: budget,
            config,
        })
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

    /// The host matrix micro-batches gather from; `None` when it lives on the device.
    pub(crate) fn host_features(&self) -> Option<&FeatureStore<'_>> {
        match self.resident_features {
            Some(_) => None,
            None => Some(&self.features),
        }
    }

    /// What is resident on the device now (for the next micro-batch's estimate).
    pub(crate) fn resident_now(&self) -> Resident {
        Resident {
            grads: self.model.parameters().iter().any(|p| p.grad().is_some()),
            optimizer_state: !self.optim.state_dict().0.is_empty(),
        }
    }
}
