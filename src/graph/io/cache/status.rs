//! What the cache did during a load, and the line that tells the user.

use std::fs;
use std::path::{Path, PathBuf};

/// What the cache did during a load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// `LoadOptions::cache` was off (or the machine is big-endian).
    Disabled,
    /// Read from this file.
    Hit(PathBuf),
    /// Parsed, then written to this file; `fallback` says why it is not beside the data.
    Written {
        /// The cache file.
        path: PathBuf,
        /// Why it is not beside the data, if so.
        fallback: Option<String>,
    },
    /// A stale or corrupt file was found (reason), the data parsed again and written here.
    Rewritten {
        /// The cache file.
        path: PathBuf,
        /// What was wrong with the old one.
        reason: String,
    },
    /// Parsed, but no cache folder could be written (reasons).
    NotWritten(String),
}

impl CacheStatus {
    /// The entry this load read or wrote, if any.
    pub fn entry(&self) -> Option<&Path> {
        match self {
            CacheStatus::Hit(p)
            | CacheStatus::Written { path: p, .. }
            | CacheStatus::Rewritten { path: p, .. } => Some(p),
            CacheStatus::Disabled | CacheStatus::NotWritten(_) => None,
        }
    }

    /// The line to show the user, if any.
    pub fn message(&self) -> Option<String> {
        let size = |p: &Path| {
            fs::metadata(p).map_or(String::new(), |m| {
                format!(", {}", crate::bytes::format_bytes(m.len()))
            })
        };
        match self {
            CacheStatus::Disabled => None,
            CacheStatus::Hit(p) => Some(format!("dataset cache: read {}", p.display())),
            CacheStatus::Written { path, fallback } => Some(format!(
                "dataset cache: wrote {}{}{}",
                path.display(),
                size(path),
                fallback
                    .as_ref()
                    .map_or(String::new(), |f| format!(" (fallback: {f})"))
            )),
            CacheStatus::Rewritten { path, reason } => Some(format!(
                "dataset cache: rebuilt {}{} ({reason})",
                path.display(),
                size(path)
            )),
            CacheStatus::NotWritten(why) => Some(format!(
                "dataset cache: not written ({why}); the next load parses the files again \
                 (--cache-dir DIR picks a writable folder)"
            )),
        }
    }
}
