//! Row-wise log-softmax of a 2-D tensor, and the stable log-sum-exp it rests on.
//!
//! `y[i, j] = x[i, j] - lseᵢ`, `lseᵢ = mᵢ + ln Σₖ exp(x[i, k] - mᵢ)`, `mᵢ = maxₖ x[i, k]`.
//! Subtracting the row maximum keeps every exponent ≤ 0, so large logits cannot overflow;
//! the output is computed as `(x - m) - ln Σ…`, which keeps full precision for large logits.
//!
//! Backward (`softmax = exp(y)`): `x̄[i, j] = ḡ[i, j] - exp(y[i, j]) · Σₖ ḡ[i, k]`.
//! It reads only the output `y`, which is all that is saved.

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuElem};
use crate::device::cuda::{self, Arg, CudaBuffer};
use crate::device::wgpu::LogSoftmaxParams;
use crate::device::wgpu::{Kernel, WgpuBuffer, WG};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::ops::rows::{dims2, rows_from_fn, u32_count};
use crate::ops::{cpu_output, cuda_output, wgpu_output};
use crate::tensor::{Storage, Tensor};

const SHADER: &str = include_str!("../../shaders/log_softmax.wgsl");
const FORWARD: Kernel = Kernel {
    stem: "log_softmax",
    source: SHADER,
    entry: "log_softmax_f32",
};
const BACKWARD: Kernel = Kernel {
    stem: "log_softmax",
    source: SHADER,
    entry: "log_softmax_backward_f32",
};

const FORWARD_CUDA: cuda::Kernel = crate::cuda_kernel!("log_softmax", "log_softmax_f32");
const FORWARD_BLOCK_CUDA: cuda::Kernel =
    crate::cuda_kernel!("log_softmax", "log_softmax_block_f32");
const BACKWARD_CUDA: cuda::Kernel = crate::cuda_kernel!("log_softmax", "log_softmax_backward_f32");
const BACKWARD_BLOCK_CUDA: cuda::Kernel =
    crate::cuda_kernel!("log_softmax", "log_softmax_backward_block_f32");
/// Rows longer than this get a block each on CUDA; shorter ones a warp.
const LONG_ROW_CUDA: usize = 256;
/// Threads per block of the block-per-row CUDA kernels.
const ROW_THREADS_CUDA: u32 = 256;

/// Launches a CUDA row kernel over `[r, c]`: `warp` (a warp per row) for short rows, `block`
/// (a block per row) for long ones. The kernel takes `buffers`, then `r` and `c`.
fn launch_rows_cuda(
    warp: &cuda::Kernel,
    block: &cuda::Kernel,
    r: usize,
    c: usize,
    buffers: &[&CudaBuffer],
) -> Result<()> {
    let ctx = buffers[0].ctx();
    if r == 0 || c == 0 {
        return Ok(());
    }
    u32_count("log_softmax", "x", r * c)?;
    let mut args: Vec<Arg> = buffers.iter().map(|b| Arg::Buf(b)).collect();
    args.extend([Arg::U32(r as u32), Arg::U32(c as u32)]);
    if c > LONG_ROW_CUDA {
        ctx.launch(block, ctx.grid_blocks(r as u64, ROW_THREADS_CUDA), &args)
    } else {
        ctx.launch_rows(warp, r as u64, &args)
    }
}

/// Launches a row kernel (one workgroup per row) over `[r, c]` with the given buffers, all
/// `[r, c]`, in ranges of rows that fit one binding.
fn launch_rows(k: &Kernel, r: usize, c: usize, buffers: &[(u32, &WgpuBuffer)]) -> Result<()> {
    let ctx = buffers[0].1.ctx();
    if r == 0 || c == 0 {
        return Ok(());
    }
    for (r0, r1) in ctx.split(k.stem, r, |a, b| (b - a) * c)? {
        let windows: Vec<_> = buffers
            .iter()
            .map(|&(slot, b)| (slot, ctx.rows_window(b, r0, r1, c)))
            .collect();
        let binds: Vec<_> = windows.iter().map(|(slot, w)| (*slot, w)).collect();
        let params = LogSoftmaxParams {
            r: (r1 - r0) as u32,
            c: c as u32,
            r0: r0 as u32,
            base: windows[0].1.base,
        };
        let grid = ctx.grid((r1 - r0) as u64 * WG as u64)?;
        ctx.launch_windows_grid(k, &params, &binds, grid)?;
    }
    Ok(())
}

/// `(m, ln Σ exp(row - m))` with `m` the row maximum, so that `lse = m + ln Σ exp(row - m)`.
/// Callers that need `x - lse` compute `(x - m) - ln Σ…`: the difference `x - m` is exact for
/// nearby values, whereas rounding `lse` itself would cost an ulp of `m` (6e-5 at 1000 in
/// f32). An empty row gives `m = -∞`; a row whose maximum is ±∞ or NaN gives `(m, 0)`.
pub(crate) fn max_and_log_sum<T: Float>(row: &[T]) -> (T, T) {
    let m = row.iter().fold(T::NEG_INFINITY, |m, &v| {
        // NaN wins, so that it propagates instead of being skipped.
        if v > m || v.partial_cmp(&v).is_none() {
            v
        } else {
            m
        }
    });
    if m.partial_cmp(&m).is_none() || m == T::NEG_INFINITY || m == -T::NEG_INFINITY {
        return (m, T::ZERO);
    }
    (m, row.iter().map(|&v| (v - m).exp()).sum::<T>().ln())
}

/// `ln Σ exp(row)`, stable (see [`max_and_log_sum`]).
#[cfg(test)]
pub(crate) fn logsumexp<T: Float>(row: &[T]) -> T {
    let (m, ls) = max_and_log_sum(row);
    m + ls
}

/// Log-softmax along each row of the 2-D `x`.
pub fn log_softmax(x: &Tensor) -> Result<Tensor> {
    const OP: &str = "log_softmax";
    x.expect_float(OP)?;
    let (r, c) = dims2(OP, "x", x)?;
    let out = match &*x.storage() {
        Storage::Cuda(b) => {
            let out = CudaBuffer::new(b.ctx(), b.len)?;
            launch_rows_cuda(&FORWARD_CUDA, &FORWARD_BLOCK_CUDA, r, c, &[b, &out])?;
            cuda_output(out, vec![r, c], x)
        }
        Storage::Cpu(b) => {
            let buf = float_cpu!(OP, &b.data, v => cpu_forward(v, r, c)?);
            cpu_output(buf, vec![r, c], x)
        }
        Storage::Wgpu(b) => {
            let out = WgpuBuffer::new(b.ctx(), b.len)?;
            launch_rows(&FORWARD, r, c, &[(1, b), (2, &out)])?;
            wgpu_output(out, vec![r, c], x)
        }
    };
    let y = out.detach();
    Ok(record(OP, out, &[x], move |g| {
        Ok(vec![Some(log_softmax_backward(g, &y)?)])
    }))
}

fn cpu_forward<T: Float + CpuElem>(x: &[T], r: usize, c: usize) -> Result<CpuBuffer> {
    rows_from_fn(r, c, 2 * r * c, |i, row: &mut [T]| {
        let xi = &x[i * c..(i + 1) * c];
        let (m, ls) = max_and_log_sum(xi);
        row.iter_mut().zip(xi).for_each(|(o, &v)| *o = (v - m) - ls);
    })
}

fn log_softmax_backward(g: &Tensor, y: &Tensor) -> Result<Tensor> {
    const OP: &str = "log_softmax_backward";
    let (r, c) = dims2(OP, "gradient", g)?;
    match (&*g.storage(), &*y.storage()) {
        (Storage::Cpu(gb), Storage::Cpu(yb)) => {
            let buf = float_cpu2!(OP, &gb.data, &yb.data, (g, y) => cpu_backward(g, y, r, c)?);
            Ok(cpu_output(buf, vec![r, c], g))
        }
        (Storage::Wgpu(gb), Storage::Wgpu(yb)) => {
            let out = WgpuBuffer::new(gb.ctx(), gb.len)?;
            launch_rows(&BACKWARD, r, c, &[(3, gb), (4, yb), (5, &out)])?;
            Ok(wgpu_output(out, vec![r, c], g))
        }
        (Storage::Cuda(gb), Storage::Cuda(yb)) => {
            let out = CudaBuffer::new(gb.ctx(), gb.len)?;
            launch_rows_cuda(&BACKWARD_CUDA, &BACKWARD_BLOCK_CUDA, r, c, &[gb, yb, &out])?;
            Ok(cuda_output(out, vec![r, c], g))
        }
        _ => Err(Error::DeviceMismatch {
            op: OP,
            lhs: g.device(),
            rhs: y.device(),
        }),
    }
}

fn cpu_backward<T: Float + CpuElem>(g: &[T], y: &[T], r: usize, c: usize) -> Result<CpuBuffer> {
    rows_from_fn(r, c, 3 * r * c, |i, row: &mut [T]| {
        let (gi, yi) = (&g[i * c..(i + 1) * c], &y[i * c..(i + 1) * c]);
        let total: T = gi.iter().copied().sum();
        for ((o, &gv), &yv) in row.iter_mut().zip(gi).zip(yi) {
            *o = gv - yv.exp() * total;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn rows_exponentiate_to_one_even_for_huge_logits() {
        let x =
            Tensor::from_f32(vec![1000., 1001., 999., -5., 0., 5.], &[2, 3], Device::Cpu).unwrap();
        let y = log_softmax(&x).unwrap().to_vec_f64().unwrap();
        for row in y.chunks(3) {
            assert!(row.iter().all(|v| v.is_finite()), "{row:?}");
            let total: f64 = row.iter().map(|v| v.exp()).sum();
            assert!((total - 1.0).abs() < 1e-5, "{total}");
        }
        // log_softmax is shift-invariant: row 0 equals log_softmax([1, 2, 0]).
        let e = [1f64.exp(), 2f64.exp(), 1.0];
        let s: f64 = e.iter().sum();
        assert!((y[1] - (e[1] / s).ln()).abs() < 1e-5);
    }

    #[test]
    fn logsumexp_edge_cases() {
        assert_eq!(logsumexp::<f64>(&[]), f64::NEG_INFINITY);
        assert_eq!(logsumexp(&[f64::NEG_INFINITY, 0.0]), 0.0);
        assert!(logsumexp(&[1.0, f64::NAN]).is_nan());
        assert_eq!(logsumexp(&[f64::INFINITY, 0.0]), f64::INFINITY);
    }
}
