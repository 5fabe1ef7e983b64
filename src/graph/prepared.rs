//! A micro-batch ready to upload: its seeds, its sliced blocks, its labels and (when the
//! trainer gathers on the host) its gathered input rows. The trainer makes it from its own
//! sample, or receives it from a sampler rank over the wire (`crate::dist::wire`).

use std::sync::Arc;

use half::{bf16, f16};

use crate::graph::Block;

/// Gathered input rows, ready to upload.
pub enum HostRows {
    /// Rows in f32.
    F32(Vec<f32>),
    /// Rows in f16.
    F16(Vec<f16>),
    /// Rows in bf16.
    BF16(Vec<bf16>),
}

/// One micro-batch ready to upload.
pub struct Prepared {
    /// Its seeds, in the order of the output block's dst nodes.
    pub seeds: Vec<u32>,
    /// Its blocks, input layer first.
    pub blocks: Vec<Arc<Block>>,
    /// Gathered rows; `None` when the matrix lives on the device (gathered there by id).
    pub features: Option<HostRows>,
    /// The seeds' labels.
    pub labels: Vec<u32>,
    /// Seconds spent slicing its blocks.
    pub slice_s: f64,
    /// Seconds spent gathering its rows.
    pub gather_s: f64,
    /// Seconds the trainer waited for it once ready to run it: the part of its slicing
    /// and gathering that the compute before it did not hide (0 until it is received).
    pub wait_s: f64,
}
