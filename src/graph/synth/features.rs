//! Class-dependent features: each node's class centroid plus Gaussian noise, normalised
//! to unit variance and rounded to 4 decimals, drawn in chunks with their own streams.

use rayon::prelude::*;

use crate::graph::dataset::{normal_pair, round4, sub_seed};
use crate::rng::Rng;

use super::draws::{stream, NODE_CHUNK};
use super::spec::Preset;

/// Rows per feature chunk (each chunk has its own random stream).
pub(super) const FEATURE_CHUNK: usize = NODE_CHUNK / 4;

/// Class centroid plus Gaussian noise, normalised to unit variance, rounded to 4 decimals;
/// rows are drawn in chunks of [`FEATURE_CHUNK`], each from its own stream.
pub(super) struct FeatureSampler {
    dim: usize,
    centroids: Vec<f64>,
    sigma: f64,
    norm: f64,
    seed: u64,
}

impl FeatureSampler {
    pub(super) fn new(p: &Preset, seed: u64) -> Self {
        let f = p.feat_dim;
        let mut rng = Rng::new(sub_seed(seed, stream::CENTROIDS));
        let mut centroids = vec![0f64; p.classes * f];
        for pair in centroids.chunks_mut(2) {
            let (a, b) = normal_pair(&mut rng);
            pair[0] = a;
            if pair.len() > 1 {
                pair[1] = b;
            }
        }
        let sigma = (f as f64 / 2.0).sqrt() / p.margin;
        FeatureSampler {
            dim: f,
            centroids,
            sigma,
            norm: 1.0 / (1.0 + sigma * sigma).sqrt(),
            seed: sub_seed(seed, stream::FEATURES),
        }
    }

    /// Fills `out` (`classes.len()` rows) with the rows of chunk `ci`, whose nodes have
    /// `classes`.
    pub(super) fn chunk(&self, ci: usize, classes: &[u32], out: &mut [f32]) {
        let f = self.dim;
        let mut rng = Rng::fork(self.seed, ci as u64);
        for (row, &c) in out.chunks_mut(f).zip(classes) {
            let mu = &self.centroids[c as usize * f..(c as usize + 1) * f];
            for (j, pair) in row.chunks_mut(2).enumerate() {
                let (a, b) = normal_pair(&mut rng);
                pair[0] = round4((mu[2 * j] + self.sigma * a) * self.norm);
                if pair.len() > 1 {
                    pair[1] = round4((mu[2 * j + 1] + self.sigma * b) * self.norm);
                }
            }
        }
    }
}

/// The features of every node.
pub(super) fn class_features(classes: &[u32], p: &Preset, seed: u64) -> Vec<f32> {
    let f = p.feat_dim;
    let gen = FeatureSampler::new(p, seed);
    let mut x = vec![0f32; classes.len() * f];
    if f == 0 {
        return x;
    }
    x.par_chunks_mut(FEATURE_CHUNK * f)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let first = ci * FEATURE_CHUNK;
            gen.chunk(ci, &classes[first..first + chunk.len() / f], chunk)
        });
    x
}
