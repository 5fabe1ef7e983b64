//! Binary cache of loaded datasets, so that re-loading a large graph costs a file read
//! instead of decompressing and parsing text.
//!
//! **Where.** `DIR/.espalier-cache/` next to the data (for an edge-list file, next to the
//! file) when that can be written; otherwise `$ESPALIER_CACHE_DIR`, then
//! `$XDG_CACHE_HOME/espalier`, then `$HOME/.cache/espalier`. A data folder whose permission
//! bits forbid writing is skipped even when the process could write it anyway (root), so a
//! read-only shared data set is never written to.
//!
//! **Key.** The file name hashes the dataset's canonical path and the load options that
//! change the content (split, feat_dim, classes, seed). Inside, the full key also lists every
//! input file with its size and modification time (or its absence). A file whose key,
//! sizes, checksum or invariants do not match is stale or corrupt: it is ignored, removed,
//! and rewritten after a fresh parse. Files are written under a temporary name and renamed,
//! so a reader never sees half a file.
//!
//! **Format** (little-endian; the cache is disabled on big-endian machines):
//!
//! ```text
//! 0   magic "ESPLCACH"          8   version u32, flags u32 (bit 0: edge ids stored)
//! 16  num_nodes u64   24 num_edges u64   32 feat_dim u64   40 num_classes u64
//! 48  train u64       56 valid u64       64 test u64       72 meta_len u64
//! 80  checksum u64 (of everything after the header)
//! 88  meta: JSON {key, name, notes}
//!     indptr u64[n+1], indices u32[E], edge_ids u64[E] (if flagged),
//!     features f32[n*feat_dim], labels u32[n], train u32[], valid u32[], test u32[]
//! ```

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::dataset::{Dataset, LoadOptions, Split};
use crate::graph::io::{edgelist, ogb};
use crate::rng::mix64;

const MAGIC: &[u8; 8] = b"ESPLCACH";
/// Bump when the format or the loaders' semantics change: old files then read as stale.
const VERSION: u32 = 1;
const HEADER: usize = 88;
const FLAG_EDGE_IDS: u32 = 1;

/// What the cache did during a load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// `LoadOptions::cache` was off (or the machine is big-endian).
    Disabled,
    /// Read from this file.
    Hit(PathBuf),
    /// Parsed, then written to this file.
    Written(PathBuf),
    /// A stale or corrupt file was found (reason), the data parsed again and written here.
    Rewritten { path: PathBuf, reason: String },
    /// Parsed, but no cache folder could be written (reasons).
    NotWritten(String),
}

/// The cache folders to try for the dataset at `data`, in order; `env` reads environment
/// variables.
pub fn cache_dirs(data: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let base = if data.is_dir() {
        data.to_path_buf()
    } else {
        match data.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    };
    let mut dirs = Vec::new();
    let marked_read_only = |p: &Path| fs::metadata(p).map_or(true, |m| m.permissions().readonly());
    if !marked_read_only(&base) {
        dirs.push(base.join(".espalier-cache"));
    }
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = var("ESPALIER_CACHE_DIR") {
        dirs.push(d);
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        dirs.push(d.join("espalier"));
    }
    if let Some(h) = var("HOME") {
        dirs.push(h.join(".cache").join("espalier"));
    }
    dirs
}

/// Loads `path` through the cache folders of [`cache_dirs`] (or without cache if
/// `opts.cache` is off).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<(Dataset, CacheStatus)> {
    let dirs = cache_dirs(path, &|k| std::env::var_os(k));
    load_in_dirs(path, opts, &dirs)
}

/// Loads `path` through the given cache folders, tried in order.
pub fn load_in_dirs(
    path: &Path,
    opts: &LoadOptions,
    dirs: &[PathBuf],
) -> Result<(Dataset, CacheStatus)> {
    if !opts.cache || cfg!(target_endian = "big") {
        return Ok((Dataset::load_uncached(path, opts)?, CacheStatus::Disabled));
    }
    let meta = fs::metadata(path).map_err(|e| Error::io(path, e))?;
    // The OGB files found before parsing; `None` for an edge-list file.
    let ogb_files = if meta.is_dir() {
        Some(ogb::OgbFiles::locate(path, opts.split.as_deref())?)
    } else {
        None
    };
    let canonical = path.canonicalize().map_err(|e| Error::io(path, e))?;
    let ident = format!(
        "espalier dataset cache v{VERSION}\nsource={}\nkind={}\nsplit={:?}\nfeat_dim={}\nclasses={:?}\nseed={}\n",
        canonical.display(),
        if meta.is_dir() { "ogb" } else { "edgelist" },
        opts.split,
        opts.feat_dim,
        opts.classes,
        opts.seed
    );
    let inputs: Vec<(String, Option<&Path>)> = match &ogb_files {
        Some(files) => files.all(),
        None => vec![("edges".to_string(), Some(path))],
    };
    let mut key = ident.clone();
    for (label, file) in inputs {
        key.push_str(&file_state(&label, file)?);
    }
    let stem: String = canonical
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let file_name = format!("{stem}-{:016x}.espc", fnv1a(ident.as_bytes()));

    let mut stale = None;
    for dir in dirs {
        let p = dir.join(&file_name);
        if !p.is_file() {
            continue;
        }
        match read(&p, &key) {
            Ok(d) => return Ok((d, CacheStatus::Hit(p))),
            Err(reason) => {
                stale.get_or_insert(format!("{}: {reason}", p.display()));
                let _ = fs::remove_file(&p);
            }
        }
    }

    let d = match &ogb_files {
        Some(files) => ogb::load_files(path, files, opts)?,
        None => edgelist::load(path, opts)?,
    };
    let mut failures = Vec::new();
    for dir in dirs {
        match write(dir, &file_name, &key, &d) {
            Ok(p) => {
                let status = match stale {
                    Some(reason) => CacheStatus::Rewritten { path: p, reason },
                    None => CacheStatus::Written(p),
                };
                return Ok((d, status));
            }
            Err(e) => failures.push(format!("{}: {e}", dir.display())),
        }
    }
    if failures.is_empty() {
        failures.push("no cache folder (set ESPALIER_CACHE_DIR)".to_string());
    }
    Ok((d, CacheStatus::NotWritten(failures.join("; "))))
}

/// One line of the key: the file's size and modification time, or its absence.
fn file_state(label: &str, file: Option<&Path>) -> Result<String> {
    let Some(p) = file else {
        return Ok(format!("{label}: absent\n"));
    };
    let m = fs::metadata(p).map_err(|e| Error::io(p, e))?;
    let mtime = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or("unknown".to_string(), |d| {
            format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
        });
    Ok(format!(
        "{label}: {} size={} mtime={mtime}\n",
        p.display(),
        m.len()
    ))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A fast parallel hash of a byte string (independent of the thread count).
fn hash_bytes(bytes: &[u8]) -> u64 {
    const P: u64 = 0x9E37_79B9_7F4A_7C15;
    let parts: Vec<u64> = bytes
        .par_chunks(1 << 20)
        .map(|c| {
            let mut lanes = [1u64, 2, 3, 4];
            let mut blocks = c.chunks_exact(32);
            for b in &mut blocks {
                for (i, lane) in lanes.iter_mut().enumerate() {
                    let w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
                    *lane = (*lane ^ w).wrapping_mul(P).rotate_left(29);
                }
            }
            let tail = blocks
                .remainder()
                .iter()
                .fold(0u64, |h, &b| (h ^ b as u64).wrapping_mul(P));
            lanes
                .iter()
                .fold(tail, |h, &l| mix64(h ^ l).wrapping_add(P))
        })
        .collect();
    parts
        .iter()
        .fold(bytes.len() as u64, |h, &x| mix64(h.wrapping_add(x)))
}

#[derive(Serialize, Deserialize)]
struct Meta {
    key: String,
    name: String,
    notes: Vec<String>,
}

/// Distinguishes temporary files of concurrent writers in one process.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn write(dir: &Path, file_name: &str, key: &str, d: &Dataset) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let path = dir.join(file_name);
    let tmp = dir.join(format!(
        ".{file_name}.{}-{}.tmp",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = write_to(&tmp, key, d).and_then(|()| fs::rename(&tmp, &path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

fn write_to(tmp: &Path, key: &str, d: &Dataset) -> io::Result<()> {
    let meta = serde_json::to_vec(&Meta {
        key: key.to_string(),
        name: d.name.clone(),
        notes: d.notes.clone(),
    })
    .map_err(io::Error::other)?;
    let g = &d.graph;
    let mut arrays: Vec<&[u8]> = vec![
        &meta,
        bytemuck::cast_slice(&g.indptr),
        bytemuck::cast_slice(&g.indices),
    ];
    if let Some(ids) = &g.edge_ids {
        arrays.push(bytemuck::cast_slice(ids));
    }
    arrays.extend([
        bytemuck::cast_slice::<f32, u8>(&d.features),
        bytemuck::cast_slice(&d.labels),
        bytemuck::cast_slice(&d.split.train),
        bytemuck::cast_slice(&d.split.valid),
        bytemuck::cast_slice(&d.split.test),
    ]);
    let checksum = arrays
        .iter()
        .fold(VERSION as u64, |h, a| mix64(h ^ hash_bytes(a)));
    let flags = if g.edge_ids.is_some() {
        FLAG_EDGE_IDS
    } else {
        0
    };
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&flags.to_le_bytes());
    for v in [
        d.num_nodes(),
        d.num_edges(),
        d.feat_dim,
        d.num_classes,
        d.split.train.len(),
        d.split.valid.len(),
        d.split.test.len(),
        meta.len(),
    ] {
        header.extend_from_slice(&(v as u64).to_le_bytes());
    }
    header.extend_from_slice(&checksum.to_le_bytes());
    let mut w = BufWriter::with_capacity(1 << 20, File::create(tmp)?);
    w.write_all(&header)?;
    for a in arrays {
        w.write_all(a)?;
    }
    // No fsync: a file cut short by a crash fails its size or checksum test and is rewritten.
    w.flush()
}

/// Reads a cache file; `Err` says why it cannot be trusted.
fn read(path: &Path, key: &str) -> std::result::Result<Dataset, String> {
    let io = |e: io::Error| format!("read error: {e}");
    let mut f = File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut h = [0u8; HEADER];
    f.read_exact(&mut h)
        .map_err(|_| "truncated header".to_string())?;
    if &h[..8] != MAGIC {
        return Err("not an espalier cache file".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
    if u32_at(8) != VERSION {
        return Err(format!("format version {} (expected {VERSION})", u32_at(8)));
    }
    let flags = u32_at(12);
    let [n, e, dim, classes, ntr, nva, nte, meta_len, checksum] =
        [16, 24, 32, 40, 48, 56, 64, 72, 80].map(u64_at);
    // Sizes must add up to the file length before anything is allocated.
    let expected = (|| {
        let ids = if flags & FLAG_EDGE_IDS != 0 { e } else { 0 };
        let words4 = e
            .checked_add(n.checked_mul(dim)?)?
            .checked_add(n)?
            .checked_add(ntr)?
            .checked_add(nva)?
            .checked_add(nte)?;
        (HEADER as u64)
            .checked_add(meta_len)?
            .checked_add(n.checked_add(1)?.checked_mul(8)?)?
            .checked_add(ids.checked_mul(8)?)?
            .checked_add(words4.checked_mul(4)?)
    })();
    if expected != Some(len) {
        return Err(format!("size {len} does not match its header (truncated?)"));
    }
    let mut meta = vec![0u8; meta_len as usize];
    f.read_exact(&mut meta).map_err(io)?;
    let m: Meta = serde_json::from_slice(&meta).map_err(|e| format!("bad metadata: {e}"))?;
    if m.key != key {
        return Err("stale: input files or options changed".into());
    }
    fn vec_of<T: bytemuck::Pod>(f: &mut File, count: u64) -> io::Result<Vec<T>> {
        let mut v = vec![T::zeroed(); count as usize];
        f.read_exact(bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }
    let indptr: Vec<u64> = vec_of(&mut f, n + 1).map_err(io)?;
    let indices: Vec<u32> = vec_of(&mut f, e).map_err(io)?;
    let edge_ids: Option<Vec<u64>> = if flags & FLAG_EDGE_IDS != 0 {
        Some(vec_of(&mut f, e).map_err(io)?)
    } else {
        None
    };
    let features: Vec<f32> = vec_of(&mut f, n * dim).map_err(io)?;
    let labels: Vec<u32> = vec_of(&mut f, n).map_err(io)?;
    let train: Vec<u32> = vec_of(&mut f, ntr).map_err(io)?;
    let valid: Vec<u32> = vec_of(&mut f, nva).map_err(io)?;
    let test: Vec<u32> = vec_of(&mut f, nte).map_err(io)?;
    let mut arrays: Vec<&[u8]> = vec![
        &meta,
        bytemuck::cast_slice(&indptr),
        bytemuck::cast_slice(&indices),
    ];
    if let Some(ids) = &edge_ids {
        arrays.push(bytemuck::cast_slice(ids));
    }
    arrays.extend([
        bytemuck::cast_slice::<f32, u8>(&features),
        bytemuck::cast_slice(&labels),
        bytemuck::cast_slice(&train),
        bytemuck::cast_slice(&valid),
        bytemuck::cast_slice(&test),
    ]);
    let sum = arrays
        .iter()
        .fold(VERSION as u64, |h, a| mix64(h ^ hash_bytes(a)));
    if sum != checksum {
        return Err("checksum mismatch (corrupt)".into());
    }
    drop(arrays);
    let d = Dataset {
        name: m.name,
        graph: Csr {
            num_nodes: n as usize,
            indptr,
            indices,
            edge_ids,
        },
        features,
        feat_dim: dim as usize,
        labels,
        num_classes: classes as usize,
        split: Split { train, valid, test },
        notes: m.notes,
    };
    d.validate().map_err(|e| format!("invalid content: {e}"))?;
    Ok(d)
}
