//! OGB node-property-prediction raw layout (headerless CSV, gzip-compressed):
//!
//! ```text
//! DIR/raw/edge.csv.gz            "src,dst" per line, 0-based ids          (required)
//! DIR/raw/num-node-list.csv.gz   one line: number of nodes                (required)
//! DIR/raw/num-edge-list.csv.gz   one line: number of edges                (checked if present)
//! DIR/raw/node-feat.csv.gz       comma-separated floats, one row per node (optional)
//! DIR/raw/node-label.csv.gz      one class per node; empty or NaN: unlabeled (optional)
//! DIR/split/NAME/{train,valid,test}.csv.gz  one node id per line          (optional)
//! ```
//!
//! Of a split folder, `train.csv.gz` is required and `valid` / `test` may be absent (empty).
//!
//! This is the layout of OGB's downloads (e.g. a real `ogbn-products` folder) and of the
//! peer baseline's `--write-ogb`. Labels may be written as integers or as integral floats
//! (`3.0`, as pandas writes a column holding NaN); negative or fractional labels are errors.
//! Nothing is returned unless every file present parsed and agreed with the node count.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::io::parts::{
    csr_bytes, ensure_allocatable, Parts, Split, MAX_CLASSES, UNLABELED,
};
use crate::graph::io::text::{self, parse_f32, parse_node_id, parse_u64, short, LineParser};

/// The files one load reads; `None` for an optional file that is absent.
#[derive(Clone, Debug)]
pub struct OgbFiles {
    /// `raw/num-node-list.csv.gz`.
    pub num_nodes: PathBuf,
    /// `raw/edge.csv.gz`.
    pub edges: PathBuf,
    /// `raw/num-edge-list.csv.gz`.
    pub num_edges: Option<PathBuf>,
    /// `raw/node-feat.csv.gz`.
    pub features: Option<PathBuf>,
    /// `raw/node-label.csv.gz`.
    pub labels: Option<PathBuf>,
    /// The split folder's files, if there is a split.
    pub split: Option<SplitFiles>,
}

/// The files of one split folder.
#[derive(Clone, Debug)]
pub struct SplitFiles {
    /// The split folder's name.
    pub name: String,
    /// `train.csv.gz`.
    pub train: PathBuf,
    /// `valid.csv.gz`.
    pub valid: Option<PathBuf>,
    /// `test.csv.gz`.
    pub test: Option<PathBuf>,
}

impl OgbFiles {
    /// Finds the files of `dir`, resolving the split name. Required files and the files of
    /// a split folder must exist.
    pub fn locate(dir: &Path, split: Option<&str>) -> Result<OgbFiles> {
        let raw = dir.join("raw");
        if !raw.is_dir() {
            return Err(Error::io(
                dir,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not a dataset folder: no raw/ inside (OGB's layout: raw/edge.csv.gz, \
                     raw/num-node-list.csv.gz, optional raw/node-feat.csv.gz, \
                     raw/node-label.csv.gz and split/NAME/{train,valid,test}.csv.gz)",
                ),
            ));
        }
        let required = |name: &str| -> Result<PathBuf> {
            let p = raw.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(Error::io(
                    &p,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "required file of the OGB layout is missing",
                    ),
                ))
            }
        };
        let optional = |name: &str| Some(raw.join(name)).filter(|p| p.is_file());
        let num_nodes = required("num-node-list.csv.gz")?;
        let edges = required("edge.csv.gz")?;
        let split_dir = dir.join("split");
        let names = split_names(&split_dir)?;
        let name = match split {
            Some(s) => {
                if !names.iter().any(|n| n == s) {
                    return Err(Error::invalid(format!(
                        "split {s:?} not found in {} (available: {})",
                        split_dir.display(),
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    )));
                }
                Some(s.to_string())
            }
            None => names.into_iter().next(),
        };
        let split = match name {
            Some(name) => {
                let d = split_dir.join(&name);
                let file =
                    |part: &str| Some(d.join(format!("{part}.csv.gz"))).filter(|p| p.is_file());
                let train = file("train").ok_or_else(|| {
                    Error::io(
                        d.join("train.csv.gz"),
                        std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "split has no train file",
                        ),
                    )
                })?;
                Some(SplitFiles {
                    name,
                    train,
                    valid: file("valid"),
                    test: file("test"),
                })
            }
            None => None,
        };
        Ok(OgbFiles {
            num_nodes,
            edges,
            num_edges: optional("num-edge-list.csv.gz"),
            features: optional("node-feat.csv.gz"),
            labels: optional("node-label.csv.gz"),
            split,
        })
    }

    /// Every file with whether it is present, for cache keys; labels are paths relative
    /// to the dataset folder.
    pub fn all(&self) -> Vec<(String, Option<&Path>)> {
        let mut v = vec![
            (
                "raw/num-node-list.csv.gz".to_string(),
                Some(self.num_nodes.as_path()),
            ),
            ("raw/edge.csv.gz".to_string(), Some(self.edges.as_path())),
            (
                "raw/num-edge-list.csv.gz".to_string(),
                self.num_edges.as_deref(),
            ),
            ("raw/node-feat.csv.gz".to_string(), self.features.as_deref()),
            ("raw/node-label.csv.gz".to_string(), self.labels.as_deref()),
        ];
        match &self.split {
            Some(s) => {
                let f = |part: &str| format!("split/{}/{part}.csv.gz", s.name);
                v.push((f("train"), Some(s.train.as_path())));
                v.push((f("valid"), s.valid.as_deref()));
                v.push((f("test"), s.test.as_deref()));
            }
            None => v.push(("split/".to_string(), None)),
        }
        v
    }
}

/// Sub-folders of `split_dir`, sorted; empty if it does not exist.
fn split_names(split_dir: &Path) -> Result<Vec<String>> {
    if !split_dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(split_dir).map_err(|e| Error::io(split_dir, e))? {
        let entry = entry.map_err(|e| Error::io(split_dir, e))?;
        if entry.path().is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Reads the files found by [`OgbFiles::locate`]; nothing is synthesized.
pub(crate) fn load_parts(dir: &Path, files: &OgbFiles) -> Result<Parts> {
    let n = read_count(&files.num_nodes, "number of nodes")?;
    if n > u32::MAX as u64 - 1 {
        return Err(Error::parse(
            &files.num_nodes,
            1,
            format!("{n} nodes do not fit u32 node ids"),
        ));
    }
    if n == 0 {
        return Err(Error::parse(
            &files.num_nodes,
            1,
            "0 nodes: the dataset is empty",
        ));
    }
    let num_edges = match &files.num_edges {
        Some(p) => Some((p, read_count(p, "number of edges")?)),
        None => None,
    };
    let (src, dst) = read_edges(&files.edges, n, num_edges.map_or(0, |(_, m)| m))?;
    if src.is_empty() {
        return Err(Error::parse(
            &files.edges,
            0,
            "no edges: a graph without edges cannot train a GNN (each node would see only itself)",
        ));
    }
    if let Some((p, m)) = num_edges {
        if m != src.len() as u64 {
            return Err(Error::parse(
                p,
                1,
                format!(
                    "says {m} edges but {} holds {}",
                    files.edges.display(),
                    src.len()
                ),
            ));
        }
    }
    let features = match &files.features {
        Some(p) => Some(read_features(p, n)?),
        None => None,
    };
    let mut notes = Vec::new();
    let labels = match &files.labels {
        Some(p) => {
            let (y, note) = read_labels(p, n)?;
            notes.extend(note);
            Some(y)
        }
        None => None,
    };
    let split_ids = match &files.split {
        Some(s) => Some(read_split_ids(s, n)?),
        None => None,
    };
    // Everything read so far takes memory in proportion to the files; what follows takes
    // it in proportion to the node count, which must first be borne out by them.
    if features.is_none() && labels.is_none() {
        check_declared_nodes(files, n, &src, &dst, split_ids.as_ref())?;
    }
    let split = match (&files.split, split_ids) {
        (Some(s), Some(ids)) => Some(check_split_overlap(s, ids, n)?),
        _ => None,
    };
    ensure_allocatable(
        csr_bytes(n as usize, src.len()),
        &format!(
            "{}: the graph of {n} nodes and {} edges",
            files.edges.display(),
            src.len()
        ),
    )?;
    let graph = Csr::from_edges(n as usize, &src, &dst)?;
    drop((src, dst));
    let name = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.to_path_buf())
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dataset".to_string());
    Ok(Parts {
        name,
        graph,
        features: features.map(|(x, d)| (x.into(), d)),
        labels: labels.map(Into::into),
        split,
        edge_list: false,
        notes,
        verified: false,
    })
}

/// Nodes a declared count may exceed the largest id the files use by (besides twice it):
/// a dataset may end with nodes that have no edges.
const UNSEEN_NODES: u64 = 1024;

/// Without a per-node file (features, labels) whose rows bear the node count out, the count
/// of `num-node-list` must not stand far above the largest node id of the edges and the
/// split: the graph, the synthesized features and labels and every per-node array are
/// sized by it, so a mistyped or hostile count (2^31 for a graph of 100 nodes) would
/// otherwise allocate for nodes no file mentions. Far: more than twice the largest id + 1,
/// and more than [`UNSEEN_NODES`] above it.
fn check_declared_nodes(
    files: &OgbFiles,
    n: u64,
    src: &[u32],
    dst: &[u32],
    split: Option<&Split>,
) -> Result<()> {
    let ids = src.par_iter().chain(dst.par_iter());
    let split_ids = split
        .into_iter()
        .flat_map(|s| [&s.train, &s.valid, &s.test])
        .flat_map(|part| part.iter());
    let seen = ids
        .max()
        .into_iter()
        .chain(split_ids.max())
        .max()
        .map_or(0, |&m| m as u64 + 1);
    if n <= seen.saturating_mul(2).max(seen + UNSEEN_NODES) {
        return Ok(());
    }
    Err(Error::parse(
        &files.num_nodes,
        1,
        format!(
            "says {n} nodes, but the largest node id in {}{} is {}, and no node-feat.csv.gz \
             or node-label.csv.gz has a row per node: {} of the nodes would appear in no \
             file, yet every per-node array would be sized for them; give the number of \
             nodes the files use (largest id + 1: {seen})",
            files.edges.display(),
            if split.is_some() {
                " and the split"
            } else {
                ""
            },
            seen - 1,
            n - seen
        ),
    ))
}

/// Reads a split folder's files (ids below `n`).
fn read_split_ids(s: &SplitFiles, n: u64) -> Result<Split> {
    let opt = |p: &Option<PathBuf>| p.as_ref().map_or(Ok(Vec::new()), |p| read_ids(p, n));
    Ok(Split {
        train: read_ids(&s.train, n)?,
        valid: opt(&s.valid)?,
        test: opt(&s.test)?,
    })
}

/// Checks a split read by [`read_split_ids`]: an id twice in one file, or in two parts,
/// is an error naming the file and line (and the other file).
fn check_split_overlap(s: &SplitFiles, split: Split, n: u64) -> Result<Split> {
    ensure_allocatable(
        n as u128 * 8,
        &format!("{}: the split check of {n} nodes", s.train.display()),
    )?;
    // Where each node was first seen: 0 none, else part index + 1 and its line.
    let mut seen: Vec<(u8, u32)> = vec![(0, 0); n as usize];
    let files: [Option<&Path>; 3] = [Some(&s.train), s.valid.as_deref(), s.test.as_deref()];
    for (k, ids) in [&split.train, &split.valid, &split.test].iter().enumerate() {
        let Some(file) = files[k] else { continue };
        for (i, &v) in ids.iter().enumerate() {
            let slot = &mut seen[v as usize];
            if slot.0 != 0 {
                let (other, line) = (slot.0 as usize - 1, slot.1);
                let msg = if other == k {
                    format!("node {v} listed twice (first on line {line})")
                } else {
                    format!(
                        "node {v} is also in {} (line {line}): the split parts overlap",
                        files[other].map_or(String::new(), |p| p.display().to_string())
                    )
                };
                return Err(Error::parse(file, i as u64 + 1, msg));
            }
            *slot = (k as u8 + 1, (i + 1).min(u32::MAX as usize) as u32);
        }
    }
    Ok(split)
}

/// Checks that a per-node file has exactly `n` rows.
fn check_rows(path: &Path, rows: u64, n: u64, what: &str) -> Result<()> {
    if rows == n {
        return Ok(());
    }
    let msg = if rows > n {
        format!("{what}: more rows than the {n} nodes")
    } else {
        format!("{what}: file ends after {rows} rows but there are {n} nodes")
    };
    Err(Error::parse(path, rows.min(n) + 1, msg))
}

/// Collects integers, one per line.
struct Counts;
impl LineParser for Counts {
    type Out = Vec<u64>;
    fn line(&self, line: &str, out: &mut Vec<u64>) -> std::result::Result<(), String> {
        out.push(parse_u64(line)?);
        Ok(())
    }
}

/// The single integer of `num-node-list` / `num-edge-list`.
fn read_count(path: &Path, what: &str) -> Result<u64> {
    let mut v = Vec::new();
    text::parse_lines(path, |_| Ok(Counts), |c| v.extend(c))?;
    match v.as_slice() {
        [n] => Ok(*n),
        [] => Err(Error::parse(
            path,
            1,
            format!("empty file: expected the {what}"),
        )),
        _ => Err(Error::parse(
            path,
            2,
            format!("expected one line (the {what}); multi-graph datasets are not supported"),
        )),
    }
}

/// `src,dst` lines with ids below `num_nodes`.
pub(crate) struct EdgeParser {
    pub num_nodes: u64,
}
impl LineParser for EdgeParser {
    type Out = (Vec<u32>, Vec<u32>);
    fn line(&self, line: &str, out: &mut Self::Out) -> std::result::Result<(), String> {
        let Some((a, b)) = line.split_once(',') else {
            return Err("expected 2 comma-separated columns (src,dst), found 1".to_string());
        };
        if b.contains(',') {
            return Err(format!(
                "expected 2 comma-separated columns (src,dst), found {}",
                line.split(',').count()
            ));
        }
        out.0.push(parse_node_id(a, self.num_nodes)?);
        out.1.push(parse_node_id(b, self.num_nodes)?);
        Ok(())
    }
}

/// Rows a text file can hold at most if each takes at least `min_line` bytes: a plain
/// file's size says so; a gzip file is taken to hold four times its size (what CSV of
/// numbers compresses by, roughly). Sizes up-front reservations by the data on disk,
/// never by a count a file merely declares.
fn plausible_rows(path: &Path, min_line: u64) -> u64 {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let text = if text::is_gz(path) {
        len.saturating_mul(4)
    } else {
        len
    };
    text / min_line.max(1)
}

/// The edge list; `expect` (the count from `num-edge-list`, or 0), when the file can hold
/// that many, sizes the vectors.
fn read_edges(path: &Path, n: u64, expect: u64) -> Result<(Vec<u32>, Vec<u32>)> {
    let (mut src, mut dst) = (Vec::<u32>::new(), Vec::<u32>::new());
    // Best effort: a failed reservation only means the vectors grow as they go. "0,1\n"
    // is the shortest line.
    let reserve = expect.min(plausible_rows(path, 4));
    if ensure_allocatable(reserve as u128 * 8, "edges").is_ok() {
        let _ = src.try_reserve_exact(reserve as usize);
        let _ = dst.try_reserve_exact(reserve as usize);
    }
    text::parse_lines(
        path,
        |_| Ok(EdgeParser { num_nodes: n }),
        |(s, d)| {
            src.extend_from_slice(&s);
            dst.extend_from_slice(&d);
        },
    )?;
    Ok((src, dst))
}

/// Rows of `cols` finite floats.
struct FeatParser {
    cols: usize,
}
impl LineParser for FeatParser {
    type Out = Vec<f32>;
    fn line(&self, line: &str, out: &mut Vec<f32>) -> std::result::Result<(), String> {
        let start = out.len();
        let mut k = 0;
        for field in line.split(',') {
            k += 1;
            if k > self.cols {
                break;
            }
            match parse_f32(field) {
                Ok(v) => out.push(v),
                Err(m) => {
                    out.truncate(start);
                    return Err(format!("column {k}: {m}"));
                }
            }
        }
        if k != self.cols {
            out.truncate(start);
            return Err(format!(
                "{} columns, but the first row has {}",
                line.split(',').count(),
                self.cols
            ));
        }
        Ok(())
    }
}

/// The feature matrix and its width.
fn read_features(path: &Path, n: u64) -> Result<(Vec<f32>, usize)> {
    let mut x: Vec<f32> = Vec::new();
    let cols = std::cell::Cell::new(0usize);
    let rows = text::parse_lines(
        path,
        |first| {
            cols.set(first.split(',').count());
            Ok(FeatParser { cols: cols.get() })
        },
        |chunk| {
            if x.capacity() == 0 {
                // Best effort: a failed reservation only means the vector grows as it goes.
                // "0\n" per column is the shortest row.
                let rows = n.min(plausible_rows(path, 2 * cols.get() as u64));
                let values = (rows as usize).saturating_mul(cols.get());
                if ensure_allocatable(values as u128 * 4, "features").is_ok() {
                    let _ = x.try_reserve_exact(values);
                }
            }
            x.extend_from_slice(&chunk)
        },
    )?;
    check_rows(path, rows, n, "node features")?;
    Ok((x, cols.get()))
}

/// One label per line: a non-negative integer (or integral float), or empty / NaN for none.
struct LabelParser;
impl LineParser for LabelParser {
    type Out = Vec<u32>;
    fn line(&self, line: &str, out: &mut Vec<u32>) -> std::result::Result<(), String> {
        out.push(parse_label(line)?);
        Ok(())
    }
}

fn parse_label(field: &str) -> std::result::Result<u32, String> {
    let f = field.trim_matches(|c| c == ' ' || c == '\t');
    if f.is_empty() || f.eq_ignore_ascii_case("nan") {
        return Ok(UNLABELED);
    }
    let v = match parse_u64(f) {
        Ok(v) => v,
        Err(_) => {
            let x: f64 = f
                .parse()
                .map_err(|_| format!("label is not a number: {:?}", short(f)))?;
            if x.is_nan() {
                return Ok(UNLABELED);
            }
            if x < 0.0 {
                return Err(format!("negative label {}", short(f)));
            }
            if !x.is_finite() || x.fract() != 0.0 {
                return Err(format!("label {} is not an integer", short(f)));
            }
            if x >= MAX_CLASSES as f64 {
                return Err(format!(
                    "label {} implies more than {MAX_CLASSES} classes (the limit)",
                    short(f)
                ));
            }
            x as u64
        }
    };
    if v >= MAX_CLASSES as u64 {
        return Err(format!(
            "label {v} implies {} classes, above the limit of {MAX_CLASSES}",
            v as u128 + 1
        ));
    }
    Ok(v as u32)
}

/// Labels, checked against the node count, and a note when the largest label stands far
/// above the others (one stray label would otherwise silently widen the model).
fn read_labels(path: &Path, n: u64) -> Result<(Vec<u32>, Option<String>)> {
    let mut y = Vec::new();
    let rows = text::parse_lines(path, |_| Ok(LabelParser), |c| y.extend_from_slice(&c))?;
    check_rows(path, rows, n, "node labels")?;
    let Some((row, &max)) = y
        .iter()
        .enumerate()
        .filter(|(_, &l)| l != UNLABELED)
        .max_by_key(|(i, &l)| (l, std::cmp::Reverse(*i)))
    else {
        return Ok((y, None));
    };
    let line = row as u64 + 1;
    if max as u64 >= n {
        return Err(Error::parse(
            path,
            line,
            format!(
                "label {max} implies {} classes, more than the {n} nodes",
                max as u64 + 1
            ),
        ));
    }
    let next = y
        .iter()
        .filter(|&&l| l != UNLABELED && l != max)
        .max()
        .map_or(0, |&l| l as u64 + 1);
    let note = (max as u64 >= 2 * next + 16).then(|| {
        format!(
            "{}:{line}: label {max} is far above the others (the next largest is {}): {} classes, most of them without a node",
            short_path(path),
            next.saturating_sub(1),
            max as u64 + 1
        )
    });
    Ok((y, note))
}

/// `raw/NAME` or `split/S/NAME`: the part of a path inside its dataset folder.
fn short_path(path: &Path) -> String {
    let parts: Vec<_> = path.iter().map(|s| s.to_string_lossy()).collect();
    let k = parts
        .iter()
        .rposition(|p| p == "raw" || p == "split")
        .unwrap_or(parts.len().saturating_sub(1));
    parts[k..].join("/")
}

/// One node id per line.
struct IdParser {
    num_nodes: u64,
}
impl LineParser for IdParser {
    type Out = Vec<u32>;
    fn line(&self, line: &str, out: &mut Vec<u32>) -> std::result::Result<(), String> {
        out.push(parse_node_id(line, self.num_nodes)?);
        Ok(())
    }
}

fn read_ids(path: &Path, n: u64) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    text::parse_lines(
        path,
        |_| Ok(IdParser { num_nodes: n }),
        |c| ids.extend_from_slice(&c),
    )?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(parse_label("3"), Ok(3));
        assert_eq!(parse_label("3.0"), Ok(3));
        assert_eq!(parse_label(""), Ok(UNLABELED));
        assert_eq!(parse_label("NaN"), Ok(UNLABELED));
        assert!(parse_label("-1").unwrap_err().contains("negative"));
        assert!(parse_label("2.5").unwrap_err().contains("integer"));
        assert!(parse_label("abc").is_err());
        assert!(parse_label("4294967294").unwrap_err().contains("limit"));
        assert!(parse_label("1e12").unwrap_err().contains("limit"));
    }
}
