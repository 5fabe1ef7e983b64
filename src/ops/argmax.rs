//! Row-wise argmax: the predicted class of each row of a 2-D tensor of scores.
//!
//! `out[i] = min { j : x[i, j] = maxₖ x[i, k] }` (ties go to the lowest column; a NaN
//! counts as the maximum, so corrupt scores show up instead of reading as class 0).
//! The output is u32 indices and has no gradient.

use crate::device::cpu::{CpuBuffer, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::argmax::ArgmaxKernels;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::meta::{Replay, Val};
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, rows_from_fn};
use crate::tensor::{DType, Storage, Tensor};

/// The column of each row's largest value, as `u32 [rows]`.
pub fn argmax_rows(x: &Tensor) -> Result<Tensor> {
    const OP: &str = "argmax_rows";
    x.expect_float(OP)?;
    let (r, c) = dims2(OP, "x", x)?;
    if c == 0 && r > 0 {
        return Err(Error::shape(
            OP,
            format!("rows of shape {:?} have no columns", x.shape()),
        ));
    }
    if c > u32::MAX as usize {
        return Err(Error::shape(OP, format!("{c} columns do not fit u32")));
    }
    let storage = match &*x.storage() {
        Storage::Cpu(b) => Storage::Cpu(float_cpu!(OP, &b.data, v => cpu_argmax(v, r, c)?)),
        s => on_gpu!(s, |D, b| D::storage(
            D::context_of(b).argmax_rows(OP, b, r, c)?
        )),
    };
    Ok(Tensor::from_storage(
        storage,
        vec![r],
        DType::U32,
        x.device(),
    ))
}

fn cpu_argmax<T: Float + CpuElem>(x: &[T], r: usize, c: usize) -> Result<CpuBuffer> {
    rows_from_fn(r, 1, r * c, |i, out: &mut [u32]| {
        let row = &x[i * c..(i + 1) * c];
        let mut best = 0;
        for (j, &v) in row.iter().enumerate().skip(1) {
            let b = row[best];
            let b_nan = b.partial_cmp(&b).is_none();
            if !b_nan && (v > b || v.partial_cmp(&v).is_none()) {
                best = j;
            }
        }
        out[0] = best as u32;
    })
}

/// Meta arm of [`argmax_rows`] ([`crate::meta`]): u32 `[rows]`, recorded by no rule.
pub fn meta_argmax_rows(r: &mut Replay, x: &Val) -> Val {
    r.input(x.rows, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn picks_the_first_maximum() {
        let x = Tensor::from_f32(
            vec![0., 3., 3., 5., 1., -1., 2., f32::NAN, 9.],
            &[3, 3],
            Device::Cpu,
        )
        .unwrap();
        let a = argmax_rows(&x).unwrap();
        assert_eq!(a.dtype(), DType::U32);
        assert_eq!(a.to_vec_u32().unwrap(), vec![1, 0, 1]);
    }

    #[test]
    fn no_columns_is_an_error() {
        let x = Tensor::from_f32(vec![], &[2, 0], Device::Cpu).unwrap();
        assert!(matches!(argmax_rows(&x), Err(Error::Shape { .. })));
        let none = Tensor::from_f32(vec![], &[0, 0], Device::Cpu).unwrap();
        assert_eq!(argmax_rows(&none).unwrap().shape(), &[0]);
    }
}
