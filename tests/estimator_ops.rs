//! Each op a layer's forward is written in (a method of `nn::exec::Exec`), alone: its
//! meta arm (`ops::meta_<op>`, in its op file, over `meta.rs`'s symbolic buffers) allocates, keeps and frees what the op itself does, to the byte,
//! on the CPU and on every GPU the tests select. The model-level tests (`estimator_aggr`,
//! `estimator_gpu`, `memory_aggr`) compare a whole micro-batch's peak, which lies in a
//! few places and lets an op's wrong replay pass where it is not the peak; here every op
//! is checked at five points of its life: live bytes after the forward, the forward's
//! peak, the backward's peak, live bytes after the backward (the inputs' gradients kept)
//! and after the block goes (its uploaded index arrays with it, on a GPU).
//!
//! The same case code runs on both executors: `Eager` (the op on tensors, measured by the
//! device's tracker) and `Replay` (its symbolic buffers). The trackers are process-wide, so
//! the tests take a lock against each other.

use std::sync::{Arc, Mutex};

mod common;

use espalier::graph::{Block, BlockSizes};
use espalier::meta::Replay;
use espalier::nn::exec::{Eager, Exec, Reduce};
use espalier::{DType, Device, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

/// An input of a case.
#[derive(Clone, Copy, Debug)]
enum In {
    /// `[rows, cols]` f32 that needs a gradient (an autograd leaf).
    Leaf(usize, usize),
    /// `[rows, cols]` f32 without a gradient.
    Const(usize, usize),
    /// A bias row of `cols` values that needs a gradient (`[cols]` on tensors).
    Bias(usize),
    /// u32 `[n]` row indices below the block's src count.
    Index(usize),
}

/// One op's case, written once over [`Exec`].
trait Case {
    fn run<'b, E: Exec<'b>>(&self, e: &mut E, x: &[E::T], b: &E::Block) -> Result<E::T>;
}

/// Bytes at the five points, each relative to the live bytes before the forward.
#[derive(Debug, PartialEq, Eq)]
struct Life {
    after_forward: u64,
    forward_peak: u64,
    backward_peak: u64,
    after_backward: u64,
    after_block: u64,
}

/// A block of 9 src and 5 dst nodes: a dst without in-edges, one with a self-loop, and
/// rows of 1 to 4 edges.
fn block() -> Block {
    let indptr = vec![0, 3, 3, 5, 9, 10];
    let indices = vec![1, 2, 4, 0, 6, 3, 5, 7, 8, 2];
    Block::new(9, indptr, indices, (10..19).collect()).unwrap()
}

/// The case on tensors on `dev`, measured by `dev`'s tracker.
fn eager<C: Case>(case: &C, inputs: &[In], dev: Device) -> Life {
    let mem = dev.memory().unwrap();
    let block = Arc::new(block());
    let num_src = block.num_src;
    let xs: Vec<Tensor> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let vals = |n: usize| {
                (0..n)
                    .map(|j| ((i * 7 + j) % 11) as f32 * 0.1 - 0.5)
                    .collect()
            };
            match *input {
                In::Leaf(r, c) => Tensor::from_f32(vals(r * c), &[r, c], dev)
                    .unwrap()
                    .requires_grad_leaf(),
                In::Const(r, c) => Tensor::from_f32(vals(r * c), &[r, c], dev).unwrap(),
                In::Bias(c) => Tensor::from_f32(vals(c), &[c], dev)
                    .unwrap()
                    .requires_grad_leaf(),
                In::Index(n) => {
                    let idx = (0..n).map(|j| (j * 5 % num_src) as u32).collect();
                    Tensor::from_u32(idx, &[n], dev).unwrap()
                }
            }
        })
        .collect();
    let live = || mem.stats().live;
    let base = live();
    mem.reset_peak();
    let out = case.run(&mut Eager, &xs, &block).unwrap();
    let after_forward = live() - base;
    let forward_peak = mem.stats().peak - base;
    let g = Tensor::zeros(out.shape(), DType::F32, dev).unwrap();
    let before_backward = live();
    mem.reset_peak();
    if out.requires_grad() {
        out.backward_with(&g).unwrap();
    }
    let backward_peak = mem.stats().peak - before_backward;
    drop((out, g));
    let after_backward = live() - base;
    drop(block);
    let after_block = live() - base;
    Life {
        after_forward,
        forward_peak,
        backward_peak,
        after_backward,
        after_block,
    }
}

/// The same case on the replay for `dev`.
fn replay<C: Case>(case: &C, inputs: &[In], dev: Device) -> Life {
    let mut r = Replay::of(dev.alloc_policy());
    let sizes = BlockSizes::of(&block());
    let b = r.block(&sizes);
    let xs: Vec<_> = inputs
        .iter()
        .map(|input| match *input {
            In::Leaf(rows, cols) => r.leaf_input(rows, cols),
            In::Const(rows, cols) => r.input(rows, cols),
            In::Bias(cols) => r.leaf_input(1, cols),
            In::Index(n) => r.input(n, 1),
        })
        .collect();
    let base = r.live();
    r.reset_peak();
    let out = case.run(&mut r, &xs, &b).unwrap();
    let after_forward = r.live() - base;
    let forward_peak = r.peak() - base;
    let (rows, cols) = <Replay as Exec>::dims(&out);
    let g = r.input(rows, cols);
    let before_backward = r.live();
    r.reset_peak();
    if <Replay as Exec>::needs_grad(&out) {
        r.backward(&out, Some(g.buf));
    }
    let backward_peak = r.peak() - before_backward;
    r.release(g.buf);
    r.release(out.buf);
    let after_backward = r.live() - base;
    r.drop_block(&b);
    let after_block = r.live() - base;
    Life {
        after_forward,
        forward_peak,
        backward_peak,
        after_backward,
        after_block,
    }
}

/// The case on the CPU and every selected GPU: the replay's bytes equal the tracker's.
fn check<C: Case>(name: &str, case: &C, inputs: &[In]) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut devices = vec![Device::Cpu];
    devices.extend(common::gpu_devices());
    for dev in devices {
        let (measured, replayed) = (eager(case, inputs, dev), replay(case, inputs, dev));
        assert_eq!(
            replayed, measured,
            "{name} on {dev}: replay (left) against the op"
        );
    }
}

/// A test per case: `case!(test_name, [inputs], |e, x, b| body)`, the body generic over
/// the executor `e` with inputs `x` and block `b`.
macro_rules! case {
    ($test:ident, [$($input:expr),* $(,)?], |$e:ident, $x:ident, $b:ident| $body:expr) => {
        #[test]
        fn $test() {
            struct C;
            impl Case for C {
                // A body written as a block is a block inside the function's own.
                #[allow(unused_braces)]
                fn run<'b, E: Exec<'b>>(&self, $e: &mut E, $x: &[E::T], $b: &E::Block) -> Result<E::T> {
                    $body
                }
            }
            check(stringify!($test), &C, &[$($input),*]);
        }
    };
}

const SRC: usize = 9;
const DST: usize = 5;
const EDGES: usize = 10;
/// The block's edges with a self-loop added to each dst node without one.
const LOOPED: usize = EDGES + DST - 1;

case!(slice_rows_matches, [In::Leaf(SRC, 6)], |e, x, _b| e
    .slice_rows(&x[0], DST));
case!(pad_rows_matches, [In::Const(DST, 6)], |e, x, _b| e
    .pad_rows(&x[0], SRC));
case!(
    matmul_matches,
    [In::Leaf(SRC, 6), In::Leaf(6, 3)],
    |e, x, _b| e.matmul(&x[0], &x[1])
);
case!(
    matmul_of_a_constant_matches,
    [In::Const(SRC, 6), In::Leaf(6, 3)],
    |e, x, _b| { e.matmul(&x[0], &x[1]) }
);
case!(
    matmul_rows_matches,
    [In::Leaf(SRC, 6), In::Leaf(6, 3)],
    |e, x, _b| { e.matmul_rows(&x[0], DST, &x[1]) }
);
case!(
    add_matches,
    [In::Leaf(SRC, 6), In::Leaf(SRC, 6)],
    |e, x, _b| e.add(&x[0], &x[1])
);
case!(
    add_of_a_bias_row_matches,
    [In::Leaf(SRC, 6), In::Bias(6)],
    |e, x, _b| { e.add(&x[0], &x[1]) }
);
case!(
    mul_by_a_column_matches,
    [In::Leaf(SRC, 6), In::Leaf(SRC, 1)],
    |e, x, _b| { e.mul(&x[0], &x[1]) }
);
case!(
    mul_by_a_constant_column_matches,
    [In::Leaf(SRC, 6), In::Const(SRC, 1)],
    |e, x, _b| { e.mul(&x[0], &x[1]) }
);
case!(relu_matches, [In::Leaf(SRC, 6)], |e, x, _b| e.relu(&x[0]));
case!(scale_matches, [In::Leaf(SRC, 6)], |e, x, _b| e
    .scale(&x[0], 0.5));
case!(
    cross_entropy_matches,
    [In::Leaf(DST, SRC), In::Index(DST)],
    |e, x, _b| { e.cross_entropy(&x[0], &x[1]) }
);
case!(argmax_rows_matches, [In::Leaf(SRC, 6)], |e, x, _b| e
    .argmax_rows(&x[0]));
case!(leaky_relu_matches, [In::Leaf(SRC, 6)], |e, x, _b| e
    .leaky_relu(&x[0], 0.2));
case!(reshape_matches, [In::Leaf(SRC, 6)], |e, x, _b| {
    let v = e.reshape(&x[0], SRC * 2, 3)?;
    let out = e.relu(&v)?;
    e.free(v);
    Ok(out)
});
case!(sum_rows_matches, [In::Leaf(SRC, 6)], |e, x, _b| e
    .sum_rows(&x[0]));
case!(segment_sum_matches, [In::Leaf(SRC, 6)], |e, x, b| e
    .segment(&x[0], b, Reduce::Sum));
case!(segment_mean_matches, [In::Leaf(SRC, 6)], |e, x, b| e
    .segment(&x[0], b, Reduce::Mean));
case!(segment_max_matches, [In::Leaf(SRC, 6)], |e, x, b| e
    .segment(&x[0], b, Reduce::Max));
case!(
    segment_transposed_matches,
    [In::Const(DST, 6)],
    |e, x, b| { e.segment_transposed(&x[0], b, true) }
);
case!(dropout_dst_matches, [In::Leaf(DST, 6)], |e, x, b| e
    .dropout(&x[0], 0.5, 3, b, false));
case!(
    gather_matches,
    [In::Leaf(SRC, 6), In::Index(14)],
    |e, x, _b| e.gather(&x[0], &x[1])
);
case!(edge_ends_match, [In::Const(SRC, 2)], |e, x, b| {
    let (src, dst) = e.edge_ends(b, &x[0])?;
    e.free(dst);
    Ok(src)
});
case!(dropout_edges_matches, [In::Leaf(EDGES, 2)], |e, x, b| e
    .dropout(&x[0], 0.5, 7, b, true));
case!(segment_softmax_matches, [In::Leaf(EDGES, 2)], |e, x, b| e
    .segment_softmax(&x[0], b));
case!(
    segment_softmax_over_a_self_looped_block_matches,
    [In::Leaf(LOOPED, 2)],
    |e, x, b| {
        let looped = e.self_looped(b)?;
        let out = e.segment_softmax(&x[0], &looped)?;
        e.free_block(looped);
        Ok(out)
    }
);
case!(
    segment_weighted_sum_matches,
    [In::Leaf(SRC, 8), In::Leaf(EDGES, 2)],
    |e, x, b| { e.segment_weighted_sum(&x[0], &x[1], b) }
);
case!(
    lstm_matches,
    [In::Leaf(SRC, 8), In::Leaf(2, 8)],
    |e, x, b| {
        let (idx, plan) = e.lstm_plan(b, None, &x[0])?;
        let out = e.lstm(&x[0], &idx, &x[1], &plan)?;
        e.free(idx);
        Ok(out)
    }
);
case!(
    lstm_with_its_largest_bucket_split_matches,
    [In::Leaf(SRC, 8), In::Leaf(2, 8)],
    |e, x, b| {
        let (idx, plan) = e.lstm_plan(b, Some(1), &x[0])?;
        let out = e.lstm(&x[0], &idx, &x[1], &plan)?;
        e.free(idx);
        Ok(out)
    }
);
