//! Dataset files: the OGB raw layout, plain edge lists, the binary cache and the writer; and
//! arrays in memory (`arrays`), checked as the files are.
//!
//! Text is decompressed on one thread and parsed on the rayon pool in line-aligned chunks
//! (see `text`); every malformed input is an [`crate::Error`] naming the file and its
//! 1-based line, and no partial dataset is ever returned.

pub mod arrays;
pub mod cache;
pub mod edgelist;
pub mod ogb;
pub(crate) mod parts;
mod text;
pub mod write;

pub use arrays::{Arrays, Labels};
pub use cache::CacheStatus;
pub use write::write_ogb;
