//! Dropout with a counter-based mask.
//!
//! `out[i, j] = x[i, j] / (1 - p)` if `uniform3(key, rowᵢ, j) ≥ p`, else 0, where `rowᵢ`
//! is `row_ids[i]` when given (the row's global id) and `i` otherwise. The mask depends only
//! on the key and the element's (global row, column), never on thread count or on which
//! other rows are present: a GPU kernel computes the identical mask from the same 32-bit
//! hash ([`crate::rng::uniform3`]), and a micro-batch holding a subset of the rows drops
//! exactly what the full batch drops. The comparison is in f32 (`p` rounded to f32), as on
//! a GPU; the scale `1/(1 - p)` is computed in f64 and rounded to the tensor's dtype.
//!
//! Backward: `x̄ = ḡ ⊙ mask / (1 - p)`, i.e. the same kernel applied to `ḡ`. The mask is
//! recomputed, so nothing is saved but the row ids (no activation, no mask bytes).
//!
//! Keys: [`dropout_key`] derives one per (seed, epoch, layer).

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuData, CpuElem};
use crate::device::gpu::GpuDevice;
use crate::device::kernels::dropout::{DropoutKernels, Mask};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::meta::{Replay, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, expect_vector, fill_rows, rows_from_fn, u32_data};
#[cfg(test)]
use crate::rng::uniform3;
use crate::rng::{mix64, pcg};
use crate::tensor::{DType, Storage, Tensor};

const OP: &str = "dropout";

/// Zeroes each element of the 2-D `x` with probability `p` (0 ≤ p < 1) and scales the rest
/// by `1/(1 - p)`. `row_ids` (u32, one per row) names the rows for the mask; without it row
/// `i` is `i`. `p = 0` returns `x` itself.
pub fn dropout(x: &Tensor, p: f64, key: u32, row_ids: Option<&Tensor>) -> Result<Tensor> {
    // Written so that NaN fails too.
    if !(0.0..1.0).contains(&p) {
        return Err(Error::invalid(format!(
            "{OP}: probability {p} is outside [0, 1)"
        )));
    }
    x.expect_float(OP)?;
    let (r, c) = dims2(OP, "x", x)?;
    if c as u64 > 1 << 32 || (row_ids.is_none() && r as u64 > 1 << 32) {
        return Err(Error::shape(
            OP,
            format!(
                "{:?} has more rows or columns than u32 coordinates",
                x.shape()
            ),
        ));
    }
    if let Some(ids) = row_ids {
        x.same_device(ids, OP)?;
        expect_vector(OP, "row_ids", ids, r)?;
    }
    if p == 0.0 {
        return Ok(x.clone());
    }
    let out = apply_mask(x, p, key, row_ids)?;
    let row_ids = row_ids.cloned();
    Ok(record(OP, out, &[x], move |g| {
        let ids = row_ids.as_ref();
        let gx = match mask_in_place(g, p, key, ids)? {
            Some(gx) => gx,
            None => apply_mask(g, p, key, ids)?,
        };
        Ok(vec![Some(gx)])
    }))
}

/// A dropout key for one layer in one epoch of a run seeded with `seed`: every
/// (seed, epoch, layer) gets its own mask, reproducible from those three numbers alone.
pub fn dropout_key(seed: u64, epoch: u64, layer: u64) -> u32 {
    let h = mix64(mix64(mix64(seed) ^ epoch) ^ layer.wrapping_add(0x9E37_79B9_7F4A_7C15));
    ((h >> 32) ^ h) as u32
}

/// `x ⊙ mask / (1 - p)`, not recorded: the forward and the backward kernel.
fn apply_mask(x: &Tensor, p: f64, key: u32, row_ids: Option<&Tensor>) -> Result<Tensor> {
    let (r, c) = dims2(OP, "x", x)?;
    let ids_guard = row_ids.map(|t| t.storage());
    match &*x.storage() {
        Storage::Cpu(b) => {
            let ids = match (row_ids, &ids_guard) {
                (Some(t), Some(g)) => Some(u32_data(OP, t, g.cpu(OP)?)?),
                _ => None,
            };
            let buf = float_cpu!(OP, &b.data, v => cpu_mask(v, r, c, p, key, ids)?);
            Ok(cpu_output(buf, vec![r, c], x))
        }
        s => on_gpu!(s, |D, b| {
            let ids = match (row_ids, ids_guard.as_deref()) {
                (Some(t), _) if t.dtype() != DType::U32 => return Err(t.dtype_error(OP, "u32")),
                (Some(t), Some(s)) => {
                    Some(D::buffer(s, OP).map_err(|_| Error::DeviceMismatch {
                        op: OP,
                        lhs: x.device().to_string(),
                        rhs: t.device().to_string(),
                    })?)
                }
                _ => None,
            };
            let ctx = D::context_of(b);
            let out = ctx.alloc(D::bytes(b))?;
            let mask = Mask {
                r,
                c,
                key,
                // The same f64 -> f32 roundings as the CPU kernel.
                threshold: p as f32,
                scale: (1.0 / (1.0 - p)) as f32,
            };
            ctx.dropout(mask, b, ids, &out)?;
            Ok(D::output(out, vec![r, c], x))
        }),
    }
}

/// The backward kernel written over `g` on the CPU when nothing else holds `g` (see
/// `ops::unary`'s `cpu_backward_in_place`): the bits of [`apply_mask`], no new buffer.
/// `None` (nothing done) on a GPU or where `g` is held elsewhere; its meta arm takes the
/// same decision ([`meta_dropout`]).
fn mask_in_place(g: &Tensor, p: f64, key: u32, row_ids: Option<&Tensor>) -> Result<Option<Tensor>> {
    if g.device() != Device::Cpu || !(g.storage_is_unique() && g.is_sole_handle()) {
        return Ok(None);
    }
    let c = dims2(OP, "g", g)?.1;
    let ids_guard = row_ids.map(|t| t.storage());
    let ids = match (row_ids, &ids_guard) {
        (Some(t), Some(s)) => match &**s {
            Storage::Cpu(b) => Some(u32_data(OP, t, &b.data)?),
            _ => return Ok(None),
        },
        _ => None,
    };
    let mut gs = g.storage_mut();
    let Storage::Cpu(b) = &mut *gs else {
        return Ok(None);
    };
    match &mut b.data {
        CpuData::F32(v) => cpu_mask_in_place(v, c, p, key, ids),
        CpuData::F64(v) => cpu_mask_in_place(v, c, p, key, ids),
        _ => return Ok(None),
    }
    drop(gs);
    Ok(Some(g.clone()))
}

/// [`cpu_mask`] over `x`'s own values, rows in parallel when large.
fn cpu_mask_in_place<T: Float + CpuElem>(
    x: &mut [T],
    c: usize,
    p: f64,
    key: u32,
    ids: Option<&[u32]>,
) {
    let keep_from = keep_threshold(p);
    let scale = T::from_f64(1.0 / (1.0 - p));
    let key_hash = pcg(key);
    fill_rows(x, c, 2 * x.len(), |i, row: &mut [T]| {
        let id = ids.map_or(i as u32, |ids| ids[i]);
        let row_hash = pcg(key_hash ^ id);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { mask_row_in_place_avx2(row, row_hash, keep_from, scale) };
            return;
        }
        mask_row_in_place(row, row_hash, keep_from, scale);
    })
}

fn cpu_mask<T: Float + CpuElem>(
    x: &[T],
    r: usize,
    c: usize,
    p: f64,
    key: u32,
    ids: Option<&[u32]>,
) -> Result<CpuBuffer> {
    let keep_from = keep_threshold(p);
    let scale = T::from_f64(1.0 / (1.0 - p));
    let key_hash = pcg(key);
    rows_from_fn(r, c, 2 * r * c, |i, row: &mut [T]| {
        let id = ids.map_or(i as u32, |ids| ids[i]);
        // hash3(key, id, j) = pcg(row_hash ^ j): two of its three rounds are per row.
        let row_hash = pcg(key_hash ^ id);
        let xi = &x[i * c..(i + 1) * c];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { mask_row_avx2(row, xi, row_hash, keep_from, scale) };
            return;
        }
        mask_row(row, xi, row_hash, keep_from, scale);
    })
}

/// One row of the mask applied to `x`: element j is kept when
/// `pcg(row_hash ^ j) >> 8 >= keep_from`. A select, not a branch, so the loop vectorises
/// (the hash's per-lane variable shift needs AVX2 on x86); a dropped element is 0 even when
/// x is infinite or NaN.
#[inline(always)]
fn mask_row<T: Float>(out: &mut [T], x: &[T], row_hash: u32, keep_from: u32, scale: T) {
    for ((o, &v), j) in out.iter_mut().zip(x).zip(0u32..) {
        let keep = pcg(row_hash ^ j) >> 8 >= keep_from;
        *o = if keep { v * scale } else { T::ZERO };
    }
}

/// [`mask_row`] compiled for AVX2 (8 hashes per instruction).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn mask_row_avx2<T: Float>(out: &mut [T], x: &[T], row_hash: u32, keep_from: u32, scale: T) {
    mask_row(out, x, row_hash, keep_from, scale)
}

/// [`mask_row`] over the row's own values.
#[inline(always)]
fn mask_row_in_place<T: Float>(row: &mut [T], row_hash: u32, keep_from: u32, scale: T) {
    for (o, j) in row.iter_mut().zip(0u32..) {
        let keep = pcg(row_hash ^ j) >> 8 >= keep_from;
        *o = if keep { *o * scale } else { T::ZERO };
    }
}

/// [`mask_row_in_place`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn mask_row_in_place_avx2<T: Float>(row: &mut [T], row_hash: u32, keep_from: u32, scale: T) {
    mask_row_in_place(row, row_hash, keep_from, scale)
}

/// The integer form of the keep test `uniform3(..) >= p as f32`: `uniform3` is
/// `(h >> 8) · 2⁻²⁴` with `h >> 8 < 2²⁴`, exact in f32, so it is at least `t = p as f32`
/// exactly when `h >> 8 ≥ ⌈t · 2²⁴⌉` (`t · 2²⁴` is exact in f64).
fn keep_threshold(p: f64) -> u32 {
    ((p as f32) as f64 * 16_777_216.0).ceil() as u32
}

/// Meta arm of [`dropout`]`(x)` with per-row ids `ids` ([`crate::meta`]): `[r, c]`; keeps
/// the ids (the mask is recomputed in backward); its rule writes over the incoming gradient
/// on the CPU where nothing else holds it ([`Replay::over_gradient`]), else allocates
/// `[r, c]`.
pub fn meta_dropout(r: &mut Replay, x: &Val, ids: &Val) -> Val {
    let out = r.alloc(x.rows, x.cols);
    let saved = vec![r.share(ids.buf)];
    r.unary(x, out, (x.rows, x.cols), saved, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn the_integer_keep_test_equals_the_float_one() {
        for p in [
            0.0,
            1e-9,
            0.1,
            0.25,
            0.3,
            0.5,
            0.6,
            0.999_999_9,
            0.999_999_99,
        ] {
            let from = keep_threshold(p);
            for (a, b) in [(0u32, 0u32), (1, 7), (12345, 99), (u32::MAX, 3)] {
                for key in [0u32, 1, 0xdead_beef] {
                    let h = crate::rng::hash3(key, a, b);
                    assert_eq!(
                        h >> 8 >= from,
                        uniform3(key, a, b) >= p as f32,
                        "p {p} key {key} ({a}, {b})"
                    );
                }
            }
            // At the boundary itself: the smallest kept 24-bit value and the one below.
            let t = p as f32;
            for v in [from.saturating_sub(1), from, from + 1] {
                let u = v as f32 * (1.0 / 16_777_216.0);
                assert_eq!(v >= from, u >= t, "p {p} v {v}");
            }
        }
    }

    #[test]
    fn the_mask_over_a_gradient_nothing_else_holds_is_in_place_with_the_same_bits() {
        // Past PAR_MIN, so that both paths split their rows over the pool.
        let (r, c) = (300, 200);
        let v: Vec<f32> = (0..r * c).map(|i| (i % 97) as f32 - 48.0).collect();
        let g = Tensor::from_f32(v, &[r, c], Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..r as u32).map(|i| i * 7 + 3).collect();
        let ids = Tensor::from_u32(ids, &[r], Device::Cpu).unwrap();
        let fresh = apply_mask(&g, 0.3, 11, Some(&ids)).unwrap();
        let other = g.clone();
        assert!(mask_in_place(&g, 0.3, 11, Some(&ids)).unwrap().is_none());
        drop(other);
        let in_place = mask_in_place(&g, 0.3, 11, Some(&ids)).unwrap().unwrap();
        assert!(in_place.shares_storage(&g));
        let bits = |t: &Tensor| {
            let v = t.to_vec_f32().unwrap();
            v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(bits(&fresh), bits(&in_place));
    }

    fn ones(r: usize, c: usize) -> Tensor {
        Tensor::from_f32(vec![1.0; r * c], &[r, c], Device::Cpu).unwrap()
    }

    #[test]
    fn bad_probabilities_are_errors() {
        for p in [-0.1, 1.0, 1.5, f64::NAN] {
            assert!(
                matches!(
                    dropout(&ones(2, 2), p, 1, None),
                    Err(Error::InvalidArgument(_))
                ),
                "p = {p}"
            );
        }
    }

    #[test]
    fn bad_row_ids_are_errors() {
        let short = Tensor::from_u32(vec![0], &[1], Device::Cpu).unwrap();
        assert!(matches!(
            dropout(&ones(2, 2), 0.5, 1, Some(&short)),
            Err(Error::Shape { .. })
        ));
        let floats = Tensor::from_f32(vec![0.0, 1.0], &[2], Device::Cpu).unwrap();
        assert!(matches!(
            dropout(&ones(2, 2), 0.5, 1, Some(&floats)),
            Err(Error::DType { .. })
        ));
    }

    #[test]
    fn zero_probability_is_the_identity() {
        let x = ones(3, 2);
        let y = dropout(&x, 0.0, 9, None).unwrap();
        assert!(y.shares_storage(&x));
    }

    #[test]
    fn kept_values_are_scaled_and_masks_follow_the_key() {
        let x = ones(64, 64);
        let a = dropout(&x, 0.25, 1, None).unwrap().to_vec_f32().unwrap();
        assert!(a.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
        let a2 = dropout(&x, 0.25, 1, None).unwrap().to_vec_f32().unwrap();
        assert_eq!(a, a2);
        let b = dropout(&x, 0.25, 2, None).unwrap().to_vec_f32().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn keys_differ_across_seed_epoch_and_layer() {
        let mut keys = std::collections::HashSet::new();
        for seed in 0..4 {
            for epoch in 0..10 {
                for layer in 0..4 {
                    keys.insert(dropout_key(seed, epoch, layer));
                }
            }
        }
        assert_eq!(keys.len(), 160);
    }
}
