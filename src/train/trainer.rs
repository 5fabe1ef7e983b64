//! The training loop: epochs over the training seeds, in mini-batches of a given size or
//! as one full batch; per batch, sample blocks, gather features, forward, loss, backward,
//! optimizer step; evaluation on validation and test nodes; per-phase timing.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use crate::autograd::no_grad;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{sample_blocks, Block, Csr, Dataset};
use crate::nn::{Forward, Gnn, ModelConfig, Module};
use crate::ops;
use crate::rng::{mix64, Rng};
use crate::tensor::Tensor;
use crate::train::checkpoint;
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
    /// Seeds per evaluation batch.
    pub eval_batch_size: usize,
}

fn serialize_display<S: serde::Serializer>(
    d: &Device,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// Seconds per phase of an epoch, summed over its batches.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Phases {
    pub sample: f64,
    pub gather: f64,
    pub forward: f64,
    pub backward: f64,
    pub optimizer: f64,
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
}

/// A model, its optimizer and the data it trains on.
pub struct Trainer<'a> {
    pub data: &'a Dataset,
    pub graph: Arc<Csr>,
    pub model: Gnn,
    pub optim: Box<dyn Optimizer>,
    pub config: TrainConfig,
    /// Epochs already completed (after a resume).
    pub start_epoch: usize,
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
        Ok(Trainer {
            data,
            graph,
            model,
            optim,
            config,
            start_epoch: 0,
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

    /// Gathers the rows of `ids` from the host feature matrix onto the training device.
    pub fn gather_features(&self, ids: &[u32]) -> Result<Tensor> {
        gather_rows(
            &self.data.features,
            self.data.feat_dim,
            ids,
            self.config.device,
        )
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
        let (mut loss_sum, mut correct, mut seen) = (0.0, 0usize, 0usize);
        let batches = self.batches(epoch);
        // Each phase ends with a device sync: GPU ops return once queued, so without it a
        // phase's time would land in whichever later phase first waits for the device.
        let device = self.config.device;
        let lap = |t: Instant| -> Result<f64> {
            device.sync()?;
            Ok(t.elapsed().as_secs_f64())
        };
        for (b, seeds) in batches.iter().enumerate() {
            let t = Instant::now();
            let blocks = self.sample(seeds, ((epoch as u64) << 32) | b as u64)?;
            ph.sample += t.elapsed().as_secs_f64();

            let t = Instant::now();
            let x = self.gather_features(&blocks[0].src_nodes)?;
            let y = self.gather_labels(seeds)?;
            ph.gather += lap(t)?;

            let t = Instant::now();
            let fwd = Forward {
                training: true,
                seed: self.config.seed,
                epoch: epoch as u64,
            };
            let logits = self.model.forward(&blocks, &x, &fwd)?;
            let loss = ops::cross_entropy(&logits, &y, None)?;
            let pred = ops::argmax_rows(&logits.detach())?.to_vec_u32()?;
            ph.forward += lap(t)?;

            let t = Instant::now();
            loss.backward()?;
            ph.backward += lap(t)?;

            let t = Instant::now();
            self.optim.step()?;
            self.optim.zero_grad();
            ph.optimizer += lap(t)?;

            loss_sum += loss.item()? * seeds.len() as f64;
            correct += pred
                .iter()
                .zip(seeds)
                .filter(|(&p, &s)| p == self.data.labels[s as usize])
                .count();
            seen += seeds.len();
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
        })
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
        no_grad(|| -> Result<()> {
            for (i, seeds) in labelled.chunks(self.config.eval_batch_size).enumerate() {
                let blocks = self.sample(seeds, u64::MAX - i as u64)?;
                let x = self.gather_features(&blocks[0].src_nodes)?;
                let logits = self.model.forward(&blocks, &x, &Forward::default())?;
                let pred = ops::argmax_rows(&logits)?.to_vec_u32()?;
                correct += pred
                    .iter()
                    .zip(seeds)
                    .filter(|(&p, &s)| p == self.data.labels[s as usize])
                    .count();
            }
            Ok(())
        })?;
        Ok(correct as f64 / labelled.len() as f64)
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
        Ok(Summary {
            dataset: self.data.name.clone(),
            config: self.config.clone(),
            num_parameters: self.model.num_parameters(),
            test_acc,
            valid_acc,
            final_loss: epochs.last().map_or(f64::NAN, |e| e.loss),
            epochs,
            peak_bytes: mem.peak(),
            train_seconds,
        })
    }
}

/// Rows `ids` of a row-major `[n, dim]` host matrix, as a tensor on `device`.
pub fn gather_rows(features: &[f32], dim: usize, ids: &[u32], device: Device) -> Result<Tensor> {
    let n = features.len() / dim.max(1);
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= n) {
        return Err(Error::invalid(format!(
            "feature gather: node {bad} out of range for {n} rows"
        )));
    }
    let mut out = vec![0f32; ids.len() * dim];
    out.par_chunks_mut(dim.max(1))
        .zip(ids.par_iter())
        .for_each(|(row, &i)| {
            let i = i as usize;
            row.copy_from_slice(&features[i * dim..(i + 1) * dim]);
        });
    Tensor::from_f32(out, &[ids.len(), dim], device)
}
