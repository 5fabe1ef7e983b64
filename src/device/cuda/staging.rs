//! Page-locked staging chunks for every upload, reused only once their transfers ran.
//!
//! Every upload goes through them, small ones and the tails of large ones too: a copy
//! from pageable memory may make the host wait for the stream's queued work (the driver
//! stages pageable memory through bounce buffers whose transfers wait their turn on the
//! stream), a wait nothing would count.
//!
//! # Ordering
//!
//! An upload copies each chunk of its bytes into a page-locked (pinned) host chunk (or, for
//! less than a chunk, into a byte range of one), queues the transfer of it on the device's
//! stream (`cuMemcpyHtoDAsync`, which returns at once) and records the chunk's own event on
//! the stream right after the transfer. Work on
//! one stream runs in the order it was queued, so the event completes only once every
//! earlier item of the stream (kernels queued before the upload, then the transfer) has
//! finished. The host writes into a chunk again only after its event has completed (it
//! asks without blocking, [`StagingChunk::done`], or blocks on it,
//! [`StagingChunk::wait`]), so no transfer ever reads a chunk the host is overwriting.
//! Kernels queued after the upload read the destination after the transfers, by stream
//! order; kernels queued before it that still read the pooled buffer's previous contents
//! run before the transfer overwrites them.
//!
//! cudarc's own event inside `PinnedHostSlice` gives none of this here: cudarc records it
//! only when a context runs several streams with event tracking, and this backend runs one
//! stream, so waiting on that event returned at once and a third chunk could overwrite the
//! first before its transfer ran.
//!
//! A second, copy-only stream would not let transfers start sooner: the destination comes
//! from a stream-ordered pool (its previous owner's kernels may still be queued, and a new
//! allocation is valid only in stream order), so the copy stream would first wait for the
//! compute stream's queued work, and a chunk's event would complete no sooner than on the
//! compute stream. Overlap comes instead from the ring: it grows up to [`MAX_CHUNKS`]
//! chunks before it blocks, so uploads up to that size never wait for queued kernels, and
//! larger ones block only on the chunk that many chunks behind.

use cudarc::driver::{CudaEvent, PinnedHostSlice};

use crate::error::Result;

/// Bytes of each staging chunk (a multiple of 4).
pub const CHUNK_BYTES: usize = 4 << 20;
/// Most chunks a device keeps (32 MiB of page-locked host memory).
pub const MAX_CHUNKS: usize = 8;

/// What the ring needs of a chunk: whether the transfer that last read it has finished.
pub trait StagingChunk {
    /// True when the chunk may be overwritten now (its last transfer ran, or none was
    /// queued). Never blocks.
    fn done(&self) -> Result<bool>;
    /// Blocks until the chunk may be overwritten.
    fn wait(&self) -> Result<()>;
}

/// Staging chunks used in turn, each filled by one or more uploads. The chunk at `next` is
/// always the one whose transfers were queued longest ago (or one never used): chunks are
/// taken in ring order, and a new chunk is inserted at `next`, so transfers complete in
/// ring order from `next` on. Uploads smaller than a chunk share the current one (each
/// from its own byte range), so that small uploads (a block's index arrays) also copy from
/// page-locked memory without one chunk each.
#[derive(Debug)]
pub struct Ring<C> {
    chunks: Vec<C>,
    next: usize,
    cap: usize,
    /// The chunk the last claim used and the bytes of it claimed so far.
    current: Option<(usize, usize)>,
}

/// A byte range of a chunk handed out by [`Ring::claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Index of the chunk in the ring.
    pub index: usize,
    /// Where the range starts in the chunk.
    pub offset: usize,
    /// True when the host blocked until the chunk's last transfer ran.
    pub waited: bool,
}

impl<C: StagingChunk> Ring<C> {
    /// An empty ring of at most `cap` (at least 1) chunks.
    pub fn new(cap: usize) -> Self {
        Ring {
            chunks: Vec::new(),
            next: 0,
            cap: cap.max(1),
            current: None,
        }
    }

    /// `len` bytes (at most [`CHUNK_BYTES`]) free to overwrite: the rest of the current
    /// chunk if they fit (its earlier ranges' transfers read other bytes), else a whole
    /// chunk: the oldest if its transfers ran; else a new one from `make` while the ring
    /// has fewer than `cap`; else the oldest after blocking on it. The caller must queue
    /// the transfer from the range and record the chunk's event before claiming again.
    pub fn claim(&mut self, len: usize, make: impl FnOnce() -> Result<C>) -> Result<Claim> {
        debug_assert!(len <= CHUNK_BYTES);
        if let Some((index, used)) = self.current {
            if used + len <= CHUNK_BYTES {
                self.current = Some((index, used + len));
                return Ok(Claim {
                    index,
                    offset: used,
                    waited: false,
                });
            }
        }
        let count = self.chunks.len();
        let mut waited = false;
        if count > 0 && self.chunks[self.next].done()? {
            // Oldest chunk is free.
        } else if count < self.cap {
            self.chunks.insert(self.next, make()?);
        } else {
            self.chunks[self.next].wait()?;
            waited = true;
        }
        let index = self.next;
        self.next = (index + 1) % self.chunks.len();
        self.current = Some((index, len));
        Ok(Claim {
            index,
            offset: 0,
            waited,
        })
    }

    /// The chunk at `index` (valid until the next claim, which may insert a chunk).
    pub fn chunk_mut(&mut self, index: usize) -> &mut C {
        &mut self.chunks[index]
    }

    /// Chunks the ring holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.chunks.len()
    }
}

/// A page-locked chunk and the event recorded on the stream after its last transfer.
pub struct PinnedChunk {
    pub host: PinnedHostSlice<u8>,
    pub copied: CudaEvent,
}

impl PinnedChunk {
    /// A new chunk of [`CHUNK_BYTES`] page-locked bytes on `ctx`'s device. Its event blocks
    /// the waiting thread instead of spinning a core: a wait for a chunk is a wait for
    /// queued device work, which may take long, while the host has batches to prepare.
    pub fn new(cuda: &std::sync::Arc<cudarc::driver::CudaContext>) -> Result<PinnedChunk> {
        // SAFETY: the contents are written before any transfer reads them.
        let host = unsafe { cuda.alloc_pinned::<u8>(CHUNK_BYTES) }
            .map_err(|e| super::driver_err("pinned host alloc", e))?;
        let copied = cuda
            .new_event(Some(
                cudarc::driver::sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC,
            ))
            .map_err(|e| super::driver_err("staging event", e))?;
        Ok(PinnedChunk { host, copied })
    }
}

impl StagingChunk for PinnedChunk {
    fn done(&self) -> Result<bool> {
        // An event never recorded counts as complete.
        self.copied
            .try_is_complete()
            .map_err(|e| super::driver_err("staging event", e))
    }

    fn wait(&self) -> Result<()> {
        self.copied
            .synchronize()
            .map_err(|e| super::driver_err("staging event", e))
    }
}

impl Drop for PinnedChunk {
    fn drop(&mut self) {
        // The page-locked memory is freed after this: no queued transfer may still read it.
        let _ = self.copied.synchronize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    /// A stream simulated on the host: items complete in order; `done` counts completed.
    #[derive(Default)]
    struct Stream {
        queued: Cell<u64>,
        done: Cell<u64>,
        blocks: Cell<u64>,
    }

    impl Stream {
        fn queue(&self) -> u64 {
            self.queued.set(self.queued.get() + 1);
            self.queued.get()
        }
    }

    /// A range of a chunk and who wrote it: (offset, length, (upload, piece)).
    type Written = (usize, usize, (u32, u32));

    /// A chunk whose last transfer is item `recorded` of the stream (0: none).
    struct Fake {
        /// Which chunk this is (indices shift when the ring grows).
        id: usize,
        stream: Rc<Stream>,
        recorded: Cell<u64>,
        /// What the chunk holds: ranges and the upload and piece that wrote each.
        contents: RefCell<Vec<Written>>,
    }

    impl StagingChunk for Fake {
        fn done(&self) -> Result<bool> {
            Ok(self.recorded.get() <= self.stream.done.get())
        }
        fn wait(&self) -> Result<()> {
            self.stream.blocks.set(self.stream.blocks.get() + 1);
            let s = &self.stream;
            s.done.set(s.done.get().max(self.recorded.get()));
            Ok(())
        }
    }

    /// A transfer queued but maybe not run: stream item, chunk id, range, what it must read.
    type Pending = (u64, usize, usize, usize, (u32, u32));

    /// Uploads pieces of `sizes` bytes after queueing a long kernel, as
    /// `CudaBuffer::from_bytes` does; checks that no claimed range overlaps one a queued
    /// transfer still reads, and that every transfer, when the stream runs it, reads what
    /// the upload wrote for it.
    fn upload(ring: &mut Ring<Fake>, s: &Rc<Stream>, id: u32, sizes: &[usize]) {
        let mut pending: Vec<Pending> = Vec::new();
        s.queue(); // a kernel that runs for a long time
        for (k, &len) in sizes.iter().enumerate() {
            let c = ring
                .claim(len, || {
                    Ok(Fake {
                        id: s.queued.get() as usize * 1000 + k,
                        stream: s.clone(),
                        recorded: Cell::new(0),
                        contents: RefCell::new(Vec::new()),
                    })
                })
                .unwrap();
            // Every transfer the stream has run by now read its range intact.
            check(ring, s, &mut pending);
            let chunk = ring.chunk_mut(c.index);
            let range = (c.offset, c.offset + len);
            assert!(range.1 <= CHUNK_BYTES, "range {range:?} past the chunk");
            for p in &pending {
                let overlaps = p.1 == chunk.id && p.2 < range.1 && range.0 < p.2 + p.3;
                assert!(
                    !overlaps,
                    "range {range:?} of chunk {} is still read by a queued transfer",
                    chunk.id
                );
            }
            chunk
                .contents
                .borrow_mut()
                .retain(|&(o, l, _)| o + l <= range.0 || range.1 <= o);
            chunk
                .contents
                .borrow_mut()
                .push((c.offset, len, (id, k as u32)));
            let item = s.queue();
            chunk.recorded.set(item);
            pending.push((item, chunk.id, c.offset, len, (id, k as u32)));
        }
        s.done.set(s.queued.get()); // the stream drains
        check(ring, s, &mut pending);
        assert!(pending.is_empty());
    }

    fn check(ring: &mut Ring<Fake>, s: &Stream, pending: &mut Vec<Pending>) {
        pending.retain(|&(item, id, offset, len, want)| {
            if item > s.done.get() {
                return true;
            }
            let chunk = ring.chunks.iter().find(|c| c.id == id).unwrap();
            let held = chunk
                .contents
                .borrow()
                .iter()
                .find(|&&(o, l, _)| (o, l) == (offset, len))
                .map(|x| x.2);
            assert_eq!(held, Some(want), "chunk {id} at {offset}");
            false
        });
    }

    #[test]
    fn a_chunk_is_reused_only_after_its_transfer_ran() {
        let s = Rc::new(Stream::default());
        let mut ring = Ring::new(MAX_CHUNKS);
        upload(&mut ring, &s, 0, &[CHUNK_BYTES; 3 * MAX_CHUNKS + 1]);
        assert_eq!(ring.len(), MAX_CHUNKS);
        // Past the cap, every chunk but the first MAX_CHUNKS blocked on its previous use.
        assert_eq!(s.blocks.get(), 2 * MAX_CHUNKS as u64 + 1);
    }

    #[test]
    fn uploads_within_the_cap_never_block_behind_queued_kernels() {
        let s = Rc::new(Stream::default());
        let mut ring = Ring::new(MAX_CHUNKS);
        for id in 0..4 {
            upload(&mut ring, &s, id, &[CHUNK_BYTES; MAX_CHUNKS]);
        }
        assert_eq!(s.blocks.get(), 0);
        assert_eq!(ring.len(), MAX_CHUNKS);
    }

    #[test]
    fn the_ring_grows_only_while_every_chunk_is_busy() {
        let s = Rc::new(Stream::default());
        let mut ring = Ring::new(MAX_CHUNKS);
        // Transfers that complete before the next claim reuse one chunk.
        for id in 0..5 {
            upload(&mut ring, &s, id, &[CHUNK_BYTES]);
        }
        assert_eq!(ring.len(), 1);
        upload(&mut ring, &s, 9, &[CHUNK_BYTES; 3]);
        assert_eq!(ring.len(), 3);
        assert_eq!(s.blocks.get(), 0);
    }

    #[test]
    fn small_uploads_share_a_chunk_in_disjoint_ranges() {
        let s = Rc::new(Stream::default());
        let mut ring = Ring::new(MAX_CHUNKS);
        // 1000 uploads of 4 KiB to 40 KiB queued behind one long kernel: about 5 chunks'
        // worth, so they share chunks and never wait.
        let sizes: Vec<usize> = (0..1000).map(|i| 4096 * (1 + i % 10)).collect();
        upload(&mut ring, &s, 1, &sizes);
        let total: usize = sizes.iter().sum();
        assert_eq!(ring.len(), total.div_ceil(CHUNK_BYTES));
        assert_eq!(s.blocks.get(), 0);
    }

    #[test]
    fn a_tail_after_whole_chunks_and_uploads_past_the_ring_never_overwrite_a_queued_range() {
        let s = Rc::new(Stream::default());
        let mut ring = Ring::new(3);
        for id in 0..6 {
            let mut sizes = vec![CHUNK_BYTES; id as usize % 3];
            sizes.extend([12_345 * 4, 4, CHUNK_BYTES / 2, CHUNK_BYTES / 2 + 4]);
            upload(&mut ring, &s, id, &sizes);
        }
        assert_eq!(ring.len(), 3);
    }
}
