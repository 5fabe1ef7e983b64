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
//! An op a layer calls is one method here, with its two arms: the op itself, and its meta
//! arm (`ops::meta_<op>`, in the op's file: what it allocates, keeps and what its backward
//! rule allocates).

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

/// The ops of a layer's forward, on tensors ([`Eager`]) or symbolic buffers ([`Replay`]);
/// `'b` is the lifetime of the symbolic blocks.
pub trait Exec<'b> {
    /// A value: a [`Tensor`] or a symbolic [`Val`].
    type T;
    /// A block: an `Arc<Block>` or a [`SymBlock`].
    type Block;
    /// The LSTM aggregation's plan of a block: an [`ops::LstmPlan`], or its buckets
    /// `(nodes, degree)` and dst count.
    type Plan;

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

    /// The first `n` rows of `x` as a new value ([`ops::slice`]).
    fn slice_rows(&mut self, x: &Self::T, n: usize) -> Result<Self::T>;

    /// `x` padded with zero rows to `rows` rows (the backward of [`Exec::slice_rows`] as an
    /// op; not recorded).
    fn pad_rows(&mut self, x: &Self::T, rows: usize) -> Result<Self::T>;

    /// `a·w` ([`ops::matmul`]).
    fn matmul(&mut self, a: &Self::T, w: &Self::T) -> Result<Self::T>;

    /// `a[..rows]·w` reading `a` in place ([`ops::matmul_rows`]).
    fn matmul_rows(&mut self, a: &Self::T, rows: usize, w: &Self::T) -> Result<Self::T>;

    /// `a + b`, `b` the same shape or a bias row ([`ops::add`]).
    fn add(&mut self, a: &Self::T, b: &Self::T) -> Result<Self::T>;

    /// `a ⊙ b`, `b` the same shape or a column ([`ops::mul`]).
    fn mul(&mut self, a: &Self::T, b: &Self::T) -> Result<Self::T>;

    /// `max(x, 0)` ([`ops::relu`]).
    fn relu(&mut self, x: &Self::T) -> Result<Self::T>;

    /// Per dst node of `block`, its in-neighbours' rows of `x` reduced by `how`.
    fn segment(&mut self, x: &Self::T, block: &Self::Block, how: Reduce) -> Result<Self::T>;

    /// The backward of a sum (`mean`: mean) segment op as an op of its own, from the dst
    /// rows' gradient `g` to the src rows' ([`ops::segment_sum_transposed`]; not recorded).
    fn segment_transposed(
        &mut self,
        g: &Self::T,
        block: &Self::Block,
        mean: bool,
    ) -> Result<Self::T>;

    /// [`ops::dropout`] with probability `p` and mask key `key`, its mask keyed by the
    /// block's dst nodes' global ids (uploaded as u32 `[num_dst]`, kept by the rule).
    fn dropout_dst(
        &mut self,
        x: &Self::T,
        p: f64,
        key: u32,
        block: &Self::Block,
    ) -> Result<Self::T>;

    /// `x`'s rows in `idx`'s order ([`ops::index_select`]; the rule keeps `idx`).
    fn gather(&mut self, x: &Self::T, idx: &Self::T) -> Result<Self::T>;

    /// The LSTM aggregation's plan of `block` (its degree buckets, the largest cut into
    /// pieces of at most `split` dst nodes), and the per-(node, step) src rows it reads
    /// as a u32 index on `like`'s device.
    fn lstm_plan(
        &mut self,
        block: &Self::Block,
        split: Option<usize>,
        like: &Self::T,
    ) -> Result<(Self::T, Self::Plan)>;

    /// [`ops::lstm_aggregate`] of the src rows' input projections `xw`, each row of the
    /// plan reading the row of `xw` that `idx` names (kept by the rule).
    fn lstm(
        &mut self,
        xw: &Self::T,
        idx: &Self::T,
        w_hh: &Self::T,
        plan: &Self::Plan,
    ) -> Result<Self::T>;

    /// `x` viewed as `[rows, cols]` ([`ops::reshape`]: no new buffer).
    fn reshape(&mut self, x: &Self::T, rows: usize, cols: usize) -> Result<Self::T>;

    /// The sum of each row of `x`, `[r, c]` to `[r]` ([`ops::sum_dim`] over dim 1).
    fn sum_rows(&mut self, x: &Self::T) -> Result<Self::T>;

    /// [`ops::leaky_relu`] with `slope` (keeps its output).
    fn leaky_relu(&mut self, x: &Self::T, slope: f64) -> Result<Self::T>;

    /// `block` with a self-loop added to every dst node without one
    /// ([`Block::with_self_loops`]), held by the caller until [`Exec::free_block`].
    fn self_looped(&mut self, block: &Self::Block) -> Result<Self::Block>;

    /// The caller lets go of a block it holds.
    fn free_block(&mut self, block: Self::Block);

    /// The src and the dst row of every edge of `block`, as two u32 `[E]` uploads.
    fn edge_ends(&mut self, block: &Self::Block, like: &Self::T) -> Result<(Self::T, Self::T)>;

    /// [`ops::dropout`] of per-edge values, the mask keyed by a per-edge id from global
    /// ids (uploaded as u32 `[E]`, kept by the rule).
    fn dropout_edges(
        &mut self,
        x: &Self::T,
        p: f64,
        key: u32,
        block: &Self::Block,
    ) -> Result<Self::T>;

    /// [`ops::segment_softmax`] of per-edge scores over each dst node's in-edges.
    fn segment_softmax(&mut self, x: &Self::T, block: &Self::Block) -> Result<Self::T>;

    /// [`ops::segment_weighted_sum`]: per dst node, its in-neighbours' rows of `x` weighted
    /// by the edges' `a`.
    fn segment_weighted_sum(
        &mut self,
        x: &Self::T,
        a: &Self::T,
        block: &Self::Block,
    ) -> Result<Self::T>;
}

/// The executor of tensors: every method is the op itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct Eager;

impl<'b> Exec<'b> for Eager {
    type T = Tensor;
    type Block = Arc<Block>;
    type Plan = Arc<ops::LstmPlan>;

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

    fn slice_rows(&mut self, x: &Tensor, n: usize) -> Result<Tensor> {
        ops::slice(x, 0, 0, n)
    }

    fn pad_rows(&mut self, x: &Tensor, rows: usize) -> Result<Tensor> {
        let cols = x.shape().get(1).copied().unwrap_or(1);
        ops::slice::slice_backward(x, 0, 0, &[rows, cols])
    }

    fn matmul(&mut self, a: &Tensor, w: &Tensor) -> Result<Tensor> {
        ops::matmul(a, w, false, false)
    }

    fn matmul_rows(&mut self, a: &Tensor, rows: usize, w: &Tensor) -> Result<Tensor> {
        ops::matmul_rows(a, rows, w)
    }

    fn add(&mut self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        ops::add(a, b)
    }

    fn mul(&mut self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        ops::mul(a, b)
    }

    fn relu(&mut self, x: &Tensor) -> Result<Tensor> {
        ops::relu(x)
    }

    fn segment(&mut self, x: &Tensor, block: &Arc<Block>, how: Reduce) -> Result<Tensor> {
        match how {
            Reduce::Sum => ops::segment_sum(x, block),
            Reduce::Mean => ops::segment_mean(x, block),
            Reduce::Max => ops::segment_max(x, block),
        }
    }

    fn segment_transposed(&mut self, g: &Tensor, block: &Arc<Block>, mean: bool) -> Result<Tensor> {
        ops::segment_sum_transposed(g, block, mean)
    }

    fn dropout_dst(&mut self, x: &Tensor, p: f64, key: u32, block: &Arc<Block>) -> Result<Tensor> {
        let ids = Tensor::from_u32(block.dst_nodes().to_vec(), &[block.num_dst], x.device())?;
        ops::dropout(x, p, key, Some(&ids))
    }

    fn gather(&mut self, x: &Tensor, idx: &Tensor) -> Result<Tensor> {
        ops::index_select(x, idx)
    }

    fn lstm_plan(
        &mut self,
        block: &Arc<Block>,
        split: Option<usize>,
        like: &Tensor,
    ) -> Result<(Tensor, Arc<ops::LstmPlan>)> {
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

    fn lstm(
        &mut self,
        xw: &Tensor,
        idx: &Tensor,
        w_hh: &Tensor,
        plan: &Arc<ops::LstmPlan>,
    ) -> Result<Tensor> {
        ops::lstm_aggregate(xw, idx, w_hh, plan)
    }

    fn reshape(&mut self, x: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        ops::reshape(x, &[rows, cols])
    }

    fn sum_rows(&mut self, x: &Tensor) -> Result<Tensor> {
        ops::sum_dim(x, 1)
    }

    fn leaky_relu(&mut self, x: &Tensor, slope: f64) -> Result<Tensor> {
        ops::leaky_relu(x, slope)
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

    fn dropout_edges(
        &mut self,
        x: &Tensor,
        p: f64,
        key: u32,
        block: &Arc<Block>,
    ) -> Result<Tensor> {
        let ids = Tensor::from_u32(edge_ids(block), &[block.num_edges()], x.device())?;
        ops::dropout(x, p, key, Some(&ids))
    }

    fn segment_softmax(&mut self, x: &Tensor, block: &Arc<Block>) -> Result<Tensor> {
        ops::segment_softmax(x, block)
    }

    fn segment_weighted_sum(
        &mut self,
        x: &Tensor,
        a: &Tensor,
        block: &Arc<Block>,
    ) -> Result<Tensor> {
        ops::segment_weighted_sum(x, a, block)
    }
}

/// The estimator's executor: every method is the op's replay, which cannot fail.
impl<'b> Exec<'b> for Replay {
    type T = Val;
    type Block = SymBlock<'b>;
    type Plan = (usize, Vec<(usize, usize)>);

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
        x.clone_in(self)
    }

    fn free(&mut self, x: Val) {
        self.release(x.buf);
    }

    fn slice_rows(&mut self, x: &Val, n: usize) -> Result<Val> {
        Ok(ops::meta_slice_rows(self, x, n))
    }

    fn pad_rows(&mut self, x: &Val, rows: usize) -> Result<Val> {
        Ok(ops::meta_pad_rows(self, x, rows))
    }

    fn matmul(&mut self, a: &Val, w: &Val) -> Result<Val> {
        Ok(ops::meta_matmul(self, a, w))
    }

    fn matmul_rows(&mut self, a: &Val, rows: usize, w: &Val) -> Result<Val> {
        Ok(ops::meta_matmul_rows(self, a, rows, w))
    }

    fn add(&mut self, a: &Val, b: &Val) -> Result<Val> {
        Ok(ops::meta_add(self, a, b))
    }

    fn mul(&mut self, a: &Val, b: &Val) -> Result<Val> {
        Ok(ops::meta_mul(self, a, b))
    }

    fn relu(&mut self, x: &Val) -> Result<Val> {
        Ok(ops::meta_unary(self, x))
    }

    fn segment(&mut self, x: &Val, block: &SymBlock<'b>, how: Reduce) -> Result<Val> {
        Ok(match how {
            Reduce::Max => ops::meta_segment_max(self, x, block),
            Reduce::Sum | Reduce::Mean => ops::meta_segment_sum(self, x, block),
        })
    }

    fn segment_transposed(&mut self, g: &Val, block: &SymBlock<'b>, _mean: bool) -> Result<Val> {
        Ok(ops::meta_segment_sum_transposed(self, g, block))
    }

    /// The ids `[nd]`, the dropout (keeps them), then the caller's holder of the ids goes.
    fn dropout_dst(&mut self, x: &Val, _p: f64, _key: u32, block: &SymBlock<'b>) -> Result<Val> {
        let ids = self.input(block.sizes.num_dst, 1);
        let out = ops::meta_dropout(self, x, &ids);
        self.release(ids.buf);
        Ok(out)
    }

    fn gather(&mut self, x: &Val, idx: &Val) -> Result<Val> {
        Ok(ops::meta_index_select(self, x, idx))
    }

    /// The buckets from the block's degree histogram ([`ops::meta_lstm_buckets`]); the index
    /// `[R]`, `R = Σ` nodes × degree.
    fn lstm_plan(
        &mut self,
        block: &SymBlock<'b>,
        split: Option<usize>,
        _like: &Val,
    ) -> Result<(Val, Self::Plan)> {
        let s = block.sizes;
        let buckets = ops::meta_lstm_buckets(&s.degree_hist, split);
        let rows = buckets.iter().map(|&(m, k)| m * k).sum();
        Ok((self.input(rows, 1), (s.num_dst, buckets)))
    }

    fn lstm(&mut self, xw: &Val, idx: &Val, w_hh: &Val, (nd, b): &Self::Plan) -> Result<Val> {
        Ok(ops::meta_lstm_aggregate(
            self,
            xw,
            idx,
            w_hh,
            *nd,
            b.clone(),
        ))
    }

    fn reshape(&mut self, x: &Val, rows: usize, cols: usize) -> Result<Val> {
        Ok(ops::meta_reshape(self, x, rows, cols))
    }

    fn sum_rows(&mut self, x: &Val) -> Result<Val> {
        Ok(ops::meta_sum_rows(self, x))
    }

    fn leaky_relu(&mut self, x: &Val, _slope: f64) -> Result<Val> {
        Ok(ops::meta_unary(self, x))
    }

    fn self_looped(&mut self, block: &SymBlock<'b>) -> Result<SymBlock<'b>> {
        Ok(Replay::self_looped(self, block))
    }

    fn free_block(&mut self, block: SymBlock<'b>) {
        self.drop_block(&block);
    }

    fn edge_ends(&mut self, block: &SymBlock<'b>, _like: &Val) -> Result<(Val, Val)> {
        Ok((self.input(block.edges, 1), self.input(block.edges, 1)))
    }

    /// The ids `[E]`, the dropout (keeps them), then the caller's holder of the ids goes.
    fn dropout_edges(&mut self, x: &Val, _p: f64, _key: u32, block: &SymBlock<'b>) -> Result<Val> {
        let ids = self.input(block.edges, 1);
        let out = ops::meta_dropout(self, x, &ids);
        self.release(ids.buf);
        Ok(out)
    }

    fn segment_softmax(&mut self, x: &Val, block: &SymBlock<'b>) -> Result<Val> {
        Ok(ops::meta_segment_softmax(self, x, block))
    }

    fn segment_weighted_sum(&mut self, x: &Val, a: &Val, block: &SymBlock<'b>) -> Result<Val> {
        Ok(ops::meta_segment_weighted_sum(self, x, a, block))
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
