//! [`Array`]: a read-mostly slice of plain values that is either owned (a `Vec`), a window
//! of a memory-mapped file (the dataset cache, [`crate::graph::io::cache`]), so that a graph
//! or a feature matrix larger than RAM is paged in on demand instead of read up front, or
//! memory owned outside Rust ([`Foreign`]: a NumPy array the Python package hands over),
//! read in place instead of copied.
//!
//! Code reads both kinds through `Deref<Target = [T]>`. Writing through `DerefMut` (or
//! [`Array::make_mut`]) first copies a mapped array into an owned `Vec`: the mapping itself
//! is read-only and never written.
//!
//! **Assumption.** A mapped file must not be modified or truncated while it is mapped (the
//! cache never does: entries are written under a temporary name and renamed over the old
//! one, which leaves a mapping of the old file intact). Another process truncating it
//! would make a later read fault (SIGBUS), as with any memory-mapped file.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytemuck::Pod;
use memmap2::Mmap;

/// A slice of `T` owned, mapped from a file or borrowed from a [`Foreign`] owner; see the
/// module docs.
pub struct Array<T: Pod> {
    inner: Inner<T>,
}

/// Memory owned outside Rust (a NumPy array held by the Python package), read in place by an
/// [`Array`]. Like a mapped file, it must not be written while espalier reads it.
pub trait Foreign: Send + Sync {
    /// The values' bytes: the same slice on every call, for as long as `self` lives.
    fn bytes(&self) -> &[u8];
}

enum Inner<T: Pod> {
    Owned(Vec<T>),
    Mapped {
        map: Arc<Mmap>,
        /// Byte offset of the first element in `map`, aligned for `T`.
        offset: usize,
        /// Number of elements.
        len: usize,
        _t: PhantomData<T>,
    },
    /// All the bytes of `owner`, checked aligned for `T` and a whole number of values.
    Foreign {
        owner: Arc<dyn Foreign>,
        _t: PhantomData<T>,
    },
}

impl<T: Pod> Array<T> {
    /// An owned array.
    pub fn owned(v: Vec<T>) -> Self {
        Array {
            inner: Inner::Owned(v),
        }
    }

    /// `len` values of `T` at byte `offset` of `map` (little-endian, as the cache writes
    /// them). `Err` says why the window is unusable: out of the map or misaligned for `T`.
    pub fn mapped(map: Arc<Mmap>, offset: usize, len: usize) -> Result<Self, String> {
        let size = std::mem::size_of::<T>();
        let end = len
            .checked_mul(size)
            .and_then(|b| b.checked_add(offset))
            .filter(|&end| end <= map.len())
            .ok_or_else(|| {
                format!(
                    "{len} values of {size} bytes at byte {offset} overrun the {}-byte file",
                    map.len()
                )
            })?;
        let addr = map.as_ptr() as usize + offset;
        if addr % std::mem::align_of::<T>() != 0 {
            return Err(format!("array at byte {offset} is not aligned"));
        }
        debug_assert!(end <= map.len());
        Ok(Array {
            inner: Inner::Mapped {
                map,
                offset,
                len,
                _t: PhantomData,
            },
        })
    }

    /// The values of `owner`, read in place. `Err` says why its bytes are unusable: not a
    /// whole number of values of `T`, or misaligned for `T`.
    pub fn foreign(owner: Arc<dyn Foreign>) -> Result<Self, String> {
        let bytes = owner.bytes();
        let size = std::mem::size_of::<T>();
        if bytes.len() % size != 0 {
            return Err(format!(
                "{} bytes are not a whole number of {size}-byte values",
                bytes.len()
            ));
        }
        if bytes.as_ptr() as usize % std::mem::align_of::<T>() != 0 {
            return Err("the values are not aligned".to_string());
        }
        Ok(Array {
            inner: Inner::Foreign {
                owner,
                _t: PhantomData,
            },
        })
    }

    /// Whether the values live in a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.inner, Inner::Mapped { .. })
    }

    /// The values as an owned `Vec`, copying a mapped or foreign array into memory first.
    pub fn make_mut(&mut self) -> &mut Vec<T> {
        if !matches!(self.inner, Inner::Owned(_)) {
            let v = self.as_slice().to_vec();
            self.inner = Inner::Owned(v);
        }
        match &mut self.inner {
            Inner::Owned(v) => v,
            // Made owned just above.
            Inner::Mapped { .. } | Inner::Foreign { .. } => {
                unreachable!("the array was copied just above")
            }
        }
    }

    /// The values as an owned `Vec` (a copy when mapped or foreign).
    pub fn into_vec(self) -> Vec<T> {
        match self.inner {
            Inner::Owned(v) => v,
            Inner::Mapped { .. } | Inner::Foreign { .. } => self.as_slice().to_vec(),
        }
    }

    /// The values.
    pub fn as_slice(&self) -> &[T] {
        match &self.inner {
            Inner::Owned(v) => v,
            Inner::Mapped {
                map, offset, len, ..
            } => {
                let bytes = &map[*offset..*offset + *len * std::mem::size_of::<T>()];
                // Bounds and alignment were checked by `Array::mapped`; `T: Pod` accepts
                // every bit pattern, so the cast cannot fail.
                bytemuck::cast_slice(bytes)
            }
            // Length and alignment were checked by `Array::foreign`, and `Foreign::bytes`
            // returns the same slice every call.
            Inner::Foreign { owner, .. } => bytemuck::cast_slice(owner.bytes()),
        }
    }
}

/// Rows probed for residency before a read-ahead: if all their pages are in memory, the
/// rows are taken to be (a matrix in the page cache costs no advice at all).
const PROBE_ROWS: usize = 32;

impl<T: Pod> Array<T> {
    /// Whether the pages of rows `ids` (each `row_len` values) look resident: the first
    /// page of [`PROBE_ROWS`] rows spread over `ids` is in memory. Always true for an owned
    /// array, and where the system cannot say (only Linux with glibc asks it).
    pub fn rows_resident(&self, ids: &[u32], row_len: usize) -> bool {
        let Inner::Mapped {
            map, offset, len, ..
        } = &self.inner
        else {
            return true;
        };
        let row_bytes = row_len * std::mem::size_of::<T>();
        let rows = *len / row_len.max(1);
        let step = ids.len().div_ceil(PROBE_ROWS).max(1);
        ids.iter()
            .step_by(step)
            .filter(|&&i| (i as usize) < rows)
            .all(|&i| page_resident(map, offset + i as usize * row_bytes))
    }

    /// Asks the system to start reading the pages of rows `ids` (each `row_len` values)
    /// of a mapped array, all at once, and returns without waiting (`MADV_WILLNEED` on
    /// each run of consecutive pages, in file order). A gather that then faults the rows
    /// in one by one waits for one read at a time; with the advice the disk serves them
    /// in parallel (docs/BENCHMARKS.md, "Feature gather"). Returns the
    /// number of page runs advised: 0 for an owned array, and where the system has no
    /// such advice. Ids out of range are skipped. Only a hint: errors are ignored.
    pub fn will_need_rows(&self, ids: &[u32], row_len: usize) -> usize {
        let Inner::Mapped {
            map, offset, len, ..
        } = &self.inner
        else {
            return 0;
        };
        if !cfg!(unix) || row_len == 0 {
            return 0;
        }
        let page = page_size();
        let row_bytes = row_len * std::mem::size_of::<T>();
        let rows = *len / row_len;
        let mut pages: Vec<usize> = Vec::with_capacity(ids.len() + ids.len() / 4);
        for &i in ids.iter().filter(|&&i| (i as usize) < rows) {
            let start = offset + i as usize * row_bytes;
            let end = start + row_bytes;
            pages.extend(start / page..end.div_ceil(page));
        }
        pages.sort_unstable();
        pages.dedup();
        let mut runs = 0;
        let mut k = 0;
        while k < pages.len() {
            let first = pages[k];
            let mut last = first;
            while k + 1 < pages.len() && pages[k + 1] == last + 1 {
                k += 1;
                last = pages[k];
            }
            k += 1;
            let from = first * page;
            let to = ((last + 1) * page).min(map.len());
            if to > from {
                advise_will_need(map, from, to - from);
                runs += 1;
            }
        }
        runs
    }
}

/// The system's page size (4 KiB where it cannot be asked).
fn page_size() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: sysconf reads a constant of the system; it has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            return p as usize;
        }
    }
    4096
}

#[cfg(unix)]
fn advise_will_need(map: &Mmap, offset: usize, len: usize) {
    let _ = map.advise_range(memmap2::Advice::WillNeed, offset, len);
}

#[cfg(not(unix))]
fn advise_will_need(_map: &Mmap, _offset: usize, _len: usize) {}

/// Whether the page holding byte `at` of `map` is in memory (`mincore`); true where the
/// system cannot say.
fn page_resident(map: &Mmap, at: usize) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let page = page_size();
        let start = at / page * page;
        if start >= map.len() {
            return true;
        }
        let mut vec = [0u8; 1];
        // SAFETY: `start` is page-aligned inside the mapping (mmap returns page-aligned
        // addresses), the length is one byte (one page) within it, and `vec` holds the one
        // status byte mincore writes for it.
        let rc = unsafe {
            libc::mincore(
                map.as_ptr().add(start) as *mut libc::c_void,
                1,
                vec.as_mut_ptr(),
            )
        };
        rc != 0 || vec[0] & 1 == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (map, at);
        true
    }
}

impl<T: Pod> Deref for Array<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Pod> DerefMut for Array<T> {
    /// Copies a mapped array into memory first (the map is read-only).
    fn deref_mut(&mut self) -> &mut [T] {
        self.make_mut()
    }
}

impl<T: Pod> Default for Array<T> {
    fn default() -> Self {
        Array::owned(Vec::new())
    }
}

impl<T: Pod> Clone for Array<T> {
    /// Owned arrays are copied; a mapped one shares its map, a foreign one its owner.
    fn clone(&self) -> Self {
        Array {
            inner: match &self.inner {
                Inner::Owned(v) => Inner::Owned(v.clone()),
                Inner::Foreign { owner, .. } => Inner::Foreign {
                    owner: owner.clone(),
                    _t: PhantomData,
                },
                Inner::Mapped {
                    map, offset, len, ..
                } => Inner::Mapped {
                    map: map.clone(),
                    offset: *offset,
                    len: *len,
                    _t: PhantomData,
                },
            },
        }
    }
}

impl<T: Pod> From<Vec<T>> for Array<T> {
    fn from(v: Vec<T>) -> Self {
        Array::owned(v)
    }
}

impl<T: Pod + fmt::Debug> fmt::Debug for Array<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl<T: Pod + PartialEq> PartialEq for Array<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Pod + Eq> Eq for Array<T> {}

impl<T: Pod + PartialEq> PartialEq<Vec<T>> for Array<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Pod + PartialEq> PartialEq<[T]> for Array<T> {
    fn eq(&self, other: &[T]) -> bool {
        self.as_slice() == other
    }
}

impl<T: Pod + PartialEq> PartialEq<Array<T>> for Vec<T> {
    fn eq(&self, other: &Array<T>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<'a, T: Pod> IntoIterator for &'a Array<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn map_of(bytes: &[u8]) -> Arc<Mmap> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        // SAFETY: the temporary file is private to this test and not modified while mapped.
        Arc::new(unsafe { Mmap::map(&f) }.unwrap())
    }

    #[test]
    fn mapped_reads_little_endian_values_and_copies_on_write() {
        let vals: Vec<u32> = vec![1, 2, 0xdead_beef, 7];
        let mut bytes = vec![0u8; 8];
        for v in &vals {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let map = map_of(&bytes);
        let mut a = Array::<u32>::mapped(map.clone(), 8, 4).unwrap();
        assert!(a.is_mapped());
        assert_eq!(a, vals);
        assert_eq!(a.clone(), Array::owned(vals.clone()));
        a[0] = 9;
        assert!(!a.is_mapped());
        assert_eq!(a, vec![9, 2, 0xdead_beef, 7]);
        // The file is untouched.
        assert_eq!(Array::<u32>::mapped(map, 8, 4).unwrap()[0], 1);
    }

    #[test]
    fn will_need_rows_advises_one_run_per_stretch_of_consecutive_pages() {
        let page = page_size();
        // 64-byte rows (16 u32), 8 pages of them after a one-page header.
        let row_len = 16;
        let rows_per_page = page / 64;
        let map = map_of(&vec![0u8; 9 * page]);
        let a = Array::<u32>::mapped(map, page, 8 * page / 4).unwrap();
        let row = |p: usize, r: usize| (p * rows_per_page + r) as u32;
        if cfg!(unix) {
            // Pages 0-1 (three rows, two on page 0), page 3, pages 5-6: three runs.
            let ids = [
                row(1, 2),
                row(0, 0),
                row(0, 5),
                row(3, 1),
                row(6, 0),
                row(5, 3),
            ];
            assert_eq!(a.will_need_rows(&ids, row_len), 3);
            // Out-of-range ids are skipped.
            assert_eq!(a.will_need_rows(&[row(8, 0)], row_len), 0);
        }
        assert_eq!(Array::owned(vec![0u32; 64]).will_need_rows(&[0, 1], 16), 0);
        assert!(Array::owned(vec![0u32; 64]).rows_resident(&[0, 1], 16));
    }

    struct Held(Vec<u64>);
    impl Foreign for Held {
        fn bytes(&self) -> &[u8] {
            bytemuck::cast_slice(&self.0)
        }
    }

    #[test]
    fn foreign_reads_in_place_and_copies_on_write() {
        let owner = Arc::new(Held(vec![1, 2, 3]));
        let before = owner.0.as_ptr() as usize;
        let mut a = Array::<u32>::foreign(owner.clone()).unwrap();
        assert_eq!(a.as_slice().as_ptr() as usize, before);
        assert_eq!(a.len(), 6);
        assert_eq!(a.clone().as_slice().as_ptr() as usize, before);
        a[0] = 9;
        assert_eq!(a[..2], [9, 0]);
        assert_eq!(owner.0[0], 1);
        // Three u64 are not a whole number of 16-byte values.
        assert!(Array::<u128>::foreign(Arc::new(Held(vec![1, 2, 3]))).is_err());
    }

    #[test]
    fn mapped_window_out_of_bounds_or_misaligned_is_an_error() {
        let map = map_of(&[0u8; 24]);
        assert!(Array::<u64>::mapped(map.clone(), 8, 2).is_ok());
        assert!(Array::<u64>::mapped(map.clone(), 8, 3).is_err());
        assert!(Array::<u64>::mapped(map.clone(), 4, 1).is_err());
        assert!(Array::<u64>::mapped(map.clone(), usize::MAX, 1).is_err());
        assert!(Array::<u32>::mapped(map, 0, usize::MAX / 2).is_err());
    }
}
