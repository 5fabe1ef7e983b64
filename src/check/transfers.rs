//! Transfers under load: large ragged uploads queued behind kernels, and uploads of every
//! size around the staging chunk, read back and compared bit for bit. A staging buffer
//! reused before the copy that reads it ran (the CUDA backend's page-locked ring, see
//! `src/device/cuda/staging.rs`) shows here as words of another upload.

use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::Result;
use crate::ops;
use crate::tensor::Tensor;

/// The staging chunk of the CUDA backend, in bytes (uploads are cut into chunks this size).
pub const CHUNK_BYTES: usize = 4 << 20;

/// A pattern whose every 4-byte word differs from its neighbours and from every other
/// upload's words.
pub fn pattern(words: usize, salt: u32) -> Vec<u32> {
    (0..words as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ salt)
        .collect()
}

/// The first word of `got` that is not `want`'s, as a sentence naming its chunk, and how
/// many differ; `None` when equal.
pub fn first_difference(want: &[u32], got: &[u32]) -> Option<String> {
    if want.len() != got.len() {
        return Some(format!(
            "{} words read back, {} sent",
            got.len(),
            want.len()
        ));
    }
    let i = want.iter().zip(got).position(|(a, b)| a != b)?;
    let wrong = want.iter().zip(got).filter(|(a, b)| a != b).count();
    Some(format!(
        "word {i} (in staging chunk {}) is {:#x}, expected {:#x}; {wrong} of {} words differ",
        (i * 4) / CHUNK_BYTES,
        got[i],
        want[i],
        want.len()
    ))
}

/// What [`upload_behind_kernels`] found.
#[derive(Clone, Debug)]
pub struct RaceResult {
    /// The first difference in either upload, or in the kernels' result.
    pub error: Option<String>,
    /// Bytes uploaded in all.
    pub bytes: usize,
    /// Seconds from the first upload until both were read back.
    pub seconds: f64,
}

/// Queues 16 chained `n`×`n` matmuls (nothing waits for them), then uploads `words` words
/// twice right behind them and reads both back; the matmuls' result (all ones) is checked
/// too. With `words` past twice the staging ring, chunks are reused while the kernels run.
pub fn upload_behind_kernels(dev: Device, n: usize, words: usize) -> Result<RaceResult> {
    let a = Tensor::from_f32(vec![1.0 / n as f32; n * n], &[n, n], dev)?;
    let b = Tensor::from_f32(vec![1.0; n * n], &[n, n], dev)?;
    dev.sync()?;
    // Every entry of `b` is 1 and of `a` 1/n, so every product `c·a` is all ones again.
    let mut c = b.clone();
    for _ in 0..16 {
        c = ops::matmul(&c, &a, false, false)?;
    }
    let start = std::time::Instant::now();
    let want = pattern(words, 0x5eed_0001);
    let up = Tensor::from_u32(want.clone(), &[words], dev)?;
    let want2 = pattern(words, 0x5eed_0002);
    let up2 = Tensor::from_u32(want2.clone(), &[words], dev)?;
    let got = up.to_vec_u32()?;
    let got2 = up2.to_vec_u32()?;
    let seconds = start.elapsed().as_secs_f64();
    let out = c.to_vec_f32()?;
    let error = first_difference(&want, &got)
        .map(|e| format!("first upload: {e}"))
        .or_else(|| first_difference(&want2, &got2).map(|e| format!("second upload: {e}")))
        .or_else(|| {
            let bad = out.iter().position(|v| (v - 1.0).abs() >= 1e-3)?;
            Some(format!(
                "the queued matmuls gave {} at {bad}, expected 1",
                out[bad]
            ))
        });
    Ok(RaceResult {
        error,
        bytes: 2 * words * 4,
        seconds,
    })
}

/// Uploads of `words` words each, read back; the first that differs.
pub fn uploads_of_sizes(dev: Device, sizes: &[usize]) -> Result<Option<String>> {
    for &words in sizes {
        let want = pattern(words, words as u32);
        let t = Tensor::from_u32(want.clone(), &[words], dev)?;
        if let Some(e) = first_difference(&want, &t.to_vec_u32()?) {
            return Ok(Some(format!("{words} words: {e}")));
        }
    }
    Ok(None)
}

/// Runs the transfer records.
pub fn run(ctx: &mut Ctx<'_>) {
    let dev = ctx.dev;
    // Tens of milliseconds of matmuls on a GPU; small ones where the device is the CPU
    // (whose queue is slow anyway).
    let n = if ctx.info.software { 64 } else { 4096 };
    let mib = if ctx.full() { 64 } else { 24 };
    let words = (mib << 20) / 4 + 12_345;
    ctx.check(
        format!("2 x {mib} MiB ragged uploads behind matmuls"),
        || {
            let r = upload_behind_kernels(dev, n, words)?;
            let ok = r.error.is_none();
            let detail = r.error.unwrap_or_else(|| {
                format!(
                    "{words} words each, queued behind 16 {n}x{n} matmuls, read back bit for bit in {:.2} s",
                    r.seconds
                )
            });
            Ok(Outcome::verdict(ok, detail)
                .figure("bytes", r.bytes as f64)
                .figure("seconds", r.seconds))
        },
    );
    let chunk = CHUNK_BYTES / 4;
    let mut sizes = vec![1, chunk - 1, chunk, chunk + 1, 3 * chunk];
    if ctx.full() {
        sizes.push(9 * chunk + 7);
    }
    ctx.check("uploads around the staging chunk size", || {
        let e = uploads_of_sizes(dev, &sizes)?;
        let detail = e.clone().unwrap_or_else(|| {
            let s: Vec<String> = sizes.iter().map(usize::to_string).collect();
            format!("{} words read back bit for bit", s.join(", "))
        });
        Ok(Outcome::verdict(e.is_none(), detail))
    });
}
