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

use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::dataset::{
    complete, csr_bytes, ensure_allocatable, Dataset, LoadOptions, Parts, Split, UNLABELED,
};
use crate::graph::io::text::{self, parse_f32, parse_node_id, parse_u64, short, LineParser};

/// The files one load reads; `None` for an optional file that is absent.
#[derive(Clone, Debug)]
pub struct OgbFiles {
    pub num_nodes: PathBuf,
    pub edges: PathBuf,
    pub num_edges: Option<PathBuf>,
    pub features: Option<PathBuf>,
    pub labels: Option<PathBuf>,
    pub split: Option<SplitFiles>,
}

/// The files of one split folder.
#[derive(Clone, Debug)]
pub struct SplitFiles {
    pub name: String,
    pub train: PathBuf,
    pub valid: Option<PathBuf>,
    pub test: Option<PathBuf>,
}

impl OgbFiles {
    /// Finds the files of `dir`, resolving the split name. Required files and the files of
    /// a split folder must exist.
    pub fn locate(dir: &Path, split: Option<&str>) -> Result<OgbFiles> {
        let raw = dir.join("raw");
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

    /// Every file with whether it is present, for cache keys.
    pub fn all(&self) -> Vec<(String, Option<&Path>)> {
        let mut v = vec![
            ("num-node-list".to_string(), Some(self.num_nodes.as_path())),
            ("edge".to_string(), Some(self.edges.as_path())),
            ("num-edge-list".to_string(), self.num_edges.as_deref()),
            ("node-feat".to_string(), self.features.as_deref()),
            ("node-label".to_string(), self.labels.as_deref()),
        ];
        match &self.split {
            Some(s) => {
                v.push((format!("split/{}/train", s.name), Some(s.train.as_path())));
                v.push((format!("split/{}/valid", s.name), s.valid.as_deref()));
                v.push((format!("split/{}/test", s.name), s.test.as_deref()));
            }
            None => v.push(("split".to_string(), None)),
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

/// Loads an OGB folder (no cache).
pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Dataset> {
    let files = OgbFiles::locate(dir, opts.split.as_deref())?;
    load_files(dir, &files, opts)
}

/// Loads the files found by [`OgbFiles::locate`].
pub fn load_files(dir: &Path, files: &OgbFiles, opts: &LoadOptions) -> Result<Dataset> {
    let n = read_count(&files.num_nodes, "number of nodes")?;
    if n > u32::MAX as u64 {
        return Err(Error::parse(
            &files.num_nodes,
            1,
            format!("{n} nodes do not fit u32 node ids"),
        ));
    }
    let num_edges = match &files.num_edges {
        Some(p) => Some((p, read_count(p, "number of edges")?)),
        None => None,
    };
    let (src, dst) = read_edges(&files.edges, n, num_edges.map_or(0, |(_, m)| m))?;
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
    let labels = match &files.labels {
        Some(p) => Some(read_labels(p, n, opts.classes)?),
        None => None,
    };
    let split = match &files.split {
        Some(s) => {
            let opt = |p: &Option<PathBuf>| p.as_ref().map_or(Ok(Vec::new()), |p| read_ids(p, n));
            Some(Split {
                train: read_ids(&s.train, n)?,
                valid: opt(&s.valid)?,
                test: opt(&s.test)?,
            })
        }
        None => None,
    };
    ensure_allocatable(csr_bytes(n as usize, src.len()), "graph")?;
    let graph = Csr::from_edges(n as usize, &src, &dst)?;
    drop((src, dst));
    let name = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.to_path_buf())
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dataset".to_string());
    complete(
        Parts {
            name,
            graph,
            features,
            labels,
            split,
            missing: [
                "no node-feat.csv.gz",
                "no node-label.csv.gz",
                "no split/ folder",
            ],
        },
        opts,
    )
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

/// The edge list; `expect` (the count from `num-edge-list`, or 0) sizes the vectors.
fn read_edges(path: &Path, n: u64, expect: u64) -> Result<(Vec<u32>, Vec<u32>)> {
    let (mut src, mut dst) = (Vec::<u32>::new(), Vec::<u32>::new());
    // Best effort: a failed reservation only means the vectors grow as they go.
    let _ = src.try_reserve_exact(expect as usize);
    let _ = dst.try_reserve_exact(expect as usize);
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
                let _ = x.try_reserve_exact((n as usize).saturating_mul(cols.get()));
            }
            x.extend_from_slice(&chunk)
        },
    )?;
    check_rows(path, rows, n, "node features")?;
    Ok((x, cols.get()))
}

/// One label per line: a non-negative integer (or integral float), or empty / NaN for none.
struct LabelParser {
    classes: Option<usize>,
}
impl LineParser for LabelParser {
    type Out = Vec<u32>;
    fn line(&self, line: &str, out: &mut Vec<u32>) -> std::result::Result<(), String> {
        out.push(parse_label(line, self.classes)?);
        Ok(())
    }
}

fn parse_label(field: &str, classes: Option<usize>) -> std::result::Result<u32, String> {
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
            if x >= UNLABELED as f64 {
                return Err(format!("label {} too large", short(f)));
            }
            x as u64
        }
    };
    if v >= UNLABELED as u64 {
        return Err(format!("label {v} too large"));
    }
    if let Some(c) = classes {
        if v >= c as u64 {
            return Err(format!("label {v} not below the {c} classes asked for"));
        }
    }
    Ok(v as u32)
}

/// Labels and the class count (given, or largest label + 1).
fn read_labels(path: &Path, n: u64, classes: Option<usize>) -> Result<(Vec<u32>, usize)> {
    let mut y = Vec::new();
    let rows = text::parse_lines(
        path,
        |_| Ok(LabelParser { classes }),
        |c| y.extend_from_slice(&c),
    )?;
    check_rows(path, rows, n, "node labels")?;
    let c = classes.unwrap_or_else(|| {
        y.iter()
            .filter(|&&l| l != UNLABELED)
            .max()
            .map_or(0, |&m| m as usize + 1)
    });
    Ok((y, c))
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
        assert_eq!(parse_label("3", None), Ok(3));
        assert_eq!(parse_label("3.0", None), Ok(3));
        assert_eq!(parse_label("", None), Ok(UNLABELED));
        assert_eq!(parse_label("NaN", None), Ok(UNLABELED));
        assert!(parse_label("-1", None).unwrap_err().contains("negative"));
        assert!(parse_label("2.5", None).unwrap_err().contains("integer"));
        assert!(parse_label("abc", None).is_err());
        assert!(parse_label("7", Some(7)).unwrap_err().contains("below"));
    }
}
