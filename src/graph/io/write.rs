//! Writes a dataset in the OGB raw layout read by [`crate::graph::io::ogb`] and by the
//! PyG peer baseline (`pyg_peer.py DIR`), so both engines train on the very same inputs.
//!
//! - edges in their input order (the order of `graph.edge_ids`, or CSR order without
//!   them), so that loading the copy rebuilds an identical CSR;
//! - features with `{}` of f32, the shortest text that parses back to the same bits;
//! - labels as integers, `nan` for unlabeled nodes (pandas reads it as NaN);
//! - the split under `split/bench/` (the name the peer's `--write-ogb` uses); an empty
//!   valid or test part is not written (pandas cannot read an empty CSV).
//!
//! Each file is cut into line-aligned chunks that are formatted and compressed in parallel,
//! each as its own gzip member; the members are concatenated in order. A multi-member gzip
//! file is valid gzip: `MultiGzDecoder`, `zcat`, Python's `gzip` and pandas read all of it.

use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::path::Path;

use flate2::write::GzEncoder;
use flate2::Compression;
use rayon::prelude::*;

use crate::atomic::AtomicFile;
use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::dataset::{Dataset, Split, UNLABELED};

/// Name of the split folder written.
pub const SPLIT_NAME: &str = "bench";

/// Uncompressed bytes per gzip member.
const MEMBER_BYTES: usize = 4 << 20;

/// Writes `dataset` under `dir` (created if needed) in the OGB raw layout. Each file is
/// written atomically ([`crate::atomic`]).
pub fn write_ogb(dataset: &Dataset, dir: impl AsRef<Path>) -> Result<()> {
    write_ogb_with(dataset, dir, &mut |_, _, _| {})
}

/// [`write_ogb`], calling `progress(file, bytes, seconds)` after each file (`file` relative
/// to `dir`), so a long write shows where it is.
pub fn write_ogb_with(
    dataset: &Dataset,
    dir: impl AsRef<Path>,
    progress: &mut dyn FnMut(&str, u64, f64),
) -> Result<()> {
    let dir = dir.as_ref();
    dataset.validate()?;
    if dataset.feat_dim == 0 && dataset.num_nodes() > 0 {
        return Err(Error::invalid(
            "write_ogb: node-feat.csv.gz cannot hold rows of 0 features",
        ));
    }
    let d = dataset;
    let dim = d.feat_dim;
    write_ogb_parts(
        dir,
        (d.num_nodes(), d.num_edges()),
        &|path| {
            let (src, dst) = edges_in_input_order(&d.graph)?;
            write_gz(path, src.len(), 16, |i, s| {
                push_u64(s, src[i] as u64);
                s.push(',');
                push_u64(s, dst[i] as u64);
            })
        },
        &|path| {
            write_gz(path, d.num_nodes(), dim * 8, |v, s| {
                push_features(s, &d.features[v * dim..(v + 1) * dim])
            })
        },
        &d.labels,
        &d.split,
        progress,
    )
}

/// Writes the OGB layout under `dir` for a graph of `counts = (nodes, edges)`: `edges`
/// and `features` write `raw/edge.csv.gz` and `raw/node-feat.csv.gz` at the path they are
/// given (returning the bytes written), so that a generator can stream them; the labels,
/// the split and the counts are written here. `progress` as in [`write_ogb_with`].
pub(crate) fn write_ogb_parts(
    dir: &Path,
    counts: (usize, usize),
    edges: &dyn Fn(&Path) -> Result<u64>,
    features: &dyn Fn(&Path) -> Result<u64>,
    labels: &[u32],
    split_ids: &Split,
    progress: &mut dyn FnMut(&str, u64, f64),
) -> Result<()> {
    let raw = dir.join("raw");
    let split = dir.join("split").join(SPLIT_NAME);
    for p in [&raw, &split] {
        fs::create_dir_all(p).map_err(|e| Error::io(p, e))?;
    }
    let mut timed = |rel: &str, r: Result<u64>, t: std::time::Instant| -> Result<()> {
        progress(rel, r?, t.elapsed().as_secs_f64());
        Ok(())
    };
    let now = std::time::Instant::now;
    let t = now();
    let r = edges(&raw.join("edge.csv.gz"));
    timed("raw/edge.csv.gz", r, t)?;
    let t = now();
    let r = write_gz(&raw.join("num-node-list.csv.gz"), 1, 12, |_, s| {
        push_u64(s, counts.0 as u64)
    });
    timed("raw/num-node-list.csv.gz", r, t)?;
    let t = now();
    let r = write_gz(&raw.join("num-edge-list.csv.gz"), 1, 12, |_, s| {
        push_u64(s, counts.1 as u64)
    });
    timed("raw/num-edge-list.csv.gz", r, t)?;
    let t = now();
    let r = features(&raw.join("node-feat.csv.gz"));
    timed("raw/node-feat.csv.gz", r, t)?;
    let t = now();
    let r = write_gz(
        &raw.join("node-label.csv.gz"),
        labels.len(),
        4,
        |v, s| match labels[v] {
            UNLABELED => s.push_str("nan"),
            l => push_u64(s, l as u64),
        },
    );
    timed("raw/node-label.csv.gz", r, t)?;
    for (part, ids) in [
        ("train", &split_ids.train),
        ("valid", &split_ids.valid),
        ("test", &split_ids.test),
    ] {
        let p = split.join(format!("{part}.csv.gz"));
        if ids.is_empty() && part != "train" {
            // A stale file from an earlier write would be read back as this part.
            if p.exists() {
                fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
            }
            continue;
        }
        let t = now();
        let r = write_gz(&p, ids.len(), 8, |i, s| push_u64(s, ids[i] as u64));
        timed(&format!("split/{SPLIT_NAME}/{part}.csv.gz"), r, t)?;
    }
    Ok(())
}

/// Appends one row of features, comma-separated, each as the shortest text that parses
/// back to the same f32.
pub(crate) fn push_features(s: &mut String, row: &[f32]) {
    for (j, x) in row.iter().enumerate() {
        if j > 0 {
            s.push(',');
        }
        // Writing to a String cannot fail.
        let _ = write!(s, "{x}");
    }
}

/// `(src, dst)` of every edge in input order.
fn edges_in_input_order(g: &Csr) -> Result<(Vec<u32>, Vec<u32>)> {
    let e = g.num_edges();
    let mut src = vec![0u32; e];
    let mut dst = vec![0u32; e];
    let mut seen = vec![false; if g.edge_ids.is_some() { e } else { 0 }];
    for v in 0..g.num_nodes {
        let (a, b) = g.range(v as u32);
        for p in a..b {
            let slot = match &g.edge_ids {
                Some(ids) => {
                    let id = ids[p] as usize;
                    if std::mem::replace(&mut seen[id], true) {
                        return Err(Error::invalid(format!(
                            "graph edge ids are not a permutation (edge id {id} twice)"
                        )));
                    }
                    id
                }
                None => p,
            };
            src[slot] = g.indices[p];
            dst[slot] = v as u32;
        }
    }
    Ok((src, dst))
}

/// Appends the decimal digits of `v`.
pub(crate) fn push_u64(s: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        s.push(b as char);
    }
}

/// Writes `rows` lines (`row(i, buf)` appends line `i` without its `\n`) as a multi-member
/// gzip file, atomically; `row_bytes` is a size hint for cutting chunks. Returns the bytes
/// written.
fn write_gz(
    path: &Path,
    rows: usize,
    row_bytes: usize,
    row: impl Fn(usize, &mut String) + Sync,
) -> Result<u64> {
    let per_chunk = (MEMBER_BYTES / row_bytes.max(1)).max(1);
    let chunks = rows.div_ceil(per_chunk).max(1);
    write_gz_chunks(path, chunks, |c, text| {
        let (a, b) = (c * per_chunk, ((c + 1) * per_chunk).min(rows));
        text.reserve((b - a) * row_bytes + 64);
        for i in a..b {
            row(i, text);
            text.push('\n');
        }
    })
}

/// Writes a multi-member gzip file, atomically, whose text is that of chunks `0..chunks`
/// in order (`chunk(c, buf)` appends chunk `c`'s whole lines): chunks are formatted and
/// compressed in parallel, a few rounds' worth at a time, so memory stays bounded by the
/// round, not the file. Returns the bytes written.
pub(crate) fn write_gz_chunks(
    path: &Path,
    chunks: usize,
    chunk: impl Fn(usize, &mut String) + Sync,
) -> Result<u64> {
    // Chunks compressed per round: enough to keep every thread busy, few enough to bound
    // memory.
    let round = rayon::current_num_threads().max(1) * 2;
    let mut file = AtomicFile::create(path)?;
    let w = file.writer();
    let mut bytes = 0u64;
    let mut c0 = 0;
    while c0 < chunks {
        let c1 = (c0 + round).min(chunks);
        let members: Vec<std::io::Result<Vec<u8>>> = (c0..c1)
            .into_par_iter()
            .map(|c| {
                let mut text = String::new();
                chunk(c, &mut text);
                let mut enc =
                    GzEncoder::new(Vec::with_capacity(text.len() / 3), Compression::fast());
                enc.write_all(text.as_bytes())?;
                enc.finish()
            })
            .collect();
        for m in members {
            let m = m.map_err(|e| Error::io(path, e))?;
            w.write_all(&m).map_err(|e| Error::io(path, e))?;
            bytes += m.len() as u64;
        }
        c0 = c1;
    }
    file.commit()?;
    Ok(bytes)
}
