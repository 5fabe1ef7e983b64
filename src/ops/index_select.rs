//! Row gather and its adjoint, the row scatter-add.
//!
//! - `index_select(x[n, f], idx[m]) = out[m, f]`, `out[i, :] = x[idx[i], :]` (also gathers
//!   node features by global id).
//! - `scatter_add(src[m, f], idx[m], n) = out[n, f]`, `out[r, :] = Σ_{i : idx[i] = r} src[i, :]`.
//!
//! Each is the other's adjoint, so the backward rules are
//! `x̄ = scatter_add(ḡ, idx, n)` for the gather and `s̄rc = index_select(ḡ, idx)` for the
//! scatter.
//!
//! The scatter needs no float atomics: the index is transposed on the CPU by a counting
//! sort (for each target row, the positions `i` that hit it, in increasing order) and each
//! target row sums its contributions in that order. One task owns one output row, so the
//! result is deterministic and independent of the thread count. GPU backends read the
//! index on the host, upload the same transposed index and run one invocation per (target
//! row, feature), each summing its positions in order; the gather runs one invocation per
//! output value. On CUDA (`kernels/index_select.cu`) a warp owns a target row, lanes over
//! its features, with the same order. The backward rule reuses the indices the forward
//! pass had on the host.
//!
//! GPU index tensors uploaded from the host keep their values there
//! (`WgpuBuffer::host_u32`, `CudaBuffer::host_u32`), so checking or transposing them
//! waits for nothing; only indices computed on the device are read back (a host wait).
//!
//! Indices are checked: one out of range is an [`Error::InvalidArgument`] naming its
//! position and value.

use std::sync::Arc;

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuData, CpuElem};
use crate::device::kernels::index_select::IndexSelectKernels;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::meta::{Replay, Rule, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, expect_vector, rows_from_fn, u32_count, u32_data};
use crate::tensor::{DType, Storage, Tensor};

/// The indices of a GPU index tensor, read back once and shared by the op and its
/// backward rule (both need them on the host: to check them, and to transpose them).
type HostIndices = Option<Arc<Vec<u32>>>;

/// Rows `idx` of `x`: `[n, f]` gathered by `u32 [m]` gives `[m, f]`. Indices may repeat.
/// Works on u32 tensors too (without gradient), e.g. to gather labels by node id.
///
/// On a GPU the indices are checked on the host: from the copy kept by their upload, or
/// read back (a synchronisation point) if they were computed on the device.
pub fn index_select(x: &Tensor, idx: &Tensor) -> Result<Tensor> {
    gather_rows(x, idx, None)
}

/// Sums the rows of `src` (`[m, f]`) into `n` rows: row `idx[i]` of the result receives
/// `src[i, :]`; rows no index names are zero. Deterministic (see the module docs).
///
/// On a GPU the indices are transposed on the host: from the copy kept by their upload, or
/// read back (a synchronisation point) if they were computed on the device.
pub fn scatter_add(src: &Tensor, idx: &Tensor, n: usize) -> Result<Tensor> {
    scatter_rows(src, idx, n, None)
}

fn gather_rows(x: &Tensor, idx: &Tensor, host: HostIndices) -> Result<Tensor> {
    const OP: &str = "index_select";
    x.same_device(idx, OP)?;
    let (n, f) = dims2(OP, "x", x)?;
    let m = match idx.shape() {
        [m] => *m,
        s => {
            return Err(Error::shape(
                OP,
                format!("idx must be 1-D, got shape {s:?} (x is {:?})", x.shape()),
            ))
        }
    };
    let (out, host) = match (&*x.storage(), &*idx.storage()) {
        (Storage::Cpu(b), Storage::Cpu(ib)) => {
            let iv = u32_data(OP, idx, &ib.data)?;
            check_indices(OP, iv, n)?;
            let buf = match &b.data {
                CpuData::F32(v) => gather(v, iv, f)?,
                CpuData::F64(v) => gather(v, iv, f)?,
                CpuData::U32(v) => gather(v, iv, f)?,
                CpuData::F16(v) => gather(v, iv, f)?,
                CpuData::BF16(v) => gather(v, iv, f)?,
            };
            (cpu_output(buf, vec![m, f], x), None)
        }
        (xs, is) => on_gpu!(
            (xs, is),
            |D, (b, ib)| gpu_gather::<D>(x, b, idx, ib, host, (n, f, m))?,
            else return Err(mismatch(OP, x, idx))
        ),
    };
    let idx = idx.clone();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(scatter_rows(g, &idx, n, host)?)])
    }))
}

fn scatter_rows(src: &Tensor, idx: &Tensor, n: usize, host: HostIndices) -> Result<Tensor> {
    const OP: &str = "scatter_add";
    src.same_device(idx, OP)?;
    src.expect_float(OP)?;
    let (m, f) = dims2(OP, "src", src)?;
    expect_vector(OP, "idx", idx, m)?;
    let (out, host) = match (&*src.storage(), &*idx.storage()) {
        (Storage::Cpu(b), Storage::Cpu(ib)) => {
            let t = TransposedIndex::build(OP, u32_data(OP, idx, &ib.data)?, n)?;
            let buf = float_cpu!(OP, &b.data, v => scatter(v, &t, f)?);
            (cpu_output(buf, vec![n, f], src), None)
        }
        (ss, is) => on_gpu!(
            (ss, is),
            |D, (b, ib)| gpu_scatter::<D>(src, b, idx, ib, host, (m, f, n))?,
            else return Err(mismatch(OP, src, idx))
        ),
    };
    let idx = idx.clone();
    Ok(record(OP, out, &[src], move |g| {
        Ok(vec![Some(gather_rows(g, &idx, host)?)])
    }))
}

/// The gather on a GPU backend: rows of `x [n, f]` (buffer `xb`) by `idx [m]` (buffer
/// `ib`), with the indices on the host (checked here, kept for the backward rule).
fn gpu_gather<D: GpuTensors + IndexSelectKernels>(
    x: &Tensor,
    xb: &D::Buffer,
    idx: &Tensor,
    ib: &D::Buffer,
    host: HostIndices,
    (n, f, m): (usize, usize, usize),
) -> Result<(Tensor, HostIndices)> {
    const OP: &str = "index_select";
    let host = host_indices(OP, idx, host, D::host_u32(ib), || D::read(ib))?;
    check_indices(OP, &host, n)?;
    // Half-precision rows gather as pairs: `words` 32-bit words per row.
    let words = row_words(x, f)?;
    let out = D::context_of(xb).gather(OP, xb, n, words, ib, m)?;
    Ok((D::output(out, vec![m, f], x), Some(host)))
}

/// The scatter-add on a GPU backend: rows of `src [m, f]` (buffer `sb`) summed into `n`
/// rows by `idx [m]` (buffer `ib`), transposed on the host.
fn gpu_scatter<D: GpuTensors + IndexSelectKernels>(
    src: &Tensor,
    sb: &D::Buffer,
    idx: &Tensor,
    ib: &D::Buffer,
    host: HostIndices,
    (m, f, n): (usize, usize, usize),
) -> Result<(Tensor, HostIndices)> {
    const OP: &str = "scatter_add";
    let host = host_indices(OP, idx, host, D::host_u32(ib), || D::read(ib))?;
    let t = TransposedIndex::build(OP, &host, n)?;
    u32_count(OP, "src", m * f)?;
    u32_count(OP, "the output", n * f)?;
    let out = D::context_of(sb).scatter_add(sb, &t.indptr, &t.pos, m, f)?;
    Ok((D::output(out, vec![n, f], src), Some(host)))
}

/// The values of `idx` (a u32 tensor on a GPU): `known` (from the forward pass), else the
/// host copy its upload kept (`uploaded`), else read back by `read`.
fn host_indices(
    op: &'static str,
    idx: &Tensor,
    known: HostIndices,
    uploaded: HostIndices,
    read: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Arc<Vec<u32>>> {
    if idx.dtype() != DType::U32 {
        return Err(idx.dtype_error(op, "u32"));
    }
    match known.or(uploaded) {
        Some(h) => Ok(h),
        None => Ok(Arc::new(bytemuck::pod_collect_to_vec(&read()?))),
    }
}

/// The values of the GPU index tensor `idx` (its buffer `ib`), each checked below `n`: the
/// host copy its upload kept, else read back (a synchronisation point). For ops that read
/// rows through an index inside their own kernels (`lstm_aggregate`).
pub(crate) fn gpu_checked_indices<D: GpuTensors>(
    op: &'static str,
    idx: &Tensor,
    ib: &D::Buffer,
    n: usize,
) -> Result<Arc<Vec<u32>>> {
    let host = host_indices(op, idx, None, D::host_u32(ib), || D::read(ib))?;
    check_indices(op, &host, n)?;
    Ok(host)
}

/// Operands whose storages are on different backends.
fn mismatch(op: &'static str, a: &Tensor, b: &Tensor) -> Error {
    Error::DeviceMismatch {
        op,
        lhs: a.device().to_string(),
        rhs: b.device().to_string(),
    }
}

/// Errors on the first index `>= n`, naming its position and value.
pub(crate) fn check_indices(op: &'static str, idx: &[u32], n: usize) -> Result<()> {
    match idx.iter().position(|&v| v as usize >= n) {
        None => Ok(()),
        Some(p) => Err(Error::invalid(format!(
            "{op}: index {} at position {p} is out of range for {n} rows",
            idx[p]
        ))),
    }
}

/// An index `idx[m]` into `n` rows, transposed: the positions hitting target row `r` are
/// `pos[indptr[r]..indptr[r + 1]]`, in increasing order.
pub(crate) struct TransposedIndex {
    pub indptr: Vec<u32>,
    pub pos: Vec<u32>,
}

impl TransposedIndex {
    /// Counting sort of `idx` by target row (stable, so positions stay increasing).
    pub fn build(op: &'static str, idx: &[u32], n: usize) -> Result<Self> {
        check_indices(op, idx, n)?;
        if idx.len() > u32::MAX as usize {
            return Err(Error::invalid(format!(
                "{op}: {} indices do not fit u32 offsets",
                idx.len()
            )));
        }
        let mut indptr = vec![0u32; n + 1];
        for &r in idx {
            indptr[r as usize + 1] += 1;
        }
        for r in 0..n {
            indptr[r + 1] += indptr[r];
        }
        let mut next = indptr[..n].to_vec();
        let mut pos = vec![0u32; idx.len()];
        for (i, &r) in idx.iter().enumerate() {
            let slot = &mut next[r as usize];
            pos[*slot as usize] = i as u32;
            *slot += 1;
        }
        Ok(TransposedIndex { indptr, pos })
    }

    fn hits(&self, r: usize) -> &[u32] {
        &self.pos[self.indptr[r] as usize..self.indptr[r + 1] as usize]
    }
}

/// The 4-byte words of one row of `x` (`f` values): `f`, or `f / 2` for half precision,
/// whose GPU rows are gathered as pairs of values (an odd width would split a word).
fn row_words(x: &Tensor, f: usize) -> Result<usize> {
    match x.dtype() {
        DType::F16 | DType::BF16 if f % 2 == 1 => Err(Error::shape(
            "index_select",
            format!(
                "a {} row of {f} values is not a whole number of words: half-precision rows \
                 need an even width on a GPU",
                x.dtype().name()
            ),
        )),
        DType::F16 | DType::BF16 => Ok(f / 2),
        _ => Ok(f),
    }
}

fn gather<T: CpuElem + Default>(x: &[T], idx: &[u32], f: usize) -> Result<CpuBuffer> {
    rows_from_fn(idx.len(), f, 2 * idx.len() * f, |i, row: &mut [T]| {
        let s = idx[i] as usize * f;
        row.copy_from_slice(&x[s..s + f]);
    })
}

fn scatter<T: Float + CpuElem>(src: &[T], t: &TransposedIndex, f: usize) -> Result<CpuBuffer> {
    let n = t.indptr.len() - 1;
    rows_from_fn(n, f, (t.pos.len() + n) * f, |r, row: &mut [T]| {
        for &i in t.hits(r) {
            let s = i as usize * f;
            row.iter_mut()
                .zip(&src[s..s + f])
                .for_each(|(o, &v)| *o += v);
        }
    })
}

/// Meta arm of [`index_select`]`(x, idx)` ([`crate::meta`]): `[m, c]`; keeps `idx`; its rule
/// scatters into `[rows of x, c]` ([`meta_scatter_add`]).
pub fn meta_index_select(r: &mut Replay, x: &Val, idx: &Val) -> Val {
    let out = r.alloc(idx.rows, x.cols);
    let saved = vec![r.share(idx.buf)];
    let (rows, cols, m) = (x.rows, x.cols, idx.rows);
    let rule: Rule = Box::new(move |r, _| vec![Some(meta_scatter_add(r, rows, cols, m))]);
    r.record(out, (m, cols), &[x], saved, rule)
}

/// Meta arm of [`scatter_add`] of `m` rows into `[rows, cols]` (a gather's backward): on a
/// GPU the transposed index (`t_indptr [rows + 1]`, `t_pos [m]`, transient), then the
/// output.
pub fn meta_scatter_add(r: &mut Replay, rows: usize, cols: usize, m: usize) -> usize {
    let index = [r.gpu_upload(rows + 1), r.gpu_upload(m)];
    let g = r.alloc(rows, cols);
    for b in index.into_iter().flatten() {
        r.release(b);
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn transposed_index_keeps_positions_in_order() {
        let t = TransposedIndex::build("t", &[2, 0, 2, 2, 0], 4).unwrap();
        assert_eq!(t.indptr, vec![0, 2, 2, 5, 5]);
        assert_eq!(t.pos, vec![1, 4, 0, 2, 3]);
    }

    #[test]
    fn gather_and_scatter_values() {
        let x = Tensor::from_f32(vec![1., 2., 3., 4., 5., 6.], &[3, 2], Device::Cpu).unwrap();
        let idx = Tensor::from_u32(vec![2, 0, 2], &[3], Device::Cpu).unwrap();
        let y = index_select(&x, &idx).unwrap();
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.to_vec_f32().unwrap(), vec![5., 6., 1., 2., 5., 6.]);
        let s = scatter_add(&y, &idx, 4).unwrap();
        assert_eq!(s.shape(), &[4, 2]);
        assert_eq!(
            s.to_vec_f32().unwrap(),
            vec![1., 2., 0., 0., 10., 12., 0., 0.]
        );
    }

    #[test]
    fn gathers_u32_labels() {
        let labels = Tensor::from_u32(vec![7, 8, 9], &[3, 1], Device::Cpu).unwrap();
        let idx = Tensor::from_u32(vec![1, 1, 0], &[3], Device::Cpu).unwrap();
        let y = index_select(&labels, &idx).unwrap();
        assert_eq!(y.to_vec_u32().unwrap(), vec![8, 8, 7]);
    }

    #[test]
    fn large_scatter_matches_a_serial_sum() {
        // Large enough for the parallel path; f64 sums in position order must match exactly.
        let (m, n, f) = (20_000, 1_000, 3);
        let mut rng = crate::rng::Rng::new(3);
        let iv: Vec<u32> = (0..m).map(|_| rng.below(n as u64) as u32).collect();
        let sv: Vec<f64> = (0..m * f).map(|_| rng.normal()).collect();
        let mut want = vec![0f64; n * f];
        for (i, &r) in iv.iter().enumerate() {
            for j in 0..f {
                want[r as usize * f + j] += sv[i * f + j];
            }
        }
        let src = Tensor::from_f64(sv, &[m, f]).unwrap();
        let idx = Tensor::from_u32(iv, &[m], Device::Cpu).unwrap();
        let got = scatter_add(&src, &idx, n).unwrap().to_vec_f64().unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn bad_indices_are_errors() {
        let x = Tensor::from_f32(vec![0.; 6], &[3, 2], Device::Cpu).unwrap();
        let idx = Tensor::from_u32(vec![0, 3], &[2], Device::Cpu).unwrap();
        match index_select(&x, &idx) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(
                    msg.contains("position 1") && msg.contains("index 3"),
                    "{msg}"
                )
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let src = Tensor::from_f32(vec![0.; 4], &[2, 2], Device::Cpu).unwrap();
        assert!(matches!(
            scatter_add(&src, &idx, 3),
            Err(Error::InvalidArgument(_))
        ));
        // idx of the wrong length or dtype.
        let short = Tensor::from_u32(vec![0], &[1], Device::Cpu).unwrap();
        assert!(matches!(
            scatter_add(&src, &short, 3),
            Err(Error::Shape { .. })
        ));
        assert!(matches!(index_select(&x, &x), Err(Error::Shape { .. })));
        let fidx = Tensor::from_f32(vec![0., 1.], &[2], Device::Cpu).unwrap();
        assert!(matches!(index_select(&x, &fidx), Err(Error::DType { .. })));
    }
}
