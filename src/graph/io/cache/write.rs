//! Writing an entry: the header, the metadata and each array at its aligned offset, under
//! a temporary name renamed over the old entry ([`crate::atomic`]), so a reader never sees
//! a partial file.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::atomic::AtomicFile;
use crate::checksum::StreamHash;
use crate::error::{Error, Result};
use crate::graph::io::parts::Parts;

use super::layout::{
    arrays, checksum, layout, Meta, ALIGN, FLAG_EDGE_IDS, FLAG_EDGE_LIST, FLAG_FEATURES,
    FLAG_LABELS, FLAG_SPLIT, HEADER, MAGIC, VERSION,
};

/// Writes the entry `file_name` of `dir` (created if missing) holding `p` under `key`;
/// returns its path.
pub(super) fn write(dir: &Path, file_name: &str, key: &[String], p: &Parts) -> Result<PathBuf> {
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
