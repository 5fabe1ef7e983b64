//! Page-locked staging chunks for large uploads, reused only once their transfer ran.
//!
//! # Ordering
//!
//! An upload copies each chunk of its bytes into a page-locked (pinned) host chunk, queues
//! the transfer of that chunk on the device's stream (`cuMemcpyHtoDAsync`, which returns at
//! once) and records the chunk's own event on the stream right after the transfer. Work on
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

/// Bytes of each staging chunk.
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

/// Staging chunks used in turn. The chunk at `next` is always the one whose transfer was
/// queued longest ago (or one never used): chunks are claimed in ring order, and a new
/// chunk is inserted at `next`, so transfers complete in ring order from `next` on.
#[derive(Debug)]
pub struct Ring<C> {
    chunks: Vec<C>,
    next: usize,
    cap: usize,
}

/// A chunk handed out by [`Ring::claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Index of the chunk in the ring.
    pub index: usize,
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
        }
    }

    /// A chunk free to overwrite: the oldest if its transfer ran; else a new one from
    /// `make` while the ring has fewer than `cap`; else the oldest after blocking on it.
    /// The caller must queue its transfer from the chunk and record the chunk's event
    /// before claiming again.
    pub fn claim(&mut self, make: impl FnOnce() -> Result<C>) -> Result<Claim> {
        let len = self.chunks.len();
        let mut waited = false;
        if len > 0 && self.chunks[self.next].done()? {
            // Oldest chunk is free.
        } else if len < self.cap {
            self.chunks.insert(self.next, make()?);
        } else {
            self.chunks[self.next].wait()?;
            waited = true;
        }
        let index = self.next;
        self.next = (index + 1) % self.chunks.len();
        Ok(Claim { index, waited })
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
    use std::cell::Cell;
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

    /// A chunk whose last transfer is item `recorded` of the stream (0: none).
    struct Fake {
        /// Which chunk this is (indices shift when the ring grows).
        id: usize,
        stream: Rc<Stream>,
        recorded: Cell<u64>,
        /// What the chunk holds: the upload and chunk that last wrote it.
        contents: Cell<(u32, u32)>,
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

    /// Uploads `chunks` chunks after queueing a long kernel, as `CudaBuffer::from_bytes`
    /// does; checks that every transfer, when the stream runs it, reads what the upload
    /// wrote for it.
    fn upload(ring: &mut Ring<Fake>, s: &Rc<Stream>, id: u32, chunks: u32) {
        // Pending transfers: (stream item, chunk id, what it must read).
        let mut pending: Vec<(u64, usize, (u32, u32))> = Vec::new();
        s.queue(); // a kernel that runs for a long time
        for k in 0..chunks {
            let c = ring
                .claim(|| {
                    Ok(Fake {
                        id: s.queued.get() as usize * 1000 + k as usize,
                        stream: s.clone(),
                        recorded: Cell::new(0),
                        contents: Cell::new((u32::MAX, u32::MAX)),
                    })
                })
                .unwrap();
            // Every transfer the stream has run by now read its chunk intact.
            check(ring, s, &mut pending);
            let chunk = ring.chunk_mut(c.index);
            assert!(
                chunk.done().unwrap(),
                "chunk {} handed out while its transfer is queued",
                c.index
            );
            chunk.contents.set((id, k));
            let item = s.queue();
            chunk.recorded.set(item);
            let chunk_id = chunk.id;
            pending.push((item, chunk_id, (id, k)));
        }
        s.done.set(s.queued.get()); // the stream drains
        check(ring, s, &mut pending);
        assert!(pending.is_empty());
    }

    fn check(ring: &mut Ring<Fake>, s: &Stream, pending: &mut Vec<(u64, usize, (u32, u32))>) {
        pending.retain(|&(item, id, want)| {
            if item > s.done.get() {
                return true;
            }
            let chunk = ring.chunks.iter().find(|c| c.id == id).unwrap();
            assert_eq!(chunk.contents.get(), want, "chunk {id}");
            false
        });
    }

    #[test]
    fn a_chunk_is_reused_only_after_its_transfer_ran() {
        let s = Rc::new(Stream::default());
        let mut ring = Ring::new(MAX_CHUNKS);
        upload(&mut ring, &s, 0, 3 * MAX_CHUNKS as u32 + 1);
        assert_eq!(ring.len(), MAX_CHUNKS);
        // Past the cap, every chunk but the first MAX_CHUNKS blocked on its previous use.
        assert_eq!(s.blocks.get(), 2 * MAX_CHUNKS as u64 + 1);
    }

    #[test]
    fn uploads_within_the_cap_never_block_behind_queued_kernels() {
        let s = Rc::new(Stream::default());
        let mut ring = Ring::new(MAX_CHUNKS);
        for id in 0..4 {
            upload(&mut ring, &s, id, MAX_CHUNKS as u32);
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
            upload(&mut ring, &s, id, 1);
        }
        assert_eq!(ring.len(), 1);
        upload(&mut ring, &s, 9, 3);
        assert_eq!(ring.len(), 3);
        assert_eq!(s.blocks.get(), 0);
    }
}
