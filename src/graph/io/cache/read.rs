//! Reading an entry: its header and metadata checked against the file's length, every
//! byte streamed once through a small buffer to check the checksum and the invariants the
//! engine relies on, then the file mapped so that its arrays are paged in on demand.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use rayon::prelude::*;

use crate::checksum::StreamHash;
use crate::graph::array::Array;
use crate::graph::csr::Csr;
use crate::graph::io::parts::{Parts, Split, MAX_CLASSES, UNLABELED};

use super::key::key_difference;
use super::layout::{
    checksum, layout, Kind, Meta, Region, CHECKSUM_AT, FLAG_EDGE_IDS, FLAG_EDGE_LIST,
    FLAG_FEATURES, FLAG_LABELS, FLAG_SPLIT, HEADER, MAGIC, VERSION,
};

/// Bytes per read of the verification pass (a multiple of 8 and of the hash chunk).
const VERIFY_BLOCK: usize = 16 << 20;

/// The header and metadata of an entry.
pub(super) struct Head {
    /// The header's bytes before the checksum.
    prefix: [u8; CHECKSUM_AT],
    flags: u32,
    pub(super) sizes: [u64; 7],
    checksum: u64,
    pub(super) meta: Meta,
    meta_bytes: Vec<u8>,
    /// Where the arrays lie.
    regions: Vec<Region>,
}

/// Reads and checks an entry's header and metadata (leaving `f` at the end of the
/// metadata); `Err` says why it cannot be trusted.
pub(super) fn read_head(f: &mut File, len: u64) -> std::result::Result<Head, String> {
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
pub(super) fn read(path: &Path, key: Option<&[String]>) -> std::result::Result<Parts, String> {
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
