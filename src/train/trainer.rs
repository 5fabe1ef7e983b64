//! The training loop: epochs over the training seeds, in mini-batches of a given size or
//! as one full batch; per batch, sample blocks once, split them into micro-batches
//! ([`crate::train::micro`]: K = 1 is plain training), forward, loss, backward per
//! micro-batch, one optimizer step; evaluation on validation and test nodes; per-phase
//! timing; memory budget and per-micro-batch memory statistics.
//!
//! [`Trainer`] owns the [`State`] every stage reads ([`crate::train::state`]) and composes
//! the stages: the micro-batch run ([`crate::train::micro`]) over a micro-batch source
//! ([`crate::train::source`]: sampled here, or on a trainer rank the sampler ranks' feed,
//! [`crate::train::feed`]), full-graph epochs ([`crate::train::full_graph`]), and
//! evaluation and prediction ([`crate::train::inference`]), each a set of functions over
//! that state. Its methods live here and in the folder beside this file: the run loop
//! (`run.rs`), one epoch (`epoch.rs`), and resuming and checkpointing (`resume.rs`), which
//! restore the run loop's history with the state.

mod epoch;
mod resume;
mod run;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{Csr, Dataset};
use crate::partition::{PartitionStats, Partitioner};
use crate::tensor::Tensor;
use crate::train::config::TrainConfig;
use crate::train::features::gather_host;
use crate::train::feed;
use crate::train::full_graph::{FullGraph, FullGraphStats};
use crate::train::inference;
use crate::train::micro::{self, Pass};
use crate::train::source::local::Local;
use crate::train::source::MicroSource;
use crate::train::state::State;
use crate::train::stats::{EpochStats, Summary};

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
    /// Where the training batches' micro-batches come from: sampled here ([`Local`]), or
    /// on a trainer rank fed by sampler ranks, received from them.
    source: Box<dyn MicroSource>,
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

impl<'a> Trainer<'a> {
    /// Builds the model and optimizer. `graph` is the graph to sample from (the dataset's,
    /// symmetrized or not).
    pub fn new(data: &'a Dataset, graph: Arc<Csr>, config: TrainConfig) -> Result<Self> {
        Ok(Trainer {
            state: State::new(data, graph, config)?,
            full: FullGraph::default(),
            source: Box::new(Local),
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
            self.source = Box::new(feed);
        }
        Ok(())
    }

    /// Tells the sampler ranks that this trainer has finished (nothing without them);
    /// batches after that are sampled here.
    fn release_samplers(&mut self) -> Result<()> {
        std::mem::replace(&mut self.source, Box::new(Local)).release(&self.state)
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
            out.push(micro::run_batch(&mut self.state, &mut Local, epoch, b, seeds, pass)?.stats);
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
        let out = micro::run_batch(&mut self.state, &mut Local, epoch, batch, seeds, pass);
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
