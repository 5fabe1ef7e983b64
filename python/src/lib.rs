//! espalier from Python: the extension module `espalier._espalier` behind the `espalier`
//! package (`python/espalier/`). It reads the same flag types as the command line
//! (`espalier_cli`), so keyword arguments, defaults, checks and messages are the CLI's.

mod check;
mod dataset;
mod errors;
mod flags;
mod log;
mod numpy;
mod partition;
mod run;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use espalier_cli::train::TrainArgs;

/// What this build can run on, as `espalier devices --json` prints it: `cpu`, `wgpu`
/// (adapters with their limits, or why there are none) and `cuda` (devices, or why there
/// are none).
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let report = py.detach(espalier_cli::devices::report);
    let text = serde_json::to_string(&report)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// The keyword arguments of `train`, `partition` or `check` with the command line's default of
/// each, as text (None: no default). The stubs' defaults are tested against it.
#[pyfunction]
fn _flag_defaults<'py>(py: Python<'py>, command: &str) -> PyResult<Bound<'py, PyDict>> {
    let list = match command {
        "train" => flags::defaults::<TrainArgs>("train"),
        "partition" => flags::defaults::<partition::PartitionCli>("partition"),
        "check" => flags::defaults::<check::CheckCli>("check"),
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "no command {other:?}: train, partition or check"
            )))
        }
    };
    let d = PyDict::new(py);
    for (k, v) in list {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// espalier: train graph neural networks in micro-batches under a memory budget.
#[pymodule]
#[pyo3(name = "_espalier")]
fn espalier_python(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<dataset::Dataset>()?;
    m.add_class::<run::Run>()?;
    m.add_class::<partition::Partition>()?;
    m.add_function(wrap_pyfunction!(run::train, m)?)?;
    m.add_function(wrap_pyfunction!(run::load, m)?)?;
    m.add_function(wrap_pyfunction!(partition::partition, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(check::check, m)?)?;
    m.add_function(wrap_pyfunction!(_flag_defaults, m)?)?;
    Ok(())
}
