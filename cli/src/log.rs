//! How much the command line says on standard error: `error` (errors and the final line
//! only), `warn`, `info` (the default) or `debug` (per-phase detail). Set by
//! `ESPALIER_LOG`, overridden by `--quiet` (error) and `--verbose` (debug).

use std::sync::atomic::{AtomicU8, Ordering};

use espalier::error::{Error, Result};

/// A verbosity level, least talkative first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

impl std::str::FromStr for Level {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(Level::Error),
            "warn" | "warning" => Ok(Level::Warn),
            "info" => Ok(Level::Info),
            "debug" | "trace" => Ok(Level::Debug),
            _ => Err(Error::invalid(format!(
                "ESPALIER_LOG=`{s}`: expected error, warn, info or debug"
            ))),
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

/// Sets the level from `ESPALIER_LOG` (if set), then from the flags, which win.
pub fn init(quiet: bool, verbose: bool) -> Result<Level> {
    let mut level = match std::env::var("ESPALIER_LOG") {
        Ok(v) if !v.trim().is_empty() => v.parse()?,
        _ => Level::Info,
    };
    if quiet {
        level = Level::Error;
    }
    if verbose {
        level = Level::Debug;
    }
    LEVEL.store(level as u8, Ordering::Relaxed);
    Ok(level)
}

/// Whether messages of `level` are shown.
pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}
