//! Deduplicated transfers of full-graph training (HongTu, SIGMOD'24): the input rows of a
//! chunk stay on the device until the next chunk of the same layer pass, which takes the
//! rows the two share from them and uploads only the rest.
//!
//! A chunk's input rows `X_c` (one per source node of its block, in the block's order) are
//! assembled from the previous chunk's `X_{c-1}` in four steps, each freeing what it no
//! longer needs, so that the device never holds more than about two inputs:
//!
//! 1. `A = X_{c-1}[keep]`: the shared rows, gathered on the device; `X_{c-1}` goes;
//! 2. `N`: the new rows, uploaded from the host;
//! 3. `C = [A; N]`; `A` and `N` go;
//! 4. `X_c = C[perm]`: the block's order; `C` goes.
//!
//! [`assembly_peak_bytes`] is that sequence's peak, which the memory estimator's budget adds
//! to a chunk's own. The values are the rows the host holds, copied: gradients do not
//! change, only which bytes cross the bus.

use serde::{Deserialize, Serialize};

use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::ops;
use crate::tensor::Tensor;
use crate::train::estimate::MemoryEstimator;

/// `--dedup-transfers`: whether consecutive chunks share their input rows on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dedup {
    /// On a GPU; off on the CPU, where the "device" is host memory and reuse would only
    /// add copies.
    #[default]
    Auto,
    /// Always (the CPU too: tests and measurements).
    On,
    /// Never: every chunk uploads all its rows.
    Off,
}

impl std::str::FromStr for Dedup {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Dedup::Auto),
            "on" => Ok(Dedup::On),
            "off" => Ok(Dedup::Off),
            _ => Err(Error::invalid(format!(
                "unknown --dedup-transfers `{s}`: expected auto, on or off"
            ))),
        }
    }
}

/// The previous chunk's input rows of one layer pass, kept on the device.
pub(crate) struct KeptRows {
    /// Its source nodes, in row order.
    ids: Vec<u32>,
    /// Its rows (no gradient).
    x: Tensor,
}

impl KeptRows {
    /// Rows kept.
    pub(crate) fn rows(&self) -> usize {
        self.ids.len()
    }

    /// Keeps `x`, the rows of `ids`, for the next chunk.
    pub(crate) fn new(ids: &[u32], x: &Tensor) -> Self {
        KeptRows {
            ids: ids.to_vec(),
            x: x.detach(),
        }
    }
}

/// How a chunk's source nodes split against the previous chunk's: per source node, its
/// row in the kept rows or `None` (to upload).
pub(crate) struct Reuse {
    /// Kept rows to gather, in the order they are taken.
    keep: Vec<u32>,
    /// The source nodes to upload, in order.
    pub(crate) new_ids: Vec<u32>,
    /// Per source node, its row in `[kept rows taken; uploaded rows]`.
    perm: Vec<u32>,
}

impl Reuse {
    /// The split of `ids` against `kept`, the source nodes of the rows kept (only
    /// the ids: needs no device, so the next chunk can be planned on another
    /// thread); `pos` is a scratch of one `u32::MAX` per graph node, left as it was found.
    pub(crate) fn plan(kept: &[u32], ids: &[u32], pos: &mut [u32]) -> Result<Reuse> {
        for (j, &v) in kept.iter().enumerate() {
            *pos.get_mut(v as usize)
                .ok_or_else(|| Error::invalid(format!("full-graph: node {v} out of range")))? =
                j as u32;
        }
        let lookup = |v: u32| pos.get(v as usize).copied().unwrap_or(u32::MAX);
        let shared = ids.iter().filter(|&&v| lookup(v) != u32::MAX).count();
        let mut r = Reuse {
            keep: Vec::with_capacity(shared),
            new_ids: Vec::with_capacity(ids.len() - shared),
            perm: Vec::with_capacity(ids.len()),
        };
        for &v in ids {
            match lookup(v) {
                u32::MAX => {
                    r.perm.push((shared + r.new_ids.len()) as u32);
                    r.new_ids.push(v);
                }
                j => {
                    r.perm.push(r.keep.len() as u32);
                    r.keep.push(j);
                }
            }
        }
        for &v in kept {
            pos[v as usize] = u32::MAX;
        }
        Ok(r)
    }

    /// Rows taken from the kept rows.
    pub(crate) fn shared(&self) -> usize {
        self.keep.len()
    }

    /// Assembles the chunk's rows from `kept` (consumed) and the rows of the new source
    /// nodes, which `upload` puts on the device, as the module docs say.
    pub(crate) fn assemble(
        self,
        kept: KeptRows,
        upload: impl FnOnce(&[u32]) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let device = kept.x.device();
        no_grad(|| {
            let shared = self.keep.len();
            let keep = Tensor::from_u32(self.keep, &[shared], device)?;
            let a = ops::index_select(&kept.x, &keep)?;
            drop(keep);
            drop(kept);
            let c = match self.new_ids.is_empty() {
                true => a,
                false => {
                    let n = upload(&self.new_ids)?;
                    let c = ops::concat(&[&a, &n], 0)?;
                    drop(a);
                    c
                }
            };
            let rows = self.perm.len();
            let perm = Tensor::from_u32(self.perm, &[rows], device)?;
            ops::index_select(&c, &perm)
        })
    }
}

/// Peak device bytes of [`Reuse::assemble`] for a chunk of `rows` source rows of `width`
/// floats, `shared` of them taken from the previous chunk's `prev` rows (0: no reuse, the
/// chunk uploads its rows as usual and this adds nothing).
pub fn assembly_peak_bytes(
    est: &MemoryEstimator,
    prev: usize,
    shared: usize,
    rows: usize,
    width: usize,
) -> u64 {
    if shared == 0 {
        return 0;
    }
    let f32s = |n: usize| est.rounded((n as u64).saturating_mul(4));
    let block = |n: usize| f32s(n.saturating_mul(width));
    let new = rows - shared.min(rows);
    let (p, a, x) = (block(prev), block(shared), block(rows));
    // 1. X_{c-1}, the keep indices and A.
    let gather = p + f32s(shared) + a;
    // 2-3. A, N and C = [A; N] (no C without new rows).
    let join = if new > 0 { a + block(new) + x } else { a };
    // 4. C, the permutation and X_c.
    let order = x + f32s(rows) + x;
    gather.max(join).max(order)
}
