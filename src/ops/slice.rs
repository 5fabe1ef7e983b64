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
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::SliceParams;
use crate::device::wgpu::{Kernel, WgpuBuffer};
use crate::error::{Error, Result};
use crate::ops::rows::{dims2, rows_from_fn, u32_count};
use crate::ops::{cpu_output, cuda_output, wgpu_output};
use crate::tensor::{Storage, Tensor};

const SHADER: &str = include_str!("../../shaders/slice.wgsl");
const COLS: Kernel = Kernel {
    stem: "slice",
    source: SHADER,
    entry: "slice_cols_u32",
};
const PAD: Kernel = Kernel {
    stem: "slice",
    source: SHADER,
    entry: "slice_pad_f32",
};
const COLS_CUDA: cuda::Kernel = crate::cuda_kernel!("slice", "slice_cols_u32");
const PAD_CUDA: cuda::Kernel = crate::cuda_kernel!("slice", "slice_pad_f32");

/// Copies `words` 32-bit words of `src` from word `from` into `dst` from word `to`, on the
/// device's stream (a slice of rows, and [`concat`](crate::ops::concat) of rows).
pub(super) fn cuda_copy_words(
    src: &CudaBuffer,
    from: usize,
    dst: &mut CudaBuffer,
    to: usize,
    words: usize,
) -> Result<()> {
    if words == 0 {
        return Ok(());
    }
    let ctx = src.ctx().clone();
    let view = src.slice().slice(from..from + words);
    let mut target = dst.slice_mut().slice_mut(to..to + words);
    ctx.stream
        .memcpy_dtod(&view, &mut target)
        .map_err(|e| Error::Backend {
            backend: "cuda",
            msg: format!("device copy of {words} words: {e}"),
        })
}

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
        Storage::Cuda(b) => {
            let n = u32_count(OP, "the slice", out_shape[0] * out_shape[1])?;
            let mut out = CudaBuffer::new(b.ctx(), n as u64 * 4)?;
            if dim == 0 {
                // Rows are contiguous: one copy.
                cuda_copy_words(b, start * c, &mut out, 0, n as usize)?;
            } else {
                // The kernel indexes x's columns with u32 offsets too.
                u32_count(OP, "x", r * c)?;
                let args = [
                    Arg::Buf(b),
                    Arg::Buf(&out),
                    Arg::U32(c as u32),
                    Arg::U32(start as u32),
                    Arg::U32(len as u32),
                    Arg::U32(n),
                ];
                b.ctx().launch_1d(&COLS_CUDA, n as u64, &args)?;
            }
            cuda_output(out, out_shape, x)
        }
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
        Storage::Wgpu(b) => {
            let ctx = b.ctx();
            let n = out_shape[0] * out_shape[1];
            let out = WgpuBuffer::new(ctx, (n * 4) as u64)?;
            if dim == 0 {
                // Rows are contiguous: one copy.
                ctx.copy(b, (start * c * 4) as u64, &out, 0, (n * 4) as u64)?;
            } else if len > 0 {
                // Ranges of output rows whose windows (len values per row out, the
                // strided columns in) fit one binding.
                let src = |r0: usize, r1: usize| (r0 * c + start, (r1 - 1) * c + start + len);
                let span = |r0: usize, r1: usize| {
                    let (lo, hi) = src(r0, r1);
                    (hi - lo).max((r1 - r0) * len)
                };
                for (r0, r1) in ctx.split(OP, r, span)? {
                    let (lo, hi) = src(r0, r1);
                    let (sw, dw) = (ctx.window(b, lo, hi), ctx.rows_window(&out, r0, r1, len));
                    let params = SliceParams {
                        n: ((r1 - r0) * len) as u32,
                        base: (r0 * len) as u32,
                        c: c as u32,
                        start: start as u32,
                        len: len as u32,
                        dim: 1,
                        src_base: sw.base,
                        dst_base: dw.base,
                    };
                    let binds = [(1, &sw), (2, &dw)];
                    ctx.launch_windows(&COLS, &params, &binds, ((r1 - r0) * len) as u64)?;
                }
            }
            wgpu_output(out, out_shape, x)
        }
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
        Storage::Cuda(b) => {
            let n = u32_count(OP, "the input", r * c)?;
            let out = CudaBuffer::new(b.ctx(), n as u64 * 4)?;
            let glen = if dim == 0 { gr } else { gc };
            let args = [
                Arg::Buf(b),
                Arg::Buf(&out),
                Arg::U32(c as u32),
                Arg::U32(start as u32),
                Arg::U32(glen as u32),
                Arg::U32(dim as u32),
                Arg::U32(n),
            ];
            b.ctx().launch_1d(&PAD_CUDA, n as u64, &args)?;
            return Ok(cuda_output(out, in_shape.to_vec(), g));
        }
        Storage::Wgpu(b) => {
            let ctx = b.ctx();
            let out = WgpuBuffer::new(ctx, (r * c * 4) as u64)?;
            let glen = if dim == 0 { gr } else { gc };
            // Ranges of rows of the output; the window of g those rows read.
            let g_range = |r0: usize, r1: usize| {
                if dim == 1 {
                    (r0 * gc, r1 * gc)
                } else {
                    let (a, b) = (r0.clamp(start, start + gr), r1.clamp(start, start + gr));
                    ((a - start) * gc, (b - start) * gc)
                }
            };
            let span = |r0: usize, r1: usize| {
                let (lo, hi) = g_range(r0, r1);
                (hi - lo).max((r1 - r0) * c)
            };
            for (r0, r1) in ctx.split(OP, r, span)? {
                let (lo, hi) = g_range(r0, r1);
                let (gw, ow) = (ctx.window(b, lo, hi), ctx.rows_window(&out, r0, r1, c));
                let params = SliceParams {
                    n: ((r1 - r0) * c) as u32,
                    base: (r0 * c) as u32,
                    c: c as u32,
                    start: start as u32,
                    len: glen as u32,
                    dim: dim as u32,
                    src_base: gw.base,
                    dst_base: ow.base,
                };
                ctx.launch_windows(&PAD, &params, &[(3, &gw), (4, &ow)], ((r1 - r0) * c) as u64)?;
            }
            return Ok(wgpu_output(out, in_shape.to_vec(), g));
        }
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
    };
    Ok(cpu_output(buf, in_shape.to_vec(), g))
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
