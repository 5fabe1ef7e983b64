//! Row-wise argmax: the predicted class of each row of a 2-D tensor of scores.
//!
//! `out[i] = min { j : x[i, j] = maxₖ x[i, k] }` (ties go to the lowest column; a NaN
//! counts as the maximum, so corrupt scores show up instead of reading as class 0).
//! The output is u32 indices and has no gradient.

use crate::device::cpu::{CpuBuffer, CpuElem};
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::ArgmaxParams;
use crate::device::wgpu::{Kernel, WgpuBuffer, WG};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::ops::rows::{dims2, rows_from_fn, u32_count};
use crate::tensor::{DType, Storage, Tensor};

const KERNEL: Kernel = Kernel {
    stem: "argmax",
    source: include_str!("../../shaders/argmax.wgsl"),
    entry: "argmax_rows_f32",
};
const KERNEL_CUDA: cuda::Kernel = crate::cuda_kernel!("argmax", "argmax_rows_f32");

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
        Storage::Cuda(b) => {
            let ctx = b.ctx();
            u32_count(OP, "x", r * c)?;
            let out = CudaBuffer::new(ctx, (r * 4) as u64)?;
            // One warp per row; nothing runs for r = 0.
            let args = [
                Arg::Buf(b),
                Arg::Buf(&out),
                Arg::U32(r as u32),
                Arg::U32(c as u32),
            ];
            ctx.launch_rows(&KERNEL_CUDA, r as u64, &args)?;
            Storage::Cuda(out)
        }
        Storage::Cpu(b) => Storage::Cpu(float_cpu!(OP, &b.data, v => cpu_argmax(v, r, c)?)),
        Storage::Wgpu(b) => {
            let ctx = b.ctx();
            let out = WgpuBuffer::new(ctx, (r * 4) as u64)?;
            // One workgroup per row, in ranges of rows that fit one binding.
            for (r0, r1) in ctx.split(OP, r, |a, b| (b - a) * c)? {
                let (xw, ow) = (ctx.rows_window(b, r0, r1, c), ctx.window(&out, r0, r1));
                let params = ArgmaxParams {
                    r: (r1 - r0) as u32,
                    c: c as u32,
                    r0: r0 as u32,
                    x_base: xw.base,
                    out_base: ow.base,
                };
                let grid = ctx.grid((r1 - r0) as u64 * WG as u64)?;
                ctx.launch_windows_grid(&KERNEL, &params, &[(1, &xw), (2, &ow)], grid)?;
            }
            Storage::Wgpu(out)
        }
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
