//! Seeded, counter-based randomness.
//!
//! [`Rng`] is a SplitMix64 stream for initialisation and sampling. [`hash3`] is a stateless
//! hash of `(key, a, b)` built from 32-bit operations only, so that a WGSL or CUDA kernel
//! computes the same value: dropout masks come from it, and they depend on the seed and an
//! element's coordinates, never on thread count or micro-batch split.

/// SplitMix64: small, fast, and statistically solid for ML initialisation and sampling.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `0..n` (n > 0), without modulo bias worth noting for n < 2³².
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A child stream for sub-task `i`, independent of how many draws this one made.
    pub fn fork(seed: u64, i: u64) -> Rng {
        Rng::new(mix64(seed ^ mix64(i.wrapping_add(0x632B_E59B_D9B4_E019))))
    }
}

/// The SplitMix64 finaliser: a bijective 64-bit mix.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// PCG-style 32-bit permutation (Jarzynski & Olano, "Hash functions for GPU rendering").
#[inline]
pub fn pcg(v: u32) -> u32 {
    let state = v.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    let word = ((state >> ((state >> 28).wrapping_add(4))) ^ state).wrapping_mul(277_803_737);
    (word >> 22) ^ word
}

/// Stateless hash of a 32-bit key and two coordinates; the same in Rust, WGSL and CUDA.
#[inline]
pub fn hash3(key: u32, a: u32, b: u32) -> u32 {
    pcg(pcg(pcg(key) ^ a) ^ b)
}

/// `hash3` as a uniform value in `[0, 1)` with 24 bits (exact in f32).
#[inline]
pub fn uniform3(key: u32, a: u32, b: u32) -> f32 {
    (hash3(key, a, b) >> 8) as f32 * (1.0 / 16_777_216.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_spread() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<f64> = (0..1000).map(|_| a.uniform()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.uniform()).collect();
        assert_eq!(xs, ys);
        let mean = xs.iter().sum::<f64>() / 1000.0;
        assert!((mean - 0.5).abs() < 0.05, "mean {mean}");
        assert!(xs.iter().all(|&x| (0.0..1.0).contains(&x)));
    }

    #[test]
    fn hash_uniform_is_balanced() {
        let n = 100_000u32;
        let below = (0..n)
            .filter(|&i| uniform3(42, i / 100, i % 100) < 0.3)
            .count();
        let frac = below as f64 / n as f64;
        assert!((frac - 0.3).abs() < 0.01, "fraction {frac}");
    }
}
