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

/// Buffers at least this large are advised to use transparent huge pages.
const HUGE_BUFFER: usize = 4 << 20;
/// The size of a transparent huge page on x86-64 and most AArch64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the 2 MiB-aligned interior of a large fresh buffer with
/// transparent huge pages (`MADV_HUGEPAGE`, Linux), before it is written. Buffers past
/// glibc's mmap threshold (32 MiB) come from fresh mappings, which fault in one 4 KiB page
/// at a time: a feature gather of 137 k rows of 512 bytes (70 MB) took 17 k page faults
/// per batch, 94% of a papers-like run's faults; advised, the epoch's gather went from
/// 8.5 to 6.2-6.8 s (docs/BENCHMARKS.md, "Feature gather"). With the advice a fault maps 2 MiB. Only a
/// hint: where huge pages are off (`/sys/kernel/mm/transparent_hugepage/enabled` set to
/// `never`), on other systems and on smaller buffers it does nothing.
pub fn advise_huge_pages<T>(buf: &mut [std::mem::MaybeUninit<T>]) {
    let bytes = std::mem::size_of_val(buf);
    if bytes < HUGE_BUFFER {
        return;
    }
    let start = buf.as_mut_ptr() as usize;
    let from = start.next_multiple_of(HUGE_PAGE);
    let to = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
    if to > from {
        advise(from, to - from);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn advise(addr: usize, len: usize) {
    // SAFETY: [addr, addr + len) is page-aligned and lies inside a live allocation the
    // caller holds mutably; MADV_HUGEPAGE changes only how the kernel backs those pages
    // (never their content), and its result is ignored (it is a hint).
    let _ = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn advise(_addr: usize, _len: usize) {}

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
