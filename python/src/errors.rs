//! espalier's errors as Python exceptions, with the messages the command line prints after
//! `error: `: bad input and invalid flags raise `ValueError`, running out of memory
//! `MemoryError`, files `OSError`, and a backend that is missing or fails `RuntimeError`.

use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use espalier::error::Error;

/// The Python exception of `e`.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        Error::Io { source, .. } => {
            // `str()` stays the command line's message (which names the file); `errno` is
            // set as on Python's own OSErrors (setting `filename` would change `str()`).
            let err = PyOSError::new_err(msg);
            if let Some(code) = source.raw_os_error() {
                Python::attach(|py| err.value(py).setattr("errno", code)).ok();
            }
            err
        }
        Error::BackendUnavailable { .. } | Error::Backend { .. } | Error::Autograd(_) => {
            PyRuntimeError::new_err(msg)
        }
        // Shapes, dtypes, devices, arguments, flags and malformed files: what the caller
        // gave.
        _ => PyValueError::new_err(msg),
    }
}

/// Converts an espalier result.
pub trait IntoPy<T> {
    /// The value, or the Python exception of the error.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for espalier::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A flag value the command line's parser refused (`invalid value 'x' for '--hidden
/// <HIDDEN>'...`), as `ValueError` with the parser's message: its lines up to the usage,
/// joined.
pub fn from_clap(e: clap::Error) -> PyErr {
    let text = e.to_string();
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
        .map(str::trim)
        .collect();
    PyValueError::new_err(lines.join(" ").trim_start_matches("error: ").to_string())
}
