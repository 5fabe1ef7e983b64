//! Software prefetch for gathers of rows at random positions (the feature gather, and
//! the CPU backend's reads of neighbour rows). Copying a row whose address the CPU
//! cannot predict waits for memory (a cache miss and usually a TLB miss) once per row;
//! asking for the lines of the row [`DISTANCE`] positions ahead overlaps those waits.
//! A standalone gather of 200 k random rows of 512 bytes from a 1.7 GB matrix (2 cores)
//! took 19.6 ms without and 9.2 ms at a distance of 8; in the engine's feature gather,
//! where page faults weighed more, about 10% (docs/BENCHMARKS.md, "Feature gather").
//!
//! The hint never faults and changes no result: on architectures without one here it
//! does nothing.

/// How many rows ahead of the one being copied to prefetch.
pub const DISTANCE: usize = 8;

/// Bytes of a row asked for at most: past the first lines the hardware's own stream
/// prefetcher follows a row.
const MAX_BYTES: usize = 512;

/// Cache line size assumed for the hints (64 bytes on current x86-64 and most AArch64).
const LINE: usize = 64;

/// Asks the CPU to start loading the cache lines of `row` (its first [`MAX_BYTES`]).
#[inline(always)]
pub fn row<T>(row: &[T]) {
    let bytes = std::mem::size_of_val(row).min(MAX_BYTES);
    let p = row.as_ptr() as *const u8;
    let mut off = 0;
    while off < bytes {
        line(p.wrapping_add(off));
        off += LINE;
    }
}

/// Asks for row `rows[at]` of `x` (rows of `f` values) ahead of its use, as [`row`]
/// does: the gathers call it with `at` [`DISTANCE`] positions past the row they copy.
/// Past the end of `rows`, or for a row outside `x`, nothing.
#[inline(always)]
pub fn row_at<T>(x: &[T], rows: &[u32], at: usize, f: usize) {
    if let Some(&r) = rows.get(at) {
        let r = r as usize;
        if let Some(v) = x.get(r * f..(r + 1) * f) {
            row(v);
        }
    }
}

#[inline(always)]
fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 (SSE, in x86-64's baseline) is a hint: it never faults, whatever
    // the address, and has no effect a program can observe other than timing.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint: it never faults and writes no register or memory.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefetching_any_row_leaves_it_unchanged() {
        let v: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        for r in [&v[..], &v[..1], &v[999..], &v[..0]] {
            super::row(r);
        }
        assert_eq!(v[999], 999.0);
    }

    #[test]
    fn prefetching_rows_past_the_list_or_outside_x_does_nothing() {
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        // Row 2 of 4 values is x[8..12]; row 3 would be outside x; index 5 is past `rows`.
        for at in [0, 1, 5] {
            super::row_at(&x, &[2, 3], at, 4);
        }
        assert_eq!(x[11], 11.0);
    }
}
