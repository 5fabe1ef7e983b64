//! Seeded synthetic graphs shaped like the papers' datasets: power-law degrees, planted
//! classes, homophilous edges and class-dependent features.
//!
//! Spec: `PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C]`, e.g.
//! `products-like,scale=0.01`; `scale` multiplies the preset's node and edge counts
//! (rounded), `seed` (default 0) fixes every random draw, `feat_dim` and `classes` replace
//! the preset's. [`SynthSpec::with_defaults`] fills what the spec leaves out from
//! `--seed`, `--feat-dim` and `--classes`.
//!
//! | preset | nodes | edges | features | classes | homophily h |
//! |---|---|---|---|---|---|
//! | `cora-like` | 2,708 | 5,429 | 1,433 | 7 | 0.8 |
//! | `arxiv-like` | 169,343 | 1,166,243 | 128 | 40 | 0.65 |
//! | `products-like` | 2,449,029 | 61,859,140 | 100 | 47 | 0.8 |
//! | `papers-like` | 111,059,956 | 1,615,685,872 | 128 | 172 | 0.6 |
//! | `as-like` | 26,475 | 53,381 | 100 | 10 | 0.6 |
//! | `road-like` | 1,965,206 | 2,766,607 | 100 | 10 | 0.8 |
//!
//! `as-like` copies the counts of CAIDA's AS-relationship graph (as-caida, 2007): a
//! power-law graph of mean degree 4 where most nodes have one or two neighbours.
//! `road-like` copies roadNet-CA's counts with equal node weights instead of a power law:
//! every node has 1 or 2 in-edges, no hubs (but no planar locality either).
//!
//! The model:
//!
//! - **Classes**: uniform over the preset's classes; labels are the classes.
//! - **Degrees** (directed Chung-Lu, as the peer's `--synthetic`; `road-like` has equal
//!   weights instead): node weights
//!   `w = (rank + i0)^(-1/(gamma-1))` with `gamma = 2.1` over a random permutation of ranks,
//!   `i0` set so that the largest expected degree is `sqrt(edges)`. Node `v` gets
//!   `round(edges * W(v) / W)` in-edges (systematic rounding of the cumulative weight `W(v)`,
//!   so there are exactly `edges` edges and each in-degree is within 1 of its expectation);
//!   out-degrees follow `w` in expectation.
//! - **Edges**: each in-edge of `v` comes, with probability `h`, from a node of `v`'s class
//!   and otherwise from any node, in both cases drawn with probability proportional to `w`
//!   (alias tables). No self-loops, no duplicate edges. About `h + (1 - h) / classes` of the
//!   edges join nodes of one class. The CSR is built directly, row by row in parallel, and
//!   its order is the edge order (a written copy lists edges grouped by destination).
//! - **Features**: `(centroid[class] + sigma * N(0, I)) / sqrt(1 + sigma^2)`, centroid entries
//!   N(0,1), rounded to 4 decimals. `sigma = sqrt(features / 2) / margin` makes a single
//!   node's nearest centroid a `margin`-sigma decision per competing class, which leaves an
//!   MLP well short of a GNN: averaging `d` mostly same-class neighbours shrinks the noise
//!   by about `sqrt(d)`.
//! - **Split**: random 10% train / 10% valid / 20% test ([`SPLIT`]).
//!
//! Generation runs in fixed-size node chunks, each with its own [`Rng::fork`] stream, and no
//! float reduction depends on the thread count: the output is identical for any number of
//! threads.

use std::path::Path;
use std::str::FromStr;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::dataset::{
    csr_bytes, ensure_allocatable, normal_pair, random_split, round4, split_note, sub_seed,
    Dataset, MAX_CLASSES, MAX_FEAT_DIM,
};
use crate::graph::io::write::{push_features, push_u64, write_gz_chunks, write_ogb_parts};
use crate::rng::Rng;

/// Degree-distribution exponent.
pub const GAMMA: f64 = 2.1;
/// Train / valid / test fractions of generated graphs.
pub const SPLIT: (f64, f64, f64) = (0.10, 0.10, 0.20);

/// A named size and shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preset {
    /// Name, e.g. `cora-like`.
    pub name: &'static str,
    /// Node count at scale 1.
    pub nodes: u64,
    /// Edge count at scale 1.
    pub edges: u64,
    /// Features per node.
    pub feat_dim: usize,
    /// Number of classes.
    pub classes: usize,
    /// Fraction of each node's out-edges drawn inside its class.
    pub homophily: f64,
    /// Single-node class separation in noise standard deviations (see module docs).
    pub margin: f64,
    /// Degree-distribution exponent of the Chung-Lu weights, or `None` for equal weights
    /// (every in-degree within 1 of `edges / nodes`, out-degrees Poisson: a low-degree
    /// graph without hubs, shaped like a road network).
    pub gamma: Option<f64>,
}

/// The presets, named after the datasets whose counts they copy.
pub const PRESETS: [Preset; 6] = [
    Preset {
        name: "cora-like",
        nodes: 2_708,
        edges: 5_429,
        feat_dim: 1_433,
        classes: 7,
        homophily: 0.8,
        margin: 1.0,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "arxiv-like",
        nodes: 169_343,
        edges: 1_166_243,
        feat_dim: 128,
        classes: 40,
        homophily: 0.65,
        margin: 1.6,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "products-like",
        nodes: 2_449_029,
        edges: 61_859_140,
        feat_dim: 100,
        classes: 47,
        homophily: 0.8,
        margin: 1.8,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "papers-like",
        nodes: 111_059_956,
        edges: 1_615_685_872,
        feat_dim: 128,
        classes: 172,
        homophily: 0.6,
        margin: 1.8,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "as-like",
        nodes: 26_475,
        edges: 53_381,
        feat_dim: 100,
        classes: 10,
        homophily: 0.6,
        margin: 1.6,
        gamma: Some(GAMMA),
    },
    Preset {
        name: "road-like",
        nodes: 1_965_206,
        edges: 2_766_607,
        feat_dim: 100,
        classes: 10,
        homophily: 0.8,
        margin: 1.6,
        gamma: None,
    },
];

/// A preset, a scale and a seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SynthSpec {
    /// The preset.
    pub preset: Preset,
    /// Multiplies the preset's node and edge counts.
    pub scale: f64,
    /// Seed of the generator.
    pub seed: u64,
}

fn spec_help() -> String {
    let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    format!(
        "expected PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C] with PRESET one of {}",
        names.join(", ")
    )
}

impl SynthSpec {
    /// Parses `PRESET[,scale=X][,seed=N][,feat_dim=F][,classes=C]`.
    pub fn parse(spec: &str) -> Result<SynthSpec> {
        Self::parse_keys(spec).map(|(s, _)| s)
    }

    /// Parses `spec`, then takes `seed` when the spec has no `seed=`, and `feat_dim` /
    /// `classes` (when given) when the spec has no `feat_dim=` / `classes=`: the command
    /// line's `--seed`, `--feat-dim` and `--classes` apply to synthetic graphs too.
    pub fn with_defaults(
        spec: &str,
        seed: u64,
        feat_dim: Option<usize>,
        classes: Option<usize>,
    ) -> Result<SynthSpec> {
        let (mut s, keys) = Self::parse_keys(spec)?;
        if !keys.contains(&"seed") {
            s.seed = seed;
        }
        let flag = |name: &str, v: usize, max: usize| {
            if v == 0 || v > max {
                Err(Error::invalid(format!(
                    "--{name} {v}: must be between 1 and {max}"
                )))
            } else {
                Ok(v)
            }
        };
        if let (Some(f), false) = (feat_dim, keys.contains(&"feat_dim")) {
            s.preset.feat_dim = flag("feat-dim", f, MAX_FEAT_DIM)?;
        }
        if let (Some(c), false) = (classes, keys.contains(&"classes")) {
            s.preset.classes = flag("classes", c, MAX_CLASSES)?;
        }
        Ok(s)
    }

    /// Parses a spec and names the keys it gave.
    fn parse_keys(spec: &str) -> Result<(SynthSpec, Vec<&'static str>)> {
        let mut keys = Vec::new();
        let mut parts = spec.split(',').map(str::trim);
        let name = parts.next().unwrap_or("");
        let preset = PRESETS
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
            .copied()
            .ok_or_else(|| {
                Error::invalid(format!("unknown synthetic graph {name:?}: {}", spec_help()))
            })?;
        let mut s = SynthSpec {
            preset,
            scale: 1.0,
            seed: 0,
        };
        for kv in parts.filter(|p| !p.is_empty()) {
            let bad = || {
                Error::invalid(format!(
                    "synthetic spec {spec:?}: bad {kv:?}; {}",
                    spec_help()
                ))
            };
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            match k.trim() {
                "scale" => {
                    s.scale = v.trim().parse().map_err(|_| bad())?;
                    if !(s.scale.is_finite() && s.scale > 0.0) {
                        return Err(bad());
                    }
                }
                "seed" => {
                    s.seed = v.trim().parse().map_err(|_| bad())?;
                    keys.push("seed");
                }
                "feat_dim" => {
                    s.preset.feat_dim = v.trim().parse().map_err(|_| bad())?;
                    if !(1..=MAX_FEAT_DIM).contains(&s.preset.feat_dim) {
                        return Err(bad());
                    }
                    keys.push("feat_dim");
                }
                "classes" => {
                    s.preset.classes = v.trim().parse().map_err(|_| bad())?;
                    if !(1..=MAX_CLASSES).contains(&s.preset.classes) {
                        return Err(bad());
                    }
                    keys.push("classes");
                }
                _ => return Err(bad()),
            }
        }
        Ok((s, keys))
    }

    /// Nodes after scaling.
    pub fn num_nodes(&self) -> usize {
        (self.preset.nodes as f64 * self.scale).round() as usize
    }

    /// Edges after scaling.
    pub fn num_edges(&self) -> usize {
        (self.preset.edges as f64 * self.scale).round() as usize
    }

    /// The canonical spec (defaults left out).
    pub fn name(&self) -> String {
        let mut s = self.preset.name.to_string();
        if self.scale != 1.0 {
            s.push_str(&format!(",scale={}", self.scale));
        }
        if self.seed != 0 {
            s.push_str(&format!(",seed={}", self.seed));
        }
        let base = PRESETS.iter().find(|p| p.name == self.preset.name);
        if base.is_none_or(|b| b.feat_dim != self.preset.feat_dim) {
            s.push_str(&format!(",feat_dim={}", self.preset.feat_dim));
        }
        if base.is_none_or(|b| b.classes != self.preset.classes) {
            s.push_str(&format!(",classes={}", self.preset.classes));
        }
        s
    }

    /// Generates the dataset.
    pub fn generate(&self) -> Result<Dataset> {
        generate(self)
    }
}

impl FromStr for SynthSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<SynthSpec> {
        SynthSpec::parse(s)
    }
}

/// Random streams, one per generation step.
mod stream {
    pub const CLASSES: u64 = 11;
    pub const RANKS: u64 = 12;
    pub const DEGREES: u64 = 13;
    pub const EDGES: u64 = 14;
    pub const CENTROIDS: u64 = 15;
    pub const FEATURES: u64 = 16;
    pub const SPLIT: u64 = 17;
}

/// Nodes per parallel task (fixed: the output must not depend on the thread count).
const NODE_CHUNK: usize = 4096;

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

/// Per node: class, Chung-Lu weight and in-degree (the O(nodes) draws both generators
/// share).
fn node_draws(spec: &SynthSpec) -> Result<(Vec<u32>, Vec<f64>, Vec<u32>)> {
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

/// Walker/Vose alias table over a set of items: `(threshold, alias)` per item; item `j` is
/// kept when 32 random bits fall below its threshold, otherwise its alias is taken.
#[derive(Clone, Copy, Default)]
struct Alias {
    thr: u32,
    alias: u32,
}

fn build_alias(weights: &[f64], out: &mut [Alias]) {
    let k = weights.len();
    let total: f64 = weights.iter().sum();
    let mut p: Vec<f64> = weights.iter().map(|&w| w * k as f64 / total).collect();
    let (mut small, mut large): (Vec<u32>, Vec<u32>) =
        (0..k as u32).partition(|&j| p[j as usize] < 1.0);
    while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
        small.pop();
        out[s as usize] = Alias {
            thr: (p[s as usize] * 4_294_967_296.0).min(u32::MAX as f64) as u32,
            alias: l,
        };
        p[l as usize] += p[s as usize] - 1.0;
        if p[l as usize] < 1.0 {
            large.pop();
            small.push(l);
        }
    }
    // Leftovers (probability 1 up to rounding) always keep themselves.
    for j in small.into_iter().chain(large) {
        out[j as usize] = Alias {
            thr: u32::MAX,
            alias: j,
        };
    }
}

#[inline]
fn draw(table: &[Alias], rng: &mut Rng) -> usize {
    let r = rng.next_u64();
    let j = (((r & 0xffff_ffff) * table.len() as u64) >> 32) as usize;
    let a = table[j];
    if ((r >> 32) as u32) < a.thr {
        j
    } else {
        a.alias as usize
    }
}

/// Draws the in-edges of node chunks: the alias tables over all nodes and per class.
/// Chunk `ci` (nodes `ci * NODE_CHUNK..`) uses its own random stream, so chunks can be
/// drawn in any order, in parallel or one by one, with the same result.
struct EdgeSampler<'a> {
    classes: &'a [u32],
    degrees: &'a [u32],
    global: Vec<Alias>,
    /// Class `c`'s members are `members[start[c]..start[c + 1]]`, and their table is
    /// `class_tables[start[c]..start[c + 1]]`.
    start: Vec<usize>,
    members: Vec<u32>,
    class_tables: Vec<Alias>,
    h: f64,
    seed: u64,
}

impl<'a> EdgeSampler<'a> {
    fn new(
        classes: &'a [u32],
        w: &[f64],
        degrees: &'a [u32],
        num_classes: usize,
        h: f64,
        seed: u64,
    ) -> Self {
        let n = w.len();
        // Global table.
        let mut global = vec![Alias::default(); n];
        build_alias(w, &mut global);
        // Per-class tables over the class members (counting sort by class).
        let mut start = vec![0usize; num_classes + 1];
        for &c in classes {
            start[c as usize + 1] += 1;
        }
        for c in 0..num_classes {
            start[c + 1] += start[c];
        }
        let mut members = vec![0u32; n];
        let mut next = start.clone();
        for (v, &c) in classes.iter().enumerate() {
            members[next[c as usize]] = v as u32;
            next[c as usize] += 1;
        }
        let mut class_tables = vec![Alias::default(); n];
        {
            let mut rest = class_tables.as_mut_slice();
            let mut jobs = Vec::with_capacity(num_classes);
            for c in 0..num_classes {
                let (head, tail) = rest.split_at_mut(start[c + 1] - start[c]);
                jobs.push((c, head));
                rest = tail;
            }
            jobs.into_par_iter().for_each(|(c, out)| {
                let ws: Vec<f64> = members[start[c]..start[c + 1]]
                    .iter()
                    .map(|&v| w[v as usize])
                    .collect();
                build_alias(&ws, out);
            });
        }
        EdgeSampler {
            classes,
            degrees,
            global,
            start,
            members,
            class_tables,
            h,
            seed,
        }
    }

    /// Number of node chunks.
    fn chunks(&self) -> usize {
        self.degrees.len().div_ceil(NODE_CHUNK)
    }

    /// The nodes of chunk `ci`.
    fn nodes(&self, ci: usize) -> std::ops::Range<usize> {
        ci * NODE_CHUNK..((ci + 1) * NODE_CHUNK).min(self.degrees.len())
    }

    /// Edges of chunk `ci`.
    fn chunk_edges(&self, ci: usize) -> usize {
        self.degrees[self.nodes(ci)]
            .iter()
            .map(|&d| d as usize)
            .sum()
    }

    /// Fills `out` (of [`EdgeSampler::chunk_edges`] values) with the rows of chunk `ci`,
    /// one after the other: row `v` holds `degrees[v]` distinct sources, sorted, none
    /// equal to `v`.
    fn chunk(&self, ci: usize, out: &mut [u32]) {
        let n = self.degrees.len();
        let mut rng = Rng::fork(self.seed, ci as u64);
        let mut buf: Vec<u32> = Vec::new();
        let mut pos = 0;
        for v in self.nodes(ci) {
            let deg = self.degrees[v] as usize;
            if deg == 0 {
                continue;
            }
            let c = self.classes[v] as usize;
            let own = &self.class_tables[self.start[c]..self.start[c + 1]];
            let own_members = &self.members[self.start[c]..self.start[c + 1]];
            buf.clear();
            // Own-class edges: Binomial(deg, h), at most the other members of the class.
            let k_own = if own.len() > 1 {
                let k = (0..deg).filter(|_| rng.uniform() < self.h).count();
                k.min(own.len() - 1)
            } else {
                0
            };
            let (exclude, r) = (v as u32, &mut rng);
            let own_draw = |r: &mut Rng| own_members[draw(own, r)];
            fill_distinct(&mut buf, k_own, exclude, r, own_draw, own.len(), |i| {
                own_members[i]
            });
            let any_draw = |r: &mut Rng| draw(&self.global, r) as u32;
            fill_distinct(&mut buf, deg, exclude, r, any_draw, n, |i| i as u32);
            out[pos..pos + deg].copy_from_slice(&buf);
            pos += deg;
        }
    }
}

/// The in-edge CSR of [`EdgeSampler`]'s rows. The CSR order is the input order
/// (`edge_ids` = identity), so a written copy reads back to the same graph.
fn in_edges(sampler: &EdgeSampler) -> Csr {
    let n = sampler.degrees.len();
    let mut indptr = Vec::with_capacity(n + 1);
    indptr.push(0u64);
    let mut total = 0u64;
    for &d in sampler.degrees {
        total += d as u64;
        indptr.push(total);
    }
    let mut indices = vec![0u32; total as usize];
    // Split the output by node chunk.
    let mut jobs = Vec::with_capacity(sampler.chunks());
    {
        let mut rest = indices.as_mut_slice();
        for ci in 0..sampler.chunks() {
            let (chunk, tail) = rest.split_at_mut(sampler.chunk_edges(ci));
            jobs.push((ci, chunk));
            rest = tail;
        }
    }
    jobs.into_par_iter()
        .for_each(|(ci, out)| sampler.chunk(ci, out));
    let edge_ids: Vec<u64> = (0..total).into_par_iter().collect();
    Csr {
        num_nodes: n,
        indptr: indptr.into(),
        indices: indices.into(),
        edge_ids: Some(edge_ids.into()),
    }
}

/// Grows the sorted, duplicate-free `buf` to `len` ids, none equal to `exclude`, drawing
/// with `draw`; if draws keep hitting ids already taken (a target set nearly exhausted),
/// the next free ids of `pool` after a random start are taken instead.
fn fill_distinct(
    buf: &mut Vec<u32>,
    len: usize,
    exclude: u32,
    rng: &mut Rng,
    mut draw: impl FnMut(&mut Rng) -> u32,
    pool_len: usize,
    pool: impl Fn(usize) -> u32,
) {
    let mut rounds = 0;
    while buf.len() < len && rounds < 32 {
        for _ in buf.len()..len {
            let t = draw(rng);
            if t != exclude {
                buf.push(t);
            }
        }
        buf.sort_unstable();
        buf.dedup();
        rounds += 1;
    }
    if buf.len() < len {
        let mut i = rng.below(pool_len as u64) as usize;
        for _ in 0..pool_len {
            let t = pool(i);
            if t != exclude {
                if let Err(at) = buf.binary_search(&t) {
                    buf.insert(at, t);
                    if buf.len() == len {
                        break;
                    }
                }
            }
            i = (i + 1) % pool_len;
        }
    }
}

/// Rows per feature chunk (each chunk has its own random stream).
const FEATURE_CHUNK: usize = NODE_CHUNK / 4;

/// Class centroid plus Gaussian noise, normalised to unit variance, rounded to 4 decimals;
/// rows are drawn in chunks of [`FEATURE_CHUNK`], each from its own stream.
struct FeatureSampler {
    dim: usize,
    centroids: Vec<f64>,
    sigma: f64,
    norm: f64,
    seed: u64,
}

impl FeatureSampler {
    fn new(p: &Preset, seed: u64) -> Self {
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
    fn chunk(&self, ci: usize, classes: &[u32], out: &mut [f32]) {
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
fn class_features(classes: &[u32], p: &Preset, seed: u64) -> Vec<f32> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = SynthSpec::parse("products-like,scale=0.01,seed=3").unwrap();
        assert_eq!(s.preset.name, "products-like");
        assert_eq!((s.num_nodes(), s.num_edges(), s.seed), (24_490, 618_591, 3));
        assert_eq!(s.name(), "products-like,scale=0.01,seed=3");
        // Flags fill what the spec leaves out; the name says what was used and re-parses.
        let f = SynthSpec::with_defaults("cora-like", 5, Some(16), Some(3)).unwrap();
        assert_eq!((f.seed, f.preset.feat_dim, f.preset.classes), (5, 16, 3));
        assert_eq!(f.name(), "cora-like,seed=5,feat_dim=16,classes=3");
        assert_eq!(SynthSpec::parse(&f.name()).unwrap(), f);
        let own = SynthSpec::with_defaults("cora-like,seed=2,classes=4", 5, None, Some(3)).unwrap();
        assert_eq!(
            (own.seed, own.preset.classes, own.preset.feat_dim),
            (2, 4, 1433)
        );
        assert!(SynthSpec::with_defaults("cora-like", 0, Some(0), None).is_err());
        assert_eq!("cora-like".parse::<SynthSpec>().unwrap().scale, 1.0);
        for bad in [
            "",
            "citeseer-like",
            "cora-like,scale=0",
            "cora-like,scale=x",
            "cora-like,foo=1",
            "cora-like,seed",
            "cora-like,classes=0",
            "cora-like,feat_dim=x",
        ] {
            match SynthSpec::parse(bad) {
                Err(Error::InvalidArgument(m)) => {
                    assert!(
                        m.contains(
                            "cora-like, arxiv-like, products-like, papers-like, as-like, road-like"
                        ),
                        "{m}"
                    )
                }
                other => panic!("{bad:?}: expected an error, got {other:?}"),
            }
        }
    }

    #[test]
    fn alias_tables_follow_weights() {
        let w = [1.0, 2.0, 3.0, 0.0, 4.0];
        let mut t = vec![Alias::default(); 5];
        build_alias(&w, &mut t);
        let mut rng = Rng::new(1);
        let mut count = [0usize; 5];
        for _ in 0..100_000 {
            count[draw(&t, &mut rng)] += 1;
        }
        assert_eq!(count[3], 0);
        for j in [0, 1, 2, 4] {
            let f = count[j] as f64 / 100_000.0;
            assert!((f - w[j] / 10.0).abs() < 0.01, "{j}: {f}");
        }
    }

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
