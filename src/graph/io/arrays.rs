//! A dataset from arrays in memory (what the Python package's `Dataset.from_arrays` and
//! `Dataset.from_pyg` hand over): the same [`Parts`] an OGB folder gives, checked as the OGB
//! loader checks its files, with errors naming the argument at fault (`edge_index`, `x`,
//! `y`, `train_idx`, `valid_idx`, `test_idx`, `num_nodes`) instead of a file and line.
//! `crate::graph::Dataset::from_arrays` completes them as it completes a loaded folder.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::array::Array;
use crate::graph::csr::Csr;
use crate::graph::io::parts::{
    csr_bytes, ensure_allocatable, Parts, Split, MAX_CLASSES, UNLABELED,
};

/// One label per node, as integers (-1: no label) or as floats (NaN: no label, as an empty
/// line or `NaN` in OGB's `node-label.csv.gz`).
#[derive(Clone, Copy, Debug)]
pub enum Labels<'a> {
    /// Integer labels, -1 for none; another negative one is an error.
    Int(&'a [i64]),
    /// Float labels: integral values, or NaN for a node without a label.
    Float(&'a [f64]),
}

impl Labels<'_> {
    fn len(&self) -> usize {
        match self {
            Labels::Int(v) => v.len(),
            Labels::Float(v) => v.len(),
        }
    }
}

/// A graph with optional features, labels and split, as arrays. Ids are `i64`, as PyTorch
/// Geometric's `edge_index` holds them, and are checked against the node count.
#[derive(Clone, Debug, Default)]
pub struct Arrays<'a> {
    /// The dataset's name (checkpoints record it, messages show it).
    pub name: String,
    /// Number of nodes; `None`: the rows of `x`, else the entries of `y`, else one more
    /// than the largest id in `edge_index`.
    pub num_nodes: Option<usize>,
    /// Source of each edge (`edge_index[0]`).
    pub src: &'a [i64],
    /// Destination of each edge (`edge_index[1]`), as many as `src`.
    pub dst: &'a [i64],
    /// Row-major features and their width (`x`); `None`: synthesized, as for a folder
    /// without `node-feat.csv.gz`.
    pub features: Option<(Array<f32>, usize)>,
    /// One label per node (`y`); `None`: synthesized.
    pub labels: Option<Labels<'a>>,
    /// Training node ids (`train_idx`); `None` for all three parts: a random split is
    /// synthesized, as for a folder without `split/`.
    pub train: Option<&'a [i64]>,
    /// Validation node ids (`valid_idx`); `None`: none.
    pub valid: Option<&'a [i64]>,
    /// Test node ids (`test_idx`); `None`: none.
    pub test: Option<&'a [i64]>,
}

/// Largest node count: ids are `u32`, and `u32::MAX` marks a missing label.
const MAX_NODES: u64 = u32::MAX as u64 - 1;

/// The parts these arrays hold, checked.
pub(crate) fn parts(a: Arrays<'_>) -> Result<Parts> {
    if a.src.len() != a.dst.len() {
        return Err(Error::invalid(format!(
            "edge_index: {} sources but {} destinations",
            a.src.len(),
            a.dst.len()
        )));
    }
    if a.src.is_empty() {
        return Err(Error::invalid(
            "edge_index: no edges: a graph without edges cannot train a GNN (each node would \
             see only itself)",
        ));
    }
    let n = num_nodes(&a)?;
    let src = ids("edge_index", Some(0), a.src, n)?;
    let dst = ids("edge_index", Some(1), a.dst, n)?;
    let features = match a.features {
        Some((x, dim)) => Some(features(x, dim, n)?),
        None => None,
    };
    let mut notes = Vec::new();
    let labels = match a.labels {
        Some(y) => {
            let (y, note) = labels(y, n)?;
            notes.extend(note);
            Some(Array::from(y))
        }
        None => None,
    };
    let split = split(a.train, a.valid, a.test, n)?;
    ensure_allocatable(csr_bytes(n as usize, src.len()), "graph")?;
    let graph = Csr::from_edges(n as usize, &src, &dst)?;
    Ok(Parts {
        name: a.name,
        graph,
        features,
        labels,
        split,
        edge_list: false,
        notes,
        verified: false,
    })
}

/// `num_nodes`, or what the arrays imply.
fn num_nodes(a: &Arrays<'_>) -> Result<u64> {
    let n = match (a.num_nodes, &a.features, &a.labels) {
        (Some(n), _, _) => n as u64,
        (None, Some((x, dim)), _) if *dim > 0 => (x.len() / dim) as u64,
        (None, _, Some(y)) => y.len() as u64,
        (None, _, _) => {
            let max = a.src.par_iter().chain(a.dst.par_iter()).copied().max();
            // A negative id is reported by name below; it implies no count.
            max.map_or(0, |m| m.max(-1) + 1) as u64
        }
    };
    if n == 0 {
        return Err(Error::invalid("num_nodes: 0 nodes: the dataset is empty"));
    }
    if n > MAX_NODES {
        return Err(Error::invalid(format!(
            "num_nodes: {n} nodes do not fit u32 node ids"
        )));
    }
    Ok(n)
}

/// `values` (row `row` of `what`, or all of it) as node ids below `n`; the first one out of
/// range is an error naming `what` and its position.
fn ids(what: &str, row: Option<usize>, values: &[i64], n: u64) -> Result<Vec<u32>> {
    if let Some(i) = values
        .par_iter()
        .position_first(|&v| v < 0 || v as u64 >= n)
    {
        let at = row.map_or(format!("{i}"), |r| format!("{r}, {i}"));
        return Err(Error::invalid(format!(
            "{what}[{at}]: node id {} out of range for {n} nodes",
            values[i]
        )));
    }
    ensure_allocatable(values.len() as u128 * 4, what)?;
    Ok(values.par_iter().map(|&v| v as u32).collect())
}

/// The feature matrix: `n` rows of `dim` finite values.
fn features(x: Array<f32>, dim: usize, n: u64) -> Result<(Array<f32>, usize)> {
    if dim == 0 {
        return Err(Error::invalid("x: 0 feature columns"));
    }
    let rows = x.len() / dim;
    if x.len() % dim != 0 || rows as u64 != n {
        return Err(Error::invalid(format!(
            "x: {rows} rows but there are {n} nodes"
        )));
    }
    if let Some(i) = x.par_iter().position_first(|v| !v.is_finite()) {
        return Err(Error::invalid(format!(
            "x[{}, {}]: {} is not a finite number",
            i / dim,
            i % dim,
            x[i]
        )));
    }
    Ok((x, dim))
}

/// One label per node below [`MAX_CLASSES`] and the node count, with the note the OGB loader
/// gives when the largest label stands far above the others.
fn labels(y: Labels<'_>, n: u64) -> Result<(Vec<u32>, Option<String>)> {
    if y.len() as u64 != n {
        return Err(Error::invalid(format!(
            "y: {} labels but there are {n} nodes",
            y.len()
        )));
    }
    let bad = |i: usize, msg: String| Error::invalid(format!("y[{i}]: {msg}"));
    let out: Vec<u32> = match y {
        Labels::Int(v) => {
            if let Some(i) = v.par_iter().position_first(|&l| l < -1) {
                return Err(bad(
                    i,
                    format!("negative label {} (-1 marks a node without a label)", v[i]),
                ));
            }
            if let Some(i) = v.par_iter().position_first(|&l| l >= MAX_CLASSES as i64) {
                return Err(bad(
                    i,
                    format!(
                        "label {} implies {} classes, above the limit of {MAX_CLASSES}",
                        v[i],
                        v[i] as u128 + 1
                    ),
                ));
            }
            v.par_iter()
                .map(|&l| if l == -1 { UNLABELED } else { l as u32 })
                .collect()
        }
        Labels::Float(v) => {
            let wrong = |l: f64| !l.is_nan() && (l < 0.0 || l.fract() != 0.0 || l.is_infinite());
            if let Some(i) = v.par_iter().position_first(|&l| wrong(l)) {
                let what = if v[i] < 0.0 {
                    "negative label"
                } else {
                    "not an integer label"
                };
                return Err(bad(i, format!("{what} {}", v[i])));
            }
            if let Some(i) = v.par_iter().position_first(|&l| l >= MAX_CLASSES as f64) {
                return Err(bad(
                    i,
                    format!(
                        "label {} implies more than {MAX_CLASSES} classes (the limit)",
                        v[i]
                    ),
                ));
            }
            v.par_iter()
                .map(|&l| if l.is_nan() { UNLABELED } else { l as u32 })
                .collect()
        }
    };
    let Some((row, &max)) = out
        .iter()
        .enumerate()
        .filter(|(_, &l)| l != UNLABELED)
        .max_by_key(|(i, &l)| (l, std::cmp::Reverse(*i)))
    else {
        return Ok((out, None));
    };
    if max as u64 >= n {
        return Err(bad(
            row,
            format!(
                "label {max} implies {} classes, more than the {n} nodes",
                max as u64 + 1
            ),
        ));
    }
    let next = out
        .iter()
        .filter(|&&l| l != UNLABELED && l != max)
        .max()
        .map_or(0, |&l| l as u64 + 1);
    let note = (max as u64 >= 2 * next + 16).then(|| {
        format!(
            "y[{row}]: label {max} is far above the others (the next largest is {}): {} \
             classes, most of them without a node",
            next.saturating_sub(1),
            max as u64 + 1
        )
    });
    Ok((out, note))
}

/// The split; an id out of range, twice in one part or in two parts is an error naming the
/// parts. All three `None`: no split (one is synthesized).
fn split(
    train: Option<&[i64]>,
    valid: Option<&[i64]>,
    test: Option<&[i64]>,
    n: u64,
) -> Result<Option<Split>> {
    if train.is_none() && valid.is_none() && test.is_none() {
        return Ok(None);
    }
    let names = ["train_idx", "valid_idx", "test_idx"];
    let mut parts: [Vec<u32>; 3] = Default::default();
    for (k, given) in [train, valid, test].into_iter().enumerate() {
        parts[k] = ids(names[k], None, given.unwrap_or(&[]), n)?;
    }
    if parts[0].is_empty() {
        return Err(Error::invalid(
            "train_idx: no training nodes (give train_idx, or no split at all for a random one)",
        ));
    }
    ensure_allocatable(n as u128 * 8, "split check")?;
    // Where each node was first seen: 0 none, else part index + 1 and its position + 1.
    let mut seen: Vec<(u8, u64)> = vec![(0, 0); n as usize];
    for (k, ids) in parts.iter().enumerate() {
        for (i, &v) in ids.iter().enumerate() {
            let slot = &mut seen[v as usize];
            if slot.0 != 0 {
                let (other, at) = (slot.0 as usize - 1, slot.1 - 1);
                let msg = if other == k {
                    format!("node {v} listed twice (first at {}[{at}])", names[k])
                } else {
                    format!(
                        "node {v} is also in {}[{at}]: the split parts overlap",
                        names[other]
                    )
                };
                return Err(Error::invalid(format!("{}[{i}]: {msg}", names[k])));
            }
            *slot = (k as u8 + 1, i as u64 + 1);
        }
    }
    let [train, valid, test] = parts;
    Ok(Some(Split { train, valid, test }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> Arrays<'static> {
        Arrays {
            name: "path".into(),
            src: &[0, 1, 2],
            dst: &[1, 2, 3],
            ..Default::default()
        }
    }

    fn err(a: Arrays<'_>) -> String {
        parts(a).unwrap_err().to_string()
    }

    #[test]
    fn node_count_comes_from_the_largest_id_without_x_or_y() {
        let p = parts(path()).unwrap();
        assert_eq!(p.graph.num_nodes, 4);
        assert_eq!(p.graph, Csr::from_edges(4, &[0, 1, 2], &[1, 2, 3]).unwrap());
        assert!(p.split.is_none() && p.features.is_none() && p.labels.is_none());
    }

    #[test]
    fn bad_ids_name_the_argument_and_position() {
        let a = Arrays {
            dst: &[1, -2, 3],
            ..path()
        };
        assert!(err(a).contains("edge_index[1, 1]: node id -2 out of range for 4 nodes"));
        let a = Arrays {
            num_nodes: Some(3),
            ..path()
        };
        assert!(err(a).contains("edge_index[1, 2]: node id 3 out of range for 3 nodes"));
        let a = Arrays {
            train: Some(&[0, 1]),
            test: Some(&[2, 1]),
            ..path()
        };
        assert!(
            err(a).contains("test_idx[1]: node 1 is also in train_idx[1]: the split parts overlap"),
        );
        let a = Arrays {
            train: Some(&[0, 0]),
            ..path()
        };
        assert!(err(a).contains("train_idx[1]: node 0 listed twice (first at train_idx[0])"));
    }

    #[test]
    fn labels_follow_the_ogb_loader_rules() {
        let a = Arrays {
            labels: Some(Labels::Float(&[0.0, f64::NAN, 1.0, 2.0])),
            ..path()
        };
        let y = parts(a).unwrap().labels.unwrap();
        assert_eq!(y, vec![0, UNLABELED, 1, 2]);
        let a = Arrays {
            labels: Some(Labels::Int(&[0, -1, 1, 2])),
            ..path()
        };
        assert_eq!(parts(a).unwrap().labels.unwrap(), vec![0, UNLABELED, 1, 2]);
        let a = Arrays {
            labels: Some(Labels::Int(&[0, -2, 1, 2])),
            ..path()
        };
        assert!(err(a).contains("y[1]: negative label -2"));
        let a = Arrays {
            labels: Some(Labels::Float(&[0.0, 0.5, 1.0, 2.0])),
            ..path()
        };
        assert!(err(a).contains("y[1]: not an integer label 0.5"));
        let a = Arrays {
            labels: Some(Labels::Int(&[0, 1, 9, 2])),
            ..path()
        };
        assert!(err(a).contains("y[2]: label 9 implies 10 classes, more than the 4 nodes"));
        let a = Arrays {
            labels: Some(Labels::Int(&[0, 1])),
            num_nodes: Some(4),
            ..path()
        };
        assert!(err(a).contains("y: 2 labels but there are 4 nodes"));
    }

    #[test]
    fn features_must_be_finite_rows_of_every_node() {
        let x = |v: Vec<f32>, d| Some((Array::from(v), d));
        let a = Arrays {
            features: x(vec![0.0; 6], 2),
            num_nodes: Some(4),
            ..path()
        };
        assert!(err(a).contains("x: 3 rows but there are 4 nodes"));
        let mut v = vec![0.0; 8];
        v[5] = f32::NAN;
        let a = Arrays {
            features: x(v, 2),
            ..path()
        };
        assert!(err(a).contains("x[2, 1]: NaN is not a finite number"));
    }
}
