//! CPU helpers shared by row-structured ops (gathers, segment reductions, row-wise
//! softmax): row-parallel output, where one task owns one output row, so no two tasks write
//! the same value and results do not depend on the thread count (GPU kernels keep that
//! ownership, down to one invocation per output value for gathers and segment reductions);
//! u32 index operands; and the u32 value counts GPU kernels index with.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::error::{Error, Result};
use crate::float::PAR_MIN;
use crate::tensor::Tensor;

/// True when a kernel touching `work` values is worth splitting across threads.
#[inline]
pub(crate) fn parallel(work: usize) -> bool {
    work >= PAR_MIN
}

/// A counted `[rows, cols]` buffer whose row `i` is written by `f(i, row)`; rows start as
/// `T::default()` (zero). Rows run in parallel when `work` (values the kernel reads and
/// writes in all) is large enough to pay for it.
pub(crate) fn rows_from_fn<T: CpuElem + Default>(
    rows: usize,
    cols: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) -> Result<CpuBuffer> {
    let len = rows * cols;
    let alloc = cpu::reserve::<T>(len)?;
    let out = zeroed_pieces(len, cols, parallel(work), |i, row| f(i, row))?;
    Ok(CpuBuffer::from_reserved(T::wrap(out), alloc))
}

/// A new vector of `len` values, `f(i, piece)` run over its pieces of `size` values (the
/// last one shorter), in parallel when `par`; each piece holds `T::default()` (zero) when
/// `f` gets it. The task that runs `f` on a piece zeroes it first, while the piece is in
/// its cache, instead of a pass of its own over the whole vector before the tasks: for a
/// vector larger than the cache that pass wrote every value to memory and the tasks read
/// it back. The values are those of a zero-filled vector written by `f`, bit for bit.
fn zeroed_pieces<T: CpuElem + Default>(
    len: usize,
    size: usize,
    par: bool,
    f: impl Fn(usize, &mut [T]) + Sync,
) -> Result<Vec<T>> {
    let mut out: Vec<T> = cpu::try_vec(len)?;
    if len == 0 || size == 0 {
        return Ok(out);
    }
    let run = |(i, piece): (usize, &mut [MaybeUninit<T>])| {
        for v in piece.iter_mut() {
            v.write(T::default());
        }
        // SAFETY: every value of `piece` was written just above, and `MaybeUninit<T>` has
        // the layout of `T`.
        let piece = unsafe { &mut *(piece as *mut [MaybeUninit<T>] as *mut [T]) };
        f(i, piece)
    };
    let spare = &mut out.spare_capacity_mut()[..len];
    if par {
        spare.par_chunks_mut(size).enumerate().for_each(run);
    } else {
        spare.chunks_mut(size).enumerate().for_each(run);
    }
    // SAFETY: the pieces cover the first `len` values, and `run` wrote each of them (a
    // panic in `f` leaves the length at 0).
    unsafe { out.set_len(len) };
    Ok(out)
}

/// Runs `f(i, row)` over the rows of `out` (`cols` values each), in parallel when `work`
/// is large enough (a new buffer's rows, or a buffer updated in place). Nothing runs when
/// `cols` is zero: such rows hold no values.
pub(crate) fn fill_rows<T: Send>(
    out: &mut [T],
    cols: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if cols == 0 {
        return;
    }
    if parallel(work) {
        out.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(i, row)| f(i, row));
    } else {
        out.chunks_mut(cols)
            .enumerate()
            .for_each(|(i, row)| f(i, row));
    }
}

/// Values per chunk of [`map_from_fn`]: large enough to amortise a task, small enough to
/// stay in the L2 cache.
const MAP_CHUNK: usize = 1 << 14;

/// A new buffer of `len` values filled by `f(start, chunk)` over consecutive chunks
/// (`chunk` holds the values `start..start + chunk.len()`), in parallel for large `len`.
/// A loop over a chunk's slice vectorises where a closure called per index does not.
pub(crate) fn map_from_fn<T: CpuElem + Default>(
    len: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) -> Result<CpuBuffer> {
    let alloc = cpu::reserve::<T>(len)?;
    // One piece on the calling thread, or chunks of MAP_CHUNK values over the pool.
    let (par, size) = (parallel(len), if parallel(len) { MAP_CHUNK } else { len });
    let out = zeroed_pieces(len, size, par, |i, chunk| f(i * size, chunk))?;
    Ok(CpuBuffer::from_reserved(T::wrap(out), alloc))
}

/// `f(out_chunk, other_chunk)` over `out` (as long as `other`) in chunks of
/// [`map_from_fn`]'s size, in parallel for large `out`: an update in place, of a buffer
/// nothing else holds, whose every value depends on its own value and the other's alone.
/// `f` takes a chunk, not a value, so that what it decides once (an op's kind) it
/// decides per chunk and the loop over the chunk vectorises.
pub(crate) fn update_from<T: Send, S: Sync>(
    out: &mut [T],
    other: &[S],
    f: impl Fn(&mut [T], &[S]) + Sync,
) {
    if parallel(out.len()) {
        out.par_chunks_mut(MAP_CHUNK)
            .zip(other.par_chunks(MAP_CHUNK))
            .for_each(|(o, s)| f(o, s));
    } else {
        f(out, other);
    }
}

/// The indices of `t`, a u32 tensor whose CPU data is `data`; a dtype error naming `op`
/// otherwise.
pub(crate) fn u32_data<'a>(op: &'static str, t: &Tensor, data: &'a CpuData) -> Result<&'a [u32]> {
    match data {
        CpuData::U32(v) => Ok(v),
        _ => Err(t.dtype_error(op, "u32")),
    }
}

/// Errors unless `t` is a 1-D tensor of `len` values (`what` names it in the message).
pub(crate) fn expect_vector(op: &'static str, what: &str, t: &Tensor, len: usize) -> Result<()> {
    if t.shape() != [len] {
        return Err(Error::shape(
            op,
            format!("{what} must have shape [{len}], got {:?}", t.shape()),
        ));
    }
    Ok(())
}

/// `(rows, cols)` of a tensor that must be 2-D.
pub(crate) fn dims2(op: &'static str, what: &str, t: &Tensor) -> Result<(usize, usize)> {
    match t.shape() {
        [r, c] => Ok((*r, *c)),
        s => Err(Error::shape(
            op,
            format!("{what} must be 2-D, got shape {s:?}"),
        )),
    }
}

/// `n` as the u32 a GPU kernel indexes values with (the device layer's, shared with the
/// backends' kernel code).
pub(crate) use crate::device::gpu::u32_count;

#[cfg(test)]
mod tests {
    use super::*;

    /// The f32 values of a CPU buffer.
    fn values(b: CpuBuffer) -> Vec<f32> {
        match b.data {
            CpuData::F32(v) => v,
            _ => panic!("not f32"),
        }
    }

    #[test]
    fn rows_and_pieces_start_as_zeros_and_keep_what_f_writes() {
        // On the calling thread and over the pool (past PAR_MIN values), with a short last
        // piece for map_from_fn; each task checks its piece is zero before writing it.
        for rows in [3, 3 * PAR_MIN] {
            let out = rows_from_fn::<f32>(rows, 5, rows * 5, |i, row| {
                assert!(row.iter().all(|&v| v.to_bits() == 0));
                row.iter_mut()
                    .enumerate()
                    .for_each(|(j, v)| *v += (i * 5 + j) as f32);
            })
            .unwrap();
            let want: Vec<f32> = (0..rows * 5).map(|v| v as f32).collect();
            assert_eq!(values(out), want);
            let len = rows * 5 + 7;
            let out = map_from_fn::<f32>(len, |start, chunk| {
                assert!(chunk.iter().all(|&v| v.to_bits() == 0));
                chunk
                    .iter_mut()
                    .enumerate()
                    .for_each(|(j, v)| *v = (start + j) as f32);
            })
            .unwrap();
            assert_eq!(values(out), (0..len).map(|v| v as f32).collect::<Vec<_>>());
        }
        assert!(values(rows_from_fn::<f32>(4, 0, 0, |_, _| unreachable!()).unwrap()).is_empty());
    }
}
