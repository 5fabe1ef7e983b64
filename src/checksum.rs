//! A fast 64-bit checksum of byte strings, the same whether the bytes come whole or in
//! pieces of any sizes, and whatever the thread count: the dataset cache
//! ([`crate::graph::io::cache`]) and checkpoints ([`crate::train::checkpoint`]) store it to
//! catch corrupt files. Not cryptographic: it detects accidents (a flipped bit, a run of
//! garbage, a truncation), not forgeries.

use rayon::prelude::*;

use crate::rng::mix64;

/// Bytes per independently hashed chunk of [`StreamHash`].
pub const HASH_CHUNK: usize = 1 << 20;

/// A fast parallel hash of a byte string (independent of the thread count).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = StreamHash::default();
    h.update(bytes);
    h.finish()
}

/// [`hash_bytes`] of a byte string given in pieces of any sizes: the string is cut into
/// 1 MiB chunks hashed in parallel, whatever the pieces, so a file streamed through a small
/// buffer hashes as the same bytes held in memory.
#[derive(Default)]
pub struct StreamHash {
    len: u64,
    pending: Vec<u8>,
    parts: Vec<u64>,
}

impl StreamHash {
    /// Adds the next piece.
    pub fn update(&mut self, mut b: &[u8]) {
        self.len += b.len() as u64;
        if !self.pending.is_empty() {
            let take = (HASH_CHUNK - self.pending.len()).min(b.len());
            self.pending.extend_from_slice(&b[..take]);
            b = &b[take..];
            if self.pending.len() < HASH_CHUNK {
                return;
            }
            self.parts.push(chunk_hash(&self.pending));
            self.pending.clear();
        }
        let full = b.len() / HASH_CHUNK * HASH_CHUNK;
        // An indexed parallel iterator extends the Vec in order.
        self.parts
            .par_extend(b[..full].par_chunks(HASH_CHUNK).map(chunk_hash));
        self.pending.extend_from_slice(&b[full..]);
    }

    /// The hash of every piece added, in order.
    pub fn finish(mut self) -> u64 {
        if !self.pending.is_empty() {
            self.parts.push(chunk_hash(&self.pending));
        }
        self.parts
            .iter()
            .fold(self.len, |h, &x| mix64(h.wrapping_add(x)))
    }
}

fn chunk_hash(c: &[u8]) -> u64 {
    const P: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [1u64, 2, 3, 4];
    let mut blocks = c.chunks_exact(32);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
            *lane = (*lane ^ w).wrapping_mul(P).rotate_left(29);
        }
    }
    let tail = blocks
        .remainder()
        .iter()
        .fold(0u64, |h, &b| (h ^ b as u64).wrapping_mul(P));
    lanes
        .iter()
        .fold(tail, |h, &l| mix64(h ^ l).wrapping_add(P))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_hash_of_pieces_equals_the_hash_of_the_whole() {
        let bytes: Vec<u8> = (0..3 * HASH_CHUNK + 12_345)
            .map(|i| (i as u64).wrapping_mul(0x9E37_79B9) as u8)
            .collect();
        let whole = hash_bytes(&bytes);
        for cuts in [
            vec![0],
            vec![1],
            vec![HASH_CHUNK],
            vec![HASH_CHUNK - 1, HASH_CHUNK + 1],
            vec![7, 2 * HASH_CHUNK + 5, 2 * HASH_CHUNK + 6],
        ] {
            let mut h = StreamHash::default();
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                h.update(&bytes[at..c]);
                at = c;
            }
            assert_eq!(h.finish(), whole);
        }
        assert_ne!(hash_bytes(&bytes[1..]), whole);
    }
}
