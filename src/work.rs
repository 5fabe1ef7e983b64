//! Work counters (not an op): the multiply-adds of every matrix product and the bytes the
//! ops read and write, counted as they run, so that `espalier bench` can say how far a
//! phase is from the machine's limit (its arithmetic against a measured GEMM peak, its
//! traffic against a measured stream bandwidth).
//!
//! - **Multiply-adds**: `m·k·n` per matrix product ([`crate::ops::matmul`], also the
//!   products inside other ops: the LSTM's steps, backward rules), on every backend. Other
//!   arithmetic (segment sums, gates, softmax) is not counted: it is memory-bound, and
//!   its cost shows in the bytes.
//! - **Bytes**: the least traffic of each op, its inputs read once and its output written
//!   once, at the op's size in memory: every op that records itself with autograd (the
//!   forward ops, whether or not they need a gradient) counts its inputs and output; a
//!   backward rule counts as one op that reads the incoming gradient and the op's inputs
//!   and writes one gradient per input (the ops it calls add their multiply-adds, not
//!   their bytes). Traffic an op does beyond that (the LSTM's saved gates, re-reads that
//!   miss the cache) is not counted, so the bytes are a lower bound.
//!
//! The counters are process-wide (atomics, relaxed): a phase's work is the difference of
//! two readings ([`Work::now`]) around it, which is exact when one computation runs at a
//! time, as in `espalier bench`.

use std::cell::Cell;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::tensor::Tensor;

static MADDS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set while a backward rule runs on this thread: its ops' bytes are the rule's.
    static IN_RULE: Cell<bool> = const { Cell::new(false) };
}

/// Multiply-adds and bytes moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// Multiply-adds of matrix products (one multiply-add is two floating-point operations).
    pub madds: u64,
    /// Bytes read and written by the ops (see the module docs: a lower bound).
    pub bytes: u64,
}

impl Work {
    /// The counters now, since the process started.
    pub fn now() -> Work {
        Work {
            madds: MADDS.load(Ordering::Relaxed),
            bytes: BYTES.load(Ordering::Relaxed),
        }
    }

    /// Nothing counted (a phase that did not run).
    pub fn is_zero(&self) -> bool {
        *self == Work::default()
    }

    /// Adds `o` to these figures.
    pub fn add(&mut self, o: &Work) {
        self.madds = self.madds.saturating_add(o.madds);
        self.bytes = self.bytes.saturating_add(o.bytes);
    }
}

impl Sub for Work {
    type Output = Work;
    /// The work between an earlier reading `rhs` and this one.
    fn sub(self, rhs: Work) -> Work {
        Work {
            madds: self.madds.saturating_sub(rhs.madds),
            bytes: self.bytes.saturating_sub(rhs.bytes),
        }
    }
}

/// Counts the multiply-adds of an `m x k` by `k x n` product.
pub(crate) fn product(m: usize, k: usize, n: usize) {
    let madds = (m as u64).saturating_mul(k as u64).saturating_mul(n as u64);
    MADDS.fetch_add(madds, Ordering::Relaxed);
}

/// Bytes of `t` in memory.
fn bytes_of(t: &Tensor) -> u64 {
    (t.numel() as u64).saturating_mul(t.dtype().size() as u64)
}

/// Counts an op that read `inputs` and wrote `output` (not inside a backward rule, which
/// is counted whole by [`rule`]).
pub(crate) fn op(inputs: &[&Tensor], output: &Tensor) {
    if IN_RULE.with(Cell::get) {
        return;
    }
    let bytes = inputs
        .iter()
        .fold(bytes_of(output), |a, t| a.saturating_add(bytes_of(t)));
    BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Runs a backward rule `f`, counting it as one op: it reads `grad` and the op's inputs
/// (of `input_shapes`, at `grad`'s element size) and writes the gradients it returns.
pub(crate) fn rule(
    grad: &Tensor,
    input_shapes: impl Iterator<Item = usize>,
    f: impl FnOnce() -> crate::error::Result<Vec<Option<Tensor>>>,
) -> crate::error::Result<Vec<Option<Tensor>>> {
    let outer = IN_RULE.with(|c| c.replace(true));
    let out = f();
    IN_RULE.with(|c| c.set(outer));
    let grads = out?;
    if !outer {
        let size = grad.dtype().size() as u64;
        let read = input_shapes.fold(bytes_of(grad), |a, n| {
            a.saturating_add((n as u64).saturating_mul(size))
        });
        let written = grads.iter().flatten().map(bytes_of).sum::<u64>();
        BYTES.fetch_add(read.saturating_add(written), Ordering::Relaxed);
    }
    Ok(grads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_minus_an_earlier_one_is_the_work_between() {
        let a = Work {
            madds: 10,
            bytes: 100,
        };
        let b = Work {
            madds: 25,
            bytes: 160,
        };
        assert_eq!(
            b - a,
            Work {
                madds: 15,
                bytes: 60
            }
        );
        assert_eq!(a - b, Work::default());
        let mut c = a;
        c.add(&b);
        assert_eq!(c.madds, 35);
    }
}
