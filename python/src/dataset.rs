//! `espalier.Dataset`: a graph with node features, labels and a train/valid/test split,
//! loaded by the command line's loaders (`Dataset.load`), made from arrays
//! (`Dataset.from_arrays`) or read from a PyTorch Geometric `Data` object by duck typing
//! (`Dataset.from_pyg`). Whatever it lacks is synthesized as the loaders synthesize it.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;

use espalier::graph::dataset::UNLABELED;
use espalier::graph::io::{Arrays, Labels};
use espalier::graph::{self, Csr, LoadOptions};
use espalier_cli::common::CommonArgs;
use espalier_cli::train::TrainArgs;

use crate::errors::IntoPy;
use crate::numpy::{asarray, hold, kind, new_array, Held};
use crate::{flags, log};

/// A graph with node features, labels and a train/valid/test split: what `espalier train
/// --dataset` loads. Make one with `Dataset.load`, `Dataset.from_arrays` or
/// `Dataset.from_pyg`.
#[pyclass(module = "espalier", frozen)]
pub struct Dataset {
    pub data: Arc<graph::Dataset>,
    /// The cache entry it was read from: its symmetrized graph is cached beside it.
    entry: Option<PathBuf>,
    /// The graphs sampled from, made on first use: as given, and symmetrized.
    graphs: [OnceLock<Arc<Csr>>; 2],
}

impl Dataset {
    fn new(data: graph::Dataset, entry: Option<PathBuf>) -> Dataset {
        Dataset {
            data: Arc::new(data),
            entry,
            graphs: Default::default(),
        }
    }

    /// The graph to sample from under `c`'s `--symmetrize`, made once per dataset.
    pub fn graph(&self, py: Python<'_>, c: &CommonArgs) -> PyResult<Arc<Csr>> {
        let slot = &self.graphs[usize::from(c.symmetrize)];
        if let Some(g) = slot.get() {
            return Ok(g.clone());
        }
        let (g, line) = py
            .detach(|| c.graph_of(&self.data, self.entry.as_deref()))
            .py()?;
        if let Some(line) = line {
            log::info(py, &line)?;
        }
        Ok(slot.get_or_init(|| Arc::new(g)).clone())
    }
}

/// Options of what is synthesized: width, classes and seed.
fn synth_options(feat_dim: Option<usize>, classes: Option<usize>, seed: u64) -> LoadOptions {
    LoadOptions {
        feat_dim,
        classes,
        seed,
        cache: false,
        ..LoadOptions::default()
    }
}

/// Which dtypes an argument takes, for the error naming it.
fn expect_kind(name: &str, a: &Bound<'_, PyAny>, kinds: &str, what: &str) -> PyResult<char> {
    let k = kind(a)?;
    if kinds.contains(k) {
        Ok(k)
    } else {
        Err(PyValueError::new_err(format!(
            "{name}: expected {what}, got dtype {}",
            a.getattr("dtype")?.str()?
        )))
    }
}

/// The shape of a NumPy array.
fn shape(a: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    a.getattr("shape")?.extract()
}

/// A split part: node ids, or a boolean mask (then with its length, checked against the
/// node count once it is known).
fn split_part(
    py: Python<'_>,
    name: &str,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(Held, Option<usize>)>> {
    let Some(obj) = obj else { return Ok(None) };
    let a = asarray(py, name, obj)?;
    let k = expect_kind(name, &a, "iub", "node ids or a boolean mask")?;
    let s = shape(&a)?;
    if s.len() != 1 {
        return Err(PyValueError::new_err(format!(
            "{name}: expected a 1-D array of node ids or a boolean mask, got shape {s:?}"
        )));
    }
    if k == 'b' {
        let ids = py.import("numpy")?.call_method1("flatnonzero", (&a,))?;
        return Ok(Some((hold(py, &ids, "int64")?, Some(s[0]))));
    }
    Ok(Some((hold(py, &a, "int64")?, None)))
}

/// The arguments of `Dataset.from_arrays`, as Python objects.
struct Given<'a, 'py> {
    edge_index: &'a Bound<'py, PyAny>,
    x: Option<&'a Bound<'py, PyAny>>,
    y: Option<&'a Bound<'py, PyAny>>,
    split: [Option<&'a Bound<'py, PyAny>>; 3],
    num_nodes: Option<usize>,
    name: String,
}

/// Checks the arrays' dtypes and shapes, then builds the dataset (checked as the OGB loader
/// checks its files).
fn from_given(py: Python<'_>, g: Given<'_, '_>, opts: &LoadOptions) -> PyResult<Dataset> {
    let ei = asarray(py, "edge_index", g.edge_index)?;
    expect_kind("edge_index", &ei, "iu", "integer node ids")?;
    let s = shape(&ei)?;
    if s.len() != 2 || s[0] != 2 {
        return Err(PyValueError::new_err(format!(
            "edge_index: expected shape [2, num_edges], got {s:?}"
        )));
    }
    let edges = hold(py, &ei, "int64")?;
    let features = match g.x {
        Some(x) => {
            let x = asarray(py, "x", x)?;
            expect_kind("x", &x, "fiub", "numbers")?;
            let s = shape(&x)?;
            if s.len() != 2 {
                return Err(PyValueError::new_err(format!(
                    "x: expected shape [num_nodes, num_features], got {s:?}"
                )));
            }
            Some((hold(py, &x, "float32")?.into_array::<f32>()?, s[1]))
        }
        None => None,
    };
    let labels = match g.y {
        Some(y) => {
            let y = asarray(py, "y", y)?;
            let k = expect_kind(
                "y",
                &y,
                "iuf",
                "integer labels (or floats with NaN for none)",
            )?;
            let s = shape(&y)?;
            if !(s.len() == 1 || (s.len() == 2 && s[1] == 1)) {
                return Err(PyValueError::new_err(format!(
                    "y: expected one label per node, shape [num_nodes] or [num_nodes, 1], got \
                     {s:?}"
                )));
            }
            Some((hold(py, &y, if k == 'f' { "float64" } else { "int64" })?, k))
        }
        None => None,
    };
    let names = ["train_idx", "valid_idx", "test_idx"];
    let mut parts = Vec::new();
    for (name, obj) in names.iter().zip(g.split) {
        parts.push(split_part(py, name, obj)?);
    }
    let e = edges.shape[1];
    let ids = edges.values::<i64>();
    let part = |k: usize| parts[k].as_ref().map(|(h, _)| h.values::<i64>());
    let arrays = Arrays {
        name: g.name,
        num_nodes: g.num_nodes,
        src: &ids[..e],
        dst: &ids[e..],
        features,
        labels: labels.as_ref().map(|(h, k)| match k {
            'f' => Labels::Float(h.values()),
            _ => Labels::Int(h.values()),
        }),
        train: part(0),
        valid: part(1),
        test: part(2),
    };
    let data = py
        .detach(|| graph::Dataset::from_arrays(arrays, opts))
        .py()?;
    let n = data.num_nodes();
    for (name, p) in names.iter().zip(&parts) {
        if let Some((_, Some(len))) = p {
            if *len != n {
                return Err(PyValueError::new_err(format!(
                    "{name}: a boolean mask of {len} entries for {n} nodes"
                )));
            }
        }
    }
    for note in &data.notes {
        log::warning(py, &format!("note: {note}"))?;
    }
    Ok(Dataset::new(data, None))
}

#[pymethods]
impl Dataset {
    /// Loads what `espalier train --dataset SPEC [--split SPLIT]` loads: a folder in OGB's
    /// raw layout, an edge-list file, a name under `data_root` (`ogbn-arxiv`, `cora`...) or
    /// `synthetic:PRESET[,scale=X][,seed=N]`, through the same binary cache. `feat_dim`,
    /// `classes` and `seed` are the CLI's `--feat-dim`, `--classes` and `--seed` for what is
    /// synthesized (the CLI's one `--seed` seeds both the data and the training: here
    /// `train` takes its own); the cache's and the loader's notes go to the `espalier`
    /// logger.
    #[staticmethod]
    #[pyo3(signature = (spec, split=None, *, feat_dim=None, classes=None, seed=0, cache=true, cache_dir=None, data_root=None))]
    #[allow(clippy::too_many_arguments)]
    fn load(
        py: Python<'_>,
        spec: String,
        split: Option<String>,
        feat_dim: Option<Bound<'_, PyAny>>,
        classes: Option<Bound<'_, PyAny>>,
        seed: u64,
        cache: bool,
        cache_dir: Option<PathBuf>,
        data_root: Option<PathBuf>,
    ) -> PyResult<Dataset> {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("seed", seed)?;
        let mut extra = vec![format!("--dataset={spec}")];
        for (flag, value) in [("--feat-dim", feat_dim), ("--classes", classes)] {
            if let Some(v) = value.filter(|v| !v.is_none()) {
                extra.push(format!("{flag}={}", v.str()?));
            }
        }
        if let Some(s) = split {
            extra.push(format!("--split={s}"));
        }
        if !cache {
            extra.push("--no-cache".into());
        }
        let mut a: TrainArgs = flags::parse("train", Some(&kwargs), &extra)?;
        a.common.cache_dir = cache_dir;
        a.common.data_root = data_root;
        let opts = a.common.load_options();
        let (data, status) = py.detach(|| graph::load_with_status(&spec, &opts)).py()?;
        if let Some(line) = status.message() {
            log::info(py, &line)?;
        }
        for note in &data.notes {
            log::warning(py, &format!("note: {note}"))?;
        }
        Ok(Dataset::new(data, status.entry().map(PathBuf::from)))
    }

    /// A dataset from arrays: `edge_index` of shape `[2, num_edges]` (sources, then
    /// destinations; any integer dtype), `x` of shape `[num_nodes, num_features]` (read in
    /// place when it is C-contiguous float32, else converted), `y` one label per node
    /// (integers, -1 for none, or floats with NaN for none), and the split as node ids or
    /// boolean masks. NumPy arrays or anything with `__array__` (CPU torch tensors). What is
    /// missing is synthesized from `seed` as for a folder that lacks it (features of width
    /// `feat_dim`, labels over `classes`, a random split). Ids, labels, widths and split
    /// overlaps are checked; a `ValueError` names the argument at fault. `x` shared in place
    /// must not be written while the dataset is in use.
    #[staticmethod]
    #[pyo3(signature = (edge_index, x=None, y=None, *, train_idx=None, valid_idx=None, test_idx=None, num_nodes=None, name="arrays".to_string(), feat_dim=None, classes=None, seed=0))]
    #[allow(clippy::too_many_arguments)]
    fn from_arrays(
        py: Python<'_>,
        edge_index: Bound<'_, PyAny>,
        x: Option<Bound<'_, PyAny>>,
        y: Option<Bound<'_, PyAny>>,
        train_idx: Option<Bound<'_, PyAny>>,
        valid_idx: Option<Bound<'_, PyAny>>,
        test_idx: Option<Bound<'_, PyAny>>,
        num_nodes: Option<usize>,
        name: String,
        feat_dim: Option<usize>,
        classes: Option<usize>,
        seed: u64,
    ) -> PyResult<Dataset> {
        let given = Given {
            edge_index: &edge_index,
            x: x.as_ref().filter(|v| !v.is_none()),
            y: y.as_ref().filter(|v| !v.is_none()),
            split: [
                train_idx.as_ref().filter(|v| !v.is_none()),
                valid_idx.as_ref().filter(|v| !v.is_none()),
                test_idx.as_ref().filter(|v| !v.is_none()),
            ],
            num_nodes,
            name,
        };
        from_given(py, given, &synth_options(feat_dim, classes, seed))
    }

    /// A dataset from a PyTorch Geometric `Data` object, read by duck typing (neither torch
    /// nor PyG is imported): `data.edge_index`, `data.x`, `data.y`, `data.num_nodes` and the
    /// split from `train_mask`/`val_mask`/`test_mask` (or `train_idx`/`valid_idx`/
    /// `test_idx`), as `Dataset.from_arrays` takes them (its argument names appear in
    /// errors). Tensors must be on the CPU.
    #[staticmethod]
    #[pyo3(signature = (data, *, name="pyg".to_string(), feat_dim=None, classes=None, seed=0))]
    fn from_pyg(
        py: Python<'_>,
        data: Bound<'_, PyAny>,
        name: String,
        feat_dim: Option<usize>,
        classes: Option<usize>,
        seed: u64,
    ) -> PyResult<Dataset> {
        let get = |attrs: &[&str]| {
            attrs
                .iter()
                .find_map(|a| data.getattr(*a).ok().filter(|v| !v.is_none()))
        };
        let edge_index = get(&["edge_index"]).ok_or_else(|| {
            PyTypeError::new_err(
                "from_pyg: the object has no edge_index (expected a PyTorch Geometric Data \
                 object, or anything with edge_index and optionally x, y, num_nodes and \
                 train_mask/val_mask/test_mask)",
            )
        })?;
        let (x, y) = (get(&["x"]), get(&["y"]));
        let split = [
            get(&["train_mask", "train_idx"]),
            get(&["val_mask", "valid_mask", "valid_idx", "val_idx"]),
            get(&["test_mask", "test_idx"]),
        ];
        for (part, v) in ["train", "valid", "test"].iter().zip(&split) {
            if let Some(v) = v {
                let s = shape(&asarray(py, part, v)?)?;
                if s.len() == 2 && s[1] > 1 {
                    return Err(PyValueError::new_err(format!(
                        "from_pyg: the {part} mask has shape {s:?}: several splits; pick one \
                         column (e.g. data.train_mask[:, 0]) and call Dataset.from_arrays"
                    )));
                }
            }
        }
        let num_nodes = match get(&["num_nodes"]) {
            Some(n) => Some(n.extract::<usize>()?),
            None => None,
        };
        let given = Given {
            edge_index: &edge_index,
            x: x.as_ref(),
            y: y.as_ref(),
            split: [split[0].as_ref(), split[1].as_ref(), split[2].as_ref()],
            num_nodes,
            name,
        };
        from_given(py, given, &synth_options(feat_dim, classes, seed))
    }

    /// The dataset's name (the folder's, the spec's, or the one given).
    #[getter]
    fn name(&self) -> String {
        self.data.name.clone()
    }

    /// Number of nodes.
    #[getter]
    fn num_nodes(&self) -> usize {
        self.data.num_nodes()
    }

    /// Number of edges as given (before `symmetrize` adds reverse edges).
    #[getter]
    fn num_edges(&self) -> usize {
        self.data.num_edges()
    }

    /// Features per node.
    #[getter]
    fn num_features(&self) -> usize {
        self.data.feat_dim
    }

    /// Number of classes.
    #[getter]
    fn num_classes(&self) -> usize {
        self.data.num_classes
    }

    /// Training node ids (int64, a copy).
    #[getter]
    fn train_idx<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ids(py, &self.data.split.train)
    }

    /// Validation node ids (int64, a copy).
    #[getter]
    fn valid_idx<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ids(py, &self.data.split.valid)
    }

    /// Test node ids (int64, a copy).
    #[getter]
    fn test_idx<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ids(py, &self.data.split.test)
    }

    /// What was synthesized or noticed while loading (also logged as warnings).
    #[getter]
    fn notes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.data.notes)
    }

    /// The edges as given, `[2, num_edges]` int64 (sources, then destinations; a copy).
    #[getter]
    fn edge_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = &self.data.graph;
        let e = g.num_edges();
        let mut out = vec![0i64; 2 * e];
        for v in 0..g.num_nodes {
            let (lo, hi) = g.range(v as u32);
            for p in lo..hi {
                let at = g.edge_ids.as_ref().map_or(p, |ids| ids[p] as usize);
                out[at] = g.indices[p] as i64;
                out[e + at] = v as i64;
            }
        }
        new_array(py, &out, &[2, e], "int64")
    }

    /// The features, `[num_nodes, num_features]` float32 (a copy).
    #[getter]
    fn x<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = &self.data;
        new_array(py, &d.features, &[d.num_nodes(), d.feat_dim], "float32")
    }

    /// The labels, `[num_nodes]` int64, -1 for a node without one (a copy).
    #[getter]
    fn y<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let y: Vec<i64> = self
            .data
            .labels
            .iter()
            .map(|&l| if l == UNLABELED { -1 } else { l as i64 })
            .collect();
        new_array(py, &y, &[y.len()], "int64")
    }

    fn __repr__(&self) -> String {
        let d = &self.data;
        format!(
            "Dataset(name={:?}, nodes={}, edges={}, features={}, classes={}, split={}/{}/{})",
            d.name,
            d.num_nodes(),
            d.num_edges(),
            d.feat_dim,
            d.num_classes,
            d.split.train.len(),
            d.split.valid.len(),
            d.split.test.len()
        )
    }
}

/// Node ids as an int64 array.
pub fn ids<'py>(py: Python<'py>, v: &[u32]) -> PyResult<Bound<'py, PyAny>> {
    let v: Vec<i64> = v.iter().map(|&x| x as i64).collect();
    new_array(py, &v, &[v.len()], "int64")
}
