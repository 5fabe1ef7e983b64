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
//! `indptr`/`indices`, the edge ids, the features and the labels are
//! [`Array`](crate::graph::array::Array) windows of the file whose pages the system reads
//! when the sampler or the feature gather touches them (and may drop again under memory
//! pressure), so a dataset larger than RAM trains.
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

mod dirs;
mod entries;
mod key;
mod layout;
mod load;
mod read;
mod status;
mod symmetrized;
mod write;

pub use dirs::{cache_dirs, CacheDir, DIR_NAME};
pub use entries::{clear, list, Entry};
pub use key::entry_stem;
pub use layout::{entry_checksum, EXT, VERSION};
pub(crate) use load::{load, load_in_dirs, Loaded};
pub use status::CacheStatus;
pub use symmetrized::symmetrized;
