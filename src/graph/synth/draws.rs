//! The O(nodes) draws: each node's class, its Chung-Lu weight and its exactly rounded
//! in-degree, and the random streams and node chunks every generation step shares.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::dataset::sub_seed;
use crate::rng::Rng;

use super::spec::SynthSpec;

/// Random streams, one per generation step.
pub(super) mod stream {
    pub const CLASSES: u64 = 11;
    pub const RANKS: u64 = 12;
    pub const DEGREES: u64 = 13;
    pub const EDGES: u64 = 14;
    pub const CENTROIDS: u64 = 15;
    pub const FEATURES: u64 = 16;
    pub const SPLIT: u64 = 17;
}

/// Nodes per parallel task (fixed: the output must not depend on the thread count).
pub(super) const NODE_CHUNK: usize = 4096;

/// Per node: class, Chung-Lu weight and in-degree (the O(nodes) draws both generators
/// share).
pub(super) fn node_draws(spec: &SynthSpec) -> Result<(Vec<u32>, Vec<f64>, Vec<u32>)> {
    let p = &spec.preset;
    let (n, m) = (spec.num_nodes(), spec.num_edges());
    let seed = spec.seed;
    let classes = random_classes(n, p.classes, sub_seed(seed, stream::CLASSES));
    let weights = match p.gamma {
        Some(gamma) => power_law_weights(n, m, gamma, sub_seed(seed, stream::RANKS)),
        None => vec![1.0; n],
    };
    let degrees = degrees(&weights, m, sub_seed(seed, stream::DEGREES));
    if degrees.iter().any(|&d| d as usize >= n) {
        return Err(Error::invalid(format!(
            "synthetic {}: {n} nodes and {m} edges: a node's degree would exceed the node count",
            spec.name()
        )));
    }
    Ok((classes, weights, degrees))
}

/// Uniform classes, filled in fixed chunks.
fn random_classes(n: usize, classes: usize, seed: u64) -> Vec<u32> {
    let mut c = vec![0u32; n];
    c.par_chunks_mut(NODE_CHUNK * 16)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = Rng::fork(seed, i as u64);
            for x in chunk {
                *x = rng.below(classes as u64) as u32;
            }
        });
    c
}

/// Chung-Lu weights `(rank + i0)^(-alpha)` over a random permutation of ranks.
fn power_law_weights(n: usize, m: usize, gamma: f64, seed: u64) -> Vec<f64> {
    let alpha = 1.0 / (gamma - 1.0);
    let i0 = weight_offset(n, m as f64, alpha, (m as f64).sqrt());
    let mut rank: Vec<u32> = (0..n as u32).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        rank.swap(i, j);
    }
    rank.par_iter()
        .map(|&r| (r as f64 + i0).powf(-alpha))
        .collect()
}

/// The offset `i0` at which the heaviest node's expected degree is `max_deg` (bisection in
/// log space; the weight sum is the exact head plus an Euler-Maclaurin tail).
fn weight_offset(n: usize, m: f64, alpha: f64, max_deg: f64) -> f64 {
    let f = |x: f64, i0: f64| (x + i0).powf(-alpha);
    let sum = |i0: f64| {
        let k = n.min(1000);
        let head: f64 = (0..k).map(|r| f(r as f64, i0)).sum();
        if k == n {
            return head;
        }
        let prim = |x: f64| (x + i0).powf(1.0 - alpha) / (1.0 - alpha);
        head + prim(n as f64) - prim(k as f64) + 0.5 * (f(k as f64, i0) - f(n as f64, i0))
    };
    let (mut lo, mut hi) = (1e-3f64, 1e12f64);
    for _ in 0..100 {
        let i0 = (lo * hi).sqrt();
        if m * f(0.0, i0) / sum(i0) > max_deg {
            lo = i0;
        } else {
            hi = i0;
        }
    }
    (lo * hi).sqrt()
}

/// Exactly `m` degrees proportional to `w`: systematic rounding of the cumulative
/// expected degree with one random offset.
fn degrees(w: &[f64], m: usize, seed: u64) -> Vec<u32> {
    // Offset in [0, 0.5): `m + u` must not round up to `m + 1` in f64.
    let u = Rng::new(seed).uniform() * 0.5;
    let total: f64 = w.iter().sum();
    let mut acc = 0.0f64;
    let mut prev = u.floor();
    w.iter()
        .enumerate()
        .map(|(i, &x)| {
            acc += x;
            let c = if i + 1 == w.len() {
                m as f64
            } else {
                m as f64 * (acc / total)
            };
            let cur = (c + u).floor();
            let d = (cur - prev).max(0.0);
            prev = cur.max(prev);
            d as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::synth::GAMMA;
    #[test]
    fn degrees_sum_exactly() {
        let w = power_law_weights(10_000, 50_000, GAMMA, 1);
        let d = degrees(&w, 50_000, 2);
        assert_eq!(d.iter().map(|&x| x as usize).sum::<usize>(), 50_000);
        let max = *d.iter().max().unwrap() as f64;
        assert!(
            (max - (50_000f64).sqrt()).abs() < 0.05 * max,
            "max degree {max}"
        );
    }
}
