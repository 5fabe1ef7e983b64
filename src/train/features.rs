//! The host feature matrix in its storage precision (`--feature-dtype f32|f16|bf16`).
//!
//! Features stay in host memory (HongTu's layout): each micro-batch gathers the rows of its
//! input nodes on the host and uploads them. In f16 or bf16 the trainer converts the
//! matrix once, then gathers and uploads half the bytes of f32; [`crate::ops::widen`]
//! turns the rows into f32 on the device, so every layer computes in f32 as before.
//! f16 keeps 11 significant bits in a ±65504 range (features outside it become ±inf);
//! bf16 keeps f32's range with 8 bits.
//!
//! On a GPU the matrix can instead live on the device ([`FeaturePlacement`]): uploaded once
//! in its stored precision, each micro-batch's rows gathered there by index
//! ([`crate::ops::index_select`]), so no rows cross the bus per micro-batch, only their ids.

pub use crate::graph::HostRows;
use std::mem::MaybeUninit;
use std::str::FromStr;

use half::{bf16, f16};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::device::{heap, Device};
use crate::error::{Error, Result};
use crate::graph::array::Array;
use crate::prefetch;
use crate::tensor::Tensor;

/// How the host stores the feature matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureDType {
    /// 32-bit floats (the loader's own matrix, no copy).
    #[default]
    F32,
    /// IEEE half precision (5-bit exponent): exact for 0/1 features, 11-bit mantissa.
    F16,
    /// bfloat16 (f32's 8-bit exponent, 8-bit mantissa): f32's range at half the bytes.
    BF16,
}

impl FromStr for FeatureDType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(FeatureDType::F32),
            "f16" => Ok(FeatureDType::F16),
            "bf16" => Ok(FeatureDType::BF16),
            _ => Err(Error::invalid(format!(
                "feature dtype `{s}`: expected f32, f16 or bf16"
            ))),
        }
    }
}

/// Where the feature matrix lives while training on a GPU (`--features`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeaturePlacement {
    /// On the device when it fits: the matrix's device bytes within the adapter's largest
    /// buffer and, under a memory budget, at most half of what the budget leaves after the
    /// parameters, gradients and optimizer state (half-precision matrices of odd width stay
    /// on the host).
    #[default]
    Auto,
    /// In host memory: each micro-batch gathers its rows on the host and uploads them.
    Host,
    /// On the device, uploaded once; an error where it cannot be.
    Device,
}

impl FromStr for FeaturePlacement {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(FeaturePlacement::Auto),
            "host" => Ok(FeaturePlacement::Host),
            "device" => Ok(FeaturePlacement::Device),
            _ => Err(Error::flag(
                "--features",
                format!("--features `{s}`: expected auto, host or device"),
            )),
        }
    }
}

/// The feature matrix, row-major `[nodes, dim]`, in the precision training reads it in.
pub enum FeatureStore<'a> {
    /// The dataset's own f32 matrix, borrowed (in memory, or mapped from the cache).
    F32(&'a Array<f32>),
    /// A half-precision copy made at start-up.
    F16(Vec<f16>),
    /// A bfloat16 copy made at start-up.
    BF16(Vec<bf16>),
}

impl<'a> FeatureStore<'a> {
    /// The store of `features` in `dtype` (a parallel conversion for f16 and bf16).
    pub fn new(features: &'a Array<f32>, dtype: FeatureDType) -> Self {
        match dtype {
            FeatureDType::F32 => FeatureStore::F32(features),
            FeatureDType::F16 => {
                FeatureStore::F16(features.par_iter().map(|&x| f16::from_f32(x)).collect())
            }
            FeatureDType::BF16 => {
                FeatureStore::BF16(features.par_iter().map(|&x| bf16::from_f32(x)).collect())
            }
        }
    }

    /// Bytes of the stored matrix.
    pub fn bytes(&self) -> usize {
        match self {
            FeatureStore::F32(v) => std::mem::size_of_val(v.as_slice()),
            FeatureStore::F16(v) => std::mem::size_of_val(v.as_slice()),
            FeatureStore::BF16(v) => std::mem::size_of_val(v.as_slice()),
        }
    }

    /// The whole `[n, dim]` matrix on `device`, in the stored precision (no widening),
    /// streamed from the stored values to the device (no host copy first: the matrix may
    /// be most of the host's memory, or a mapped file).
    pub fn upload_all(&self, dim: usize, device: Device) -> Result<Tensor> {
        let n = self.len() / dim.max(1);
        let shape = [n, dim];
        match self {
            FeatureStore::F32(v) => Tensor::upload(v.as_slice(), &shape, device),
            FeatureStore::F16(v) => Tensor::upload(v, &shape, device),
            FeatureStore::BF16(v) => Tensor::upload(v, &shape, device),
        }
    }

    /// Values stored.
    pub fn len(&self) -> usize {
        match self {
            FeatureStore::F32(v) => v.len(),
            FeatureStore::F16(v) => v.len(),
            FeatureStore::BF16(v) => v.len(),
        }
    }

    /// True when no value is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether rows are stored in half precision (f16 or bf16).
    pub fn is_half(&self) -> bool {
        !matches!(self, FeatureStore::F32(_))
    }

    /// Rows `ids` of the `[n, dim]` matrix, on the host, in the stored precision.
    pub fn gather(&self, dim: usize, ids: &[u32]) -> Result<HostRows> {
        Ok(match self {
            FeatureStore::F32(v) => HostRows::F32(gather_mapped(v, dim, ids)?),
            FeatureStore::F16(v) => HostRows::F16(gather_host(v, dim, ids)?),
            FeatureStore::BF16(v) => HostRows::BF16(gather_host(v, dim, ids)?),
        })
    }
}

impl HostRows {
    /// Uploads `[rows, dim]` to `device` and widens half precision to f32 there.
    pub fn upload(self, rows: usize, dim: usize, device: Device) -> Result<Tensor> {
        let shape = [rows, dim];
        match self {
            HostRows::F32(v) => Tensor::from_f32(v, &shape, device),
            HostRows::F16(v) => crate::ops::widen(&Tensor::from_f16(v, &shape, device)?),
            HostRows::BF16(v) => crate::ops::widen(&Tensor::from_bf16(v, &shape, device)?),
        }
    }
}

/// Rows `ids` of a matrix that lives on the device (`[n, dim]`, stored precision),
/// gathered there and widened to f32: only the ids are uploaded.
pub fn gather_on_device(resident: &Tensor, ids: &[u32]) -> Result<Tensor> {
    let idx = Tensor::from_u32(ids.to_vec(), &[ids.len()], resident.device())?;
    let rows = crate::ops::index_select(resident, &idx)?;
    drop(idx);
    crate::ops::widen(&rows)
}

/// Rows `ids` of a row-major `[n, dim]` host matrix, on the host (parallel copy).
pub fn gather_host<T: Copy + Default + Send + Sync>(
    features: &[T],
    dim: usize,
    ids: &[u32],
) -> Result<Vec<T>> {
    let mut out = gather_output(features.len() / dim.max(1), dim, ids)?;
    gather_into(out.spare_capacity_mut(), features, dim, ids);
    // SAFETY: gather_into wrote all `ids.len() * dim` values (one full row per id).
    unsafe { out.set_len(ids.len() * dim) };
    Ok(out)
}

/// An empty buffer for rows `ids` of an `[n, dim]` matrix (advised huge pages when
/// large); `Err` names an id out of range.
fn gather_output<T>(n: usize, dim: usize, ids: &[u32]) -> Result<Vec<T>> {
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= n) {
        return Err(Error::invalid(format!(
            "feature gather: node {bad} out of range for {n} rows"
        )));
    }
    let mut out = Vec::with_capacity(ids.len() * dim);
    heap::advise_huge_pages(out.spare_capacity_mut());
    Ok(out)
}

/// Writes rows `ids` (in range) of `features` into `out` (`[ids.len(), dim]`, every value
/// written). The output is not zeroed first: a batch's rows are tens of MB, and zeroing
/// them cost as much as a third of the copy.
fn gather_into<T: Copy + Send + Sync>(
    out: &mut [MaybeUninit<T>],
    features: &[T],
    dim: usize,
    ids: &[u32],
) {
    assert_eq!(
        out.len(),
        ids.len() * dim,
        "gather output of the wrong size"
    );
    let d = dim.max(1);
    out.par_chunks_mut(GATHER_TASK * d)
        .zip(ids.par_chunks(GATHER_TASK))
        .for_each(|(out, ids)| {
            for (k, (row, &i)) in out.chunks_mut(d).zip(ids).enumerate() {
                prefetch::row_at(features, ids, k + prefetch::DISTANCE, dim);
                let i = i as usize;
                for (o, &v) in row.iter_mut().zip(&features[i * dim..(i + 1) * dim]) {
                    o.write(v);
                }
            }
        });
}

/// Rows copied in order by one task of [`gather_into`] (the prefetch runs ahead within
/// a task).
const GATHER_TASK: usize = 1024;

/// Rows advised to the system per read-ahead step of [`gather_mapped`]: at most this
/// many pages are read ahead of the copy (128 MiB of 4 KiB pages).
const READ_AHEAD_ROWS: usize = 32 * 1024;

/// Rows `ids` of a matrix that may be mapped from the dataset cache and not in memory
/// (a dataset larger than RAM): when a probe finds its pages missing, the rows are read
/// in steps of [`READ_AHEAD_ROWS`], the next step's pages advised to the system
/// ([`Array::will_need_rows`]) before the current step is copied, so the disk reads them
/// in parallel instead of one fault at a time. The same values as [`gather_host`].
pub fn gather_mapped(features: &Array<f32>, dim: usize, ids: &[u32]) -> Result<Vec<f32>> {
    if !features.is_mapped() || features.rows_resident(ids, dim) {
        return gather_host(features, dim, ids);
    }
    gather_ahead(features, dim, ids)
}

/// [`gather_mapped`]'s read-ahead path, whatever the probe says.
fn gather_ahead(features: &Array<f32>, dim: usize, ids: &[u32]) -> Result<Vec<f32>> {
    let mut out = gather_output(features.len() / dim.max(1), dim, ids)?;
    let steps: Vec<&[u32]> = ids.chunks(READ_AHEAD_ROWS).collect();
    if let Some(first) = steps.first() {
        features.will_need_rows(first, dim);
    }
    for (k, (rows, step)) in out.spare_capacity_mut()[..ids.len() * dim]
        .chunks_mut(READ_AHEAD_ROWS * dim.max(1))
        .zip(&steps)
        .enumerate()
    {
        if let Some(next) = steps.get(k + 1) {
            features.will_need_rows(next, dim);
        }
        gather_into(rows, features, dim, step);
    }
    // SAFETY: the steps cover `ids` in order, and gather_into wrote each step's rows.
    unsafe { out.set_len(ids.len() * dim) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_rows_in_the_stored_precision_and_widens_on_upload() {
        let f = Array::owned((0..12).map(|i| i as f32 * 0.1 - 0.5).collect());
        for dtype in [FeatureDType::F32, FeatureDType::F16, FeatureDType::BF16] {
            let store = FeatureStore::new(&f, dtype);
            let rows = store.gather(3, &[3, 0, 3]).unwrap();
            let t = rows.upload(3, 3, Device::Cpu).unwrap();
            assert_eq!(t.dtype(), crate::DType::F32);
            let got = t.to_vec_f32().unwrap();
            let want = [&f[9..12], &f[0..3], &f[9..12]].concat();
            let tol = match dtype {
                FeatureDType::F32 => 0.0,
                FeatureDType::F16 => 1e-3,
                FeatureDType::BF16 => 4e-3,
            };
            for (a, b) in want.iter().zip(&got) {
                assert!((a - b).abs() <= tol, "{dtype:?}: {a} vs {b}");
            }
        }
        assert_eq!(FeatureStore::new(&f, FeatureDType::F16).bytes(), 24);
        assert!(FeatureStore::new(&f, FeatureDType::F32)
            .gather(3, &[4])
            .is_err());
        assert!("f8".parse::<FeatureDType>().is_err());
        assert_eq!("bf16".parse::<FeatureDType>().unwrap(), FeatureDType::BF16);
    }

    #[test]
    fn read_ahead_gather_of_a_mapped_matrix_equals_the_plain_gather() {
        use std::io::Write;
        use std::sync::Arc;
        let dim = 5;
        let n = 3 * READ_AHEAD_ROWS / 2;
        let vals: Vec<f32> = (0..n * dim).map(|i| (i % 9973) as f32 * 0.25).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytemuck::cast_slice(&vals)).unwrap();
        // SAFETY: the temporary file is private to this test and not modified while mapped.
        let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap());
        let mapped = Array::<f32>::mapped(map, 0, n * dim).unwrap();
        // More ids than one read-ahead step, out of order and repeated.
        let ids: Vec<u32> = (0..2 * READ_AHEAD_ROWS + 7)
            .map(|k| (crate::rng::mix64(k as u64) % n as u64) as u32)
            .collect();
        let want = gather_host(&vals, dim, &ids).unwrap();
        assert_eq!(gather_ahead(&mapped, dim, &ids).unwrap(), want);
        assert_eq!(gather_mapped(&mapped, dim, &ids).unwrap(), want);
        assert!(gather_ahead(&mapped, dim, &[n as u32]).is_err());
        assert!(gather_ahead(&mapped, dim, &[]).unwrap().is_empty());
    }
}
