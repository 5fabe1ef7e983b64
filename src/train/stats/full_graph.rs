//! What a full-graph epoch reports: every chunk run, the bytes moved, and how often each
//! layer's rows were read and uploaded.

use serde::{Deserialize, Serialize};

/// One chunk as run: which layer and pass, its size, its predicted and measured peaks.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChunkStats {
    /// Layer (0: the input layer).
    pub layer: usize,
    /// `forward`, `loss` or `backward`.
    pub pass: String,
    /// Chunk index within the layer.
    pub chunk: usize,
    /// Destination nodes.
    pub num_dst: usize,
    /// Source nodes (rows uploaded).
    pub num_src: usize,
    /// The estimator's peak bytes.
    pub est_peak_bytes: u64,
    /// The device tracker's peak bytes.
    pub peak_bytes: u64,
}

/// A full-graph epoch's figures (`EpochStats::full_graph`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FullGraphStats {
    /// Chunks per layer.
    pub chunks: usize,
    /// The largest estimated chunk peak.
    pub est_peak_bytes: u64,
    /// The largest measured chunk peak.
    pub peak_bytes: u64,
    /// Bytes of vertex rows uploaded (features, `H`, `G`, labels): host to device.
    pub rows_to_device_bytes: u64,
    /// Bytes of vertex rows read back (`H`, input gradients): device to host.
    pub rows_to_host_bytes: u64,
    /// Every chunk run, in order.
    pub chunk_runs: Vec<ChunkStats>,
    /// Per layer, the replication of its input rows over the chunks (one pass).
    pub layers: Vec<LayerRows>,
    /// Chunks that ran out of memory and were split in two (for the rest of the run).
    #[serde(default)]
    pub oom_splits: usize,
    /// Seconds the chunks' compute waited, once it ended, for the next chunk's
    /// preparation on the worker thread (`--overlap`; 0 without).
    #[serde(default)]
    pub prep_wait_s: f64,
}

/// How often one layer's input rows are read and uploaded in one pass over its chunks:
/// the naive replication (every chunk uploads all its rows) against what deduplicated
/// transfers (HongTu's reuse of the rows consecutive chunks share) upload.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LayerRows {
    /// Layer (0: the input layer, whose rows are the features).
    pub layer: usize,
    /// Rows the chunks read: the sum of their source nodes (what naive transfers upload).
    #[serde(default)]
    pub rows_read: u64,
    /// Rows uploaded: `rows_read` less the rows taken from the previous chunk on the
    /// device (equal without `--dedup-transfers`).
    pub rows_uploaded: u64,
    /// Distinct rows among them: a perfect cache would upload each once.
    pub distinct_rows: u64,
    /// Rows a chunk shares with the chunk before it: what keeping the previous chunk's
    /// rows on the device would save.
    pub shared_with_previous: u64,
}

impl LayerRows {
    /// `rows_uploaded / distinct_rows`.
    pub fn replication(&self) -> f64 {
        self.rows_uploaded as f64 / self.distinct_rows.max(1) as f64
    }

    /// `rows_read / distinct_rows`: the replication of naive transfers.
    pub fn naive_replication(&self) -> f64 {
        self.rows_read as f64 / self.distinct_rows.max(1) as f64
    }
}
