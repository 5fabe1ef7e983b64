//! A node-classification dataset: graph, features, labels and split.
//!
//! [`Dataset::load`] reads an OGB node-property-prediction folder (`DIR/raw/...`) or a plain
//! edge-list file, through the binary cache of [`crate::graph::io::cache`]; from a cache
//! entry, the graph, features and labels are memory-mapped ([`Array`]) and paged in on
//! demand, everything else is in memory. Whatever the
//! input lacks is synthesized from `LoadOptions::seed` and recorded in `notes`:
//!
//! - features: N(0,1) of `feat_dim` columns, rounded to 4 decimals (like the peer
//!   baseline, so that a written copy is short and reads back exactly);
//! - labels: uniform over `classes` (10 unless the caller fixes a count);
//! - split: a random [`RANDOM_SPLIT`] of the nodes: 8% train (the peer's `--train-frac`
//!   default, so the full batch has as many seeds), 10% valid, 20% test.
//!
//! Every random array is filled in fixed-size chunks, each from its own [`Rng::fork`]
//! stream, so the result does not depend on the number of threads.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::array::Array;
use crate::graph::csr::Csr;
use crate::graph::io;
use crate::graph::io::cache::{CacheStatus, Loaded};
pub(crate) use crate::graph::io::parts::{csr_bytes, ensure_allocatable, Parts};
pub use crate::graph::io::parts::{LoadOptions, Split, MAX_CLASSES, UNLABELED};
use crate::rng::Rng;

/// Feature width synthesized when the input has no features.
pub const DEFAULT_FEAT_DIM: usize = 100;
/// Class count synthesized when the input has no labels and the caller fixes none.
pub const DEFAULT_CLASSES: usize = 10;
/// Widest synthesized feature matrix accepted (`--feat-dim`).
pub const MAX_FEAT_DIM: usize = 1 << 20;
/// Train / valid / test fractions of a synthesized split for loaded graphs.
pub const RANDOM_SPLIT: (f64, f64, f64) = (0.08, 0.10, 0.20);

/// A graph with node features, labels and a split.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dataset {
    /// Folder or file stem, or the generator spec.
    pub name: String,
    /// In-edges as loaded (NOT symmetrized); `edge_ids` map CSR positions to input lines.
    pub graph: Csr,
    /// Row-major `num_nodes x feat_dim` (mapped from the cache when read from it).
    pub features: Array<f32>,
    /// Features per node.
    pub feat_dim: usize,
    /// One class per node; [`UNLABELED`] for none (mapped from the cache when read from it).
    pub labels: Array<u32>,
    /// Number of classes; every label but [`UNLABELED`] is below it.
    pub num_classes: usize,
    /// Train, validation and test node ids.
    pub split: Split,
    /// What was synthesized, for the user (e.g. "no node-feat.csv.gz: 100 random features").
    pub notes: Vec<String>,
}

impl Dataset {
    /// Loads an OGB folder (one holding `raw/`) or an edge-list file, using the binary
    /// cache when `opts.cache` is set.
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Dataset> {
        Self::load_with_status(path, opts).map(|(d, _)| d)
    }

    /// [`Dataset::load`], also telling what the cache did.
    pub fn load_with_status(
        path: impl AsRef<Path>,
        opts: &LoadOptions,
    ) -> Result<(Dataset, CacheStatus)> {
        Self::completed(io::cache::load(path.as_ref(), opts)?, opts)
    }

    /// Loads `path` through the given cache folders, tried in order (none: no cache).
    pub fn load_in_dirs(
        path: impl AsRef<Path>,
        opts: &LoadOptions,
        dirs: &[PathBuf],
    ) -> Result<(Dataset, CacheStatus)> {
        Self::completed(io::cache::load_in_dirs(path.as_ref(), opts, dirs)?, opts)
    }

    /// A dataset from arrays in memory ([`io::Arrays`]: what the Python package's
    /// `Dataset.from_arrays` passes), checked as the OGB loader checks its files, and with
    /// what the arrays lack synthesized from `opts` exactly as for a folder that lacks it:
    /// the same graph, features, labels and split as loading that folder.
    pub fn from_arrays(arrays: io::Arrays<'_>, opts: &LoadOptions) -> Result<Dataset> {
        let missing = ["no x", "no y", "no train_idx"];
        complete_with(io::arrays::parts(arrays)?, opts, None, missing)
    }

    /// Loads without the cache: an OGB folder or an edge-list file.
    pub fn load_uncached(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Dataset> {
        let opts = LoadOptions {
            cache: false,
            ..opts.clone()
        };
        Self::load_in_dirs(path, &opts, &[]).map(|(d, _)| d)
    }

    /// The dataset of what a loader read, with what it lacked synthesized.
    fn completed(loaded: Loaded, opts: &LoadOptions) -> Result<(Dataset, CacheStatus)> {
        let d = complete(loaded.parts, opts, loaded.labels_file.as_deref())?;
        Ok((d, loaded.status))
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.graph.num_nodes
    }

    /// Number of (directed, as loaded) edges.
    pub fn num_edges(&self) -> usize {
        self.graph.num_edges()
    }

    /// The features of node `v`.
    pub fn feature_row(&self, v: u32) -> &[f32] {
        let d = self.feat_dim;
        &self.features[v as usize * d..(v as usize + 1) * d]
    }

    /// Checks the array sizes only (a few reads, whatever the graph's size).
    pub fn validate_sizes(&self) -> Result<()> {
        let n = self.num_nodes();
        let g = &self.graph;
        let bad = |msg: String| Err(Error::invalid(format!("dataset {}: {msg}", self.name)));
        if n > u32::MAX as usize {
            return bad(format!("{n} nodes do not fit u32 ids"));
        }
        if g.indptr.len() != n + 1 || g.indptr[n] != g.indices.len() as u64 {
            return bad("graph indptr is not a valid offset array".into());
        }
        if g.edge_ids
            .as_ref()
            .is_some_and(|ids| ids.len() != g.indices.len())
        {
            return bad("graph edge ids are not edge positions".into());
        }
        if Some(self.features.len()) != n.checked_mul(self.feat_dim) {
            return bad(format!(
                "{} feature values for {n} nodes x {} columns",
                self.features.len(),
                self.feat_dim
            ));
        }
        if self.labels.len() != n {
            return bad(format!("{} labels for {n} nodes", self.labels.len()));
        }
        Ok(())
    }

    /// Checks every invariant the rest of the engine relies on (sizes, id ranges, offsets).
    pub fn validate(&self) -> Result<()> {
        let n = self.num_nodes();
        let g = &self.graph;
        let bad = |msg: String| Err(Error::invalid(format!("dataset {}: {msg}", self.name)));
        if n > u32::MAX as usize {
            return bad(format!("{n} nodes do not fit u32 ids"));
        }
        if g.indptr.len() != n + 1
            || g.indptr[0] != 0
            || g.indptr[n] != g.indices.len() as u64
            || g.indptr.par_windows(2).any(|w| w[0] > w[1])
        {
            return bad("graph indptr is not a valid offset array".into());
        }
        if g.indices.par_iter().any(|&s| s as usize >= n) {
            return bad("graph has a node id out of range".into());
        }
        if let Some(ids) = &g.edge_ids {
            let e = g.indices.len() as u64;
            if ids.len() != g.indices.len() || ids.par_iter().any(|&i| i >= e) {
                return bad("graph edge ids are not edge positions".into());
            }
        }
        if Some(self.features.len()) != n.checked_mul(self.feat_dim) {
            return bad(format!(
                "{} feature values for {n} nodes x {} columns",
                self.features.len(),
                self.feat_dim
            ));
        }
        if self.labels.len() != n {
            return bad(format!("{} labels for {n} nodes", self.labels.len()));
        }
        let c = self.num_classes;
        if self
            .labels
            .par_iter()
            .any(|&l| l != UNLABELED && l as usize >= c)
        {
            return bad(format!("a label is not below {c} classes"));
        }
        for (part, ids) in [
            ("train", &self.split.train),
            ("valid", &self.split.valid),
            ("test", &self.split.test),
        ] {
            if ids.par_iter().any(|&v| v as usize >= n) {
                return bad(format!("{part} split has a node id out of range"));
            }
        }
        Ok(())
    }
}

/// Independent seeds for the things synthesized from one user seed.
pub(crate) mod stream {
    pub const FEATURES: u64 = 1;
    pub const LABELS: u64 = 2;
    pub const SPLIT: u64 = 3;
}

/// A seed derived from `seed` for stream `id`.
pub(crate) fn sub_seed(seed: u64, id: u64) -> u64 {
    Rng::fork(seed, id).next_u64()
}

/// Two independent standard normals (Marsaglia's polar method: no sin/cos).
#[inline]
pub(crate) fn normal_pair(rng: &mut Rng) -> (f64, f64) {
    loop {
        let u = 2.0 * rng.uniform() - 1.0;
        let v = 2.0 * rng.uniform() - 1.0;
        let s = u * u + v * v;
        if s < 1.0 && s > 0.0 {
            let f = (-2.0 * s.ln() / s).sqrt();
            return (u * f, v * f);
        }
    }
}

/// `x` rounded to 4 decimals (half away from zero), as the f32 nearest to that decimal (so
/// `{}` prints it back in at most 4 decimals and it parses to the same bits).
#[inline]
pub(crate) fn round4(x: f64) -> f32 {
    let k = x * 1e4;
    if k.abs() < 16_777_216.0 {
        // Truncating `k ± 0.5` rounds without a libm call.
        (k + 0.5f64.copysign(k)) as i32 as f32 / 1e4f32
    } else {
        x as f32
    }
}

/// Rows per random-fill chunk (fixed, so output is independent of the thread count).
const FILL_ROWS: usize = 1024;

/// `n x dim` N(0,1) features rounded to 4 decimals.
pub fn random_features(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let seed = sub_seed(seed, stream::FEATURES);
    let mut x = vec![0f32; n * dim];
    if dim == 0 {
        return x;
    }
    x.par_chunks_mut(FILL_ROWS * dim)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = Rng::fork(seed, i as u64);
            for pair in chunk.chunks_mut(2) {
                let (a, b) = normal_pair(&mut rng);
                pair[0] = round4(a);
                if pair.len() > 1 {
                    pair[1] = round4(b);
                }
            }
        });
    x
}

/// `n` labels uniform over `classes` (which must be > 0 when n > 0).
pub fn random_labels(n: usize, classes: usize, seed: u64) -> Vec<u32> {
    let seed = sub_seed(seed, stream::LABELS);
    let mut y = vec![0u32; n];
    y.par_chunks_mut(FILL_ROWS * 64)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = Rng::fork(seed, i as u64);
            for l in chunk {
                *l = rng.below(classes as u64) as u32;
            }
        });
    y
}

/// A random split with exact sizes `round(frac * n)` (train at least 1 when n > 0); each
/// part is sorted. Fractions must be non-negative and sum to at most 1.
pub fn random_split(n: usize, fracs: (f64, f64, f64), seed: u64) -> Split {
    let count = |f: f64| ((f * n as f64).round() as usize).min(n);
    let train = count(fracs.0).max(usize::from(n > 0));
    let valid = count(fracs.1).min(n - train);
    let test = count(fracs.2).min(n - train - valid);
    let take = train + valid + test;
    // Partial Fisher-Yates: the first `take` positions are a uniform random sample.
    let mut rng = Rng::new(sub_seed(seed, stream::SPLIT));
    let mut ids: Vec<u32> = (0..n as u32).collect();
    for i in 0..take {
        let j = i + rng.below((n - i) as u64) as usize;
        ids.swap(i, j);
    }
    let part = |a: usize, b: usize| {
        let mut v = ids[a..b].to_vec();
        v.sort_unstable();
        v
    };
    Split {
        train: part(0, train),
        valid: part(train, train + valid),
        test: part(train + valid, take),
    }
}

/// Percentages of a split, for notes.
pub(crate) fn split_note(fracs: (f64, f64, f64)) -> String {
    format!(
        "{}% train / {}% valid / {}% test",
        fracs.0 * 100.0,
        fracs.1 * 100.0,
        fracs.2 * 100.0
    )
}

/// Fills in what a loader did not find, with notes, and checks the result. `labels_file`
/// names the label file in errors about `--classes`.
pub(crate) fn complete(
    p: Parts,
    opts: &LoadOptions,
    labels_file: Option<&Path>,
) -> Result<Dataset> {
    let missing = if p.edge_list {
        ["edge list", "edge list", "edge list"]
    } else {
        [
            "no node-feat.csv.gz",
            "no node-label.csv.gz",
            "no split/ folder",
        ]
    };
    complete_with(p, opts, labels_file, missing)
}

/// [`complete`], with `missing` naming what lacked the features, labels and split in the
/// notes.
fn complete_with(
    p: Parts,
    opts: &LoadOptions,
    labels_file: Option<&Path>,
    missing: [&str; 3],
) -> Result<Dataset> {
    let n = p.graph.num_nodes;
    if n == 0 {
        return Err(Error::invalid(format!(
            "dataset {}: no nodes (an empty graph cannot be trained on)",
            p.name
        )));
    }
    if let Some(c) = opts.classes {
        if c == 0 || c > MAX_CLASSES {
            return Err(Error::flag(
                "--classes",
                format!("--classes {c}: must be between 1 and {MAX_CLASSES}"),
            ));
        }
    }
    let mut notes = p.notes;
    let (features, feat_dim) = match p.features {
        Some(f) => {
            if let Some(d) = opts.feat_dim.filter(|&d| d != f.1) {
                notes.push(format!(
                    "--feat-dim {d} not used: the dataset has its own {} features",
                    f.1
                ));
            }
            f
        }
        None => {
            let dim = opts.feat_dim.unwrap_or(DEFAULT_FEAT_DIM);
            if dim == 0 || dim > MAX_FEAT_DIM {
                return Err(Error::flag(
                    "--feat-dim",
                    format!("--feat-dim {dim}: must be between 1 and {MAX_FEAT_DIM}"),
                ));
            }
            ensure_allocatable(
                n as u128 * dim as u128 * 4,
                &format!(
                    "dataset {}: {dim} synthesized features for {n} nodes",
                    p.name
                ),
            )?;
            notes.push(format!(
                "{}: {dim} random N(0,1) features (seed {})",
                missing[0], opts.seed
            ));
            (random_features(n, dim, opts.seed).into(), dim)
        }
    };
    let (labels, num_classes) = match p.labels {
        Some(y) => {
            let implied = y
                .par_iter()
                .filter(|&&l| l != UNLABELED)
                .max()
                .map_or(0, |&m| m as usize + 1);
            let c = match opts.classes {
                Some(c) if c < implied => {
                    // The first offending row, as a line of the label file.
                    let row = y
                        .iter()
                        .position(|&l| l != UNLABELED && l as usize >= c)
                        .unwrap_or(0);
                    let msg = format!(
                        "label {} not below the {c} classes asked for (--classes)",
                        y[row]
                    );
                    return Err(match labels_file {
                        Some(f) => Error::parse(f, row as u64 + 1, msg),
                        None => Error::invalid(format!("dataset {}: {msg}", p.name)),
                    });
                }
                Some(c) => c,
                None => implied,
            };
            (y, c)
        }
        None => {
            let c = opts.classes.unwrap_or(DEFAULT_CLASSES);
            ensure_allocatable(
                n as u128 * 4,
                &format!("dataset {}: synthesized labels for {n} nodes", p.name),
            )?;
            notes.push(format!(
                "{}: uniform random labels over {c} classes (seed {})",
                missing[1], opts.seed
            ));
            (random_labels(n, c, opts.seed).into(), c)
        }
    };
    let split = match p.split {
        Some(s) => s,
        None => {
            ensure_allocatable(
                n as u128 * 4,
                &format!("dataset {}: a synthesized split of {n} nodes", p.name),
            )?;
            notes.push(format!(
                "{}: random split {} (seed {})",
                missing[2],
                split_note(RANDOM_SPLIT),
                opts.seed
            ));
            random_split(n, RANDOM_SPLIT, opts.seed)
        }
    };
    let d = Dataset {
        name: p.name,
        graph: p.graph,
        features,
        feat_dim,
        labels,
        num_classes,
        split,
        notes,
    };
    if p.verified {
        // The stand-ins synthesized above are valid by construction.
        d.validate_sizes()?;
    } else {
        d.validate()?;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_split_sizes_and_disjointness() {
        let s = random_split(1000, RANDOM_SPLIT, 3);
        assert_eq!((s.train.len(), s.valid.len(), s.test.len()), (80, 100, 200));
        let mut all: Vec<u32> = [&s.train[..], &s.valid, &s.test].concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 380);
        assert_ne!(s, random_split(1000, RANDOM_SPLIT, 4));
        assert_eq!(random_split(1, RANDOM_SPLIT, 0).train, vec![0]);
        assert_eq!(random_split(0, RANDOM_SPLIT, 0), Split::default());
    }

    #[test]
    fn random_features_are_standard_and_round_trip_as_text() {
        let x = random_features(3000, 7, 1);
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / x.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        for &v in &x[..500] {
            let s = format!("{v}");
            assert!(s.trim_start_matches('-').len() <= 7, "{s}");
            assert_eq!(s.parse::<f32>().unwrap().to_bits(), v.to_bits());
        }
        let y = random_labels(5000, 4, 1);
        assert!(y.iter().all(|&l| l < 4));
        assert!((0..4).all(|c| y.iter().filter(|&&l| l == c).count() > 1100));
    }
}
