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
//! files left by a killed writer are removed by the next load or `espalier cache clear`
//! ([`crate::atomic::remove_stale_temps`]).
//!
//! **Reading** maps the entry ([`memmap2`]) instead of reading it into memory: the graph's
//! `indptr`/`indices`, the edge ids, the features and the labels are [`Array`] windows of
//! the file whose pages the system reads when the sampler or the feature gather touches
//! them (and may drop again under memory pressure), so a dataset larger than RAM trains.
//! Before mapping, the reader streams the file once through a small buffer to check the
//! checksum and every invariant the engine relies on (offsets, id ranges, labels), so a
//! corrupt or truncated entry is rebuilt with the reason printed, never trusted; that
//! pass costs one sequential read but no resident memory. A mapped file must not be
//! modified while mapped: entries are only ever replaced by renaming a new file over them.
//!
//! **Format** (version 4, little-endian; the cache is disabled on big-endian machines):
//!
//! ```text
//! 0   magic "ESPLCACH"          8   version u32, flags u32 (bit 0: edge ids, 1: features,
//!                                   2: labels, 3: split, 4: read from an edge-list file)
//! 16  num_nodes u64   24 num_edges u64   32 feat_dim u64
//! 40  train u64       48 valid u64       56 test u64       64 meta_len u64
//! 72  checksum u64 (of the header's first 72 bytes and every byte after the header)
//! 80  meta: JSON {key, name, notes}
//!     then each array at the next multiple of 64 bytes (zero padding between):
//!     indptr u64[n+1], indices u32[E], edge_ids u64[E] (flag 0),
//!     features f32[n*feat_dim] (flag 1), labels u32[n] (flag 2),
//!     train u32[], valid u32[], test u32[] (flag 3); the file ends with the last array
//! ```
//!
//! Version 3 entries (unaligned, read whole into memory) read as "written by another
//! version" and are rebuilt.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use memmap2::Mmap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::atomic::AtomicFile;
use crate::checksum::{hash_bytes, StreamHash};
use crate::error::{Error, Result};
use crate::graph::array::Array;
use crate::graph::csr::Csr;
use crate::graph::io::parts::{LoadOptions, Parts, Split, MAX_CLASSES, UNLABELED};
use crate::graph::io::{edgelist, ogb};
use crate::rng::mix64;

const MAGIC: &[u8; 8] = b"ESPLCACH";
/// Bump when the format or the loaders' semantics change: old files then read as stale
/// (rebuilt, with the reason printed).
/// 2: entries hold only what the files hold (no seed-dependent stand-ins), keys name files
/// relative to the dataset. 4: arrays aligned to 64 bytes and memory-mapped.
pub const VERSION: u32 = 4;
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
    let stem = entry_stem(&canonical);
    // The identity: where the dataset is (canonically) and which split; not its content,
    // so a changed file rebuilds this entry instead of adding another.
    let ident = format!("{}\n{}", canonical.display(), key[1]);
    let file_name = format!("{stem}-{:016x}.{EXT}", fnv1a(ident.as_bytes()));

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

/// The symmetrized graph ([`Csr::symmetrize`]) of the dataset whose cache entry is
/// `entry` and whose graph is `graph`, kept beside the entry (`NAME.sym.espc`, the same
/// format holding only a graph) so that later runs map it instead of building it in
/// memory. The key is the entry's checksum: a rebuilt entry makes the old one stale. Also
/// returns the line to show the user. When the file cannot be written, the graph built
/// in memory is returned and the line says why.
pub fn symmetrized(graph: &Csr, entry: &Path) -> Result<(Csr, String)> {
    let io_err = |e| Error::io(entry, e);
    let mut head = [0u8; HEADER];
    File::open(entry)
        .and_then(|mut f| f.read_exact(&mut head))
        .map_err(io_err)?;
    let parent = u64::from_le_bytes(head[CHECKSUM_AT..HEADER].try_into().unwrap_or([0; 8]));
    let name = entry
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(&format!(".{EXT}")).unwrap_or(&name);
    let file_name = format!("{stem}.sym.{EXT}");
    let key = vec![
        format!("espalier dataset cache v{VERSION}"),
        format!("symmetrized graph of {name} checksum={parent:016x}"),
    ];
    let dir = entry.parent().unwrap_or(Path::new("."));
    let path = dir.join(&file_name);
    let stale = if path.is_file() {
        match read(&path, Some(&key)) {
            Ok(p) => {
                let line = format!("dataset cache: read {}", path.display());
                return Ok((p.graph, line));
            }
            Err(reason) => Some(reason),
        }
    } else {
        None
    };
    crate::admission::admit(graph.symmetrize_bytes(), || {
        format!("{}: the symmetrized graph", entry.display())
    })?;
    let sym = graph.symmetrize();
    let parts = Parts {
        name: format!("{name} (symmetrized)"),
        graph: sym,
        ..Parts::default()
    };
    match write(dir, &file_name, &key, &parts) {
        Ok(p) => {
            drop(parts);
            // Read back mapped, so the graph built here is not held for the run.
            let g = read(&p, Some(&key))
                .map_err(|why| Error::invalid(format!("{}: {why}", p.display())))?
                .graph;
            let what = match stale {
                Some(reason) => format!("rebuilt {} ({reason})", p.display()),
                None => format!("wrote {}", p.display()),
            };
            Ok((g, format!("dataset cache: {what}")))
        }
        Err(e) => Ok((
            parts.graph,
            format!("dataset cache: symmetrized graph not written ({e})"),
        )),
    }
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

#[derive(Serialize, Deserialize)]
struct Meta {
    key: Vec<String>,
    name: String,
    notes: Vec<String>,
}

/// Every array starts at a multiple of this many bytes, so that a mapped entry (the map is
/// page-aligned) serves each array aligned for its type.
const ALIGN: u64 = 64;
/// Bytes per read of the verification pass (a multiple of 8 and of the hash chunk).
const VERIFY_BLOCK: usize = 16 << 20;

/// The arrays an entry may hold, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Indptr,
    Indices,
    EdgeIds,
    Features,
    Labels,
    Train,
    Valid,
    Test,
}

impl Kind {
    /// Bytes per value.
    fn elem(self) -> u64 {
        match self {
            Kind::Indptr | Kind::EdgeIds => 8,
            _ => 4,
        }
    }
}

/// One array of an entry: what it is, its byte offset and its number of values.
#[derive(Clone, Copy, Debug)]
struct Region {
    kind: Kind,
    offset: u64,
    count: u64,
}

/// Where the arrays of an entry with these flags and header sizes lie, and the file's
/// length; `None` when the sizes overflow.
fn layout(flags: u32, sizes: &[u64; 7]) -> Option<(Vec<Region>, u64)> {
    let [n, e, dim, ntr, nva, nte, meta_len] = *sizes;
    let has = |f: u32| flags & f != 0;
    let mut wanted = vec![(Kind::Indptr, n.checked_add(1)?), (Kind::Indices, e)];
    if has(FLAG_EDGE_IDS) {
        wanted.push((Kind::EdgeIds, e));
    }
    if has(FLAG_FEATURES) {
        wanted.push((Kind::Features, n.checked_mul(dim)?));
    }
    if has(FLAG_LABELS) {
        wanted.push((Kind::Labels, n));
    }
    if has(FLAG_SPLIT) {
        wanted.extend([(Kind::Train, ntr), (Kind::Valid, nva), (Kind::Test, nte)]);
    }
    let mut at = (HEADER as u64).checked_add(meta_len)?;
    let mut regions = Vec::with_capacity(wanted.len());
    for (kind, count) in wanted {
        let offset = at.checked_next_multiple_of(ALIGN)?;
        at = offset.checked_add(count.checked_mul(kind.elem())?)?;
        regions.push(Region {
            kind,
            offset,
            count,
        });
    }
    Some((regions, at))
}

/// The arrays of an entry, in file order (the order of [`layout`]).
fn arrays(p: &Parts) -> Vec<&[u8]> {
    let g = &p.graph;
    let mut a: Vec<&[u8]> = vec![
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

/// The checksum of an entry: of the header's first 72 bytes (everything but the checksum
/// itself, so a flipped flag or size bit is caught too) and of `body`, the hash of every
/// byte after the header (metadata, padding and arrays).
fn checksum(prefix: &[u8], body: u64) -> u64 {
    mix64(mix64(VERSION as u64 ^ hash_bytes(&prefix[..CHECKSUM_AT])) ^ body)
}

/// The checksum that the header of the entry whose bytes are `bytes` should hold (for
/// tools and tests that patch an entry); 0 for fewer bytes than a header.
pub fn entry_checksum(bytes: &[u8]) -> u64 {
    if bytes.len() < HEADER {
        return 0;
    }
    checksum(&bytes[..CHECKSUM_AT], hash_bytes(&bytes[HEADER..]))
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
    let sizes = [
        p.graph.num_nodes,
        p.graph.num_edges(),
        p.features.as_ref().map_or(0, |f| f.1),
        split.train.len(),
        split.valid.len(),
        split.test.len(),
        meta.len(),
    ]
    .map(|v| v as u64);
    let (regions, _) = layout(flags, &sizes)
        .ok_or_else(|| Error::invalid(format!("{}: sizes overflow", path.display())))?;
    // The body in file order: metadata, then each array after its zero padding.
    let zeros = [0u8; ALIGN as usize];
    let mut body: Vec<&[u8]> = vec![&meta];
    let mut at = (HEADER + meta.len()) as u64;
    for (r, a) in regions.iter().zip(arrays(p)) {
        body.push(&zeros[..(r.offset - at) as usize]);
        body.push(a);
        at = r.offset + a.len() as u64;
    }
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&flags.to_le_bytes());
    for v in sizes {
        header.extend_from_slice(&v.to_le_bytes());
    }
    let mut h = StreamHash::default();
    for piece in &body {
        h.update(piece);
    }
    let sum = checksum(&header, h.finish());
    header.extend_from_slice(&sum.to_le_bytes());
    let mut f = AtomicFile::create(&path)?;
    let w = f.writer();
    let io_err = |e| Error::io(&path, e);
    w.write_all(&header).map_err(io_err)?;
    for piece in body {
        w.write_all(piece).map_err(io_err)?;
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
    /// Where the arrays lie.
    regions: Vec<Region>,
}

/// Reads and checks an entry's header and metadata (leaving `f` at the end of the
/// metadata); `Err` says why it cannot be trusted.
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
    // Sizes must add up to the file length before anything is allocated or mapped.
    let laid = layout(flags, &sizes);
    if laid.as_ref().map(|l| l.1) != Some(len) || sizes[0] > u32::MAX as u64 {
        return Err(format!("size {len} does not match its header (truncated?)"));
    }
    let regions = laid.map(|l| l.0).unwrap_or_default();
    let mut meta_bytes = vec![0u8; sizes[6] as usize];
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
        regions,
    })
}

/// Reads every byte after the metadata through a small buffer (not through the map, so
/// the pages do not count against the process), checks the checksum and the invariants
/// the engine relies on (offsets, id ranges, labels); `Err` says what is wrong.
fn verify(f: &mut File, head: &Head) -> std::result::Result<(), String> {
    let io = |e: io::Error| format!("read error: {e}");
    let (n, e) = (head.sizes[0], head.sizes[1]);
    let label_cap = MAX_CLASSES.min(n as usize) as u32;
    let mut h = StreamHash::default();
    h.update(&head.meta_bytes);
    let mut pos = (HEADER + head.meta_bytes.len()) as u64;
    let mut buf = vec![0u64; VERIFY_BLOCK / 8];
    // The first invariant broken; reported only if the checksum matches (a corruption
    // says "checksum").
    let mut invalid: Option<String> = None;
    let mut last_offset = 0u64;
    for r in &head.regions {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
        let pad = &mut bytes[..(r.offset - pos) as usize];
        f.read_exact(pad).map_err(io)?;
        h.update(pad);
        pos = r.offset;
        let mut left = r.count * r.kind.elem();
        let mut first = true;
        while left > 0 {
            let take = left.min(VERIFY_BLOCK as u64) as usize;
            let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut buf)[..take];
            f.read_exact(bytes).map_err(io)?;
            h.update(bytes);
            let u32s = || bytemuck::cast_slice::<u8, u32>(bytes);
            let u64s = || bytemuck::cast_slice::<u8, u64>(bytes);
            let bad = match r.kind {
                Kind::Indptr => {
                    let v = u64s();
                    let start = if first { 0 } else { last_offset };
                    let broken = v[0] < start
                        || (first && v[0] != 0)
                        || v.par_windows(2).any(|w| w[0] > w[1]);
                    last_offset = v[v.len() - 1];
                    broken.then_some("graph indptr is not a valid offset array")
                }
                Kind::Indices => u32s()
                    .par_iter()
                    .any(|&s| s as u64 >= n)
                    .then_some("graph has a node id out of range"),
                Kind::EdgeIds => u64s()
                    .par_iter()
                    .any(|&i| i >= e)
                    .then_some("graph edge ids are not edge positions"),
                Kind::Features => None,
                Kind::Labels => u32s()
                    .par_iter()
                    .any(|&l| l != UNLABELED && l >= label_cap)
                    .then_some("labels do not fit the node count"),
                Kind::Train | Kind::Valid | Kind::Test => u32s()
                    .par_iter()
                    .any(|&v| v as u64 >= n)
                    .then_some("split has a node id out of range"),
            };
            if let (Some(why), None) = (bad, &invalid) {
                invalid = Some(why.to_string());
            }
            first = false;
            pos += take as u64;
            left -= take as u64;
        }
        if r.kind == Kind::Indptr && last_offset != e && invalid.is_none() {
            invalid = Some("graph indptr does not end at the edge count".into());
        }
    }
    if checksum(&head.prefix, h.finish()) != head.checksum {
        return Err("checksum mismatch (corrupt)".into());
    }
    match invalid {
        Some(why) => Err(format!("invalid content: {why}")),
        None => Ok(()),
    }
}

/// Tells the kernel that `r` (elements of `size` bytes) is read at random: a page fault
/// there reads its page, not the pages after it as well. Feature rows are gathered by
/// node id, a few hundred bytes each; with the default read-ahead, a training run whose
/// memory is smaller than the features read 128 KiB for every row it faulted in and made
/// no progress (docs/BENCHMARKS.md, "Out of core"). Only a hint: an error is ignored.
fn random_access(map: &Mmap, r: &Region, size: u64) {
    #[cfg(unix)]
    if let (Ok(offset), Ok(len)) = (
        usize::try_from(r.offset),
        usize::try_from(r.count.saturating_mul(size)),
    ) {
        if len > 0 {
            let _ = map.advise_range(memmap2::Advice::Random, offset, len);
        }
    }
    #[cfg(not(unix))]
    let _ = (map, r, size);
}

/// A window of the map as an [`Array`].
fn mapped<T: bytemuck::Pod>(map: &Arc<Mmap>, r: &Region) -> std::result::Result<Array<T>, String> {
    let (offset, count) = match (usize::try_from(r.offset), usize::try_from(r.count)) {
        (Ok(o), Ok(c)) => (o, c),
        _ => return Err("entry too large for this machine's address space".into()),
    };
    Array::mapped(map.clone(), offset, count)
}

/// Reads an entry: checks it whole ([`verify`]), then maps it, so that its arrays are
/// paged in on demand. With `key`, an entry for other inputs is stale. `Err` says why it
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
    verify(&mut f, &head)?;
    // SAFETY: the map is only read, through `Array` windows whose bounds and alignment are
    // checked. Its content was verified just above through the same open file. The cache
    // never modifies a file in place (entries are written under a temporary name and
    // renamed over the old one, which leaves this mapping's file intact); another program
    // modifying or truncating it while mapped is outside what the cache supports (see
    // `crate::graph::array`).
    let map = Arc::new(unsafe { Mmap::map(&f) }.map_err(io)?);
    if map.len() as u64 != len {
        return Err("the file changed while it was read".into());
    }
    let has = |flag: u32| head.flags & flag != 0;
    let mut regions = head.regions.iter();
    let mut next = || {
        regions
            .next()
            .ok_or_else(|| "missing array".to_string())
            .copied()
    };
    let indptr = mapped::<u64>(&map, &next()?)?;
    let indices = mapped::<u32>(&map, &next()?)?;
    let edge_ids = if has(FLAG_EDGE_IDS) {
        Some(mapped::<u64>(&map, &next()?)?)
    } else {
        None
    };
    let features = if has(FLAG_FEATURES) {
        let r = next()?;
        random_access(&map, &r, 4);
        Some((mapped::<f32>(&map, &r)?, head.sizes[2] as usize))
    } else {
        None
    };
    let labels = if has(FLAG_LABELS) {
        Some(mapped::<u32>(&map, &next()?)?)
    } else {
        None
    };
    let split = if has(FLAG_SPLIT) {
        Some(Split {
            train: mapped::<u32>(&map, &next()?)?.to_vec(),
            valid: mapped::<u32>(&map, &next()?)?.to_vec(),
            test: mapped::<u32>(&map, &next()?)?.to_vec(),
        })
    } else {
        None
    };
    Ok(Parts {
        name: head.meta.name,
        graph: Csr {
            num_nodes: head.sizes[0] as usize,
            indptr,
            indices,
            edge_ids,
        },
        features,
        labels,
        split,
        edge_list: has(FLAG_EDGE_LIST),
        notes: head.meta.notes,
        verified: true,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_every_array_and_rejects_overflowing_sizes() {
        let all = FLAG_EDGE_IDS | FLAG_FEATURES | FLAG_LABELS | FLAG_SPLIT;
        let (regions, len) = layout(all, &[5, 7, 3, 1, 1, 1, 13]).unwrap();
        assert_eq!(regions.len(), 8);
        assert!(regions.iter().all(|r| r.offset % ALIGN == 0));
        let last = regions[regions.len() - 1];
        assert_eq!(len, last.offset + 4);
        assert!(layout(all, &[u64::MAX, 1, 1, 0, 0, 0, 0]).is_none());
        assert!(layout(all, &[1 << 40, 1, 1 << 40, 0, 0, 0, 0]).is_none());
    }
}
