//! `espalier.partition`: one batch's micro-batches, as `espalier partition` makes them, for a
//! training loop of one's own.

use clap::Parser;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use espalier::partition::PartitionStats;
use espalier_cli::partition::{self as cli_partition, PartitionArgs};

use crate::dataset::{ids, Dataset};
use crate::errors::IntoPy;
use crate::flags;
use crate::run::node_ids;

/// `espalier partition`'s flags as a parser of their own (they are a part of the CLI's).
#[derive(Parser)]
#[command(name = "partition")]
pub struct PartitionCli {
    #[command(flatten)]
    pub args: PartitionArgs,
}

/// One batch split into micro-batches: each micro-batch's seeds, with the partition's
/// figures as `espalier partition --json` reports them.
#[pyclass(module = "espalier", frozen)]
pub struct Partition {
    stats: PartitionStats,
}

/// Samples the blocks of `seeds` (the dataset's training nodes when None) as batch 0 of
/// epoch 0 of a training run with the same flags, and splits them into micro-batches as
/// `espalier partition` does: `k` micro-batches (`--micro-batches`), or under
/// `memory_budget` the fewest that fit. Every other keyword argument is the command-line
/// flag of that name (`partitioner`, `model`, `fanouts`, `seed`...), with its default. With
/// `measure`, each micro-batch also runs forward and backward to measure its peak (no
/// optimizer step). For the training seeds it gives `espalier partition`'s micro-batches.
#[pyfunction]
#[pyo3(signature = (dataset, seeds=None, *, k=None, measure=false, **kwargs))]
pub fn partition(
    py: Python<'_>,
    dataset: &Bound<'_, Dataset>,
    seeds: Option<Bound<'_, PyAny>>,
    k: Option<Bound<'_, PyAny>>,
    measure: bool,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Partition> {
    let kwargs = match kwargs {
        Some(d) => d.copy()?,
        None => PyDict::new(py),
    };
    if let Some(k) = k.filter(|k| !k.is_none()) {
        if kwargs.contains("micro_batches")? {
            return Err(PyTypeError::new_err(
                "partition(): give k or micro_batches, not both",
            ));
        }
        kwargs.set_item("micro_batches", k)?;
    }
    let a = flags::parse::<PartitionCli>("partition", Some(&kwargs), &[])?.args;
    let c = &a.common;
    c.check().py()?;
    let ds = dataset.get();
    let data = &ds.data;
    let seeds = match seeds.filter(|s| !s.is_none()) {
        Some(s) => node_ids(py, "seeds", &s, data.num_nodes())?,
        None => data.split.train.clone(),
    };
    let graph = ds.graph(py, c)?;
    let config = cli_partition::config(c, data, 1).py()?;
    let stats = py
        .detach(|| {
            let mut trainer = c.trainer(data, graph, config)?;
            trainer.partition_seeds(0, 0, &seeds, measure)
        })
        .py()?;
    Ok(Partition { stats })
}

#[pymethods]
impl Partition {
    /// Number of micro-batches.
    #[getter]
    fn k(&self) -> usize {
        self.stats.k
    }

    /// The seeds of each micro-batch (int64 arrays), in the order they run.
    #[getter]
    fn parts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let arrays = self
            .stats
            .parts
            .iter()
            .map(|p| ids(py, p))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, arrays)
    }

    /// Σ input nodes of the micro-batches / input nodes of the whole batch (1: no
    /// neighbour is gathered twice).
    #[getter]
    fn redundancy(&self) -> f64 {
        self.stats.redundancy
    }

    /// The memory estimator's peak bytes of each micro-batch.
    #[getter]
    fn est_peak_bytes(&self) -> Vec<u64> {
        self.stats
            .batches
            .iter()
            .map(|b| b.est_peak_bytes)
            .collect()
    }

    /// Measured peak bytes of each micro-batch (None unless `measure`); the device's
    /// tracker is the process's, so other runs alive in it count too.
    #[getter]
    fn peak_bytes(&self) -> Option<Vec<u64>> {
        self.stats.batches.iter().map(|b| b.peak_bytes).collect()
    }

    /// Input nodes (feature rows gathered) of each micro-batch.
    #[getter]
    fn input_nodes(&self) -> Vec<usize> {
        self.stats.batches.iter().map(|b| b.input_nodes).collect()
    }

    /// The figures as `espalier partition --json` writes one entry of `micro_batches`.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = serde_json::to_string(&self.stats)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        py.import("json")?.call_method1("loads", (text,))
    }

    fn __len__(&self) -> usize {
        self.stats.parts.len()
    }

    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyAny>> {
        let n = self.stats.parts.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if !(0..n).contains(&j) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "micro-batch {i} of {n}"
            )));
        }
        ids(py, &self.stats.parts[j as usize])
    }

    fn __repr__(&self) -> String {
        format!(
            "Partition(k={}, partitioner={:?}, redundancy={:.3}, seeds={:?})",
            self.stats.k,
            self.stats.partitioner,
            self.stats.redundancy,
            self.stats.parts.iter().map(Vec::len).collect::<Vec<_>>()
        )
    }
}
