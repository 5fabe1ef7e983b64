//! What a partition costs: per micro-batch sizes, estimated and measured peaks, times,
//! and the redundancy of the whole partition.

use serde::{Deserialize, Serialize};

/// One micro-batch as run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MicroBatchStats {
    /// Seeds (output nodes).
    pub seeds: usize,
    /// Src nodes of its input block: the feature rows it gathers.
    pub input_nodes: usize,
    /// The estimator's peak device bytes, predicted before it ran.
    pub est_peak_bytes: u64,
    /// Measured peak device bytes during its forward and backward (the tracker's peak,
    /// reset when it starts); absent when it was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// Seconds of upload, forward and backward; 0 when not run.
    pub compute_s: f64,
}

/// One batch's partition (one entry per epoch for full-batch training).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PartitionStats {
    /// Epoch of the batch, 1-based like the console and `EpochStats::epoch`.
    pub epoch: usize,
    /// Index of the batch in its epoch.
    pub batch: usize,
    /// Micro-batches run, after any split forced by running out of memory.
    pub k: usize,
    /// Name of the partitioner that made the micro-batches.
    pub partitioner: String,
    /// Σ_k input nodes of micro-batch k / input nodes of the full batch.
    pub redundancy: f64,
    /// Seconds choosing K and partitioning (including the estimates a budget needs).
    pub partition_s: f64,
    /// Seconds slicing micro-batch blocks out of the full batch.
    pub slice_s: f64,
    /// Micro-batches split in two after running out of memory.
    pub oom_splits: usize,
    /// One entry per micro-batch, in the order they ran.
    pub batches: Vec<MicroBatchStats>,
    /// The seeds of each micro-batch, in the order of `batches`; only where asked for
    /// ([`crate::train::Trainer::partition_seeds`]), and never in the JSON.
    #[serde(skip)]
    pub parts: Vec<Vec<u32>>,
}

impl PartitionStats {
    /// Fills `redundancy` from the micro-batches and the full batch's input nodes.
    pub fn set_redundancy(&mut self, full_input_nodes: usize) {
        let sum: usize = self.batches.iter().map(|b| b.input_nodes).sum();
        self.redundancy = sum as f64 / full_input_nodes.max(1) as f64;
    }
}
