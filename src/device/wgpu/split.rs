//! Splitting work whose storage bindings would pass the adapter's
//! `max_storage_buffer_binding_size` (or the test cap of [`Context::set_chunk_cap`]).
//!
//! The unit of splitting is a row: an op splits its output into ranges of rows, and a
//! single row (of logits, of features, of a dst node's edges, of an LSTM node's gates) must
//! fit one binding; [`Context::split`] says which row does not. Elementwise ops split into
//! element ranges ([`Context::launch_chunked`], or [`Context::launch_followed`] when a
//! broadcast operand follows the ranges), reductions cut long rows into blocks and matmul
//! into blocks of its own, so these have no such rule.
//!
//! **Windows.** A dispatch binds a [`Window`] of a buffer: its elements `lo..hi`, the byte
//! offset aligned down to `min_storage_buffer_offset_alignment`. The kernel receives the
//! window's first element, [`Window::base`], as a parameter word and indexes `buf[k - base]`
//! with the global element index `k`, so the same kernel serves a whole tensor and any part
//! of it. [`Context::split`] cuts `0..n` into the longest ranges whose windows (output rows,
//! the input rows they read, a CSR edge range) fit.
//!
//! **Tiles.** An operand read at arbitrary rows (the source of a gather or of a segment
//! reduction) has no contiguous part per output range; it is cut into tiles of rows
//! ([`Context::tiles`]) and the kernel runs once per (output range, tile), reading only the
//! rows inside the tile. A kernel that sums carries its partial sum across tiles in its
//! output (a `first` flag says whether to start from zero). Where the rows a sum visits
//! increase along the sum (the transposed CSR, the scatter's sorted positions) the order of
//! the additions is unchanged, so results are bit-identical to one dispatch.
//!
//! When everything fits there is one range and one tile: one dispatch, as before.

use crate::device::wgpu::launch::Binding;
use crate::device::wgpu::params::Params;
use crate::device::wgpu::{Context, Kernel, WgpuBuffer};
use crate::error::{Error, Result};

/// How an elementwise kernel reads its broadcast operand at global element `gi` of a tensor
/// of `cols` columns (see [`Context::launch_followed`]).
#[derive(Clone, Copy, Debug)]
pub enum Follow {
    /// One value per element: `gi`.
    Same,
    /// A row repeated down the rows: `gi % cols`.
    Row(usize),
    /// A column repeated along each row: `gi / cols`.
    Col(usize),
    /// One value: 0.
    Scalar,
}

impl Follow {
    /// The operand's values that elements `g0..g1` read: all of a row once the range wraps
    /// one, so ranges stay inside rows when a row is too long for one binding.
    fn range(self, g0: usize, g1: usize) -> (usize, usize) {
        match self {
            Follow::Same => (g0, g1),
            Follow::Row(c) if g0 / c == (g1 - 1) / c => (g0 % c, (g1 - 1) % c + 1),
            Follow::Row(c) => (0, c),
            Follow::Col(c) => (g0 / c, (g1 - 1) / c + 1),
            Follow::Scalar => (0, 1),
        }
    }
}

/// Elements `lo..hi` of a buffer, bound at an aligned offset (see the module docs).
pub struct Window<'a> {
    buffer: &'a WgpuBuffer,
    offset: u64,
    size: u64,
    /// The global index of the window's first element: kernels index `buf[k - base]`.
    pub base: u32,
}

impl Context {
    /// Elements of 4 bytes per alignment step of binding offsets.
    fn align_elems(&self) -> u64 {
        (self.limits.min_storage_buffer_offset_alignment as u64 / 4).max(1)
    }

    /// The elements a window may span so that it fits [`Context::chunk_bytes`] wherever it
    /// starts (aligning its offset down adds up to one alignment step less one element).
    pub fn window_elems(&self) -> usize {
        let limit = self.chunk_bytes() / 4;
        limit.saturating_sub(self.align_elems() - 1).max(1) as usize
    }

    /// The window of elements `lo..hi` of `buffer`. An empty window binds the buffer's first
    /// word (bindings cannot be empty); its kernel must not read it. Global element indices
    /// fit u32: the ops check their tensors' sizes.
    pub fn window<'a>(&self, buffer: &'a WgpuBuffer, lo: usize, hi: usize) -> Window<'a> {
        if hi <= lo {
            return Window {
                buffer,
                offset: 0,
                size: 4,
                base: 0,
            };
        }
        let a = self.align_elems();
        let base = lo as u64 / a * a;
        Window {
            buffer,
            offset: base * 4,
            size: (hi as u64 - base) * 4,
            base: base as u32,
        }
    }

    /// Rows `r0..r1` of a buffer of rows of `width` elements.
    pub fn rows_window<'a>(
        &self,
        buffer: &'a WgpuBuffer,
        r0: usize,
        r1: usize,
        width: usize,
    ) -> Window<'a> {
        self.window(buffer, r0 * width, r1 * width)
    }

    /// Cuts `0..n` into consecutive ranges, each the longest whose `span(start, end)` (the
    /// elements of the largest window the range needs; it must grow with `end`) fits
    /// [`Context::window_elems`]. An error naming `what` when one row alone does not fit.
    pub fn split(
        &self,
        what: &str,
        n: usize,
        span: impl Fn(usize, usize) -> usize,
    ) -> Result<Vec<(usize, usize)>> {
        let limit = self.window_elems();
        split_ranges(n, limit, &span).map_err(|row| Error::Backend {
            backend: "wgpu",
            msg: format!(
                "{what}: row {row} alone needs {} bytes in one binding, past the limit of {} bytes",
                span(row, row + 1) * 4,
                self.chunk_bytes()
            ),
        })
    }

    /// Tiles of the `rows` rows of operands read at arbitrary rows (see the module docs):
    /// [`Context::split`] with `span` the elements of their largest window, and one empty
    /// tile when there are no rows, so that kernels still run once and write their outputs.
    pub fn tiles(
        &self,
        what: &str,
        rows: usize,
        span: impl Fn(usize, usize) -> usize,
    ) -> Result<Vec<(usize, usize)>> {
        let t = self.split(what, rows, span)?;
        Ok(if t.is_empty() { vec![(0, 0)] } else { t })
    }

    /// Runs the elementwise kernel `k` over `n` elements in ranges whose windows fit: the
    /// buffers of `same` hold one value per element and are bound as the range's window, the
    /// optional `follow` operand as the window of the values the range reads through its
    /// [`Follow`] map. The shader's parameters start with `n, base, same_base, follow_base`,
    /// set here per range (`n` values from global index `base`); it indexes with the global
    /// element index `gi = base + i` (`i < n`), less the windows' first elements.
    pub fn launch_followed<P: Params>(
        &self,
        k: &Kernel,
        params: P,
        same: &[(u32, &WgpuBuffer)],
        follow: Option<(u32, &WgpuBuffer, Follow)>,
        n: usize,
    ) -> Result<()> {
        if n > u32::MAX as usize {
            return Err(Error::Backend {
                backend: "wgpu",
                msg: format!(
                    "{}::{}: {n} elements do not fit u32 indices",
                    k.stem, k.entry
                ),
            });
        }
        let f_range = |g0: usize, g1: usize| follow.map_or((0, 0), |(_, _, f)| f.range(g0, g1));
        let span = |g0: usize, g1: usize| {
            let (lo, hi) = f_range(g0, g1);
            (g1 - g0).max(hi - lo)
        };
        for (g0, g1) in self.split(k.stem, n, span)? {
            let mut windows: Vec<(u32, Window)> = same
                .iter()
                .map(|&(slot, b)| (slot, self.window(b, g0, g1)))
                .collect();
            let same_base = windows.first().map_or(0, |w| w.1.base);
            let mut follow_base = 0;
            if let Some((slot, b, _)) = follow {
                let (lo, hi) = f_range(g0, g1);
                let w = self.window(b, lo, hi);
                follow_base = w.base;
                windows.push((slot, w));
            }
            let mut words = params;
            super::params::set_prefix(
                &mut words,
                &["n", "base", "same_base", "follow_base"],
                &[(g1 - g0) as u32, g0 as u32, same_base, follow_base],
            )?;
            let binds: Vec<_> = windows.iter().map(|(slot, w)| (*slot, w)).collect();
            self.launch_windows(k, &words, &binds, (g1 - g0) as u64)?;
        }
        Ok(())
    }

    /// Runs `k` over `n` invocations (1-D grid, see [`Context::launch`]) with the given
    /// windows bound; nothing runs when `n` is 0.
    pub fn launch_windows<P: Params>(
        &self,
        k: &Kernel,
        params: &P,
        windows: &[(u32, &Window)],
        n: u64,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch_windows_grid(k, params, windows, self.grid(n)?)
    }

    /// Runs `k` on an explicit grid of workgroups with the given windows bound.
    pub fn launch_windows_grid<P: Params>(
        &self,
        k: &Kernel,
        params: &P,
        windows: &[(u32, &Window)],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let binds: Vec<Binding> = windows
            .iter()
            .map(|&(slot, w)| Binding {
                slot,
                buffer: w.buffer,
                offset: w.offset,
                size: w.size,
            })
            .collect();
        self.dispatch(k, params, &binds, grid)
    }
}

/// The ranges of [`Context::split`] for a window limit of `limit` elements, or the first
/// row that does not fit alone.
fn split_ranges(
    n: usize,
    limit: usize,
    span: impl Fn(usize, usize) -> usize,
) -> std::result::Result<Vec<(usize, usize)>, usize> {
    let fits = |s: usize, e: usize| span(s, e) <= limit;
    if n == 0 || fits(0, n) {
        return Ok(if n == 0 { Vec::new() } else { vec![(0, n)] });
    }
    let mut out = Vec::new();
    let mut s = 0;
    while s < n {
        if !fits(s, s + 1) {
            return Err(s);
        }
        // Gallop to the first end that does not fit, then bisect.
        let (mut good, mut bad, mut len) = (s + 1, None, 1);
        while good < n {
            let e = (s + 2 * len).min(n);
            if fits(s, e) {
                good = e;
                len *= 2;
            } else {
                bad = Some(e);
                break;
            }
        }
        if let Some(mut bad) = bad {
            while bad - good > 1 {
                let mid = good + (bad - good) / 2;
                if fits(s, mid) {
                    good = mid;
                } else {
                    bad = mid;
                }
            }
        }
        out.push((s, good));
        s = good;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// The longest ranges by a linear scan: the reference for the galloping search.
    fn split(n: usize, limit: usize, span: impl Fn(usize, usize) -> usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut s = 0;
        while s < n {
            let mut e = s + 1;
            while e < n && span(s, e + 1) <= limit {
                e += 1;
            }
            out.push((s, e));
            s = e;
        }
        out
    }

    #[test]
    fn galloping_split_matches_a_linear_scan() {
        // Rows of uneven widths (a CSR edge range): prefix sums of 1..=7 repeated.
        let widths: Vec<usize> = (0..300).map(|i| 1 + (i * 7919) % 13).collect();
        let mut ptr = vec![0];
        for w in &widths {
            ptr.push(ptr.last().unwrap() + w);
        }
        let span = |a: usize, b: usize| ptr[b] - ptr[a];
        for limit in [13, 14, 40, 100, 1000, 100_000] {
            let want = split(widths.len(), limit, span);
            let got = super::split_ranges(widths.len(), limit, span).unwrap();
            assert_eq!(want, got, "limit {limit}");
        }
        assert!(super::split_ranges(3, 2, |a, b| (b - a) * 3).is_err());
        assert!(super::split_ranges(0, 2, |a, b| b - a).unwrap().is_empty());
    }
}
