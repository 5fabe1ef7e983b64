//! A load through the cache: find the dataset's files, build the key, read a matching
//! entry, else parse the files and write the entry to the first folder that takes it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::graph::io::parts::{LoadOptions, Parts};
use crate::graph::io::{edgelist, ogb};

use super::dirs::{cache_dirs, CacheDir};
use super::key::{file_name, file_state};
use super::layout::VERSION;
use super::read::read;
use super::status::CacheStatus;
use super::write::write;

/// What a load read, before `dataset` completes it.
pub(crate) struct Loaded {
    /// What the files (or the cache entry) hold.
    pub parts: Parts,
    /// The label file, for errors about `--classes`.
    pub labels_file: Option<PathBuf>,
    /// What the cache did.
    pub status: CacheStatus,
}

/// Reads `path` through the cache folders of [`cache_dirs`] (or without cache if
/// `opts.cache` is off).
pub(crate) fn load(path: &Path, opts: &LoadOptions) -> Result<Loaded> {
    let dirs = cache_dirs(path, opts.cache_dir.as_deref(), &|k| std::env::var_os(k));
    load_in(path, opts, &dirs)
}

/// Reads `path` through the given cache folders, tried in order.
pub(crate) fn load_in_dirs(path: &Path, opts: &LoadOptions, dirs: &[PathBuf]) -> Result<Loaded> {
    let dirs: Vec<CacheDir> = dirs
        .iter()
        .map(|p| CacheDir {
            path: p.clone(),
            fallback: None,
        })
        .collect();
    load_in(path, opts, &dirs)
}

/// What a path holds.
enum Source {
    Ogb(Box<ogb::OgbFiles>),
    EdgeList,
}

fn load_in(path: &Path, opts: &LoadOptions, dirs: &[CacheDir]) -> Result<Loaded> {
    let meta = fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let source = if meta.is_dir() {
        Source::Ogb(Box::new(ogb::OgbFiles::locate(
            path,
            opts.split.as_deref(),
        )?))
    } else if meta.is_file() {
        if let Some(split) = &opts.split {
            return Err(edgelist::no_split(path, split));
        }
        Source::EdgeList
    } else {
        return Err(Error::io(
            path,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "neither a dataset folder nor an edge-list file",
            ),
        ));
    };
    let labels_file = match &source {
        Source::Ogb(f) => f.labels.clone(),
        Source::EdgeList => None,
    };
    let parse = || match &source {
        Source::Ogb(files) => ogb::load_parts(path, files),
        Source::EdgeList => edgelist::load_parts(path),
    };
    let finish = |parts: Parts, status: CacheStatus| {
        Ok(Loaded {
            parts,
            labels_file: labels_file.clone(),
            status,
        })
    };
    if !opts.cache || cfg!(target_endian = "big") {
        return finish(parse()?, CacheStatus::Disabled);
    }

    let canonical = path.canonicalize().map_err(|e| Error::io(path, e))?;
    let mut key = vec![format!("espalier dataset cache v{VERSION}")];
    let inputs: Vec<(String, Option<&Path>)> = match &source {
        Source::Ogb(files) => {
            key.push(format!(
                "kind=ogb split={}",
                files.split.as_ref().map_or("-", |s| s.name.as_str())
            ));
            files.all()
        }
        Source::EdgeList => {
            key.push("kind=edgelist".to_string());
            let name = path
                .file_name()
                .map_or_else(|| "edges".into(), |s| s.to_string_lossy().into_owned());
            vec![(name, Some(path))]
        }
    };
    for (label, file) in inputs {
        key.push(file_state(&label, file)?);
    }
    let file_name = file_name(&canonical, &key[1]);

    let mut stale = None;
    for dir in dirs {
        crate::atomic::remove_stale_temps(&dir.path, crate::atomic::DEAD_WRITER_GRACE);
        let p = dir.path.join(&file_name);
        if !p.is_file() {
            continue;
        }
        match read(&p, Some(&key)) {
            Ok(parts) => return finish(parts, CacheStatus::Hit(p)),
            Err(reason) => {
                stale.get_or_insert(reason);
                let _ = fs::remove_file(&p);
            }
        }
    }

    let parts = parse()?;
    let mut failures = Vec::new();
    let mut status = None;
    for dir in dirs {
        match write(&dir.path, &file_name, &key, &parts) {
            Ok(p) => {
                status = Some(match stale.take() {
                    Some(reason) => CacheStatus::Rewritten { path: p, reason },
                    None => CacheStatus::Written {
                        path: p,
                        fallback: dir.fallback.clone(),
                    },
                });
                break;
            }
            Err(e) => failures.push(format!("{}: {e}", dir.path.display())),
        }
    }
    let status = status.unwrap_or_else(|| {
        if failures.is_empty() {
            failures.push("no cache folder (set --cache-dir or ESPALIER_CACHE)".to_string());
        }
        CacheStatus::NotWritten(failures.join("; "))
    });
    finish(parts, status)
}
