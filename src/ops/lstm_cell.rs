//! Fused LSTM cell: gate non-linearities, state update and output in one pass.
//!
//! Input: pre-activation gates `z[n, 4H]` in PyTorch's order (i, f, g, o), which the caller
//! computes with matmul (`z = x·W_ih + h·W_hh + b`), and the previous cell state
//! `c_prev[n, H]`. With σ the logistic function:
//!
//! ```text
//! i = σ(z_i)   f = σ(z_f)   g = tanh(z_g)   o = σ(z_o)
//! c = f ⊙ c_prev + i ⊙ g
//! h = o ⊙ tanh(c)
//! ```
//!
//! Output: **packed `[n, 2H]`**, h in columns `0..H` and c in columns `H..2H`. Autograd
//! nodes have one output, so both states travel in one tensor; [`crate::ops::slice`] along
//! dimension 1 splits them, and since the backward takes the gradient of the whole packed
//! tensor, both h and c carry gradients (slices of an unused half contribute zeros).
//!
//! Backward, with `ḡ = [h̄ | c̄]` and `τ = tanh(c)`:
//!
//! ```text
//! ĉ = c̄ + h̄ ⊙ o ⊙ (1 - τ²)              (total gradient of c)
//! z̄_i = ĉ ⊙ g ⊙ i(1 - i)      z̄_f = ĉ ⊙ c_prev ⊙ f(1 - f)
//! z̄_g = ĉ ⊙ i ⊙ (1 - g²)      z̄_o = h̄ ⊙ τ ⊙ o(1 - o)
//! c̄_prev = ĉ ⊙ f
//! ```
//!
//! **Saved for backward: 4 f32 values per (node, hidden unit)**, the activated gates
//! (i, f, g, o), plus a reference to `c_prev` (shared, not copied); `c` is recomputed as
//! `f ⊙ c_prev + i ⊙ g`. In a recurrence, `c_prev` is the previous step's `c`, which the
//! next step's cell holds anyway, so the cell costs **5 f32 per (node, step, hidden unit)**
//! (PyTorch's LSTM keeps about 18); a recurrence that feeds `h` to a matmul adds the 1 the
//! matmul keeps. [`crate::ops::lstm_aggregate`] keeps 5 in all (it recomputes `h`).
//!
//! Kernels: one thread per (node, hidden unit) in both directions; the backward is a single
//! fused kernel ([`lstm_cell_backward`]) that writes `z̄` and `c̄_prev` together
//! (`shaders/lstm_cell.wgsl`, `kernels/lstm_cell.cu`). On wgpu, past the storage-binding
//! limit, both run over ranges of nodes (row-wise: the results do not change).

use rayon::prelude::*;

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::lstm_cell::LstmCellKernels;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, parallel};
use crate::tensor::{Storage, Tensor};

const OP: &str = "lstm_cell";
/// One LSTM step: packed `[h | c]` (`[n, 2H]`) from pre-activation gates `[n, 4H]` (order
/// i, f, g, o) and the previous cell state `[n, H]`. Both inputs get gradients.
pub fn lstm_cell(gates: &Tensor, c_prev: &Tensor) -> Result<Tensor> {
    let (out, acts) = lstm_cell_forward(gates, c_prev)?;
    let c_saved = c_prev.detach();
    Ok(record(OP, out, &[gates, c_prev], move |g| {
        let (dz, dc) = lstm_cell_backward(&acts, &c_saved, g)?;
        Ok(vec![Some(dz), Some(dc)])
    }))
}

/// The forward kernel without recording: `(packed [h | c] [n, 2H], activated gates [n, 4H])`.
/// The activated gates are what [`lstm_cell_backward`] reads.
pub fn lstm_cell_forward(gates: &Tensor, c_prev: &Tensor) -> Result<(Tensor, Tensor)> {
    let (n, h) = check(gates, c_prev)?;
    let (out, acts) = match (&*gates.storage(), &*c_prev.storage()) {
        (Storage::Cpu(z), Storage::Cpu(c)) => {
            let (o, a) = float_cpu2!(OP, &z.data, &c.data, (z, c) => cpu_forward(z, c, n, h)?);
            (
                cpu_output(o, vec![n, 2 * h], gates),
                cpu_output(a, vec![n, 4 * h], gates),
            )
        }
        (zs, cs) => on_gpu!(
            (zs, cs),
            |D, (z, c)| {
                let (out, acts) = D::context_of(z).lstm_cell(z, c, n, h)?;
                (
                    D::output(out, vec![n, 2 * h], gates),
                    D::output(acts, vec![n, 4 * h], gates),
                )
            },
            else return Err(mismatch(gates, c_prev))
        ),
    };
    Ok((out, acts))
}

/// The fused backward kernel: from the activated gates `[n, 4H]`, `c_prev [n, H]` and the
/// gradient of the packed output `[n, 2H]`, returns `(z̄ [n, 4H], c̄_prev [n, H])`.
pub fn lstm_cell_backward(
    acts: &Tensor,
    c_prev: &Tensor,
    grad: &Tensor,
) -> Result<(Tensor, Tensor)> {
    const BOP: &str = "lstm_cell_backward";
    let (n, h) = check(acts, c_prev)?;
    acts.same_device(grad, BOP)?;
    if grad.shape() != [n, 2 * h] || grad.dtype() != acts.dtype() {
        return Err(Error::shape(
            BOP,
            format!(
                "gradient of shape {:?} ({}) for an output of shape [{n}, {}] ({})",
                grad.shape(),
                grad.dtype().name(),
                2 * h,
                acts.dtype().name()
            ),
        ));
    }
    let guards = (acts.storage(), c_prev.storage(), grad.storage());
    match (&*guards.0, &*guards.1, &*guards.2) {
        (Storage::Cpu(a), Storage::Cpu(c), Storage::Cpu(g)) => {
            let (dz, dc) = match (&a.data, &c.data, &g.data) {
                (cpu::CpuData::F32(a), cpu::CpuData::F32(c), cpu::CpuData::F32(g)) => {
                    cpu_backward(a, c, g, n, h)?
                }
                (cpu::CpuData::F64(a), cpu::CpuData::F64(c), cpu::CpuData::F64(g)) => {
                    cpu_backward(a, c, g, n, h)?
                }
                _ => return Err(acts.dtype_error(BOP, "f32")),
            };
            Ok((
                cpu_output(dz, vec![n, 4 * h], acts),
                cpu_output(dc, vec![n, h], acts),
            ))
        }
        (as_, cs, gs) => on_gpu!(
            (as_, cs, gs),
            |D, (a, c, g)| {
                let (dz, dc) = D::context_of(a).lstm_cell_backward(a, c, g, n, h)?;
                Ok((
                    D::output(dz, vec![n, 4 * h], acts),
                    D::output(dc, vec![n, h], acts),
                ))
            },
            else Err(Error::DeviceMismatch {
                op: BOP,
                lhs: acts.device().to_string(),
                rhs: grad.device().to_string(),
            })
        ),
    }
}

/// Checks `[n, 4H]` gates (or activations) against `[n, H]` states; returns `(n, H)`.
fn check(gates: &Tensor, c_prev: &Tensor) -> Result<(usize, usize)> {
    gates.expect_float(OP)?;
    gates.same_device(c_prev, OP)?;
    let (n, g4) = dims2(OP, "gates", gates)?;
    let (nc, h) = dims2(OP, "c_prev", c_prev)?;
    if nc != n || g4 != 4 * h || gates.dtype() != c_prev.dtype() {
        return Err(Error::shape(
            OP,
            format!(
                "gates must be [n, 4H] and c_prev [n, H] of one dtype; got {:?} ({}) and {:?} ({})",
                gates.shape(),
                gates.dtype().name(),
                c_prev.shape(),
                c_prev.dtype().name()
            ),
        ));
    }
    Ok((n, h))
}

fn mismatch(a: &Tensor, b: &Tensor) -> Error {
    Error::DeviceMismatch {
        op: OP,
        lhs: a.device().to_string(),
        rhs: b.device().to_string(),
    }
}

/// One unit of the cell: pre-activations `(z_i, z_f, z_g, z_o)` and `c_prev` to the
/// activated gates, `c` and `h`.
#[inline(always)]
pub(crate) fn cell_unit<T: Float>(z: [T; 4], c_prev: T) -> ([T; 4], T, T) {
    let a = [z[0].sigmoid(), z[1].sigmoid(), z[2].tanh(), z[3].sigmoid()];
    let c = a[1] * c_prev + a[0] * a[2];
    (a, c, a[3] * c.tanh())
}

/// Backward of one unit: from the activated gates, `c`, `c_prev` and the incoming
/// gradients of `h` and `c`, the pre-activation gradients and `c̄_prev`.
#[inline(always)]
pub(crate) fn cell_unit_backward<T: Float>(
    a: [T; 4],
    c: T,
    c_prev: T,
    dh: T,
    dc: T,
) -> ([T; 4], T) {
    let [i, f, g, o] = a;
    let tc = c.tanh();
    let dct = dc + dh * o * (T::ONE - tc * tc);
    let dz = [
        dct * g * i * (T::ONE - i),
        dct * c_prev * f * (T::ONE - f),
        dct * i * (T::ONE - g * g),
        dh * tc * o * (T::ONE - o),
    ];
    (dz, dct * f)
}

/// [`cell_unit`] over the `h` units of one (node, step): the pre-activation gates are
/// `x [4h]` (blocks i, f, g, o) plus, when `recurrent`, the `h_{t-1}·W_hh` already in `z
/// [4h]`, which receives the activated gates; `c_prev [h]` (zeros at a sequence's first
/// step), `c [h]` and `h_out [h]`. A loop over each block's contiguous units,
/// branch-free, so that it vectorises (with AVX2 where the CPU has it); each unit's value
/// is [`cell_unit`]'s of `x + z`, bit for bit.
pub(crate) fn cell_rows<T: Float>(
    z: &mut [T],
    x: &[T],
    recurrent: bool,
    c_prev: &[T],
    c: &mut [T],
    h_out: &mut [T],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { cell_rows_avx2(z, x, recurrent, c_prev, c, h_out) };
        return;
    }
    cell_rows_any(z, x, recurrent, c_prev, c, h_out)
}

/// [`cell_rows`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn cell_rows_avx2<T: Float>(
    z: &mut [T],
    x: &[T],
    recurrent: bool,
    c_prev: &[T],
    c: &mut [T],
    h_out: &mut [T],
) {
    cell_rows_any(z, x, recurrent, c_prev, c, h_out)
}

#[inline(always)]
fn cell_rows_any<T: Float>(
    z: &mut [T],
    x: &[T],
    recurrent: bool,
    c_prev: &[T],
    c: &mut [T],
    h_out: &mut [T],
) {
    let h = c.len();
    let x = &x[..4 * h];
    let z = &mut z[..4 * h];
    if recurrent {
        for (z, &x) in z.iter_mut().zip(x) {
            *z = x + *z;
        }
    } else {
        z.copy_from_slice(x);
    }
    let (zi, rest) = z.split_at_mut(h);
    let (zf, rest) = rest.split_at_mut(h);
    let (zg, zo) = rest.split_at_mut(h);
    let (c_prev, h_out) = (&c_prev[..h], &mut h_out[..h]);
    for j in 0..h {
        let (a, cv, hv) = cell_unit([zi[j], zf[j], zg[j], zo[j]], c_prev[j]);
        (zi[j], zf[j], zg[j], zo[j]) = (a[0], a[1], a[2], a[3]);
        c[j] = cv;
        h_out[j] = hv;
    }
}

/// `h = o ⊙ tanh(c)` over rows of width `h`: `acts [rows, 4h]` activated gates (the
/// output gate their last `h` values), `c [rows, h]`, `out [rows, h]` with `rows =
/// out.len() / h`. Each value is [`cell_unit`]'s `h`, bit for bit; vectorises as
/// [`cell_rows`] does.
pub(crate) fn hidden_rows<T: Float>(h: usize, acts: &[T], c: &[T], out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { hidden_rows_avx2(h, acts, c, out) };
        return;
    }
    hidden_rows_any(h, acts, c, out)
}

/// [`hidden_rows`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hidden_rows_avx2<T: Float>(h: usize, acts: &[T], c: &[T], out: &mut [T]) {
    hidden_rows_any(h, acts, c, out)
}

#[inline(always)]
fn hidden_rows_any<T: Float>(h: usize, acts: &[T], c: &[T], out: &mut [T]) {
    if h == 0 {
        return;
    }
    for ((out, a), c) in out
        .chunks_exact_mut(h)
        .zip(acts.chunks_exact(4 * h))
        .zip(c.chunks_exact(h))
    {
        for ((y, &o), &c) in out.iter_mut().zip(&a[3 * h..]).zip(c) {
            *y = o * c.tanh();
        }
    }
}

/// [`cell_unit_backward`] over the `h` units of one (node, step): the activated gates
/// `a [4h]`, `c [h]`, `c_prev [h]` (zeros at a sequence's first step), `dh [h]`; `dc [h]`
/// holds `c̄` and receives `c̄_prev`; `dz [4h]` receives the pre-activation gradients.
/// Vectorises as [`cell_rows`] does; each unit's value is [`cell_unit_backward`]'s.
pub(crate) fn cell_rows_backward<T: Float>(
    a: &[T],
    (c, c_prev): (&[T], &[T]),
    dh: &[T],
    dc: &mut [T],
    dz: &mut [T],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { cell_rows_backward_avx2(a, (c, c_prev), dh, dc, dz) };
        return;
    }
    cell_rows_backward_any(a, (c, c_prev), dh, dc, dz)
}

/// [`cell_rows_backward`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn cell_rows_backward_avx2<T: Float>(
    a: &[T],
    cs: (&[T], &[T]),
    dh: &[T],
    dc: &mut [T],
    dz: &mut [T],
) {
    cell_rows_backward_any(a, cs, dh, dc, dz)
}

#[inline(always)]
fn cell_rows_backward_any<T: Float>(
    a: &[T],
    (c, c_prev): (&[T], &[T]),
    dh: &[T],
    dc: &mut [T],
    dz: &mut [T],
) {
    let h = dc.len();
    let (ai, af, ag, ao) = (&a[..h], &a[h..2 * h], &a[2 * h..3 * h], &a[3 * h..4 * h]);
    let (c, c_prev, dh) = (&c[..h], &c_prev[..h], &dh[..h]);
    let (di, rest) = dz[..4 * h].split_at_mut(h);
    let (df, rest) = rest.split_at_mut(h);
    let (dg, d_o) = rest.split_at_mut(h);
    for j in 0..h {
        let (d, dcp) =
            cell_unit_backward([ai[j], af[j], ag[j], ao[j]], c[j], c_prev[j], dh[j], dc[j]);
        (di[j], df[j], dg[j], d_o[j]) = (d[0], d[1], d[2], d[3]);
        dc[j] = dcp;
    }
}

fn cpu_forward<T: Float + CpuElem>(
    z: &[T],
    c_prev: &[T],
    n: usize,
    h: usize,
) -> Result<(CpuBuffer, CpuBuffer)> {
    let (out_alloc, acts_alloc) = (cpu::reserve::<T>(n * 2 * h)?, cpu::reserve::<T>(n * 4 * h)?);
    let mut out = vec![T::ZERO; n * 2 * h];
    let mut acts = vec![T::ZERO; n * 4 * h];
    let row = |r: usize, (o, a): (&mut [T], &mut [T])| {
        let zr = &z[r * 4 * h..(r + 1) * 4 * h];
        for j in 0..h {
            let zz = [zr[j], zr[h + j], zr[2 * h + j], zr[3 * h + j]];
            let (act, c, hv) = cell_unit(zz, c_prev[r * h + j]);
            for (g, &v) in act.iter().enumerate() {
                a[g * h + j] = v;
            }
            o[j] = hv;
            o[h + j] = c;
        }
    };
    if h > 0 {
        if parallel(n * 7 * h) {
            out.par_chunks_mut(2 * h)
                .zip(acts.par_chunks_mut(4 * h))
                .enumerate()
                .for_each(|(r, rows)| row(r, rows));
        } else {
            out.chunks_mut(2 * h)
                .zip(acts.chunks_mut(4 * h))
                .enumerate()
                .for_each(|(r, rows)| row(r, rows));
        }
    }
    Ok((
        CpuBuffer::from_reserved(T::wrap(out), out_alloc),
        CpuBuffer::from_reserved(T::wrap(acts), acts_alloc),
    ))
}

fn cpu_backward<T: Float + CpuElem>(
    acts: &[T],
    c_prev: &[T],
    g: &[T],
    n: usize,
    h: usize,
) -> Result<(CpuBuffer, CpuBuffer)> {
    let (dz_alloc, dc_alloc) = (cpu::reserve::<T>(n * 4 * h)?, cpu::reserve::<T>(n * h)?);
    let mut dz = vec![T::ZERO; n * 4 * h];
    let mut dc = vec![T::ZERO; n * h];
    let row = |r: usize, (dzr, dcr): (&mut [T], &mut [T])| {
        let ar = &acts[r * 4 * h..(r + 1) * 4 * h];
        let gr = &g[r * 2 * h..(r + 1) * 2 * h];
        for j in 0..h {
            let a = [ar[j], ar[h + j], ar[2 * h + j], ar[3 * h + j]];
            let cp = c_prev[r * h + j];
            let c = a[1] * cp + a[0] * a[2];
            let (d, dcp) = cell_unit_backward(a, c, cp, gr[j], gr[h + j]);
            for (k, &v) in d.iter().enumerate() {
                dzr[k * h + j] = v;
            }
            dcr[j] = dcp;
        }
    };
    if h > 0 {
        if parallel(n * 11 * h) {
            dz.par_chunks_mut(4 * h)
                .zip(dc.par_chunks_mut(h))
                .enumerate()
                .for_each(|(r, rows)| row(r, rows));
        } else {
            dz.chunks_mut(4 * h)
                .zip(dc.chunks_mut(h))
                .enumerate()
                .for_each(|(r, rows)| row(r, rows));
        }
    }
    Ok((
        CpuBuffer::from_reserved(T::wrap(dz), dz_alloc),
        CpuBuffer::from_reserved(T::wrap(dc), dc_alloc),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::ops::test_values::values_over;

    #[test]
    fn one_unit_by_hand() {
        // z = 0 everywhere: i = f = o = 1/2, g = 0, so c = c_prev / 2 and h = tanh(c) / 2.
        let z = Tensor::from_f64(vec![0.0; 4], &[1, 4]).unwrap();
        let c = Tensor::from_f64(vec![1.0], &[1, 1]).unwrap();
        let out = lstm_cell(&z, &c).unwrap().to_vec_f64().unwrap();
        assert!((out[1] - 0.5).abs() < 1e-15);
        assert!((out[0] - 0.5 * 0.5f64.tanh()).abs() < 1e-15);
    }

    #[test]
    fn hidden_rows_are_the_cells_h_bit_for_bit() {
        // Pre-activations across tanh's two branches (|c| below and above 0.25).
        let (h, rows) = (20, 7);
        let z = values_over(rows * 4 * h, 11, 125.0, 4.0);
        let cp = values_over(rows * h, 12, 250.0, 2.0);
        let (mut acts, mut c, mut want) = (
            vec![0.0f32; rows * 4 * h],
            vec![0.0; rows * h],
            vec![0.0; rows * h],
        );
        for r in 0..rows {
            for j in 0..h {
                let zr = &z[r * 4 * h..];
                let (a, cv, hv) = cell_unit(
                    [zr[j], zr[h + j], zr[2 * h + j], zr[3 * h + j]],
                    cp[r * h + j],
                );
                for (q, a) in a.into_iter().enumerate() {
                    acts[r * 4 * h + q * h + j] = a;
                }
                (c[r * h + j], want[r * h + j]) = (cv, hv);
            }
        }
        let mut got = vec![7.0f32; rows * h];
        hidden_rows(h, &acts, &c, &mut got);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
    }

    #[test]
    fn bad_shapes_and_devices_are_errors() {
        let z = Tensor::from_f32(vec![0.0; 8], &[2, 4], Device::Cpu).unwrap();
        let c = Tensor::from_f32(vec![0.0; 3], &[3, 1], Device::Cpu).unwrap();
        assert!(matches!(lstm_cell(&z, &c), Err(Error::Shape { .. })));
        let c64 = Tensor::from_f64(vec![0.0; 2], &[2, 1]).unwrap();
        assert!(matches!(lstm_cell(&z, &c64), Err(Error::Shape { .. })));
        let z5 = Tensor::from_f32(vec![0.0; 10], &[2, 5], Device::Cpu).unwrap();
        let c2 = Tensor::from_f32(vec![0.0; 2], &[2, 1], Device::Cpu).unwrap();
        assert!(matches!(lstm_cell(&z5, &c2), Err(Error::Shape { .. })));
        let (_, acts) = lstm_cell_forward(&z, &c2).unwrap();
        let bad_g = Tensor::from_f32(vec![0.0; 2], &[2, 1], Device::Cpu).unwrap();
        assert!(matches!(
            lstm_cell_backward(&acts, &c2, &bad_g),
            Err(Error::Shape { .. })
        ));
    }
}
