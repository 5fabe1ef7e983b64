//! The key of an entry: its file name (the dataset's name and a hash of where it is), and
//! the lines inside it that name every input file with its size, modification time and,
//! for small files, a hash of its content; and why a stored key differs from the current.

use std::fs;
use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::checksum::hash_bytes;
use crate::error::{Error, Result};

use super::layout::EXT;

/// Input files up to this size are hashed into the key (beyond, size and time only).
const SMALL_FILE: u64 = 1 << 20;

/// One line of the key: the file's size, modification time and (small files) content
/// hash, or its absence. `label` is the file's path inside the dataset.
pub(super) fn file_state(label: &str, file: Option<&Path>) -> Result<String> {
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
pub(super) fn key_difference(stored: &[String], current: &[String]) -> String {
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

/// The name of the entry for the dataset at the canonical path `canonical` whose key
/// line naming its kind and split is `kind`: [`entry_stem`] and a hash of that identity.
/// The identity is where the dataset is (canonically) and which split; not its content,
/// so a changed file rebuilds this entry instead of adding another.
pub(super) fn file_name(canonical: &Path, kind: &str) -> String {
    let stem = entry_stem(canonical);
    let ident = format!("{}\n{}", canonical.display(), kind);
    format!("{stem}-{:016x}.{EXT}", fnv1a(ident.as_bytes()))
}

/// The 64-bit FNV-1a hash of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
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
