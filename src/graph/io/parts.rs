//! What a loader returns and what it is told: the raw [`Parts`] of a dataset (what the files
//! hold, nothing synthesized), the [`LoadOptions`], and the limits every loader checks. The
//! loaders in this folder produce parts; `graph/dataset.rs` completes them into a
//! [`crate::graph::Dataset`], so the loaders never depend on the dataset.

use std::path::PathBuf;

use crate::error::Result;
use crate::graph::array::Array;
use crate::graph::csr::Csr;

/// Label of a node without a class.
pub const UNLABELED: u32 = u32::MAX;
/// Most classes a dataset may have (from its labels or `--classes`): more is a malformed
/// label file, not a task a model could learn.
pub const MAX_CLASSES: usize = 1 << 20;
/// Train, validation and test node ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Training node ids.
    pub train: Vec<u32>,
    /// Validation node ids.
    pub valid: Vec<u32>,
    /// Test node ids.
    pub test: Vec<u32>,
}

/// How to load a dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Split folder under `DIR/split/`, e.g. `"per-class-20"`; `None`: the only one, or the
    /// first in alphabetical order.
    pub split: Option<String>,
    /// Width of synthesized features: used when the input has none ([`crate::graph::dataset::DEFAULT_FEAT_DIM`]
    /// when `None`); for a synthetic preset, replaces the preset's width.
    pub feat_dim: Option<usize>,
    /// `Some(c)`: the dataset has exactly `c` classes and a label `>= c` is an error; also
    /// the count of synthesized labels and a synthetic preset's class count. `None`:
    /// inferred (largest label + 1), or [`crate::graph::dataset::DEFAULT_CLASSES`] when labels are synthesized.
    pub classes: Option<usize>,
    /// Seed of everything synthesized (a synthetic spec's own `seed=` wins).
    pub seed: u64,
    /// Read and write the binary cache.
    pub cache: bool,
    /// The cache folder; `None`: `$ESPALIER_CACHE`, else beside the data (see
    /// [`crate::graph::io::cache`]).
    pub cache_dir: Option<PathBuf>,
    /// Where named datasets (`ogbn-arxiv`, `cora`) live; `None`: `$ESPALIER_DATA`, else
    /// `./dataset` (see [`crate::graph::resolve`]).
    pub data_root: Option<PathBuf>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            split: None,
            feat_dim: None,
            classes: None,
            seed: 0,
            cache: true,
            cache_dir: None,
            data_root: None,
        }
    }
}

/// Fails with an error naming `what` (the input and what the bytes would hold) instead of
/// exhausting the machine when `bytes` are more than the system can still give this
/// process ([`crate::admission`]: available memory, cgroup and `ulimit` limits).
pub(crate) fn ensure_allocatable(bytes: u128, what: &str) -> Result<()> {
    crate::admission::admit(bytes, || what.to_string())
}

/// Bytes of an in-edge CSR with edge ids.
pub(crate) fn csr_bytes(nodes: usize, edges: usize) -> u128 {
    (nodes as u128 + 1) * 8 + edges as u128 * 12
}

/// What a loader found; the pieces it did not find are synthesized by `dataset::complete`. This
/// is what the cache stores: nothing in it depends on the seed or the synthesized widths.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Parts {
    pub name: String,
    pub graph: Csr,
    /// `(values, columns)`.
    pub features: Option<(Array<f32>, usize)>,
    /// One label per node ([`UNLABELED`] for none), already checked against
    /// [`MAX_CLASSES`] and the node count.
    pub labels: Option<Array<u32>>,
    pub split: Option<Split>,
    /// Read from a plain edge-list file (else an OGB folder); words the notes.
    pub edge_list: bool,
    /// What the loader noticed (a label far above the others...), for the user.
    pub notes: Vec<String>,
    /// Every invariant of [`crate::graph::Dataset::validate`] was already checked (by the cache's reader,
    /// which streams the file once): `complete` then checks only the sizes, so that a
    /// mapped graph is not read whole again.
    pub verified: bool,
}
