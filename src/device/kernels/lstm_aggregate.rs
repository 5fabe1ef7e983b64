//! The kernels of `src/ops/lstm_aggregate.rs` on a GPU backend: one fused LSTM step over a
//! degree bucket, its backward, and the previous hidden states for the weight gradient.

use std::sync::Arc;

use crate::device::gpu::GpuDevice;
use crate::error::Result;

/// Sizes of one step of one bucket: bucket `bucket` of the plan, `m` nodes of degree `k`
/// from row `offset`, step `t`, `h` hidden units, `num_dst` output rows.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    /// The bucket's position in the plan.
    pub bucket: usize,
    /// Nodes of the bucket.
    pub m: usize,
    /// Hidden units.
    pub h: usize,
    /// The bucket's degree (steps).
    pub k: usize,
    /// This step.
    pub t: usize,
    /// The bucket's first row in the plan's layout.
    pub offset: usize,
    /// Rows of the output.
    pub num_dst: usize,
}

/// The buffers of a forward step: the src rows' input projections `xw [num_src, 4H]`
/// (`num_src` given beside it), read at the rows the index `idx` (u32 `[rows]`, the
/// plan's layout) names, each below `num_src`; `acts
/// [rows, 4H]` and `cs [rows, H]` in the plan's layout; `hw = h_{t-1}·W_hh [m, 4H]` (none
/// at `t = 0`); the bucket's next hidden state `next [m, H]`; the output `out [num_dst, H]`.
#[allow(missing_docs)]
pub struct StepBuffers<'a, B> {
    pub xw: &'a B,
    pub num_src: usize,
    pub idx: &'a B,
    pub hw: Option<&'a B>,
    pub acts: &'a B,
    pub cs: &'a B,
    pub next: &'a B,
    pub out: &'a B,
}

/// The buffers of a backward step: the saved `acts`, `cs`; the output gradient
/// `grad [num_dst, H]`; `dh = h̄_t [m, H]` (none at `t = k - 1`, where h̄ is the bucket's
/// rows of `grad`); `dc [m, H]`; the step's `dz [m, 4H]`; `dxg [rows, 4H]`.
#[allow(missing_docs)]
pub struct StepBackwardBuffers<'a, B> {
    pub acts: &'a B,
    pub cs: &'a B,
    pub grad: &'a B,
    pub dh: Option<&'a B>,
    pub dc: &'a B,
    pub dz: &'a B,
    pub dxg: &'a B,
}

/// The LSTM aggregation's kernels on one GPU backend; the bucket and step
/// loop around them is `src/ops/lstm_aggregate.rs`'s, once for every backend.
pub trait LstmKernels: GpuDevice {
    /// The buckets' dst ids, laid out as this backend's step kernels read them.
    type DstIds: Send + Sync + 'static;

    /// Uploads the dst ids of every bucket of the plan (`dst[b]`: bucket `b`'s).
    fn upload_dst(self: &Arc<Self>, dst: &[&[u32]]) -> Result<Self::DstIds>;

    /// One forward step (`lstm_step_f32`): gates, `c` and `h` of every node of the bucket,
    /// each row's input read as `xw[idx[row]]` (no gathered copy); at the last step also
    /// the bucket's rows of `out`.
    fn step(&self, s: Step, dst: &Self::DstIds, b: StepBuffers<Self::Buffer>) -> Result<()>;

    /// One backward step (`lstm_step_backward_f32`): `z̄` into `dz` and `dxg`, `c̄_{t-1}`
    /// into `dc`.
    fn step_backward(
        &self,
        s: Step,
        dst: &Self::DstIds,
        b: StepBackwardBuffers<Self::Buffer>,
    ) -> Result<()>;

    /// `hprev [rows, H]` (`rows_h` = (rows, H)): `o·tanh(c)` of the row before, 0 where `steps` is 0
    /// (`lstm_hprev_f32`).
    fn hprev(
        &self,
        rows_h: (usize, usize),
        acts: &Self::Buffer,
        cs: &Self::Buffer,
        steps: &Self::Buffer,
        hprev: &Self::Buffer,
    ) -> Result<()>;
}
