//! Slice: a contiguous range of rows or columns of a 2-D tensor.
//!
//! `slice(x[r, c], 0, s, l) = x[s..s+l, :]` (shape `[l, c]`);
//! `slice(x[r, c], 1, s, l) = x[:, s..s+l]` (shape `[r, l]`).
//!
//! Backward: `x̄` is zero except on the slice, where it is `ḡ`. A dedicated kernel writes
//! `ḡ` into zeros of `x`'s shape in one pass, rather than concatenating zero tensors.
//! Works on u32 tensors too (without gradient).

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuData, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::slice::SliceKernels;
use crate::error::{Error, Result};
use crate::meta::{Replay, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, rows_from_fn};
use crate::tensor::{Storage, Tensor};

/// `len` rows (`dim` 0) or columns (`dim` 1) of the 2-D `x`, starting at `start`.
pub fn slice(x: &Tensor, dim: usize, start: usize, len: usize) -> Result<Tensor> {
    const OP: &str = "slice";
    let (r, c) = dims2(OP, "x", x)?;
    let size = match dim {
        0 => r,
        1 => c,
        _ => return Err(Error::shape(OP, format!("dimension {dim} of a 2-D tensor"))),
    };
    if start.checked_add(len).is_none_or(|end| end > size) {
        return Err(Error::shape(
            OP,
            format!(
                "range {start}..{start}+{len} along dimension {dim} is outside shape {:?}",
                x.shape()
            ),
        ));
    }
    let out_shape = if dim == 0 { vec![len, c] } else { vec![r, len] };
    let out = match &*x.storage() {
        Storage::Cpu(b) => {
            let buf = match &b.data {
                CpuData::F32(v) => cpu_slice(v, c, dim, start, &out_shape)?,
                CpuData::F64(v) => cpu_slice(v, c, dim, start, &out_shape)?,
                CpuData::U32(v) => cpu_slice(v, c, dim, start, &out_shape)?,
                other => {
                    return Err(Error::DType {
                        op: "slice",
                        expected: "f32",
                        got: other.dtype_name(),
                    })
                }
            };
            cpu_output(buf, out_shape, x)
        }
        s => on_gpu!(s, |D, b| {
            let out = D::context_of(b).slice(b, (r, c), dim, (start, len))?;
            D::output(out, out_shape, x)
        }),
    };
    let in_shape = x.shape().to_vec();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(slice_backward(g, dim, start, &in_shape)?)])
    }))
}

fn cpu_slice<T: CpuElem + Default>(
    x: &[T],
    c: usize,
    dim: usize,
    start: usize,
    out_shape: &[usize],
) -> Result<CpuBuffer> {
    let (rows, cols) = (out_shape[0], out_shape[1]);
    let (row0, col0) = if dim == 0 { (start, 0) } else { (0, start) };
    rows_from_fn(rows, cols, 2 * rows * cols, |i, row: &mut [T]| {
        let s = (row0 + i) * c + col0;
        row.copy_from_slice(&x[s..s + cols]);
    })
}

/// Zeros shaped `in_shape` with `g` written at `start` along `dim`: the adjoint of [`slice`].
pub(crate) fn slice_backward(
    g: &Tensor,
    dim: usize,
    start: usize,
    in_shape: &[usize],
) -> Result<Tensor> {
    const OP: &str = "slice_backward";
    let (gr, gc) = dims2(OP, "gradient", g)?;
    let (r, c) = (in_shape[0], in_shape[1]);
    let buf = match &*g.storage() {
        Storage::Cpu(b) => float_cpu!(OP, &b.data, v => {
            rows_from_fn(r, c, r * c + gr * gc, |i, row| {
                if dim == 0 {
                    if (start..start + gr).contains(&i) {
                        row.copy_from_slice(&v[(i - start) * gc..(i - start + 1) * gc]);
                    }
                } else {
                    row[start..start + gc].copy_from_slice(&v[i * gc..(i + 1) * gc]);
                }
            })?
        }),
        s => on_gpu!(s, |D, b| {
            let out = D::context_of(b).slice_pad(b, (gr, gc), dim, start, (r, c))?;
            return Ok(D::output(out, in_shape.to_vec(), g));
        }),
    };
    Ok(cpu_output(buf, in_shape.to_vec(), g))
}

/// Meta arm of `slice(x, 0, 0, n)` ([`crate::meta`]): the first `n` rows as a new buffer;
/// nothing kept; its rule allocates `[rows of x, c]` (zeros + ḡ).
pub fn meta_slice_rows(r: &mut Replay, x: &Val, n: usize) -> Val {
    let out = r.alloc(n, x.cols);
    r.unary(x, out, (n, x.cols), vec![], false)
}

/// Meta arm of [`slice_backward`] run as an op (not recorded): a new `[rows, c]` buffer.
pub fn meta_pad_rows(r: &mut Replay, x: &Val, rows: usize) -> Val {
    r.input(rows, x.cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    fn x() -> Tensor {
        Tensor::from_f32((0..12).map(|v| v as f32).collect(), &[3, 4], Device::Cpu).unwrap()
    }

    #[test]
    fn slices_rows_and_columns() {
        let rows = slice(&x(), 0, 1, 2).unwrap();
        assert_eq!(rows.shape(), &[2, 4]);
        assert_eq!(
            rows.to_vec_f32().unwrap(),
            (4..12).map(|v| v as f32).collect::<Vec<_>>()
        );
        let cols = slice(&x(), 1, 1, 2).unwrap();
        assert_eq!(cols.shape(), &[3, 2]);
        assert_eq!(cols.to_vec_f32().unwrap(), vec![1., 2., 5., 6., 9., 10.]);
        assert_eq!(slice(&x(), 1, 4, 0).unwrap().shape(), &[3, 0]);
    }

    #[test]
    fn bad_ranges_are_errors() {
        assert!(matches!(slice(&x(), 0, 2, 2), Err(Error::Shape { .. })));
        assert!(matches!(
            slice(&x(), 1, usize::MAX, 2),
            Err(Error::Shape { .. })
        ));
        assert!(matches!(slice(&x(), 2, 0, 1), Err(Error::Shape { .. })));
    }
}
