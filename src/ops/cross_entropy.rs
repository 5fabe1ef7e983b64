//! Fused, numerically stable softmax cross-entropy over the rows of a logit matrix.
//!
//! For logits `x[n, c]`, labels `yᵢ ∈ [0, c)` and optional per-row weights `wᵢ` (1 when
//! absent):
//!
//! `loss = (1/n) Σᵢ wᵢ · (lseᵢ - x[i, yᵢ])`, `lseᵢ = ln Σⱼ exp(x[i, j])` (see
//! [`log_softmax`](crate::ops::log_softmax) for the stable form).
//!
//! The sum is divided by `n`, **not** by `Σ wᵢ`: weights scale each row's contribution
//! without renormalising, so a micro-batch can weight its rows (or the caller can scale a
//! whole micro-batch's loss) and the accumulated gradients add up to the full batch's. For a
//! weighted mean, pass weights that sum to `n`.
//!
//! Backward (`ḡ` the scalar gradient of the loss, `softmaxᵢ = exp(xᵢ - lseᵢ)`):
//! - `x̄[i, :] = ḡ · wᵢ/n · (softmaxᵢ - onehot(yᵢ))`;
//! - `w̄ᵢ = ḡ/n · (lseᵢ - x[i, yᵢ])` (only when the weights require grad).
//!
//! Saved: the logits (detached, sharing storage, so nothing is copied) and the per-row
//! `lse` (`n` values); the softmax is recomputed in the backward kernel rather than stored.
//! The row losses are summed in row order in f64, so the value does not depend on threads.
//!
//! wgpu (`shaders/cross_entropy.wgsl`): one workgroup per row computes `lse` and the row
//! loss, one workgroup sums the row losses in a fixed order (f32) and finds the first label
//! that is out of range; that status (4 bytes) is read back, so a bad label is an error
//! there too (this waits for the queue once per forward). Past the storage-binding limit
//! (see `src/device/wgpu/split.rs`) every kernel runs over ranges of rows; the mean keeps
//! each thread's rows and order across ranges, so splitting does not change the loss. The backward kernels read the
//! loss gradient from the device, without a readback.
//!
//! CUDA (`kernels/cross_entropy.cu`): the same kernels, with a warp per row (a block per
//! row past 256 classes) and one block of 1024 threads for the mean and the label check,
//! whose status is read back the same way.
//!
//! The GPU orchestration (label checks, buffers, the status readback, the gradients) is
//! written once over the GPU seam (`src/ops/gpu.rs`): [`gpu_forward`] and
//! `Saved::gpu_backward`, generic over a backend implementing [`CrossEntropyKernels`]
//! (`src/device/kernels/`), whose wgpu and CUDA implementations in each backend's
//! `kernels/cross_entropy.rs` marshal each kernel's parameters.

use crate::autograd::record;
use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::device::gpu::word_at;
use crate::device::kernels::cross_entropy::{CrossEntropyKernels, Operands};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::meta::{Replay, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::log_softmax::max_and_log_sum;
use crate::ops::rows::{dims2, expect_vector, rows_from_fn, u32_count, u32_data};
use crate::tensor::{DType, Tensor};

const OP: &str = "cross_entropy";

fn bad_label(row: usize, label: u32, c: usize) -> Error {
    Error::invalid(format!(
        "{OP}: label {label} at row {row} is out of range for {c} classes"
    ))
}

/// Mean over rows of `wᵢ · (-log softmax(logits)[i, labels[i]])`, as a scalar (shape `[]`).
/// `logits` is `[n, c]` (n ≥ 1), `labels` is `u32 [n]` with values below `c`, `weights`
/// (same dtype as the logits) is `[n]`. Divides by `n`, not by the weights' sum.
pub fn cross_entropy(logits: &Tensor, labels: &Tensor, weights: Option<&Tensor>) -> Result<Tensor> {
    logits.expect_float(OP)?;
    logits.same_device(labels, OP)?;
    let (n, c) = dims2(OP, "logits", logits)?;
    if n == 0 {
        return Err(Error::shape(
            OP,
            format!("no rows: logits of shape {:?}", logits.shape()),
        ));
    }
    expect_vector(OP, "labels", labels, n)?;
    if let Some(w) = weights {
        logits.same_device(w, OP)?;
        expect_vector(OP, "weights", w, n)?;
        if w.dtype() != logits.dtype() {
            return Err(w.dtype_error(OP, logits.dtype().name()));
        }
    }
    if labels.dtype() != DType::U32 {
        return Err(labels.dtype_error(OP, "u32"));
    }
    let (out, lse) = match logits.device() {
        Device::Cpu => {
            let (xg, lg) = (logits.storage(), labels.storage());
            let ys = u32_data(OP, labels, lg.cpu(OP)?)?;
            if let Some(i) = ys.iter().position(|&y| y as usize >= c) {
                return Err(bad_label(i, ys[i], c));
            }
            let wg = weights.map(|w| w.storage());
            let wd = wg.as_ref().map(|g| g.cpu(OP)).transpose()?;
            let (loss, lse) = float_cpu!(OP, xg.cpu(OP)?, x => cpu_forward(x, ys, wd, c)?);
            (
                cpu_output(loss, vec![], logits),
                cpu_output(lse, vec![n], logits),
            )
        }
        dev => on_gpu!(dev, |D| gpu_forward::<D>(logits, labels, weights, n, c)?),
    };
    let saved = Saved {
        logits: logits.detach(),
        lse,
        labels: labels.clone(),
        weights: weights.map(Tensor::detach),
        logits_grad: logits.requires_grad(),
        weights_grad: weights.is_some_and(Tensor::requires_grad),
    };
    let inputs: Vec<&Tensor> = std::iter::once(logits).chain(weights).collect();
    Ok(record(OP, out, &inputs, move |g| saved.backward(g)))
}

/// Checks labels a GPU buffer was uploaded from (its host copy, when it has one) against
/// `c` classes: the first label out of range is the error the kernels' status word would
/// report. `Ok(true)` when checked here, so the status need not be read back (a host
/// wait); `Ok(false)` when there is no host copy.
fn check_host_labels(labels: Option<&Vec<u32>>, n: usize, c: usize) -> Result<bool> {
    let Some(labels) = labels else {
        return Ok(false);
    };
    match labels[..n.min(labels.len())]
        .iter()
        .position(|&y| y as usize >= c)
    {
        Some(row) => Err(bad_label(row, labels[row], c)),
        None => Ok(true),
    }
}

/// The loss (shape `[]`) and the per-row `lse` (`[n]`) on a GPU backend; a bad label is an
/// error.
fn gpu_forward<D: GpuTensors + CrossEntropyKernels>(
    logits: &Tensor,
    labels: &Tensor,
    weights: Option<&Tensor>,
    n: usize,
    c: usize,
) -> Result<(Tensor, Tensor)> {
    let (xg, yg) = (logits.storage(), labels.storage());
    let wg = weights.map(|w| w.storage());
    let o = Operands {
        n,
        c,
        x: D::buffer(&xg, OP)?,
        labels: D::buffer(&yg, OP)?,
        weights: wg.as_deref().map(|s| D::buffer(s, OP)).transpose()?,
    };
    let ctx = D::context_of(o.x);
    let label_at = |row: usize| -> Result<u32> { Ok(word_at(&D::read(o.labels)?, row)) };
    if c == 0 {
        // No class exists, so the first label is out of range whatever it is.
        return Err(bad_label(0, label_at(0)?, c));
    }
    u32_count(OP, "logits", n * c)?;
    let host_checked = check_host_labels(D::host_u32(o.labels).as_deref(), n, c)?;
    let lse = ctx.alloc((n * 4) as u64)?;
    let rows = ctx.alloc((n * 4) as u64)?;
    ctx.rows(&o, &lse, &rows)?;
    let loss = ctx.alloc(4)?;
    let status = ctx.alloc(8)?;
    ctx.mean(&o, &rows, &loss, &status)?;
    if !host_checked {
        let row = word_at(&D::read(&status)?, 0);
        if row != u32::MAX {
            return Err(bad_label(row as usize, label_at(row as usize)?, c));
        }
    }
    Ok((
        D::output(loss, vec![], logits),
        D::output(lse, vec![n], logits),
    ))
}

/// The weights' values as `T`, if there are weights.
fn weight_slice<T: CpuElem>(w: Option<&CpuData>) -> Result<Option<&[T]>> {
    w.map(|d| {
        T::slice(d)
            .ok_or_else(|| Error::invalid(format!("{OP}: weights and logits differ in dtype")))
    })
    .transpose()
}

/// Returns the loss (one value) and the per-row log-sum-exp.
fn cpu_forward<T: Float + CpuElem>(
    x: &[T],
    ys: &[u32],
    w: Option<&CpuData>,
    c: usize,
) -> Result<(CpuBuffer, CpuBuffer)> {
    let w = weight_slice::<T>(w)?;
    let n = ys.len();
    // Per row, [lse, loss]: the loss as lnΣ - (x[y] - m) keeps full precision for large
    // logits (see `max_and_log_sum`); lse = m + lnΣ is what the backward pass reads.
    let pair_buf = rows_from_fn(n, 2, n * c, |i, out: &mut [T]| {
        let xi = &x[i * c..(i + 1) * c];
        let (m, ls) = max_and_log_sum(xi);
        out[0] = m + ls;
        out[1] = ls - (xi[ys[i] as usize] - m);
    })?;
    let pairs = T::slice(&pair_buf.data).unwrap_or(&[]);
    let lse = cpu::from_fn(n, |i| pairs[2 * i])?;
    let mut total = 0f64;
    for (i, p) in pairs.chunks_exact(2).enumerate() {
        total += w.map_or(1.0, |w| w[i].to_f64()) * p[1].to_f64();
    }
    let loss = CpuBuffer::new(T::wrap(vec![T::from_f64(total / n as f64)]))?;
    Ok((loss, lse))
}

/// What the backward rule reads.
struct Saved {
    logits: Tensor,
    lse: Tensor,
    labels: Tensor,
    weights: Option<Tensor>,
    logits_grad: bool,
    weights_grad: bool,
}

impl Saved {
    fn backward(self, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let (n, c) = dims2(OP, "logits", &self.logits)?;
        let (gx, gw) = match self.logits.device() {
            Device::Cpu => self.cpu_backward(g, n, c)?,
            dev => on_gpu!(dev, |D| self.gpu_backward::<D>(g, n, c)?),
        };
        Ok(match self.weights {
            None => vec![gx],
            Some(_) => vec![gx, gw],
        })
    }

    fn cpu_backward(&self, g: &Tensor, n: usize, c: usize) -> Result<(Grad, Grad)> {
        let scale = g.item()? / n as f64;
        let (gx, gw) = {
            let xg = self.logits.storage();
            let lg = self.lse.storage();
            let yg = self.labels.storage();
            let wg = self.weights.as_ref().map(|w| w.storage());
            let ys = u32_data(OP, &self.labels, yg.cpu(OP)?)?;
            let wd = wg.as_ref().map(|g| g.cpu(OP)).transpose()?;
            let (lx, gl) = (self.logits_grad, self.weights_grad);
            float_cpu2!(OP, xg.cpu(OP)?, lg.cpu(OP)?, (x, lse) => {
                cpu_backward(x, lse, ys, wd, c, scale, lx, gl)?
            })
        };
        let gx = gx.map(|b| cpu_output(b, vec![n, c], &self.logits));
        let gw = gw.map(|b| cpu_output(b, vec![n], &self.logits));
        Ok((gx, gw))
    }

    fn gpu_backward<D: GpuTensors + CrossEntropyKernels>(
        &self,
        g: &Tensor,
        n: usize,
        c: usize,
    ) -> Result<(Grad, Grad)> {
        self.logits.same_device(g, OP)?;
        let (xg, lg, yg, gg) = (
            self.logits.storage(),
            self.lse.storage(),
            self.labels.storage(),
            g.storage(),
        );
        let wg = self.weights.as_ref().map(|w| w.storage());
        let o = Operands {
            n,
            c,
            x: D::buffer(&xg, OP)?,
            labels: D::buffer(&yg, OP)?,
            weights: wg.as_deref().map(|s| D::buffer(s, OP)).transpose()?,
        };
        let (lse, gl) = (D::buffer(&lg, OP)?, D::buffer(&gg, OP)?);
        let ctx = D::context_of(o.x);
        let gx = if self.logits_grad {
            u32_count(OP, "logits", n * c)?;
            let out = ctx.alloc((n * c * 4) as u64)?;
            ctx.logits_grad(&o, lse, gl, &out)?;
            Some(D::output(out, vec![n, c], &self.logits))
        } else {
            None
        };
        let gw = if self.weights_grad {
            let out = ctx.alloc((n * 4) as u64)?;
            ctx.weights_grad(&o, lse, gl, &out)?;
            Some(D::output(out, vec![n], &self.logits))
        } else {
            None
        };
        Ok((gx, gw))
    }
}

/// An optional gradient.
type Grad = Option<Tensor>;

#[allow(clippy::too_many_arguments)]
fn cpu_backward<T: Float + CpuElem>(
    x: &[T],
    lse: &[T],
    ys: &[u32],
    w: Option<&CpuData>,
    c: usize,
    scale: f64,
    logits_grad: bool,
    weights_grad: bool,
) -> Result<(Option<CpuBuffer>, Option<CpuBuffer>)> {
    let w = weight_slice::<T>(w)?;
    let n = ys.len();
    let gx = logits_grad
        .then(|| {
            rows_from_fn(n, c, 2 * n * c, |i, row: &mut [T]| {
                let s = T::from_f64(scale * w.map_or(1.0, |w| w[i].to_f64()));
                let xi = &x[i * c..(i + 1) * c];
                for (o, &v) in row.iter_mut().zip(xi) {
                    *o = s * (v - lse[i]).exp();
                }
                row[ys[i] as usize] -= s;
            })
        })
        .transpose()?;
    let gw = weights_grad
        .then(|| {
            rows_from_fn(n, 1, n, |i, out: &mut [T]| {
                out[0] = T::from_f64(scale) * (lse[i] - x[i * c + ys[i] as usize]);
            })
        })
        .transpose()?;
    Ok((gx, gw))
}

/// Meta arm of [`cross_entropy`]`(logits, labels)` ([`crate::meta`]): on the CPU `[n, 2]`
/// scratch (transient), `lse [n]` and the loss; on a GPU `lse [n]`, the rows' losses
/// `[n]`, the loss and a status pair (transient but `lse` and the loss), and where the
/// backend's mean takes one, a 512-word scratch while it runs. Keeps logits, `lse` and
/// labels; its rule allocates `[n, classes]`.
pub fn meta_cross_entropy(r: &mut Replay, logits: &Val, labels: &Val) -> Val {
    let n = logits.rows;
    let (lse, loss) = if r.policy.gpu {
        let (lse, rows) = (r.alloc(n, 1), r.alloc(n, 1));
        let (loss, status) = (r.alloc(1, 1), r.alloc(2, 1));
        if r.policy.mean_scratch {
            let scratch = r.alloc(512, 1);
            r.release(scratch);
        }
        r.release(rows);
        r.release(status);
        (lse, loss)
    } else {
        let scratch = r.alloc(n, 2);
        let (lse, loss) = (r.alloc(n, 1), r.alloc(1, 1));
        r.release(scratch);
        (lse, loss)
    };
    let saved = vec![r.share(logits.buf), lse, r.share(labels.buf)];
    r.unary(logits, loss, (1, 1), saved, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    fn logits() -> Tensor {
        Tensor::from_f64(vec![1.0, 2.0, 0.5, -1.0, 0.0, 3.0], &[2, 3]).unwrap()
    }

    fn labels(v: &[u32]) -> Tensor {
        Tensor::from_u32(v.to_vec(), &[v.len()], Device::Cpu).unwrap()
    }

    /// -ln softmax(row)[y], by the textbook formula.
    fn nll(row: &[f64], y: usize) -> f64 {
        let z: f64 = row.iter().map(|v| v.exp()).sum();
        -(row[y].exp() / z).ln()
    }

    #[test]
    fn matches_a_hand_computation() {
        let l0 = nll(&[1.0, 2.0, 0.5], 1);
        let l1 = nll(&[-1.0, 0.0, 3.0], 0);
        let loss = cross_entropy(&logits(), &labels(&[1, 0]), None).unwrap();
        assert_eq!(loss.shape(), &[] as &[usize]);
        assert!((loss.item().unwrap() - (l0 + l1) / 2.0).abs() < 1e-12);
        // Weighted: divided by n = 2, not by the weights' sum 3.5.
        let w = Tensor::from_f64(vec![0.5, 3.0], &[2]).unwrap();
        let loss = cross_entropy(&logits(), &labels(&[1, 0]), Some(&w)).unwrap();
        let want = (0.5 * l0 + 3.0 * l1) / 2.0;
        assert!((loss.item().unwrap() - want).abs() < 1e-12);
    }

    #[test]
    fn large_logits_do_not_overflow() {
        // exp(1000) overflows f32 and f64 alike; the stable form must not care.
        let v = vec![1000.0, 1000.0, 999.0, 0.0];
        // Row 0: ln 2 (gradient ±1/4 after the 1/n); row 1: lse(999, 0) - 0 = 999.
        let want = (2f64.ln() + 999.0) / 2.0;
        for (x, tol, gtol) in [
            (Tensor::from_f64(v.clone(), &[2, 2]).unwrap(), 1e-12, 1e-12),
            (
                Tensor::from_f32(v.iter().map(|&v| v as f32).collect(), &[2, 2], Device::Cpu)
                    .unwrap(),
                1e-6,
                1e-4,
            ),
        ] {
            let x = x.requires_grad_leaf();
            let loss = cross_entropy(&x, &labels(&[0, 1]), None).unwrap();
            let got = loss.item().unwrap();
            assert!((got - want).abs() < tol * want, "{got} vs {want}");
            loss.backward().unwrap();
            let g = x.grad().unwrap().to_vec_f64().unwrap();
            // The backward reads lse rounded to the logits' precision: an ulp of 1000 in f32
            // is 6e-5, so the f32 gradient is good to a few 1e-5.
            let want_g = [-0.25, 0.25, 0.5, -0.5];
            for (a, b) in g.iter().zip(want_g) {
                assert!((a - b).abs() < gtol, "{g:?}");
            }
        }
    }

    #[test]
    fn fused_equals_the_composition_it_replaces() {
        // -(1/n) Σ wᵢ · (log_softmax(x) ⊙ onehot(y))ᵢ, built from simple ops.
        use crate::ops::{log_softmax, mul, mul_scalar, sum_all};
        let (n, c) = (6, 5);
        let mut rng = crate::rng::Rng::new(17);
        let xv: Vec<f64> = (0..n * c).map(|_| 4.0 * rng.normal()).collect();
        let ys: Vec<u32> = (0..n).map(|_| rng.below(c as u64) as u32).collect();
        let wv: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
        let mut onehot_w = vec![0.0; n * c];
        for i in 0..n {
            onehot_w[i * c + ys[i] as usize] = wv[i];
        }
        let onehot_w = Tensor::from_f64(onehot_w, &[n, c]).unwrap();
        let w = Tensor::from_f64(wv, &[n]).unwrap();

        let x1 = Tensor::from_f64(xv.clone(), &[n, c])
            .unwrap()
            .requires_grad_leaf();
        let fused = cross_entropy(&x1, &labels(&ys), Some(&w)).unwrap();
        fused.backward().unwrap();

        let x2 = Tensor::from_f64(xv, &[n, c]).unwrap().requires_grad_leaf();
        let picked = sum_all(&mul(&log_softmax(&x2).unwrap(), &onehot_w).unwrap()).unwrap();
        let composed = mul_scalar(&picked, -1.0 / n as f64).unwrap();
        composed.backward().unwrap();

        assert!((fused.item().unwrap() - composed.item().unwrap()).abs() < 1e-12);
        let (g1, g2) = (
            x1.grad().unwrap().to_vec_f64().unwrap(),
            x2.grad().unwrap().to_vec_f64().unwrap(),
        );
        for (a, b) in g1.iter().zip(&g2) {
            assert!((a - b).abs() < 1e-12, "{g1:?} vs {g2:?}");
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        match cross_entropy(&logits(), &labels(&[1, 3]), None) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("row 1") && msg.contains("label 3"), "{msg}")
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let empty = Tensor::from_f64(vec![], &[0, 3]).unwrap();
        assert!(matches!(
            cross_entropy(&empty, &labels(&[]), None),
            Err(Error::Shape { .. })
        ));
        assert!(matches!(
            cross_entropy(&logits(), &labels(&[0]), None),
            Err(Error::Shape { .. })
        ));
        let w32 = Tensor::from_f32(vec![1.0, 1.0], &[2], Device::Cpu).unwrap();
        assert!(matches!(
            cross_entropy(&logits(), &labels(&[0, 0]), Some(&w32)),
            Err(Error::DType { .. })
        ));
        let w3 = Tensor::from_f64(vec![1.0; 3], &[3]).unwrap();
        assert!(matches!(
            cross_entropy(&logits(), &labels(&[0, 0]), Some(&w3)),
            Err(Error::Shape { .. })
        ));
        let float_labels = Tensor::from_f64(vec![0.0, 1.0], &[2]).unwrap();
        assert!(matches!(
            cross_entropy(&logits(), &float_labels, None),
            Err(Error::DType { .. })
        ));
    }
}
