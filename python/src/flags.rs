//! Keyword arguments as command-line flags: `train(hidden=64, fanouts=[10, 5])` is parsed as
//! `espalier train --hidden=64 --fanouts=10,5` by the command line's own parser, so that the
//! Python package and the CLI share every flag's name, default, check and message (one source
//! of truth: the clap types in `espalier_cli`).

use clap::{ArgAction, CommandFactory, Parser};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::from_clap;

/// Flags that are no keyword arguments: the dataset's (`Dataset.load` takes them), where the
/// command line writes its output and what it prints, MPI's sampler ranks, and what the
/// Python package does its own way (`checkpoint`/`resume`: `Run.save`, `espalier.load`;
/// `partition`'s `--no-run`, `--compare`, `--graph-only`, `--parts`, `--epochs`).
const NOT_KWARGS: &[&str] = &[
    "dataset",
    "data_root",
    "cache_dir",
    "split",
    "feat_dim",
    "classes",
    "no_cache",
    "json",
    "quiet",
    "verbose",
    "sampler_ranks",
    "checkpoint",
    "resume",
];

/// Flags of `espalier partition` that are its own (the Python `partition` has `k`,
/// `measure` and explicit seeds instead).
const PARTITION_ONLY: &[&str] = &["epochs", "no_run", "compare", "graph_only", "parts"];

/// Whether flag `id` of command `P` is a keyword argument.
fn is_kwarg(command: &str, id: &str) -> bool {
    let own_flag = command == "partition" && PARTITION_ONLY.contains(&id);
    !(NOT_KWARGS.contains(&id) || own_flag)
}

/// The keyword arguments of `command` (`train` or `partition`) with their command-line
/// defaults as the CLI's help shows them (`None`: no default, the flag is optional).
pub fn defaults<P: CommandFactory>(command: &str) -> Vec<(String, Option<String>)> {
    P::command()
        .get_arguments()
        .filter(|a| a.get_long().is_some() && is_kwarg(command, a.get_id().as_str()))
        .map(|a| {
            let d = a.get_default_values();
            // A switch (`--profile`) is off unless given.
            if d.is_empty() && matches!(a.get_action(), ArgAction::SetTrue) {
                return (a.get_id().to_string(), Some("false".to_string()));
            }
            let d = (!d.is_empty()).then(|| {
                d.iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            });
            (a.get_id().to_string(), d)
        })
        .collect()
}

/// The command line `command` with `kwargs` as flags (`extra` appended), parsed by `P`.
pub fn parse<P: Parser>(
    command: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
    extra: &[String],
) -> PyResult<P> {
    let cmd = P::command();
    let mut argv = vec![command.to_string()];
    for (key, value) in kwargs.into_iter().flatten() {
        let key: String = key.extract()?;
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == key.as_str() && is_kwarg(command, &key))
            .filter(|a| a.get_long().is_some())
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "{command}() got an unexpected keyword argument '{key}'"
                ))
            })?;
        if value.is_none() {
            continue;
        }
        let flag = format!("--{}", arg.get_long().unwrap_or_default());
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            let on = value
                .cast::<PyBool>()
                .map_err(|_| PyTypeError::new_err(format!("{key}: expected True or False")))?;
            if on.is_true() {
                argv.push(flag);
            }
        } else {
            argv.push(format!("{flag}={}", text(&key, &value)?));
        }
    }
    argv.extend(extra.iter().cloned());
    P::try_parse_from(argv).map_err(from_clap)
}

/// A keyword argument's value as the command line would spell it.
fn text(key: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(if b.is_true() { "true" } else { "false" }.to_string());
    }
    if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyString>() {
        return Ok(v.str()?.to_string());
    }
    if v.is_instance_of::<PyFloat>() {
        // The shortest text that reads back as the same float.
        return Ok(v.repr()?.to_string());
    }
    // Lists, tuples, NumPy arrays...: one value per element (`fanouts=[10, 5]`).
    let sequence = v.is_instance_of::<PyList>()
        || v.is_instance_of::<PyTuple>()
        || v.hasattr("__len__")? && v.hasattr("__iter__")?;
    if sequence {
        let parts = v
            .try_iter()?
            .map(|item| text(key, &item?))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(parts.join(","));
    }
    // NumPy scalars and the like: their integer or float value.
    if let Ok(i) = v.call_method0("__index__") {
        return Ok(i.str()?.to_string());
    }
    if let Ok(f) = v.call_method0("__float__") {
        return Ok(f.repr()?.to_string());
    }
    Err(PyTypeError::new_err(format!(
        "{key}: expected a number, a string, or a list of numbers, got {}",
        v.get_type().name()?
    )))
}
