//! Binary cache of loaded datasets, so that re-loading a large graph costs a file read
//! instead of decompressing and parsing text.
//!
//! **Where.** `--cache-dir DIR` when given, else `$ESPALIER_CACHE` when set, else a visible
//! `espalier-cache/` folder beside the data: inside a dataset folder, or next to an
//! edge-list file. A data folder whose permission bits forbid writing is never written to
//! (even by root): the cache then falls back to `$XDG_CACHE_HOME/espalier`, then
//! `$HOME/.cache/espalier`, and the load says so. `espalier cache ls` lists the entries of
//! a folder (dataset, size, date) and `espalier cache clear` removes them.
//!
//! **What.** One entry per dataset: the files as read (graph, and the features, labels and
//! split when the dataset has them). Nothing that depends on `--seed`, `--feat-dim` or
//! `--classes` is stored: random stand-ins for missing parts are regenerated after each
//! read (a few seconds at most, against a full copy per seed).
//!
//! **Key.** The entry's file name is the dataset's folder or file name and a hash of its
//! canonical path, kind and split folder, so `data/x` and `/abs/data/x` share one entry.
//! Inside, the key lists every input file by its path relative to the dataset (no absolute
//! path is stored) with its size, modification time and, for files up to 1 MiB, a hash of
//! its content. An entry whose key, sizes, checksum or invariants do not match is rebuilt
//! and the reason printed. Entries are written atomically ([`crate::atomic`]); temporary
//! files left by a crashed writer are removed after an hour.
//!
//! **Format** (little-endian; the cache is disabled on big-endian machines):
//!
//! ```text
//! 0   magic "ESPLCACH"          8   version u32, flags u32 (bit 0: edge ids, 1: features,
//!                                   2: labels, 3: split, 4: read from an edge-list file)
//! 16  num_nodes u64   24 num_edges u64   32 feat_dim u64
//! 40  train u64       48 valid u64       56 test u64       64 meta_len u64
//! 72  checksum u64 (of the header's first 72 bytes and everything after the header)
//! 80  meta: JSON {key, name, notes}
//!     indptr u64[n+1], indices u32[E], edge_ids u64[E] (flag 0),
//!     features f32[n*feat_dim] (flag 1), labels u32[n] (flag 2),
//!     train u32[], valid u32[], test u32[] (flag 3)
//! ```

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::atomic::AtomicFile;
use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::dataset::{complete, Dataset, LoadOptions, Parts, Split};
use crate::graph::io::{edgelist, ogb};
use crate::rng::mix64;

const MAGIC: &[u8; 8] = b"ESPLCACH";
/// Bump when the format or the loaders' semantics change: old files then read as stale.
/// 2: entries hold only what the files hold (no seed-dependent stand-ins), keys name files
/// relative to the dataset.
pub const VERSION: u32 = 3;
/// The visible cache folder created beside the data.
pub const DIR_NAME: &str = "espalier-cache";
/// Extension of cache entries.
pub const EXT: &str = "espc";
const HEADER: usize = 80;
/// Offset of the checksum, the header's last field.
const CHECKSUM_AT: usize = 72;
const FLAG_EDGE_IDS: u32 = 1;
const FLAG_FEATURES: u32 = 2;
const FLAG_LABELS: u32 = 4;
const FLAG_SPLIT: u32 = 8;
const FLAG_EDGE_LIST: u32 = 16;
/// Input files up to this size are hashed into the key (beyond, size and time only).
const SMALL_FILE: u64 = 1 << 20;
/// Temporary files older than this are left over from a crashed writer.
const STALE_TMP: Duration = Duration::from_secs(3600);

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
    /// The line to show the user, if any.
    pub fn message(&self) -> Option<String> {
        let size = |p: &Path| {
            fs::metadata(p).map_or(String::new(), |m| format!(", {}", human_bytes(m.len())))
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

/// `1.5 MB`-style sizes.
pub fn human_bytes(b: u64) -> String {
    if b < 1000 {
        return format!("{b} B");
    }
    let mut x = b as f64;
    for unit in ["kB", "MB", "GB", "TB"] {
        x /= 1000.0;
        if x < 1000.0 {
            return format!("{x:.1} {unit}");
        }
    }
    format!("{x:.1} PB")
}

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

/// Loads `path` through the cache folders of [`cache_dirs`] (or without cache if
/// `opts.cache` is off).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<(Dataset, CacheStatus)> {
    let dirs = cache_dirs(path, opts.cache_dir.as_deref(), &|k| std::env::var_os(k));
    load_in(path, opts, &dirs)
}

/// Loads `path` through the given cache folders, tried in order.
pub fn load_in_dirs(
    path: &Path,
    opts: &LoadOptions,
    dirs: &[PathBuf],
) -> Result<(Dataset, CacheStatus)> {
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

fn load_in(path: &Path, opts: &LoadOptions, dirs: &[CacheDir]) -> Result<(Dataset, CacheStatus)> {
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
        complete(parts, opts, labels_file.as_deref()).map(|d| (d, status))
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
    let stem = entry_stem(&canonical);
    // The identity: where the dataset is (canonically) and which split; not its content,
    // so a changed file rebuilds this entry instead of adding another.
    let ident = format!("{}\n{}", canonical.display(), key[1]);
    let file_name = format!("{stem}-{:016x}.{EXT}", fnv1a(ident.as_bytes()));

    let mut stale = None;
    for dir in dirs {
        clean_stale_temps(&dir.path);
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

/// One line of the key: the file's size, modification time and (small files) content
/// hash, or its absence. `label` is the file's path inside the dataset.
fn file_state(label: &str, file: Option<&Path>) -> Result<String> {
    let Some(p) = file else {
        return Ok(format!("{label} absent"));
    };
    let m = fs::metadata(p).map_err(|e| Error::io(p, e))?;
    let mtime = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or("unknown".to_string(), |d| {
            format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
        });
    let mut line = format!("{label} size={} mtime={mtime}", m.len());
    if m.len() <= SMALL_FILE {
        let bytes = fs::read(p).map_err(|e| Error::io(p, e))?;
        line.push_str(&format!(" hash={:016x}", hash_bytes(&bytes)));
    }
    Ok(line)
}

/// Why a stored key differs from the current one, in words.
fn key_difference(stored: &[String], current: &[String]) -> String {
    if stored.first() != current.first() {
        return "written by another version".to_string();
    }
    for (a, b) in stored.iter().zip(current) {
        if a != b {
            let name = b.split(' ').next().unwrap_or("");
            let what = |s: &str| s.split_once(' ').map_or(String::new(), |x| x.1.to_string());
            return format!("stale: {name} changed: {} -> {}", what(a), what(b));
        }
    }
    "stale: the input files changed".to_string()
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
    key: Vec<String>,
    name: String,
    notes: Vec<String>,
}

/// Removes temporary files of writers that died more than an hour ago.
fn clean_stale_temps(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with('.') && (name.contains(".tmp.") || name.ends_with(".tmp"))) {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_TMP);
        if old && fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The arrays of an entry, in file order.
fn arrays<'a>(meta: &'a [u8], p: &'a Parts) -> Vec<&'a [u8]> {
    let g = &p.graph;
    let mut a: Vec<&[u8]> = vec![
        meta,
        bytemuck::cast_slice(&g.indptr),
        bytemuck::cast_slice(&g.indices),
    ];
    if let Some(ids) = &g.edge_ids {
        a.push(bytemuck::cast_slice(ids));
    }
    if let Some((x, _)) = &p.features {
        a.push(bytemuck::cast_slice(x));
    }
    if let Some(y) = &p.labels {
        a.push(bytemuck::cast_slice(y));
    }
    if let Some(s) = &p.split {
        a.extend([
            bytemuck::cast_slice(&s.train),
            bytemuck::cast_slice(&s.valid),
            bytemuck::cast_slice(&s.test),
        ]);
    }
    a
}

/// Hash of the header's first 72 bytes (everything but the checksum itself, so a flipped
/// flag or size bit is caught too) and of every array after it.
fn checksum(header: &[u8], arrays: &[&[u8]]) -> u64 {
    arrays.iter().fold(
        mix64(VERSION as u64 ^ hash_bytes(&header[..CHECKSUM_AT])),
        |h, a| mix64(h ^ hash_bytes(a)),
    )
}

fn write(dir: &Path, file_name: &str, key: &[String], p: &Parts) -> Result<PathBuf> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join(file_name);
    let meta = serde_json::to_vec(&Meta {
        key: key.to_vec(),
        name: p.name.clone(),
        notes: p.notes.clone(),
    })
    .map_err(|e| Error::io(&path, io::Error::other(e)))?;
    let arrays = arrays(&meta, p);
    let mut flags = 0;
    for (on, f) in [
        (p.graph.edge_ids.is_some(), FLAG_EDGE_IDS),
        (p.features.is_some(), FLAG_FEATURES),
        (p.labels.is_some(), FLAG_LABELS),
        (p.split.is_some(), FLAG_SPLIT),
        (p.edge_list, FLAG_EDGE_LIST),
    ] {
        if on {
            flags |= f;
        }
    }
    let split = p.split.clone().unwrap_or_default();
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&flags.to_le_bytes());
    for v in [
        p.graph.num_nodes,
        p.graph.num_edges(),
        p.features.as_ref().map_or(0, |f| f.1),
        split.train.len(),
        split.valid.len(),
        split.test.len(),
        meta.len(),
    ] {
        header.extend_from_slice(&(v as u64).to_le_bytes());
    }
    let sum = checksum(&header, &arrays);
    header.extend_from_slice(&sum.to_le_bytes());
    let mut f = AtomicFile::create(&path)?;
    let w = f.writer();
    let io_err = |e| Error::io(&path, e);
    w.write_all(&header).map_err(io_err)?;
    for a in arrays {
        w.write_all(a).map_err(io_err)?;
    }
    f.commit()?;
    Ok(path)
}

/// The header and metadata of an entry.
struct Head {
    /// The header's bytes before the checksum.
    prefix: [u8; CHECKSUM_AT],
    flags: u32,
    sizes: [u64; 7],
    checksum: u64,
    meta: Meta,
    meta_bytes: Vec<u8>,
}

/// Reads and checks an entry's header and metadata; `Err` says why it cannot be trusted.
fn read_head(f: &mut File, len: u64) -> std::result::Result<Head, String> {
    let io = |e: io::Error| format!("read error: {e}");
    let mut h = [0u8; HEADER];
    f.read_exact(&mut h)
        .map_err(|_| "truncated header".to_string())?;
    if &h[..8] != MAGIC {
        return Err("not an espalier cache file".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
    if u32_at(8) != VERSION {
        return Err(format!(
            "written by another version (format {}, expected {VERSION})",
            u32_at(8)
        ));
    }
    let flags = u32_at(12);
    let sizes = [16, 24, 32, 40, 48, 56, 64].map(u64_at);
    let [n, e, dim, ntr, nva, nte, meta_len] = sizes;
    let has = |f: u32| flags & f != 0;
    // Sizes must add up to the file length before anything is allocated.
    let expected = (|| {
        let ids = if has(FLAG_EDGE_IDS) { e } else { 0 };
        let feats = if has(FLAG_FEATURES) {
            n.checked_mul(dim)?
        } else {
            0
        };
        let labels = if has(FLAG_LABELS) { n } else { 0 };
        let split = if has(FLAG_SPLIT) {
            ntr.checked_add(nva)?.checked_add(nte)?
        } else {
            0
        };
        let words4 = e
            .checked_add(feats)?
            .checked_add(labels)?
            .checked_add(split)?;
        (HEADER as u64)
            .checked_add(meta_len)?
            .checked_add(n.checked_add(1)?.checked_mul(8)?)?
            .checked_add(ids.checked_mul(8)?)?
            .checked_add(words4.checked_mul(4)?)
    })();
    if expected != Some(len) || n > u32::MAX as u64 {
        return Err(format!("size {len} does not match its header (truncated?)"));
    }
    let mut meta_bytes = vec![0u8; meta_len as usize];
    f.read_exact(&mut meta_bytes).map_err(io)?;
    let meta: Meta =
        serde_json::from_slice(&meta_bytes).map_err(|e| format!("bad metadata: {e}"))?;
    Ok(Head {
        flags,
        sizes,
        checksum: u64_at(CHECKSUM_AT),
        prefix: h[..CHECKSUM_AT].try_into().unwrap_or([0; CHECKSUM_AT]),
        meta,
        meta_bytes,
    })
}

/// Reads an entry; with `key`, an entry for other inputs is stale. `Err` says why it
/// cannot be trusted.
fn read(path: &Path, key: Option<&[String]>) -> std::result::Result<Parts, String> {
    let io = |e: io::Error| format!("read error: {e}");
    let mut f = File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let head = read_head(&mut f, len)?;
    if let Some(key) = key {
        if head.meta.key != key {
            return Err(key_difference(&head.meta.key, key));
        }
    }
    let has = |flag: u32| head.flags & flag != 0;
    let [n, e, dim, ntr, nva, nte, _] = head.sizes;
    fn vec_of<T: bytemuck::Pod>(f: &mut File, count: u64) -> io::Result<Vec<T>> {
        let mut v = vec![T::zeroed(); count as usize];
        f.read_exact(bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }
    let indptr: Vec<u64> = vec_of(&mut f, n + 1).map_err(io)?;
    let indices: Vec<u32> = vec_of(&mut f, e).map_err(io)?;
    let edge_ids = if has(FLAG_EDGE_IDS) {
        Some(vec_of(&mut f, e).map_err(io)?)
    } else {
        None
    };
    let features = if has(FLAG_FEATURES) {
        Some((vec_of(&mut f, n * dim).map_err(io)?, dim as usize))
    } else {
        None
    };
    let labels = if has(FLAG_LABELS) {
        Some(vec_of(&mut f, n).map_err(io)?)
    } else {
        None
    };
    let split = if has(FLAG_SPLIT) {
        Some(Split {
            train: vec_of(&mut f, ntr).map_err(io)?,
            valid: vec_of(&mut f, nva).map_err(io)?,
            test: vec_of(&mut f, nte).map_err(io)?,
        })
    } else {
        None
    };
    let parts = Parts {
        name: head.meta.name,
        graph: Csr {
            num_nodes: n as usize,
            indptr,
            indices,
            edge_ids,
        },
        features,
        labels,
        split,
        edge_list: has(FLAG_EDGE_LIST),
        notes: head.meta.notes,
    };
    if checksum(&head.prefix, &arrays(&head.meta_bytes, &parts)) != head.checksum {
        return Err("checksum mismatch (corrupt)".into());
    }
    parts.check().map_err(|e| format!("invalid content: {e}"))?;
    Ok(parts)
}

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

/// Removes the entries of `dir` that `matches` accepts, and stale temporary files;
/// returns the number of files and bytes removed.
pub fn clear(dir: &Path, matches: &dyn Fn(&Entry) -> bool) -> Result<(usize, u64)> {
    let mut files = clean_stale_temps(dir);
    let mut bytes = 0;
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

/// The readable start of a cache entry's file name for the dataset at the canonical path
/// `canonical`: its last component with every character outside `[A-Za-z0-9._-]` as `_`.
pub fn entry_stem(canonical: &Path) -> String {
    canonical
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
        .collect()
}
