//! `espalier.check`: `espalier check` from Python, each GPU device against the CPU
//! reference, with the command line's flags, table and JSON.

use clap::Parser;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use espalier_cli::check::{self as cli_check, CheckArgs};

use crate::errors::IntoPy;
use crate::{flags, log};

/// `espalier check`'s flags as a parser of their own (they are a part of the CLI's).
#[derive(Parser)]
#[command(name = "check")]
pub struct CheckCli {
    #[command(flatten)]
    pub args: CheckArgs,
}

/// Checks each GPU device against the CPU reference, as `espalier check --json` does, and
/// returns what that JSON holds: `records` (one per check: `device`, `group`, `name`,
/// `status` pass, fail, info or skip, `figures`, `detail`, `seconds`), `passed`, `failed`,
/// `devices`, `finished`. The keyword arguments are the command's flags: `device` (a name
/// or a list; default every GPU device), `quick`, `full`, `only` (groups), `data` (the
/// folder holding Cora). Each table line is logged at INFO on the `espalier` logger. A
/// failed check is a record with status `fail`, not an exception; a bad flag or naming the
/// CPU raises `ValueError`.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn check<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let a = flags::parse::<CheckCli>("check", kwargs, &[])?.args;
    let report = py
        .detach(|| {
            cli_check::run_checks(&a, &mut |line: &str| {
                Python::attach(|py| log::info(py, line)).ok();
            })
        })
        .py()?;
    let text = serde_json::to_string(&report.json)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}
