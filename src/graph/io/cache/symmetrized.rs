//! The symmetrized graph of a cached dataset, kept as an entry beside the dataset's own.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::graph::csr::Csr;
use crate::graph::io::parts::Parts;

use super::layout::{CHECKSUM_AT, EXT, HEADER, VERSION};
use super::read::read;
use super::write::write;

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
