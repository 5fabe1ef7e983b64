//! One error type for the whole crate. Everything a caller can get wrong (shapes, devices,
//! files, flags, memory budgets) comes back as an [`Error`], never as a panic.

use std::path::PathBuf;

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure espalier reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Operand shapes do not fit the op.
    #[error("{op}: shape mismatch: {msg}")]
    Shape {
        /// The op.
        op: &'static str,
        /// What does not fit.
        msg: String,
    },

    /// Operands live on different devices.
    #[error("{op}: operands on different devices ({lhs} and {rhs})")]
    DeviceMismatch {
        /// The op.
        op: &'static str,
        /// The first operand's device, by name (`cuda:0`).
        lhs: String,
        /// The other operand's device, by name.
        rhs: String,
    },

    /// An operand has the wrong element type.
    #[error("{op}: expected dtype {expected}, got {got}")]
    DType {
        /// The op.
        op: &'static str,
        /// The dtype the op takes.
        expected: &'static str,
        /// The operand's dtype.
        got: &'static str,
    },

    /// An allocation would pass the device's memory budget, or (with `budget` equal to
    /// [`NO_BUDGET`]) the system refused it.
    #[error(
        "out of memory on {device}: requested {requested} bytes with {live} bytes live, {}",
        budget_text(*.budget)
    )]
    OutOfMemory {
        /// The device that ran out, by name (`cuda:0`).
        device: String,
        /// Bytes asked for.
        requested: u64,
        /// Bytes allocated at the time.
        live: u64,
        /// The budget in bytes, or [`NO_BUDGET`].
        budget: u64,
    },

    /// A backend cannot be used on this machine, with the reason.
    #[error("backend {backend} unavailable: {reason}")]
    BackendUnavailable {
        /// The backend, e.g. `cuda:0`.
        backend: String,
        /// Why it cannot be used.
        reason: String,
    },

    /// A backend call failed (driver, shader or kernel compile errors carry their log).
    #[error("{backend}: {msg}")]
    Backend {
        /// The backend: `wgpu` or `cuda`.
        backend: &'static str,
        /// What failed.
        msg: String,
    },

    /// Misuse of the autograd graph (backward twice, backward from a non-scalar...).
    #[error("autograd: {0}")]
    Autograd(String),

    /// An argument is out of range or malformed (a flag's value: [`Error::InvalidFlag`]).
    /// Printed as its message alone: the message says what is wrong (and a message that
    /// quotes another error would otherwise repeat a prefix).
    #[error("{0}")]
    InvalidArgument(String),

    /// A command-line flag's value is out of range or malformed, or the flag does not apply
    /// to the run: `flag` says which, for a caller to match on; `msg` is the whole message
    /// and names the flag.
    #[error("{msg}")]
    InvalidFlag {
        /// The flag as the user types it, e.g. `--classes`.
        flag: &'static str,
        /// What is wrong, starting with the flag.
        msg: String,
    },

    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },

    /// A file's content is malformed; `line` is 1-based (0 when the whole file is at fault,
    /// and then no line number is shown: `path: msg`).
    #[error("{}", parse_message(path, *line, msg))]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line, 0 for the whole file.
        line: u64,
        /// What is wrong.
        msg: String,
    },
}

/// `path:line: msg`, or `path: msg` for a whole-file error (line 0).
fn parse_message(path: &std::path::Path, line: u64, msg: &str) -> String {
    if line == 0 {
        format!("{}: {msg}", path.display())
    } else {
        format!("{}:{line}: {msg}", path.display())
    }
}

/// The `budget` of an [`Error::OutOfMemory`] that no budget caused: the system allocator
/// (or the driver) refused the request.
pub const NO_BUDGET: u64 = u64::MAX;

fn budget_text(budget: u64) -> String {
    if budget == NO_BUDGET {
        "and the system refused it".to_string()
    } else {
        format!("budget {budget} bytes")
    }
}

/// Returns the value of `r`, or ends the process as the `espalier` binary does on an
/// error: `error: MESSAGE` on standard error and exit code 1. For a program's `main` (the
/// binary's and the examples'), where returning the error would print Rust's `Error: `
/// and the error's debug form instead of its message.
pub fn exit_on_error<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    }
}

impl Error {
    /// Shorthand for a shape error.
    pub fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Shape {
            op,
            msg: msg.into(),
        }
    }

    /// Shorthand for an invalid-argument error.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// Shorthand for an invalid-flag error: `flag` is e.g. `"--classes"`, `msg` the whole
    /// message (which names the flag).
    pub fn flag(flag: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidFlag {
            flag,
            msg: msg.into(),
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A parse error at a 1-based line of a file.
    pub fn parse(path: impl Into<PathBuf>, line: u64, msg: impl Into<String>) -> Self {
        Error::Parse {
            path: path.into(),
            line,
            msg: msg.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_error_carries_the_flag_and_prints_like_an_invalid_argument() {
        let e = Error::flag("--heads", "--heads must be at least 1");
        assert!(matches!(
            e,
            Error::InvalidFlag {
                flag: "--heads",
                ..
            }
        ));
        assert_eq!(
            e.to_string(),
            Error::invalid("--heads must be at least 1").to_string()
        );
    }

    #[test]
    fn a_message_quoting_another_error_has_no_repeated_prefix() {
        let inner = Error::invalid("byte size `xyz`: expected a number and a unit");
        let outer = Error::flag("--memory-budget", format!("--memory-budget: {inner}"));
        assert_eq!(
            outer.to_string(),
            "--memory-budget: byte size `xyz`: expected a number and a unit"
        );
    }

    #[test]
    fn a_parse_error_names_the_file_and_the_line() {
        let e = Error::parse("g.txt", 3, "negative id");
        assert_eq!(e.to_string(), "g.txt:3: negative id");
        assert_eq!(
            Error::parse("g.txt", 0, "empty").to_string(),
            "g.txt: empty"
        );
    }
}
