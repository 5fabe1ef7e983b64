//! Plain edge lists: one `src dst` edge per line, separated by spaces, tabs or a comma,
//! plain or gzip-compressed (`.gz`). Blank lines and lines starting with `#` or `%` are
//! skipped; columns after the second (a weight, a timestamp) are ignored. Ids are 0-based;
//! the node count is the largest id + 1. Features, labels and the split are synthesized
//! (see [`crate::graph::dataset`]) and listed in the dataset's notes.

use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::io::parts::{csr_bytes, ensure_allocatable, Parts};
use crate::graph::io::text::{self, parse_node_id, LineParser};

/// Largest id accepted, so that the node count (id + 1) fits a u32.
const MAX_ID: u64 = u32::MAX as u64 - 1;

struct Parser;
impl LineParser for Parser {
    type Out = (Vec<u32>, Vec<u32>);
    fn line(&self, line: &str, out: &mut Self::Out) -> std::result::Result<(), String> {
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') || t.starts_with('%') {
            return Ok(());
        }
        let mut fields = t.split([' ', '\t', ',']).filter(|f| !f.is_empty());
        let (Some(a), Some(b)) = (fields.next(), fields.next()) else {
            return Err("expected at least 2 columns (src dst)".to_string());
        };
        out.0.push(parse_node_id(a, MAX_ID + 1)?);
        out.1.push(parse_node_id(b, MAX_ID + 1)?);
        Ok(())
    }
}

/// The error for `--split` on an edge list.
pub(crate) fn no_split(path: &Path, split: &str) -> Error {
    Error::invalid(format!(
        "split {split:?} asked for, but edge list {} has no split folders",
        path.display()
    ))
}

/// Reads the edges; features, labels and the split are left to `dataset::complete`.
pub(crate) fn load_parts(path: &Path) -> Result<Parts> {
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    text::parse_lines(
        path,
        |_| Ok(Parser),
        |(s, d)| {
            src.extend_from_slice(&s);
            dst.extend_from_slice(&d);
        },
    )
    .map_err(|e| match e {
        // A file that fails on its first line was probably never an edge list.
        Error::Parse { path, line: 1, msg } => Error::parse(
            path,
            1,
            format!(
                "{msg} (a file, not a dataset folder, is read as an edge list of `src dst` \
                 lines; for OGB's layout give the folder holding raw/)"
            ),
        ),
        e => e,
    })?;
    if src.is_empty() {
        return Err(Error::parse(
            path,
            0,
            "no edges found: a graph without edges cannot train a GNN (read as an edge list \
             of `src dst` lines, because it is a file and not a dataset folder)",
        ));
    }
    let n = src
        .par_iter()
        .chain(dst.par_iter())
        .max()
        .map_or(0, |&m| m as usize + 1);
    ensure_allocatable(
        csr_bytes(n, src.len()),
        &format!(
            "{}: the graph of {n} nodes (the largest id + 1) and {} edges",
            path.display(),
            src.len()
        ),
    )?;
    let graph = Csr::from_edges(n, &src, &dst)?;
    drop((src, dst));
    let file = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "edges".to_string());
    let mut name = file.clone();
    // "email-Enron.txt.gz" -> "email-Enron"
    for ext in [".gz", ".txt", ".csv", ".tsv", ".edges", ".el"] {
        if let Some(s) = name.strip_suffix(ext) {
            name = s.to_string();
        }
    }
    Ok(Parts {
        name,
        graph,
        features: None,
        labels: None,
        split: None,
        edge_list: true,
        notes: vec![format!(
            "{file} is a file, not a dataset folder: read as an edge list (`src dst` per line)"
        )],
        verified: false,
    })
}
