//! The machine's limits for `espalier bench`, measured in the same run on the same thread
//! pool as the workload: the best rate of the engine's own CPU matrix product on a large
//! square product (the arithmetic peak an epoch could reach) and the best bandwidth of a
//! stream triad `a = b + s·c` over arrays far larger than the caches (the memory peak).
//! Each is the best of a few repetitions after a warm-up: on a shared machine the best
//! repetition is the one least disturbed. And the work of a bench run's forward and
//! backward phases set against them ([`PhaseRate`]).

use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use espalier::error::Result;
use espalier::tensor::Tensor;
use espalier::work::Work;
use espalier::Device;

/// Side of the square product (`n x n` times `n x n`: `n³` multiply-adds).
const GEMM_SIDE: usize = 1024;
/// Values per array of the triad (three arrays of 64 MiB).
const STREAM_VALUES: usize = 1 << 24;
/// Timed repetitions of each, after one untimed.
const REPEATS: usize = 5;

/// The measured limits.
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// Best rate of `matmul` on `[gemm_side, gemm_side]` operands, in GFLOP/s (two
    /// operations per multiply-add).
    pub gemm_gflops: f64,
    /// Side of the square product.
    pub gemm_side: usize,
    /// Best bandwidth of the triad, GB/s (10⁹ bytes): 12 bytes per value (two read, one
    /// written).
    pub stream_gbps: f64,
    /// Values per array of the triad.
    pub stream_values: usize,
    /// Threads of the pool both ran on.
    pub threads: usize,
}

/// Measures the CPU's limits (a few hundred milliseconds).
pub fn measure() -> Result<Peak> {
    Ok(Peak {
        gemm_gflops: gemm()?,
        gemm_side: GEMM_SIDE,
        stream_gbps: stream(),
        stream_values: STREAM_VALUES,
        threads: rayon::current_num_threads(),
    })
}

/// Best GFLOP/s of the engine's CPU matmul on a square product.
fn gemm() -> Result<f64> {
    let n = GEMM_SIDE;
    let values = |salt: usize| -> Vec<f32> {
        (0..n * n)
            .map(|i| ((i * 31 + salt) % 97) as f32 / 97.0 - 0.5)
            .collect()
    };
    let a = Tensor::from_f32(values(1), &[n, n], Device::Cpu)?;
    let b = Tensor::from_f32(values(2), &[n, n], Device::Cpu)?;
    let mut best = f64::INFINITY;
    for rep in 0..=REPEATS {
        let t = Instant::now();
        let c = espalier::ops::matmul(&a, &b, false, false)?;
        let s = t.elapsed().as_secs_f64();
        drop(c);
        if rep > 0 {
            best = best.min(s);
        }
    }
    Ok(2.0 * (n as f64).powi(3) / best / 1e9)
}

/// Best GB/s of `a = b + s·c` split over the pool.
fn stream() -> f64 {
    let n = STREAM_VALUES;
    let b: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let c: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let mut a = vec![0.0f32; n];
    let chunk = 1 << 16;
    let mut best = f64::INFINITY;
    for rep in 0..=REPEATS {
        let s = 0.5 + rep as f32;
        let t = Instant::now();
        a.par_chunks_mut(chunk)
            .zip(b.par_chunks(chunk))
            .zip(c.par_chunks(chunk))
            .for_each(|((a, b), c)| {
                for ((a, &b), &c) in a.iter_mut().zip(b).zip(c) {
                    *a = b + s * c;
                }
            });
        let secs = t.elapsed().as_secs_f64();
        std::hint::black_box(&a);
        if rep > 0 {
            best = best.min(secs);
        }
    }
    12.0 * n as f64 / best / 1e9
}

/// The work of a phase (medians over the measured epochs) and its rates.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseRate {
    /// Multiply-adds of the phase's matrix products per epoch.
    pub madds: f64,
    /// Bytes the phase's ops read and wrote per epoch (a lower bound, see `work`).
    pub bytes: f64,
    /// Achieved GFLOP/s: `2·madds` over the phase's seconds.
    pub gflops: f64,
    /// Achieved GB/s: bytes over the phase's seconds.
    pub gbps: f64,
    /// `gflops` over the measured GEMM peak (CPU runs only).
    pub gemm_peak_share: Option<f64>,
    /// `gbps` over the measured stream bandwidth (CPU runs only).
    pub stream_peak_share: Option<f64>,
}

/// Forward, backward, and the two together.
#[derive(Clone, Debug, Serialize)]
pub struct WorkReport {
    pub forward: PhaseRate,
    pub backward: PhaseRate,
    pub forward_backward: PhaseRate,
}

/// The rates of a phase whose epochs did `work` in `secs` seconds, against `peak`.
fn rate(epochs: &[(Work, f64)], peak: Option<&Peak>) -> PhaseRate {
    let med = |f: &dyn Fn(&(Work, f64)) -> f64| median(epochs.iter().map(f).collect());
    let per_s = |v: f64, s: f64| if s > 0.0 { v / s } else { 0.0 };
    let gflops = med(&|(w, s)| per_s(2.0 * w.madds as f64, *s) / 1e9);
    let gbps = med(&|(w, s)| per_s(w.bytes as f64, *s) / 1e9);
    PhaseRate {
        madds: med(&|(w, _)| w.madds as f64),
        bytes: med(&|(w, _)| w.bytes as f64),
        gflops,
        gbps,
        gemm_peak_share: peak.map(|p| gflops / p.gemm_gflops),
        stream_peak_share: peak.map(|p| gbps / p.stream_gbps),
    }
}

/// The work report of epochs given as (forward work, forward seconds, backward work,
/// backward seconds).
pub fn report(epochs: &[(Work, f64, Work, f64)], peak: Option<&Peak>) -> WorkReport {
    let fwd: Vec<_> = epochs.iter().map(|e| (e.0, e.1)).collect();
    let bwd: Vec<_> = epochs.iter().map(|e| (e.2, e.3)).collect();
    let both: Vec<_> = epochs
        .iter()
        .map(|e| {
            let mut w = e.0;
            w.add(&e.2);
            (w, e.1 + e.3)
        })
        .collect();
    WorkReport {
        forward: rate(&fwd, peak),
        backward: rate(&bwd, peak),
        forward_backward: rate(&both, peak),
    }
}

/// The median of `v` (the mean of the middle two for an even count; NaN when empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_medians_over_epochs_against_the_peak() {
        let w = |madds, bytes| Work { madds, bytes };
        let epochs = [
            (
                w(1_000_000_000, 4_000_000_000),
                1.0,
                w(2_000_000_000, 0),
                2.0,
            ),
            (
                w(1_000_000_000, 4_000_000_000),
                0.5,
                w(2_000_000_000, 0),
                1.0,
            ),
            (
                w(1_000_000_000, 4_000_000_000),
                2.0,
                w(2_000_000_000, 0),
                4.0,
            ),
        ];
        let peak = Peak {
            gemm_gflops: 8.0,
            gemm_side: 1,
            stream_gbps: 8.0,
            stream_values: 1,
            threads: 1,
        };
        let r = report(&epochs, Some(&peak));
        assert_eq!(r.forward.gflops, 2.0);
        assert_eq!(r.forward.gbps, 4.0);
        assert_eq!(r.forward.gemm_peak_share, Some(0.25));
        assert_eq!(r.forward.stream_peak_share, Some(0.5));
        assert_eq!(r.forward_backward.madds, 3e9);
        assert_eq!(r.forward_backward.gflops, 2.0);
        assert_eq!(report(&epochs, None).backward.gemm_peak_share, None);
    }
}
