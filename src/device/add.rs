//! Element-wise addition of two float buffers of the same length on one device: in place
//! (`dst += src`) or into a new buffer (`a + b`). It is what gradient accumulation needs
//! (autograd's sums, a micro-batch's held gradients): the device layer owns it, as it
//! owns `fill`, so that autograd adds gradients without going through the ops, which
//! record autograd nodes. Not recorded by autograd.
//!
//! On a GPU it runs the `binary` op's kernels (`BinaryKernels`: `add_assign` and the
//! binary op's add without broadcast), which compute the same `x + y` per element: a
//! gradient summed here is bit-identical to one summed by `ops::add`.

use rayon::prelude::*;

use crate::device::cpu::{self, CpuBuffer, CpuData, CpuElem};
use crate::device::kernels::binary::{BinaryKernels, BinaryShape};
use crate::error::{Error, Result};
use crate::float::{Float, PAR_MIN};

/// The error for operands that are not both f32 (or both f64) or differ in length.
fn operands(op: &str, a: &CpuData, b: &CpuData) -> Error {
    Error::invalid(format!(
        "{op}: operands must both be f32 (or both f64 on the CPU) of one length, got {} and {}",
        a.dtype_name(),
        b.dtype_name()
    ))
}

/// `d += s` on CPU values (f32 or f64, same length).
pub fn cpu_add_assign(d: &mut CpuData, s: &CpuData) -> Result<()> {
    fn go<T: Float + CpuElem>(d: &mut [T], s: &[T]) {
        if d.len() >= PAR_MIN {
            d.par_chunks_mut(ADD_CHUNK)
                .zip(s.par_chunks(ADD_CHUNK))
                .for_each(|(d, s)| add_slice(d, s));
        } else {
            add_slice(d, s);
        }
    }
    match (&mut *d, s) {
        (CpuData::F32(d), CpuData::F32(s)) if d.len() == s.len() => go(d, s),
        (CpuData::F64(d), CpuData::F64(s)) if d.len() == s.len() => go(d, s),
        (d, s) => return Err(operands("add_assign", d, s)),
    }
    Ok(())
}

/// Values per task of [`cpu_add_assign`]'s parallel loop: rayon splits tasks, not values,
/// so each task runs a plain loop the compiler vectorises (value by value, the split and
/// the closure per value cost more than the add).
const ADD_CHUNK: usize = 4096;

/// `d += s` value by value, in a plain loop.
fn add_slice<T: Float>(d: &mut [T], s: &[T]) {
    d.iter_mut().zip(s).for_each(|(d, &s)| *d += s);
}

/// `a + b` on CPU values (f32 or f64, same length), as a new counted buffer.
pub fn cpu_add(a: &CpuData, b: &CpuData) -> Result<CpuBuffer> {
    fn go<T: Float + CpuElem>(a: &[T], b: &[T]) -> Result<CpuBuffer> {
        cpu::from_fn(a.len(), |i| a[i] + b[i])
    }
    match (a, b) {
        (CpuData::F32(x), CpuData::F32(y)) if x.len() == y.len() => go(x, y),
        (CpuData::F64(x), CpuData::F64(y)) if x.len() == y.len() => go(x, y),
        _ => Err(operands("add", a, b)),
    }
}

/// `d += s` over the first `n` f32 values of two buffers of GPU backend `D`.
pub fn gpu_add_assign<D: BinaryKernels>(d: &D::Buffer, s: &D::Buffer, n: usize) -> Result<()> {
    D::context_of(d).add_assign(d, s, n)
}

/// `a + b` over the first `n` f32 values of two buffers of GPU backend `D`, as a new
/// buffer: the binary op's add without broadcast.
pub fn gpu_add<D: BinaryKernels>(a: &D::Buffer, b: &D::Buffer, n: usize) -> Result<D::Buffer> {
    let ctx = D::context_of(a);
    let out = ctx.alloc(D::bytes(a))?;
    let shape = BinaryShape {
        op: 0,
        bcast: 0,
        cols: 1,
        n,
    };
    ctx.binary("add", shape, a, b, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_assign_over_chunks_equals_the_value_by_value_sum_exactly() {
        // Past PAR_MIN and not a whole number of chunks, so the last chunk is short.
        let n = PAR_MIN + 3 * ADD_CHUNK + 17;
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 * 1.13).cos() * 1e-3).collect();
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        let mut d = CpuData::F32(a);
        cpu_add_assign(&mut d, &CpuData::F32(b)).unwrap();
        let CpuData::F32(got) = d else {
            panic!("dtype changed")
        };
        assert_eq!(got, want);
    }
}
