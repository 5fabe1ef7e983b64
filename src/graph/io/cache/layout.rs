//! The on-disk format of an entry: the header's fields and flags, where each array lies
//! (aligned to 64 bytes, so a mapped entry serves each array aligned for its type), the
//! metadata, and the checksum. The writer and the reader both follow this layout.

use serde::{Deserialize, Serialize};

use crate::checksum::hash_bytes;
use crate::graph::io::parts::Parts;
use crate::rng::mix64;

/// The first 8 bytes of every entry.
pub(super) const MAGIC: &[u8; 8] = b"ESPLCACH";
/// Bump when the format or the loaders' semantics change: old files then read as stale
/// (rebuilt, with the reason printed).
/// 2: entries hold only what the files hold (no seed-dependent stand-ins), keys name files
/// relative to the dataset. 4: arrays aligned to 64 bytes and memory-mapped.
pub const VERSION: u32 = 4;
/// Extension of cache entries.
pub const EXT: &str = "espc";
pub(super) const HEADER: usize = 80;
/// Offset of the checksum, the header's last field.
pub(super) const CHECKSUM_AT: usize = 72;
pub(super) const FLAG_EDGE_IDS: u32 = 1;
pub(super) const FLAG_FEATURES: u32 = 2;
pub(super) const FLAG_LABELS: u32 = 4;
pub(super) const FLAG_SPLIT: u32 = 8;
pub(super) const FLAG_EDGE_LIST: u32 = 16;

/// Every array starts at a multiple of this many bytes, so that a mapped entry (the map is
/// page-aligned) serves each array aligned for its type.
pub(super) const ALIGN: u64 = 64;

/// The metadata after the header (JSON): the key, the dataset's name and its notes.
#[derive(Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) key: Vec<String>,
    pub(super) name: String,
    pub(super) notes: Vec<String>,
}

/// The arrays an entry may hold, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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
    pub(super) fn elem(self) -> u64 {
        match self {
            Kind::Indptr | Kind::EdgeIds => 8,
            _ => 4,
        }
    }
}

/// One array of an entry: what it is, its byte offset and its number of values.
#[derive(Clone, Copy, Debug)]
pub(super) struct Region {
    pub(super) kind: Kind,
    pub(super) offset: u64,
    pub(super) count: u64,
}

/// Where the arrays of an entry with these flags and header sizes lie, and the file's
/// length; `None` when the sizes overflow.
pub(super) fn layout(flags: u32, sizes: &[u64; 7]) -> Option<(Vec<Region>, u64)> {
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
pub(super) fn arrays(p: &Parts) -> Vec<&[u8]> {
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
pub(super) fn checksum(prefix: &[u8], body: u64) -> u64 {
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
