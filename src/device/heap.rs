//! The C heap's settings for training on the CPU backend.
//!
//! glibc serves allocations past its mmap threshold with fresh mappings and gives the
//! free memory at the top of its heap back to the system once it passes the trim
//! threshold. A training step frees and allocates the same tensor sizes over and over,
//! so under those defaults every step faulted its buffers in again and the kernel zeroed
//! each page: on a 100k-node SAGE epoch (2 cores) 640k page faults, half of the epoch's
//! time (docs/BENCHMARKS.md). [`keep_freed_memory`] keeps freed memory in the process
//! instead: the peak resident memory does not change (it is the peak of live buffers
//! either way), but memory freed after the peak is kept for the next step rather than
//! returned.

/// Allocations up to this many bytes come from the heap (glibc's largest mmap threshold).
pub const MMAP_THRESHOLD: usize = 32 << 20;
/// Free memory kept at the top of the heap, and asked for in advance when it grows.
pub const TOP_PAD: usize = 1 << 30;

/// Sets the heap to keep freed memory (see the module's comment). Returns whether it did:
/// not where the C library is not glibc, nor where the user tunes glibc's allocator
/// through `GLIBC_TUNABLES` (their settings win). The `espalier` binary calls it first
/// thing; a program that embeds the library may call it too.
pub fn keep_freed_memory() -> bool {
    if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
        return false;
    }
    set()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set() -> bool {
    let params = [
        (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int),
        (libc::M_TRIM_THRESHOLD, libc::c_int::MAX),
        (libc::M_TOP_PAD, TOP_PAD as libc::c_int),
    ];
    // SAFETY: mallopt only changes the allocator's parameters (under its own lock); it
    // returns 1 on success.
    params
        .iter()
        .all(|&(param, value)| unsafe { libc::mallopt(param, value) } == 1)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeping_freed_memory_is_set_under_glibc_and_allocation_still_works() {
        let set = keep_freed_memory();
        let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."));
        assert_eq!(
            set,
            cfg!(all(target_os = "linux", target_env = "gnu")) && !tuned
        );
        // Sizes below and past the mmap threshold, freed and allocated again.
        for _ in 0..3 {
            for len in [1 << 10, MMAP_THRESHOLD / 4 + 1, MMAP_THRESHOLD + 1] {
                let v = vec![7u8; len];
                assert_eq!((v[0], v[len - 1]), (7, 7));
            }
        }
    }
}
