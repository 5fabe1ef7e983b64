//! The ops a layer's forward is written in, once, for two executors.
//!
//! A layer kind writes its forward as one function generic over [`Exec`]: [`Eager`] runs it
//! on tensors (training, inference, full-graph chunks), and the memory estimator runs the
//! very same function on [`Replay`]'s symbolic buffers (sizes and reference counts, no
//! data; [`crate::meta`]), so the estimate follows the code that runs rather than a
//! second copy of it. What a layer's spec adds for the estimator is only what the layer
//! holds before its forward starts: its parameters ([`Replay::param`]) and inputs computed
//! on the host (GCN's degree norms).
//!
//! Frees are explicit ([`Exec::free`]): on tensors a free is a `drop`, on the replay the
//! release of a holder, so both see the same buffers go at the same points.
//!
//! The trainer's steps around the layers (`train/step.rs`: uploads, the loss, the
//! backward, reads back to the host) are written over [`Exec`] too, so the estimate runs
//! them rather than a copy of them.
//!
//! An op a layer or a step calls is one line of `exec_ops!` below: its arguments, the op on
//! tensors, and its meta arm (`ops::meta_<op>`, in the op's file: what it allocates, keeps
//! and what its backward rule allocates). The methods written out by hand are the values'
//! and the blocks' bookkeeping (uploads, leaves, gradients, recording on or off, the
//! backward, reads back to the host) and the steps that build a small input on the host
//! before an op. See `docs/guide/memory-estimate.md`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::graph::{Block, Buckets};
use crate::meta::{Replay, SymBlock, Val};
use crate::ops;
use crate::rng::hash3;
use crate::tensor::Tensor;

/// How a segment op reduces a dst node's in-neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// [`ops::segment_sum`].
    Sum,
    /// [`ops::segment_mean`].
    Mean,
    /// [`ops::segment_max`] (keeps an argmax).
    Max,
}

/// The type of an argument of [`exec_ops!`]'s methods: `T` a value, `B` a block, `P` an
/// LSTM plan (each by reference), on the trait, on tensors or on the replay; any other
/// type as it is.
macro_rules! arg {
    (trait, T) => { &Self::T };
    (trait, B) => { &Self::Block };
    (trait, P) => { &Self::Plan };
    (eager, T) => { &Tensor };
    (eager, B) => { &Arc<Block> };
    (eager, P) => { &Arc<ops::LstmPlan> };
    (meta, T) => { &Val };
    (meta, B) => { &SymBlock<'b> };
    (meta, P) => { &MetaPlan };
    ($exec:ident, $t:ty) => { $t };
}

/// [`Exec`] with its two impls: the bookkeeping methods written out (`trait`, `eager`,
/// `meta`), then one line per op, `fn name(args) = the op on tensors, |r| its meta arm on
/// the replay r;`, which declares the method and gives [`Eager`] the op and [`Replay`] the
/// meta arm.
macro_rules! exec_ops {
    (
        trait { $($decl:tt)* }
        eager { $($eager_item:tt)* }
        meta { $($meta_item:tt)* }
        ops { $(
            $(#[$doc:meta])*
            fn $name:ident($($p:ident: $k:tt),*) = $op:expr, |$r:ident| $meta:expr;
        )* }
    ) => {
        /// The ops of a layer's forward, on tensors ([`Eager`]) or symbolic buffers
        /// ([`Replay`]); `'b` is the lifetime of the symbolic blocks.
        pub trait Exec<'b> {
            $($decl)*
            $(
                $(#[$doc])*
                fn $name(&mut self, $($p: arg!(trait, $k)),*) -> Result<Self::T>;
            )*
        }

        /// The executor of tensors: every op is the op itself.
        impl<'b> Exec<'b> for Eager {
            $($eager_item)*
            $(
                fn $name(&mut self, $($p: arg!(eager, $k)),*) -> Result<Tensor> {
                    $op
                }
            )*
        }

        /// The estimator's executor: every op is its meta arm, which cannot fail.
        impl<'b> Exec<'b> for Replay {
            $($meta_item)*
            $(
                // A meta arm may leave a value argument unread (a slope: no allocation).
                #[allow(unused_variables)]
                fn $name(&mut self, $($p: arg!(meta, $k)),*) -> Result<Val> {
                    let $r: &mut Replay = self;
                    Ok($meta)
                }
            )*
        }
    };
}

/// The executor of tensors: every method is the op itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct Eager;

/// The LSTM aggregation's plan on the replay: the block's dst count and its buckets
/// `(nodes, degree)`.
pub type MetaPlan = (usize, Vec<(usize, usize)>);

exec_ops! {
    trait {
        /// A value: a [`Tensor`] or a symbolic [`Val`].
        type T;
        /// A block: an `Arc<Block>` or a [`SymBlock`].
        type Block;
        /// The LSTM aggregation's plan of a block: an [`ops::LstmPlan`], or a [`MetaPlan`].
        type Plan;
        /// What puts a value on the device ([`Exec::upload`]): the host's upload on tensors
        /// (it may have run already), nothing on the replay (the call gives the shape).
        type Host;

        /// `(num_src, num_dst, num_edges)` of `block`.
        fn block_rows(block: &Self::Block) -> (usize, usize, usize);

        /// `[rows, cols]` of a 2-D value.
        fn dims(x: &Self::T) -> (usize, usize);

        /// Whether `x` needs a gradient.
        fn needs_grad(x: &Self::T) -> bool;

        /// A second holder of `x` (a `Tensor::clone`).
        fn share(&mut self, x: &Self::T) -> Self::T;

        /// One holder of `x` lets go (a `drop`).
        fn free(&mut self, x: Self::T);

        /// [`ops::dropout`] with probability `p` and mask key `key`, its mask keyed by the
        /// block's dst nodes' global ids (uploaded as u32 `[num_dst]`) or, for per-edge
        /// values (`per_edge`), by a per-edge id from global ids ([`edge_ids`], uploaded as
        /// u32 `[E]`); the rule keeps the ids.
        fn dropout(&mut self, x: &Self::T, p: f64, key: u32, block: &Self::Block, per_edge: bool)
            -> Result<Self::T>;

        /// The LSTM aggregation's plan of `block` (its degree buckets, the largest cut into
        /// pieces of at most `split` dst nodes), and the per-(node, step) src rows it reads
        /// as a u32 index on `like`'s device.
        fn lstm_plan(&mut self, block: &Self::Block, split: Option<usize>, like: &Self::T)
            -> Result<(Self::T, Self::Plan)>;

        /// `block` with a self-loop added to every dst node without one
        /// ([`Block::with_self_loops`]), held by the caller until [`Exec::free_block`].
        fn self_looped(&mut self, block: &Self::Block) -> Result<Self::Block>;

        /// The caller lets go of a block it holds.
        fn free_block(&mut self, block: Self::Block);

        /// The src and the dst row of every edge of `block`, as two u32 `[E]` uploads.
        fn edge_ends(&mut self, block: &Self::Block, like: &Self::T)
            -> Result<(Self::T, Self::T)>;

        /// `[rows, cols]` values from the host, put on the device by `host`; where `by_id`,
        /// gathered there from a resident matrix by their ids (a u32 `[rows]` upload,
        /// freed once the rows are gathered).
        fn upload(&mut self, rows: usize, cols: usize, by_id: bool, host: Self::Host)
            -> Result<Self::T>;

        /// `x` as a leaf of the autograd graph whose gradient is kept
        /// ([`Tensor::requires_grad_leaf`]).
        fn leaf(&mut self, x: Self::T) -> Self::T;

        /// `x`'s kept gradient, taken from it (`None` if it has none).
        fn take_grad(&mut self, x: &Self::T) -> Option<Self::T>;

        /// `f` with autograd's recording off ([`crate::autograd::no_grad`]).
        fn no_grad<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R
        where
            Self: Sized;

        /// The backward pass from the scalar `root`, or from `root` with the gradient `grad`
        /// ([`Tensor::backward`], [`Tensor::backward_with`]).
        fn backward_from(&mut self, root: &Self::T, grad: Option<&Self::T>) -> Result<()>;

        /// `x`'s values read back to the host, then `x` freed (the replay reads nothing).
        fn read_f32(&mut self, x: Self::T) -> Result<Vec<f32>>;

        /// [`Exec::read_f32`] of a u32 value.
        fn read_u32(&mut self, x: Self::T) -> Result<Vec<u32>>;

        /// The one value of `x` read back to the host (0 on the replay).
        fn item(&mut self, x: &Self::T) -> Result<f64>;
    }
    eager {
        type T = Tensor;
        type Block = Arc<Block>;
        type Plan = Arc<ops::LstmPlan>;
        type Host = Box<dyn FnOnce() -> Result<Tensor> + 'b>;

        fn block_rows(block: &Arc<Block>) -> (usize, usize, usize) {
            (block.num_src, block.num_dst, block.num_edges())
        }

        fn dims(x: &Tensor) -> (usize, usize) {
            match x.shape() {
                [r, c] => (*r, *c),
                [n] => (*n, 1),
                _ => (x.numel(), 1),
            }
        }

        fn needs_grad(x: &Tensor) -> bool {
            x.requires_grad()
        }

        fn share(&mut self, x: &Tensor) -> Tensor {
            x.clone()
        }

        fn free(&mut self, x: Tensor) {
            drop(x);
        }

        fn dropout(&mut self, x: &Tensor, p: f64, key: u32, block: &Arc<Block>, per_edge: bool)
            -> Result<Tensor> {
            let ids = match per_edge {
                true => edge_ids(block),
                false => block.dst_nodes().to_vec(),
            };
            let n = ids.len();
            ops::dropout(x, p, key, Some(&Tensor::from_u32(ids, &[n], x.device())?))
        }

        fn lstm_plan(&mut self, block: &Arc<Block>, split: Option<usize>, like: &Tensor)
            -> Result<(Tensor, Arc<ops::LstmPlan>)> {
            let max_degree = (0..block.num_dst).map(|d| block.degree(d)).max();
            let buckets = Buckets::new(block, max_degree);
            let buckets = match split {
                Some(n) => buckets.split_explosion(n)?,
                None => buckets,
            };
            let plan = Arc::new(ops::LstmPlan::new(block, &buckets)?);
            let idx = Tensor::from_u32(plan.src.clone(), &[plan.rows()], like.device())?;
            Ok((idx, plan))
        }

        fn self_looped(&mut self, block: &Arc<Block>) -> Result<Arc<Block>> {
            Ok(Arc::new(block.with_self_loops()?))
        }

        fn free_block(&mut self, block: Arc<Block>) {
            drop(block);
        }

        fn edge_ends(&mut self, block: &Arc<Block>, like: &Tensor) -> Result<(Tensor, Tensor)> {
            let (e, dev) = (block.num_edges(), like.device());
            let src = Tensor::from_u32(block.indices.clone(), &[e], dev)?;
            let dst = Tensor::from_u32(edge_dst(block), &[e], dev)?;
            Ok((src, dst))
        }

        fn upload(&mut self, _rows: usize, _cols: usize, _by_id: bool, host: Self::Host)
            -> Result<Tensor> {
            host()
        }

        fn leaf(&mut self, x: Tensor) -> Tensor {
            x.requires_grad_leaf()
        }

        fn take_grad(&mut self, x: &Tensor) -> Option<Tensor> {
            let g = x.grad();
            x.set_grad(None);
            g
        }

        fn no_grad<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
            crate::autograd::no_grad(|| f(self))
        }

        fn backward_from(&mut self, root: &Tensor, grad: Option<&Tensor>) -> Result<()> {
            match grad {
                Some(g) => root.backward_with(g),
                None => root.backward(),
            }
        }

        fn read_f32(&mut self, x: Tensor) -> Result<Vec<f32>> {
            x.to_vec_f32()
        }

        fn read_u32(&mut self, x: Tensor) -> Result<Vec<u32>> {
            x.to_vec_u32()
        }

        fn item(&mut self, x: &Tensor) -> Result<f64> {
            x.item()
        }
    }
    meta {
        type T = Val;
        type Block = SymBlock<'b>;
        type Plan = MetaPlan;
        type Host = ();

        fn block_rows(block: &SymBlock<'b>) -> (usize, usize, usize) {
            let s = block.sizes;
            (s.num_src, s.num_dst, block.edges)
        }

        fn dims(x: &Val) -> (usize, usize) {
            (x.rows, x.cols)
        }

        fn needs_grad(x: &Val) -> bool {
            x.grad
        }

        fn share(&mut self, x: &Val) -> Val {
            Replay::share(self, x.buf);
            *x
        }

        fn free(&mut self, x: Val) {
            self.release(x.buf);
        }

        /// The ids (`[E]` per edge, else `[nd]`), the dropout (keeps them), then the caller's
        /// holder of the ids goes.
        fn dropout(&mut self, x: &Val, _p: f64, _key: u32, block: &SymBlock<'b>, per_edge: bool)
            -> Result<Val> {
            let ids = self.input(if per_edge { block.edges } else { block.sizes.num_dst }, 1);
            let out = ops::meta_dropout(self, x, &ids);
            self.release(ids.buf);
            Ok(out)
        }

        /// The buckets from the block's degree histogram ([`ops::meta_lstm_buckets`]); the
        /// index `[R]`, `R = Σ` nodes × degree.
        fn lstm_plan(&mut self, block: &SymBlock<'b>, split: Option<usize>, _like: &Val)
            -> Result<(Val, MetaPlan)> {
            let s = block.sizes;
            let buckets = ops::meta_lstm_buckets(&s.degree_hist, split);
            let rows = buckets.iter().map(|&(m, k)| m * k).sum();
            Ok((self.input(rows, 1), (s.num_dst, buckets)))
        }

        /// One more edge for every dst node without a self-loop, nothing on the device yet.
        fn self_looped(&mut self, block: &SymBlock<'b>) -> Result<SymBlock<'b>> {
            let s = block.sizes;
            let mut looped = self.block(s);
            looped.edges = s.num_edges + s.num_dst - s.self_loops.min(s.num_dst);
            Ok(looped)
        }

        fn free_block(&mut self, block: SymBlock<'b>) {
            self.drop_block(&block);
        }

        fn edge_ends(&mut self, block: &SymBlock<'b>, _like: &Val) -> Result<(Val, Val)> {
            Ok((self.input(block.edges, 1), self.input(block.edges, 1)))
        }

        fn upload(&mut self, rows: usize, cols: usize, by_id: bool, _host: ()) -> Result<Val> {
            let ids = by_id.then(|| self.alloc(rows, 1));
            let x = self.input(rows, cols);
            if let Some(ids) = ids {
                self.release(ids);
            }
            Ok(x)
        }

        fn leaf(&mut self, x: Val) -> Val {
            self.make_leaf(x)
        }

        fn take_grad(&mut self, x: &Val) -> Option<Val> {
            let buf = self.leaf_grads[x.leaf?].take()?;
            Some(Val::plain(buf, x.rows, x.cols))
        }

        fn no_grad<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
            let was = std::mem::replace(&mut self.no_grad, true);
            let out = f(self);
            self.no_grad = was;
            out
        }

        fn backward_from(&mut self, root: &Val, grad: Option<&Val>) -> Result<()> {
            self.backward(root, grad.map(|g| g.buf));
            Ok(())
        }

        fn read_f32(&mut self, x: Val) -> Result<Vec<f32>> {
            self.release(x.buf);
            Ok(Vec::new())
        }

        fn read_u32(&mut self, x: Val) -> Result<Vec<u32>> {
            self.release(x.buf);
            Ok(Vec::new())
        }

        fn item(&mut self, _x: &Val) -> Result<f64> {
            Ok(0.0)
        }
    }
    ops {
        /// The first `n` rows of `x` as a new value ([`ops::slice`]).
        fn slice_rows(x: T, n: usize) = ops::slice(x, 0, 0, n), |r| ops::meta_slice_rows(r, x, n);
        /// `x` padded with zero rows to `rows` rows (the backward of [`Exec::slice_rows`] as
        /// an op; not recorded).
        fn pad_rows(x: T, rows: usize) = pad_rows(x, rows), |r| ops::meta_pad_rows(r, x, rows);
        /// `a·w` ([`ops::matmul`]).
        fn matmul(a: T, w: T) = ops::matmul(a, w, false, false), |r| ops::meta_matmul(r, a, w);
        /// `a[..rows]·w` reading `a` in place ([`ops::matmul_rows`]).
        fn matmul_rows(a: T, rows: usize, w: T) =
            ops::matmul_rows(a, rows, w), |r| ops::meta_matmul_rows(r, a, rows, w);
        /// `a + b`, `b` the same shape or a bias row ([`ops::add`]).
        fn add(a: T, b: T) = ops::add(a, b), |r| ops::meta_add(r, a, b);
        /// `a ⊙ b`, `b` the same shape or a column ([`ops::mul`]).
        fn mul(a: T, b: T) = ops::mul(a, b), |r| ops::meta_mul(r, a, b);
        /// Mean cross-entropy of `logits` against the u32 `labels` ([`ops::cross_entropy`]).
        fn cross_entropy(logits: T, labels: T) =
            ops::cross_entropy(logits, labels, None), |r| ops::meta_cross_entropy(r, logits, labels);
        /// The column of each row's largest value, u32 `[rows]`, of `x` detached
        /// ([`ops::argmax_rows`]).
        fn argmax_rows(x: T) = ops::argmax_rows(&x.detach()), |r| ops::meta_argmax_rows(r, x);
        /// `c · x` ([`ops::mul_scalar`]).
        fn scale(x: T, c: f64) = ops::mul_scalar(x, c), |r| ops::meta_unary(r, x);
        /// `max(x, 0)` ([`ops::relu`]).
        fn relu(x: T) = ops::relu(x), |r| ops::meta_unary(r, x);
        /// Per dst node of `block`, its in-neighbours' rows of `x` reduced by `how`.
        fn segment(x: T, block: B, how: Reduce) =
            segment(x, block, how), |r| meta_segment(r, x, block, how);
        /// The backward of a sum (`mean`: mean) segment op as an op of its own, from the dst
        /// rows' gradient `g` to the src rows' ([`ops::segment_sum_transposed`]; not
        /// recorded; the mean's meta arm is the sum's).
        fn segment_transposed(g: T, block: B, mean: bool) =
            ops::segment_sum_transposed(g, block, mean),
            |r| ops::meta_segment_sum_transposed(r, g, block);
        /// `x`'s rows in `idx`'s order ([`ops::index_select`]; the rule keeps `idx`).
        fn gather(x: T, idx: T) = ops::index_select(x, idx), |r| ops::meta_index_select(r, x, idx);
        /// [`ops::lstm_aggregate`] of the src rows' input projections `xw`, each row of the
        /// plan reading the row of `xw` that `idx` names (kept by the rule).
        fn lstm(xw: T, idx: T, w_hh: T, plan: P) =
            ops::lstm_aggregate(xw, idx, w_hh, plan),
            |r| ops::meta_lstm_aggregate(r, xw, idx, w_hh, plan.0, plan.1.clone());
        /// `x` viewed as `[rows, cols]` ([`ops::reshape`]: no new buffer).
        fn reshape(x: T, rows: usize, cols: usize) =
            ops::reshape(x, &[rows, cols]), |r| ops::meta_reshape(r, x, rows, cols);
        /// The sum of each row of `x`, `[r, c]` to `[r]` ([`ops::sum_dim`] over dim 1).
        fn sum_rows(x: T) = ops::sum_dim(x, 1), |r| ops::meta_sum_rows(r, x);
        /// [`ops::leaky_relu`] with `slope` (keeps its output).
        fn leaky_relu(x: T, slope: f64) = ops::leaky_relu(x, slope), |r| ops::meta_unary(r, x);
        /// [`ops::segment_softmax`] of per-edge scores over each dst node's in-edges.
        fn segment_softmax(x: T, block: B) =
            ops::segment_softmax(x, block), |r| ops::meta_segment_softmax(r, x, block);
        /// [`ops::segment_weighted_sum`]: per dst node, its in-neighbours' rows of `x`
        /// weighted by the edges' `a`.
        fn segment_weighted_sum(x: T, a: T, block: B) =
            ops::segment_weighted_sum(x, a, block),
            |r| ops::meta_segment_weighted_sum(r, x, a, block);
    }
}

/// [`Exec::pad_rows`] on tensors: [`ops::slice`]'s backward into `[rows, c]`.
fn pad_rows(x: &Tensor, rows: usize) -> Result<Tensor> {
    let cols = x.shape().get(1).copied().unwrap_or(1);
    ops::slice::slice_backward(x, 0, 0, &[rows, cols])
}

/// [`Exec::segment`] on tensors: the segment op `how` names.
fn segment(x: &Tensor, block: &Arc<Block>, how: Reduce) -> Result<Tensor> {
    match how {
        Reduce::Sum => ops::segment_sum(x, block),
        Reduce::Mean => ops::segment_mean(x, block),
        Reduce::Max => ops::segment_max(x, block),
    }
}

/// [`Exec::segment`] on the replay: the meta arm of the segment op `how` names.
fn meta_segment(r: &mut Replay, x: &Val, block: &SymBlock, how: Reduce) -> Val {
    match how {
        Reduce::Max => ops::meta_segment_max(r, x, block),
        Reduce::Sum | Reduce::Mean => ops::meta_segment_sum(r, x, block),
    }
}

/// The local dst node of every edge position.
pub fn edge_dst(block: &Block) -> Vec<u32> {
    let mut v = Vec::with_capacity(block.num_edges());
    for d in 0..block.num_dst {
        v.extend(std::iter::repeat_n(d as u32, block.degree(d)));
    }
    v
}

/// A 32-bit id per edge position from global ids: `hash3(global dst, global src,
/// occurrence)`, where occurrence counts earlier edges of the same dst from the same src.
/// It depends only on the graph and the dst node's in-edges, not on the batch.
pub fn edge_ids(block: &Block) -> Vec<u32> {
    let mut ids = Vec::with_capacity(block.num_edges());
    let mut seen: HashMap<u32, u32> = HashMap::new();
    for d in 0..block.num_dst {
        let gd = block.src_nodes[d];
        seen.clear();
        for &u in block.neighbors(d) {
            let gu = block.src_nodes[u as usize];
            let occ = seen.entry(gu).or_insert(0);
            ids.push(hash3(gd, gu, *occ));
            *occ += 1;
        }
    }
    ids
}
