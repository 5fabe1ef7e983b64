//! Generation: the whole dataset in memory ([`generate`]), or streamed to the OGB raw
//! layout chunk by chunk without holding the edges or the features ([`generate_to_ogb`]).

use std::path::Path;

use crate::error::{Error, Result};
use crate::graph::dataset::{
    csr_bytes, ensure_allocatable, random_split, split_note, sub_seed, Dataset,
};
use crate::graph::io::write::{push_features, push_u64, write_gz_chunks, write_ogb_parts};

use super::draws::{node_draws, stream};
use super::edges::{in_edges, EdgeSampler};
use super::features::{class_features, FeatureSampler, FEATURE_CHUNK};
use super::spec::{SynthSpec, SPLIT};

impl SynthSpec {
    /// Generates the dataset.
    pub fn generate(&self) -> Result<Dataset> {
        generate(self)
    }
}

/// Generates the graph, features, labels and split of `spec`.
pub fn generate(spec: &SynthSpec) -> Result<Dataset> {
    let p = &spec.preset;
    let (n, m) = check_sizes(spec)?;
    // Features and the CSR are alive together at the peak.
    let peak = n as u128 * p.feat_dim as u128 * 4 + csr_bytes(n, m);
    ensure_allocatable(peak, &format!("synthetic {}", spec.name()))?;
    let seed = spec.seed;
    let (classes, weights, degrees) = node_draws(spec)?;
    let sampler = EdgeSampler::new(
        &classes,
        &weights,
        &degrees,
        p.classes,
        p.homophily,
        sub_seed(seed, stream::EDGES),
    );
    drop(weights);
    let graph = in_edges(&sampler);
    drop(sampler);
    drop(degrees);
    let features = class_features(&classes, p, seed);
    let split = random_split(n, SPLIT, sub_seed(seed, stream::SPLIT));
    let note = format!(
        "synthetic {}: directed Chung-Lu {} graph, {} planted classes, homophily {}, class-centroid features (margin {}), random split {} (seed {seed})",
        spec.name(),
        match p.gamma {
            Some(g) => format!("power-law (degree exponent {g})"),
            None => "equal-weight (low-degree, no hubs)".to_string(),
        },
        p.classes,
        p.homophily,
        p.margin,
        split_note(SPLIT)
    );
    let d = Dataset {
        name: spec.name(),
        graph,
        features: features.into(),
        feat_dim: p.feat_dim,
        labels: classes.into(),
        num_classes: p.classes,
        split,
        notes: vec![note],
    };
    d.validate()?;
    Ok(d)
}

/// The node and edge counts of `spec`, or why it cannot be generated.
pub fn check_sizes(spec: &SynthSpec) -> Result<(usize, usize)> {
    let (n, m) = (spec.num_nodes(), spec.num_edges());
    let too_small = |why: &str| {
        Error::invalid(format!(
            "synthetic {}: {n} nodes and {m} edges: {why}",
            spec.name()
        ))
    };
    if n < 2 || n < spec.preset.classes {
        return Err(too_small("need at least 2 nodes and one node per class"));
    }
    if n > u32::MAX as usize - 1 {
        return Err(too_small("node ids must fit u32"));
    }
    if m as f64 > (n as f64) * (n as f64 - 1.0) / 4.0 {
        return Err(too_small("too dense for a sparse power-law graph"));
    }
    Ok((n, m))
}

/// Bytes per node that [`generate_to_ogb`] holds at its peak: class, weight, degree, two
/// alias entries, the class member list and the split's shuffle.
const STREAM_BYTES_PER_NODE: u128 = 4 + 8 + 4 + 8 + 8 + 4 + 4;

/// Writes the dataset of `spec` in the OGB raw layout under `dir`, exactly as
/// [`crate::graph::io::write_ogb`] writes [`generate`]'s output (the same text, cut into
/// other gzip members), without holding the edges or the features in memory: node chunks
/// are drawn, formatted and compressed a few at a time, so memory is O(nodes) (about
/// 40 bytes per node), not O(edges). `progress(file, bytes, seconds)` after each file.
pub fn generate_to_ogb(
    spec: &SynthSpec,
    dir: &Path,
    progress: &mut dyn FnMut(&str, u64, f64),
) -> Result<()> {
    let p = &spec.preset;
    let (n, m) = check_sizes(spec)?;
    ensure_allocatable(
        n as u128 * STREAM_BYTES_PER_NODE,
        &format!("synthetic {}", spec.name()),
    )?;
    let seed = spec.seed;
    let (classes, weights, degrees) = node_draws(spec)?;
    let sampler = EdgeSampler::new(
        &classes,
        &weights,
        &degrees,
        p.classes,
        p.homophily,
        sub_seed(seed, stream::EDGES),
    );
    drop(weights);
    let features = FeatureSampler::new(p, seed);
    let split = random_split(n, SPLIT, sub_seed(seed, stream::SPLIT));
    let f = p.feat_dim;
    write_ogb_parts(
        dir,
        (n, m),
        &|path| {
            write_gz_chunks(path, sampler.chunks(), |ci, s| {
                let mut rows = vec![0u32; sampler.chunk_edges(ci)];
                sampler.chunk(ci, &mut rows);
                s.reserve(rows.len() * 16);
                let mut pos = 0;
                for v in sampler.nodes(ci) {
                    let d = degrees[v] as usize;
                    for &src in &rows[pos..pos + d] {
                        push_u64(s, src as u64);
                        s.push(',');
                        push_u64(s, v as u64);
                        s.push('\n');
                    }
                    pos += d;
                }
            })
        },
        &|path| {
            write_gz_chunks(path, n.div_ceil(FEATURE_CHUNK), |ci, s| {
                let first = ci * FEATURE_CHUNK;
                let rows = first..(first + FEATURE_CHUNK).min(n);
                let mut x = vec![0f32; rows.len() * f];
                features.chunk(ci, &classes[rows], &mut x);
                s.reserve(x.len() * 8);
                for row in x.chunks(f) {
                    push_features(s, row);
                    s.push('\n');
                }
            })
        },
        &classes,
        &split,
        progress,
    )
}
