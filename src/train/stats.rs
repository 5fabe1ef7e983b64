//! What a run reports: per-phase seconds ([`Phases`]), each epoch's figures
//! ([`EpochStats`]) and the run's result ([`Summary`], the `--json` output).

mod full_graph;

pub use full_graph::{ChunkStats, FullGraphStats, LayerRows};

use serde::{Deserialize, Serialize};

use crate::partition::PartitionStats;
use crate::train::config::TrainConfig;
use crate::work::Work;

/// Seconds per phase of an epoch, summed over its batches and micro-batches (and the work
/// of forward and backward). `slice` and
/// `gather` (host work) run on a helper thread while the previous micro-batch computes,
/// so the phases can add up to more than the epoch; `wait` is the part the trainer waited
/// for. On a GPU without
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
    /// Waiting for the next micro-batch from the helper thread that slices and gathers
    /// it: the part of `slice` and `gather` the compute did not hide (all of it for the
    /// first micro-batch of a batch and for the halves of one that ran out of memory).
    #[serde(default)]
    pub wait: f64,
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
    /// Work of the forward phase: multiply-adds of its matrix products and bytes its ops
    /// read and wrote (counted by [`crate::work`]).
    #[serde(default, skip_serializing_if = "Work::is_zero")]
    pub forward_work: Work,
    /// Work of the backward phase, likewise.
    #[serde(default, skip_serializing_if = "Work::is_zero")]
    pub backward_work: Work,
}

impl Phases {
    pub(crate) fn add(&mut self, o: &Phases) {
        self.sample += o.sample;
        self.partition += o.partition;
        self.slice += o.slice;
        self.gather += o.gather;
        self.wait += o.wait;
        self.forward += o.forward;
        self.backward += o.backward;
        self.optimizer += o.optimizer;
        self.allreduce += o.allreduce;
        self.feed += o.feed;
        self.forward_work.add(&o.forward_work);
        self.backward_work.add(&o.backward_work);
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
    /// Highest bytes live on the training device during the run (over every process of a
    /// resumed run).
    pub peak_bytes: u64,
    /// Whether the feature matrix lived on the device (`--features`).
    #[serde(default)]
    pub features_on_device: bool,
    /// Seconds of training (evaluation included), summed over every process of a resumed
    /// run.
    pub train_seconds: f64,
    /// Processes that trained together (`mpirun -np N`; 1 without MPI; the trainer ranks
    /// with `--sampler-ranks`).
    pub ranks: usize,
    /// Ranks that sampled for them (`--sampler-ranks`; 0 without).
    #[serde(default)]
    pub sampler_ranks: usize,
    /// One entry per batch (per epoch in full-batch training): K, partitioner, redundancy,
    /// times, and per micro-batch seeds, input nodes, estimated and measured peaks; every
    /// batch of the run, those of the processes before a resume included.
    pub micro_batches: Vec<PartitionStats>,
}
