//! Messages go to the standard `logging` logger `espalier`, never straight to a stream:
//! what the command line prints on standard error (the cache's line, the loader's notes,
//! one line per epoch) is logged, and shown only where the application configures logging.

use pyo3::prelude::*;

fn say(py: Python<'_>, level: &str, msg: &str) -> PyResult<()> {
    py.import("logging")?
        .call_method1("getLogger", ("espalier",))?
        .call_method1(level, (msg,))?;
    Ok(())
}

/// Logs `msg` at INFO.
pub fn info(py: Python<'_>, msg: &str) -> PyResult<()> {
    say(py, "info", msg)
}

/// Logs `msg` at WARNING.
pub fn warning(py: Python<'_>, msg: &str) -> PyResult<()> {
    say(py, "warning", msg)
}
