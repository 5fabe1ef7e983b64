//! The entries of a cache folder, as `espalier cache ls` lists them and `espalier cache
//! clear` removes them.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};

use super::layout::EXT;
use super::read::read_head;

/// One cache entry, as `espalier cache ls` shows it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The cache file.
    pub path: PathBuf,
    /// The dataset's name (folder or file name), empty when unreadable.
    pub dataset: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Last modification time, if the system gives one.
    pub modified: Option<SystemTime>,
    /// Node count from the header (0 when unreadable).
    pub nodes: u64,
    /// Edge count from the header (0 when unreadable).
    pub edges: u64,
    /// Why the entry cannot be used (another version, corrupt header), if so.
    pub problem: Option<String>,
}

/// The entries of a cache folder, by file name; an absent folder has none.
pub fn list(dir: &Path) -> Result<Vec<Entry>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|err| Error::io(dir, err))?;
        let path = e.path();
        if path.extension().is_none_or(|x| x != EXT) || !path.is_file() {
            continue;
        }
        let m = e.metadata().map_err(|err| Error::io(&path, err))?;
        let mut entry = Entry {
            path: path.clone(),
            dataset: String::new(),
            bytes: m.len(),
            modified: m.modified().ok(),
            nodes: 0,
            edges: 0,
            problem: None,
        };
        let head = File::open(&path)
            .map_err(|err| err.to_string())
            .and_then(|mut f| read_head(&mut f, m.len()));
        match head {
            Ok(h) => {
                entry.dataset = h.meta.name;
                entry.nodes = h.sizes[0];
                entry.edges = h.sizes[1];
            }
            Err(why) => entry.problem = Some(why),
        }
        out.push(entry);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Removes the entries of `dir` that `matches` accepts, and the temporary files of
/// writers that are gone (a killed run's partial entries; never one a live run is
/// writing); returns the number of files and bytes removed.
pub fn clear(dir: &Path, matches: &dyn Fn(&Entry) -> bool) -> Result<(usize, u64)> {
    let (mut files, mut bytes) = crate::atomic::remove_stale_temps(dir, Duration::ZERO);
    for e in list(dir)? {
        if !matches(&e) {
            continue;
        }
        fs::remove_file(&e.path).map_err(|err| Error::io(&e.path, err))?;
        files += 1;
        bytes += e.bytes;
    }
    Ok((files, bytes))
}
