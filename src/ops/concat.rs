//! Concatenation of 2-D tensors along rows (dim 0) or columns (dim 1).
//!
//! `concat([x₁[r₁, c], …, x_k[r_k, c]], 0) = [Σ rᵢ, c]`;
//! `concat([x₁[r, c₁], …, x_k[r, c_k]], 1) = [r, Σ cᵢ]`.
//!
//! Backward: each input's gradient is its slice of `ḡ`,
//! `x̄ᵢ = slice(ḡ, dim, offsetᵢ, sizeᵢ)`; inputs that need no gradient get none.
//! Works on u32 tensors too (without gradient).

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuData, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::concat::ConcatKernels;
use crate::error::{Error, Result};
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, rows_from_fn};
use crate::ops::{cpu_output, slice};
use crate::tensor::{Storage, Tensor};

/// The 2-D tensors `xs` joined along `dim` (0: stacked rows, 1: side-by-side columns).
/// All must share the dtype, the device and the other dimension.
pub fn concat(xs: &[&Tensor], dim: usize) -> Result<Tensor> {
    const OP: &str = "concat";
    let Some(first) = xs.first() else {
        return Err(Error::invalid("concat: no tensors to concatenate"));
    };
    if dim > 1 {
        return Err(Error::shape(OP, format!("dimension {dim} of a 2-D tensor")));
    }
    let shapes: Vec<(usize, usize)> = xs
        .iter()
        .map(|t| dims2(OP, "every input", t))
        .collect::<Result<_>>()?;
    for t in &xs[1..] {
        first.same_device(t, OP)?;
        if t.dtype() != first.dtype() {
            return Err(Error::DType {
                op: OP,
                expected: first.dtype().name(),
                got: t.dtype().name(),
            });
        }
    }
    let other = |s: &(usize, usize)| if dim == 0 { s.1 } else { s.0 };
    if shapes.iter().any(|s| other(s) != other(&shapes[0])) {
        let all: Vec<&[usize]> = xs.iter().map(|t| t.shape()).collect();
        return Err(Error::shape(
            OP,
            format!("inputs {all:?} differ outside dimension {dim}"),
        ));
    }
    // Offset and size of each input along `dim`.
    let mut parts = Vec::with_capacity(xs.len());
    let mut total = 0usize;
    for s in &shapes {
        let size = if dim == 0 { s.0 } else { s.1 };
        parts.push((total, size));
        total += size;
    }
    let out_shape = if dim == 0 {
        vec![total, shapes[0].1]
    } else {
        vec![shapes[0].0, total]
    };
    let out = {
        let guards: Vec<_> = xs.iter().map(|t| t.storage()).collect();
        let mismatch = |t: &Tensor| Error::DeviceMismatch {
            op: OP,
            lhs: first.device(),
            rhs: t.device(),
        };
        if !matches!(&*guards[0], Storage::Cpu(_)) {
            on_gpu!(&*guards[0], |D, _b| {
                let bufs: Vec<&<D as GpuDevice>::Buffer> = guards
                    .iter()
                    .zip(xs)
                    .map(|(g, t)| D::buffer(g, OP).map_err(|_| mismatch(t)))
                    .collect::<Result<_>>()?;
                let ctx = D::context_of(bufs[0]);
                let buf = ctx.concat(&bufs, &shapes, &parts, dim, (out_shape[0], out_shape[1]))?;
                D::output(buf, out_shape, first)
            })
        } else {
            let datas: Vec<&CpuData> = guards.iter().map(|g| g.cpu(OP)).collect::<Result<_>>()?;
            let buf = match datas[0] {
                CpuData::F32(_) => cpu_concat::<f32>(&datas, &parts, dim, &out_shape)?,
                CpuData::F64(_) => cpu_concat::<f64>(&datas, &parts, dim, &out_shape)?,
                CpuData::U32(_) => cpu_concat::<u32>(&datas, &parts, dim, &out_shape)?,
                other => {
                    return Err(Error::DType {
                        op: OP,
                        expected: "f32",
                        got: other.dtype_name(),
                    })
                }
            };
            cpu_output(buf, out_shape, first)
        }
    };
    let wanted: Vec<bool> = xs.iter().map(|t| t.requires_grad()).collect();
    Ok(record(OP, out, xs, move |g| {
        parts
            .iter()
            .zip(&wanted)
            .map(|(&(start, size), &w)| w.then(|| slice(g, dim, start, size)).transpose())
            .collect()
    }))
}

fn cpu_concat<T: CpuElem + Default>(
    datas: &[&CpuData],
    parts: &[(usize, usize)],
    dim: usize,
    out_shape: &[usize],
) -> Result<CpuBuffer> {
    let xs: Vec<&[T]> = datas
        .iter()
        .map(|d| T::slice(d).ok_or_else(|| Error::invalid("concat: inputs of mixed dtypes")))
        .collect::<Result<_>>()?;
    let (rows, cols) = (out_shape[0], out_shape[1]);
    rows_from_fn(rows, cols, 2 * rows * cols, |i, row: &mut [T]| {
        if dim == 0 {
            // The input holding row i: the last whose offset is <= i.
            let k = parts.partition_point(|&(start, _)| start <= i) - 1;
            let r = i - parts[k].0;
            row.copy_from_slice(&xs[k][r * cols..(r + 1) * cols]);
        } else {
            for (x, &(start, size)) in xs.iter().zip(parts) {
                row[start..start + size].copy_from_slice(&x[i * size..(i + 1) * size]);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    fn t(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_f32(v.to_vec(), shape, Device::Cpu).unwrap()
    }

    #[test]
    fn joins_rows_and_columns() {
        let a = t(&[1., 2.], &[1, 2]);
        let b = t(&[3., 4., 5., 6.], &[2, 2]);
        let empty = t(&[], &[0, 2]);
        let rows = concat(&[&a, &empty, &b], 0).unwrap();
        assert_eq!(rows.shape(), &[3, 2]);
        assert_eq!(rows.to_vec_f32().unwrap(), vec![1., 2., 3., 4., 5., 6.]);
        let c = t(&[7., 8.], &[2, 1]);
        let cols = concat(&[&b, &c], 1).unwrap();
        assert_eq!(cols.shape(), &[2, 3]);
        assert_eq!(cols.to_vec_f32().unwrap(), vec![3., 4., 7., 5., 6., 8.]);
    }

    #[test]
    fn mismatches_are_errors() {
        let a = t(&[1., 2.], &[1, 2]);
        let b = t(&[1., 2., 3.], &[1, 3]);
        assert!(matches!(concat(&[], 0), Err(Error::InvalidArgument(_))));
        assert!(matches!(concat(&[&a, &b], 0), Err(Error::Shape { .. })));
        assert!(concat(&[&a, &b], 1).is_ok());
        assert!(matches!(concat(&[&a], 2), Err(Error::Shape { .. })));
        let f64s = Tensor::from_f64(vec![1., 2.], &[1, 2]).unwrap();
        assert!(matches!(concat(&[&a, &f64s], 0), Err(Error::DType { .. })));
    }
}
