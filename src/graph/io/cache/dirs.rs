//! Where the cache goes: `--cache-dir`, else `$ESPALIER_CACHE`, else beside the data with
//! the user's cache folders as fallbacks when the data folder cannot be written.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

/// The visible cache folder created beside the data.
pub const DIR_NAME: &str = "espalier-cache";

/// A cache folder to try, and why it is a fallback (`None`: the usual place).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheDir {
    /// The folder.
    pub path: PathBuf,
    /// Why it is a fallback; `None` for the usual place.
    pub fallback: Option<String>,
}

/// The cache folders to try for the dataset at `data`, in order: `explicit`
/// (`--cache-dir`) alone, else `$ESPALIER_CACHE` alone, else `espalier-cache/` beside the
/// data and the user's cache folders as fallbacks. `env` reads environment variables.
pub fn cache_dirs(
    data: &Path,
    explicit: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<CacheDir> {
    let usual = |p: PathBuf| CacheDir {
        path: p,
        fallback: None,
    };
    if let Some(d) = explicit {
        return vec![usual(d.to_path_buf())];
    }
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = var("ESPALIER_CACHE") {
        return vec![usual(d)];
    }
    let base = default_base(data);
    let mut dirs = Vec::new();
    let marked_read_only = |p: &Path| fs::metadata(p).map_or(true, |m| m.permissions().readonly());
    let beside = base.join(DIR_NAME);
    let why = if marked_read_only(&base) {
        format!("{} is read-only", base.display())
    } else {
        dirs.push(usual(beside.clone()));
        format!("{} could not be written", beside.display())
    };
    let fallback = |p: PathBuf| CacheDir {
        path: p,
        fallback: Some(why.clone()),
    };
    if let Some(d) = var("XDG_CACHE_HOME") {
        dirs.push(fallback(d.join("espalier")));
    }
    if let Some(h) = var("HOME") {
        dirs.push(fallback(h.join(".cache").join("espalier")));
    }
    dirs
}

/// The folder beside which the cache of `data` goes: the dataset folder itself, or the
/// folder of an edge-list file.
fn default_base(data: &Path) -> PathBuf {
    if data.is_dir() {
        data.to_path_buf()
    } else {
        match data.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }
}
