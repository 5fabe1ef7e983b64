//! The training loop: epochs over the training seeds, in mini-batches of a given size or
//! as one full batch; per batch, sample blocks once, split them into micro-batches
//! ([`crate::train::micro`]: K = 1 is plain training), forward, loss, backward per
//! micro-batch, one optimizer step; evaluation on validation and test nodes; per-phase
//! timing; memory budget and per-micro-batch memory statistics.
//!
//! [`Trainer`] owns the [`State`] every stage reads ([`crate::train::state`]) and is the
//! only file that imports the stages: the micro-batch run ([`crate::train::micro`]),
//! full-graph epochs ([`crate::train::full_graph`]), evaluation and prediction
//! ([`crate::train::inference`]) and the sampler-rank feed ([`crate::train::feed`]), each a
//! set of functions over that state. Resuming and checkpointing stay here: they restore
//! the run loop's history with the state.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::autograd::no_grad;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{Csr, Dataset};
use crate::nn::Module;
use crate::partition::{PartitionStats, Partitioner};
use crate::tensor::Tensor;
use crate::train::checkpoint;
use crate::train::config::{OnNan, TrainConfig};
use crate::train::features::gather_host;
use crate::train::feed::{self, Feed};
use crate::train::full_graph::{FullGraph, FullGraphStats};
use crate::train::inference;
use crate::train::micro::{self, Pass};
use crate::train::state::State;
use crate::train::stats::{EpochStats, Phases, Summary};

/// Trains a model: owns the [`State`] every stage reads and composes the stages over it
/// (micro-batch runs, full-graph epochs, a sampler feed), with what only the run loop
/// needs (epoch history, the partition log, checkpointed final figures, the stop flag).
/// What the stages read is `trainer.state` ([`State`]); the trainer itself holds only
/// what the run loop needs.
pub struct Trainer<'a> {
    /// The dataset, model, optimizer, configuration... (see [`State`]).
    pub state: State<'a>,
    /// Full-graph training: the training nodes' chunks, made at the first epoch.
    full: FullGraph,
    /// On a trainer rank fed by sampler ranks: where its micro-batches come from.
    feed: Option<Feed>,
    /// Partition statistics of the batches run so far.
    micro_log: Vec<PartitionStats>,
    /// Figures of the finished epochs (from a resumed checkpoint, then the run's).
    pub history: Vec<EpochStats>,
    /// The final figures stored in a resumed checkpoint of a finished run.
    stored_final: Option<FinalFigures>,
    /// Set from elsewhere (a signal handler) to stop after the current batch.
    stop: Option<Arc<AtomicBool>>,
    /// After [`Trainer::resume`] from a checkpoint whose values could not be verified (one
    /// written before checksums): why, for the user.
    pub resume_warning: Option<String>,
    /// What the processes before this one measured (a resumed run's checkpoint says).
    earlier: SoFar,
    /// Seconds this process has trained so far (evaluation included), at the last epoch's
    /// end.
    seconds_here: f64,
    /// Where [`Trainer::run`] keeps the summary of the epochs finished so far, marked
    /// interrupted, for a caller that must write it from elsewhere (a second Ctrl-C).
    partial: Option<Arc<Mutex<Option<Summary>>>>,
}

/// What a run has measured beyond its epochs' figures: its seconds, peak bytes and
/// micro-batch statistics. Kept in every checkpoint, so that a resumed run reports them
/// over all its processes and a finished run resumed again reports them as they were.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct SoFar {
    train_seconds: f64,
    peak_bytes: u64,
    micro_batches: Vec<PartitionStats>,
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

    /// Whether `v` beats the best so far (NaN, an accuracy over no node, never does).
    fn improves(&self, v: f64) -> bool {
        !v.is_nan() && self.acc.is_none_or(|b| v > b)
    }
}

impl<'a> Trainer<'a> {
    /// Builds the model and optimizer. `graph` is the graph to sample from (the dataset's,
    /// symmetrized or not).
    pub fn new(data: &'a Dataset, graph: Arc<Csr>, config: TrainConfig) -> Result<Self> {
        Ok(Trainer {
            state: State::new(data, graph, config)?,
            full: FullGraph::default(),
            feed: None,
            micro_log: Vec::new(),
            history: Vec::new(),
            stored_final: None,
            stop: None,
            resume_warning: None,
            earlier: SoFar::default(),
            seconds_here: 0.0,
            partial: None,
        })
    }

    /// Makes the run stop after the current batch once `flag` is set (e.g. by a Ctrl-C
    /// handler): [`Trainer::run`] then returns the finished epochs with `interrupted`.
    pub fn set_stop_flag(&mut self, flag: Arc<AtomicBool>) {
        self.stop = Some(flag);
    }

    /// Has [`Trainer::run`] keep, after every epoch, the summary of the epochs finished so
    /// far in `sink` (marked interrupted, without final figures): what a caller writes
    /// when it must quit at once (a second Ctrl-C) rather than wait for the batch to end.
    pub fn keep_partial_summary(&mut self, sink: Arc<Mutex<Option<Summary>>>) {
        self.partial = Some(sink);
    }

    /// Trains with other ranks (data-parallel, see [`crate::dist`]): this rank runs its
    /// share of each batch's micro-batches, and the gradients are summed over the ranks
    /// before each optimizer step (by NCCL on CUDA where every rank has it). Only rank 0
    /// writes checkpoints. A collective call: every rank makes it.
    pub fn set_collective(&mut self, collective: Arc<dyn crate::dist::Collective>) -> Result<()> {
        if collective.size() > 1 && self.state.config.full_graph.is_some() {
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
        self.state.dist = crate::dist::Dist::for_device(collective, self.state.config.device)?;
        Ok(())
    }

    /// Whether a stop was requested on any rank (so that all stop at the same batch).
    fn stop_requested(&self) -> Result<bool> {
        self.state
            .dist
            .any(self.stop.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)))
    }

    /// After [`Trainer::resume`]: the checkpoint had finished the run (all epochs done, or
    /// stopped early), so [`Trainer::run`] trains nothing and reports the stored figures.
    pub fn finished(&self) -> bool {
        self.state.start_epoch >= self.state.config.epochs
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
            let here = DatasetId::of(self.state.data);
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
            let here = serde_json::to_value(&self.state.config).map_err(|e| parse("config", e))?;
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
        ck.restore(&self.state.model, self.state.optim.as_mut())?;
        self.resume_warning = ck.unverified.clone();
        self.state.start_epoch = ck.epoch;
        self.history = match ck.meta.get("history") {
            Some(h) => serde_json::from_str(h).map_err(|e| parse("history", e))?,
            None => Vec::new(),
        };
        self.stored_final = match ck.meta.get("final") {
            Some(f) => Some(serde_json::from_str(f).map_err(|e| parse("final", e))?),
            None => None,
        };
        // Absent from checkpoints written before it was kept: the run then counts from here.
        self.earlier = match ck.meta.get("so_far") {
            Some(f) => serde_json::from_str(f).map_err(|e| parse("so_far", e))?,
            None => SoFar::default(),
        };
        Ok(())
    }

    /// What the run has measured over all its processes, this one to its last epoch.
    fn so_far(&self) -> SoFar {
        self.state.fold_peak();
        let mut micro_batches = self.earlier.micro_batches.clone();
        micro_batches.extend(self.micro_log.iter().cloned());
        SoFar {
            train_seconds: self.earlier.train_seconds + self.seconds_here,
            peak_bytes: self.earlier.peak_bytes.max(self.state.peak_seen.get()),
            micro_batches,
        }
    }

    /// Writes a checkpoint after `epochs_done` epochs, with the configuration, the
    /// dataset's identity and the figures of the epochs in [`Trainer::history`].
    pub fn save(&self, path: &Path, epochs_done: usize) -> Result<()> {
        self.save_with(path, epochs_done, None)
    }

    fn save_with(&self, path: &Path, epochs_done: usize, fin: Option<&FinalFigures>) -> Result<()> {
        let mut extra = vec![
            ("dataset", json(&DatasetId::of(self.state.data))?),
            ("history", json(&self.history)?),
            ("so_far", json(&self.so_far())?),
        ];
        if let Some(f) = fin {
            extra.push(("final", json(f)?));
        }
        checkpoint::save(
            path,
            &self.state.model,
            self.state.optim.as_ref(),
            epochs_done,
            &json(&self.state.config)?,
            &extra,
        )
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
        let waits0 = self.state.config.device.host_waits()?;
        let submits0 = self.state.config.device.submits()?;
        let mut ph = Phases::default();
        let (mut loss_sum, mut correct, mut seen, mut micro) = (0.0, 0usize, 0usize, 0usize);
        let mut skipped = 0usize;
        let mut full_graph = None;
        let batches = match self.state.config.full_graph {
            Some(_) => Vec::new(),
            None => self.state.batches(epoch),
        };
        if self.state.config.full_graph.is_some() {
            let out = self.full.run(&mut self.state, epoch)?;
            ph.add(&out.phases);
            if !out.loss_sum.is_finite() {
                self.state.optim.zero_grad();
                return Ok(EpochEnd::Diverged(format!(
                    "training diverged: the loss of epoch {} is {} (its gradients were not \
                     applied)",
                    epoch + 1,
                    out.loss_sum
                )));
            }
            let t = Instant::now();
            self.state.optim.step()?;
            self.state.optim.zero_grad();
            ph.optimizer = t.elapsed().as_secs_f64();
            loss_sum = out.loss_sum;
            correct = out.correct;
            seen = out.seeds;
            full_graph = Some(out.stats);
        }
        for (b, seeds) in batches.iter().enumerate() {
            let out = match &mut self.feed {
                Some(feed) => feed.run_batch(&mut self.state, epoch, b, seeds.len())?,
                None => micro::run_batch(&mut self.state, epoch, b, seeds, Pass::Train)?,
            };
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
                if self.state.config.on_nan == OnNan::Stop {
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
        let valid_acc = if self.state.config.eval_every > 0
            && (epoch + 1) % self.state.config.eval_every == 0
            && self.has_validation_nodes()
        {
            Some(self.evaluate(&self.state.data.split.valid)?)
        } else {
            None
        };
        Ok(EpochEnd::Done(Box::new(EpochStats {
            epoch: epoch + 1,
            loss: loss_sum / seen.max(1) as f64,
            train_acc: correct as f64 / seen.max(1) as f64,
            valid_acc,
            test_acc: None,
            lr: self.state.optim.lr(),
            seconds: t0.elapsed().as_secs_f64(),
            phases: ph,
            batches: batches.len().max(usize::from(full_graph.is_some())),
            skipped_batches: skipped,
            micro_batches: micro,
            host_waits: self.state.config.device.host_waits()? - waits0,
            submits: self.state.config.device.submits()? - submits0,
            full_graph,
        })))
    }

    /// Runs full-graph epoch `epoch`'s forward, loss and backward over the training nodes
    /// (chunked as configured; the plan is made at the first call and kept), without the
    /// optimizer step: afterwards every parameter holds the gradient of the mean
    /// cross-entropy over all training nodes. Returns that mean loss and the epoch's chunk
    /// figures. Needs [`TrainConfig::full_graph`].
    pub fn full_graph_gradients(&mut self, epoch: usize) -> Result<(f64, FullGraphStats)> {
        let out = self.full.run(&mut self.state, epoch)?;
        Ok((out.loss_sum / out.seeds.max(1) as f64, out.stats))
    }

    /// Whether this rank is a sampler rank (it serves trainers instead of training).
    pub fn is_sampler_rank(&self) -> bool {
        crate::dist::is_sampler(&*self.state.dist.collective)
    }

    /// On a trainer rank of a world with sampler ranks: takes its micro-batches from them
    /// from now on (tells each whether to gather the input rows). Nothing otherwise.
    pub fn join_samplers(&mut self) -> Result<()> {
        if let Some(feed) = feed::join(&self.state)? {
            self.feed = Some(feed);
        }
        Ok(())
    }

    /// Tells the sampler ranks that this trainer has finished (nothing without them).
    fn release_samplers(&mut self) -> Result<()> {
        match self.feed.take() {
            Some(feed) => feed.release(&self.state),
            None => Ok(()),
        }
    }

    /// A sampler rank's run: serves every batch of the run that is its own to the trainer
    /// ranks, until each trainer has said it stopped.
    pub fn serve_trainers(&mut self) -> Result<()> {
        feed::serve_trainers(&mut self.state)
    }

    /// Replaces the partitioner; a budget's K search starts afresh (from
    /// `micro_batches`), not from the K the previous partitioner needed.
    pub fn set_partitioner(&mut self, partitioner: Box<dyn Partitioner>) {
        self.state.partitioner = partitioner;
        self.state.last_k = self.state.config.micro.micro_batches;
    }

    /// Samples and partitions the batches of `epoch` without training: with `run`, every
    /// micro-batch also runs forward and backward (no optimizer step; gradients dropped)
    /// to measure its peak. Returns one entry per batch.
    pub fn partition_epoch(&mut self, epoch: usize, run: bool) -> Result<Vec<PartitionStats>> {
        let pass = if run { Pass::Measure } else { Pass::Plan };
        let batches = self.state.batches(epoch);
        let mut out = Vec::with_capacity(batches.len());
        for (b, seeds) in batches.iter().enumerate() {
            out.push(micro::run_batch(&mut self.state, epoch, b, seeds, pass)?.stats);
        }
        Ok(out)
    }

    /// Samples `seeds` as batch `batch` of `epoch` (0-based) and partitions them as training
    /// would, without training: the statistics come back with each micro-batch's seeds
    /// (`parts`, in the order of `batches`). With `run`, every micro-batch also runs
    /// forward and backward to measure its peak (no optimizer step; a micro-batch that runs
    /// out of memory is split, as in training). For the training seeds of batch 0 this is
    /// what `espalier partition` reports. The seeds must be distinct node ids.
    pub fn partition_seeds(
        &mut self,
        epoch: usize,
        batch: usize,
        seeds: &[u32],
        run: bool,
    ) -> Result<PartitionStats> {
        let n = self.state.graph.num_nodes;
        if seeds.is_empty() {
            return Err(Error::invalid("seeds: no seeds to partition"));
        }
        let mut seen = vec![false; n];
        for (i, &s) in seeds.iter().enumerate() {
            match seen.get_mut(s as usize) {
                None => {
                    return Err(Error::invalid(format!(
                        "seeds[{i}]: node id {s} out of range for {n} nodes"
                    )))
                }
                Some(true) => {
                    return Err(Error::invalid(format!("seeds[{i}]: node {s} listed twice")))
                }
                Some(slot) => *slot = true,
            }
        }
        let pass = if run { Pass::Measure } else { Pass::Plan };
        self.state.keep_parts = true;
        let out = micro::run_batch(&mut self.state, epoch, batch, seeds, pass);
        self.state.keep_parts = false;
        Ok(out?.stats)
    }

    /// Takes the partition statistics of the batches trained since the last call.
    pub fn take_micro_log(&mut self) -> Vec<PartitionStats> {
        std::mem::take(&mut self.micro_log)
    }

    /// Whether the validation split has a labelled node (without one, no epoch has a
    /// validation accuracy, none is the best, and `patience` has nothing to watch).
    pub fn has_validation_nodes(&self) -> bool {
        let labels = &self.state.data.labels;
        self.state
            .data
            .split
            .valid
            .iter()
            .any(|&v| labels[v as usize] != u32::MAX)
    }

    /// What the user should know before the run, if anything: that the validation split
    /// has no labelled node, so no epoch is evaluated or picked as the best.
    pub fn validation_warning(&self) -> Option<String> {
        (self.state.config.eval_every > 0 && !self.has_validation_nodes()).then(|| {
            format!(
                "dataset {}: the validation split has no labelled node ({} nodes): no epoch \
                 gets a validation accuracy, none is picked as the best, and the final \
                 validation accuracy is not measured",
                self.state.data.name,
                self.state.data.split.valid.len()
            )
        })
    }

    /// Accuracy on `nodes` (labelled ones only), sampling with the training fanouts; NaN
    /// when none is labelled.
    pub fn evaluate(&self, nodes: &[u32]) -> Result<f64> {
        let labelled: Vec<u32> = nodes
            .iter()
            .copied()
            .filter(|&v| self.state.data.labels[v as usize] != u32::MAX)
            .collect();
        if labelled.is_empty() {
            return Ok(f64::NAN);
        }
        if self.state.config.full_graph.is_some() {
            let (nodes, pred) = self
                .full
                .predict(&self.state, &labelled, self.full.chunks())?;
            let correct = nodes
                .iter()
                .zip(&pred)
                .filter(|(&v, &p)| p == self.state.data.labels[v as usize])
                .count();
            return Ok(correct as f64 / labelled.len() as f64);
        }
        let correct = inference::correct_sampled(&self.state, &labelled)?;
        Ok(correct as f64 / labelled.len() as f64)
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
        let checkpoint = checkpoint.filter(|_| self.state.dist.is_root());
        if let Some(path) = checkpoint {
            crate::atomic::check_writable(path)?;
        }
        if self.state.config.patience.is_some() && !self.has_validation_nodes() {
            return Err(Error::flag(
                "--patience",
                format!(
                    "--patience watches the validation accuracy, but the validation split of \
                     dataset {} has no labelled node",
                    self.state.data.name
                ),
            ));
        }
        let mem = self.state.config.device.memory()?;
        mem.reset_peak();
        self.state.peak_seen.set(0);
        let mut best = Best::from_history(&self.history);
        if self.finished() {
            self.release_samplers()?;
            let fin = match self.stored_final.clone() {
                Some(f) => f,
                // Finished but saved before the final evaluation: evaluate now.
                None => FinalFigures {
                    valid_acc: self.evaluate(&self.state.data.split.valid)?,
                    test_acc: self.evaluate(&self.state.data.split.test)?,
                    final_loss: self.history.last().map_or(f64::NAN, |e| e.loss),
                    stopped_early: false,
                },
            };
            return Ok(self.summary(fin, &best, self.earlier.clone(), false, true));
        }
        let t0 = Instant::now();
        self.seconds_here = 0.0;
        let (mut stopped_early, mut interrupted) = (false, false);
        for epoch in self.state.start_epoch..self.state.config.epochs {
            let lr = self.state.config.lr_schedule.lr_at(
                self.state.config.lr,
                epoch,
                self.state.config.epochs,
            );
            self.state.optim.set_lr(lr);
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
                    let test = no_grad(|| self.evaluate(&self.state.data.split.test))?;
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
            self.seconds_here = t0.elapsed().as_secs_f64();
            if let Some(path) = checkpoint {
                self.save(path, epoch + 1)?;
            }
            if let Some(sink) = &self.partial {
                let partial = self.summary(
                    FinalFigures {
                        valid_acc: f64::NAN,
                        test_acc: f64::NAN,
                        final_loss: self.history.last().map_or(f64::NAN, |e| e.loss),
                        stopped_early: false,
                    },
                    &best,
                    self.so_far(),
                    true,
                    false,
                );
                *sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(partial);
            }
            if self.state.config.patience.is_some_and(|p| best.since >= p) {
                stopped_early = epoch + 1 < self.state.config.epochs;
                break;
            }
            if self.stop_requested()? {
                interrupted = epoch + 1 < self.state.config.epochs;
                break;
            }
        }
        // No more batches: sampler ranks (if any) may stop.
        self.release_samplers()?;
        self.seconds_here = t0.elapsed().as_secs_f64();
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
                valid_acc: self.evaluate(&self.state.data.split.valid)?,
                test_acc: self.evaluate(&self.state.data.split.test)?,
                final_loss,
                stopped_early,
            };
            if let Some(path) = checkpoint {
                let done = self
                    .history
                    .last()
                    .map_or(self.state.start_epoch, |e| e.epoch);
                self.save_with(path, done, Some(&fin))?;
            }
            fin
        };
        let so_far = self.so_far();
        self.micro_log.clear();
        Ok(self.summary(fin, &best, so_far, interrupted, false))
    }

    fn summary(
        &self,
        fin: FinalFigures,
        best: &Best,
        so_far: SoFar,
        interrupted: bool,
        already_finished: bool,
    ) -> Summary {
        Summary {
            dataset: self.state.data.name.clone(),
            config: self.state.config.clone(),
            num_parameters: self.state.model.num_parameters(),
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
            peak_bytes: so_far.peak_bytes,
            features_on_device: self.state.resident_features.is_some(),
            train_seconds: so_far.train_seconds,
            ranks: self.state.dist.size(),
            sampler_ranks: self.state.dist.collective.samplers(),
            micro_batches: so_far.micro_batches,
        }
    }

    /// Logits of `nodes` (`[nodes.len(), classes]`, on the CPU) from full-neighbour
    /// inference: every layer aggregates all neighbours (fanout -1), no dropout, in
    /// batches of `eval_batch_size` seeds (halved while one runs out of memory).
    pub fn predict(&self, nodes: &[u32]) -> Result<Tensor> {
        inference::predict(&self.state, nodes)
    }

    /// Node embeddings: the last hidden layer's output (after its ReLU) for `nodes`
    /// (`[nodes.len(), hidden]`, on the CPU), from full-neighbour inference as in
    /// [`Trainer::predict`]. Needs a model of at least two layers; GAT is not supported
    /// (its truncated stack would change the last layer's heads).
    pub fn embeddings(&self, nodes: &[u32]) -> Result<Tensor> {
        inference::embeddings(&self.state, nodes)
    }
}

/// A trainer can move to another thread (the Python package trains on a worker thread).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Trainer<'static>>();
};

/// Rows `ids` of a row-major `[n, dim]` host matrix, as a tensor on `device`.
pub fn gather_rows(features: &[f32], dim: usize, ids: &[u32], device: Device) -> Result<Tensor> {
    let out = gather_host(features, dim, ids)?;
    Tensor::from_f32(out, &[ids.len(), dim], device)
}
