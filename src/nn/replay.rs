//! Symbolic replay of the engine's allocations: buffers with sizes and reference counts,
//! no data, and a symbolic autograd graph. Each layer replays its own forward with these
//! ops beside its real forward ([`crate::nn::LayerSpec::replay`]); the memory estimator
//! ([`crate::partition::MemoryEstimator`]) adds the trainer's steps around the layers and
//! reads the highest live total.
//!
//! # The engine's allocation pattern
//!
//! Every tensor is f32 or u32 (4 bytes a value). A buffer is freed when its last holder
//! drops it; holders are the caller's variables and the backward closures, which keep
//! exactly what their rule reads. With `[r, c]` the output's shape:
//!
//! | op | forward allocates | backward rule keeps | backward allocates |
//! |---|---|---|---|
//! | `slice` rows | `[n, c]` | nothing | `[rows of x, c]` (zeros + ḡ) |
//! | `matmul(a, W)` | `[r, c]` | `a` and `W` | `ā` `[r, k]` if `a` needs it, then `W̄` |
//! | `matmul_rows(a, n, W)` | `[n, c]` | `a` and `W` | `[n, k]`, then `ā` `[rows of a, k]` (the first goes), then `W̄` |
//! | `add(a, b)` | `[r, c]` | nothing | `ā = ḡ` shared; `b̄ = ḡ`, or `[c]` for a bias row |
//! | `mul(a, col)` | `[r, c]` | `col` (and `a` if `col` needs a gradient) | `ā` `[r, c]` |
//! | `segment_mean/sum` | `[num_dst, c]` | the block (host) | `[num_src, c]` |
//! | `segment_max` | `[num_dst, c]` + argmax u32 `[num_dst, c]` | argmax | `[num_src, c]` |
//! | `relu`, `mul_scalar` | `[r, c]` | their output | `[r, c]` |
//! | `dropout` | `[r, c]` | the u32 row ids `[r]` | `[r, c]` (mask recomputed) |
//! | `reshape` | nothing (a view) | nothing | nothing (a view of ḡ) |
//! | `sum_dim(x, 1)` | `[r]` | nothing | `[r, c]` |
//! | `index_select(x, idx)` | `[m, c]` | `idx` | `[rows of x, c]` (scatter) |
//! | `leaky_relu`, `segment_softmax` | `[r, c]` | their output | `[r, c]` |
//! | `segment_weighted_sum(z, α)` | `[nd, H·D]` | `z` and `α` | `z̄` `[ns, H·D]`, then `ᾱ` `[E, H]` |
//! | `lstm_aggregate` | `[nd, F]`, gates `[R, 4F]`, cells `[R, F]`; per step of a pack (`ops::lstm_packs`) `h·W_hh` `[n_t, 4F]` and the next `h` `[n_t, F]` | gates, cells | `x̄g` `[R, 4F]`; per step `z̄` `[n_t, 4F]` and `h̄` `[n_t, F]`; `Hprev` `[R, F]`; gates and cells go before `W̄_hh` |
//! | `cross_entropy` | `[n, 2]` scratch, `lse [n]`, the loss | logits, `lse`, labels | `[n, classes]` |
//!
//! Autograd's backward allocates the scalar seed, then visits nodes in the topological
//! order of [`crate::autograd`] (depth-first from the loss, first input first, reversed
//! post-order). After a node's rule it frees the node's saved tensors and its incoming
//! gradient; a gradient flowing into a tensor that already has one is merged with `add`
//! (a new buffer, then both parts freed); a parameter's first gradient is kept.
//!
//! Adding an op that a layer calls means adding its replay here: its forward allocations,
//! what its closure keeps, what its rule allocates.

use std::collections::{HashMap, HashSet};

/// Bytes of one value (f32 and u32 alike).
pub const WORD: u64 = 4;

/// Bytes of a `[rows, cols]` buffer of 4-byte values, saturating: widths from user input
/// can be absurd, and an estimate that saturates simply fits no budget.
pub fn bytes_of(rows: usize, cols: usize) -> u64 {
    (rows as u64)
        .saturating_mul(cols as u64)
        .saturating_mul(WORD)
}

/// A symbolic tensor: a buffer, its shape, and its autograd link.
#[derive(Clone, Copy, Debug)]
pub struct Val {
    /// The buffer (an index into the replay's buffers).
    pub buf: usize,
    /// Rows of its shape.
    pub rows: usize,
    /// Columns of its shape (1 for a vector).
    pub cols: usize,
    /// It needs a gradient (a parameter, or computed from one).
    pub grad: bool,
    /// The autograd node that computed it.
    pub(crate) node: Option<usize>,
    /// The leaf (parameter or leaf input) it is.
    pub(crate) leaf: Option<usize>,
}

impl Val {
    /// A second holder of the same buffer (a `Tensor::clone`).
    pub fn clone_in(&self, r: &mut Replay) -> Val {
        r.share(self.buf);
        *self
    }
}

/// Where a node's input gradient goes.
enum Par {
    None,
    Node(usize),
    Leaf(usize),
}

type Rule = Box<dyn FnOnce(&mut Replay, usize) -> Vec<Option<usize>>>;

struct SymNode {
    parents: Vec<Par>,
    saved: Vec<usize>,
    rule: Option<Rule>,
}

/// Symbolic buffers with reference counts, and a symbolic autograd graph.
pub struct Replay {
    round: fn(u64) -> u64,
    /// Rounded bytes and holders of each buffer.
    bytes: Vec<u64>,
    refs: Vec<u32>,
    live: u64,
    pub(crate) peak: u64,
    nodes: Vec<SymNode>,
    /// Rounded bytes of each parameter (resident: not in `live`).
    pub(crate) params: Vec<u64>,
    /// The gradient buffer each parameter received in this backward.
    pub(crate) leaf_grads: Vec<Option<usize>>,
    /// Recording is off (`autograd::no_grad`): ops record no node.
    pub no_grad: bool,
}

impl Replay {
    /// A replay whose every allocation is rounded by `round` (the device's pool size classes, or exact bytes).
    pub fn new(round: fn(u64) -> u64) -> Self {
        Replay {
            round,
            bytes: Vec::new(),
            refs: Vec::new(),
            live: 0,
            peak: 0,
            nodes: Vec::new(),
            params: Vec::new(),
            leaf_grads: Vec::new(),
            no_grad: false,
        }
    }

    /// A new buffer of `[rows, cols]` 4-byte values with one holder.
    pub fn alloc(&mut self, rows: usize, cols: usize) -> usize {
        let b = (self.round)(bytes_of(rows, cols));
        self.bytes.push(b);
        self.refs.push(1);
        self.live = self.live.saturating_add(b);
        self.peak = self.peak.max(self.live);
        self.bytes.len() - 1
    }

    /// One more holder of `buf` (a `Tensor::clone` or a saved tensor).
    pub fn share(&mut self, buf: usize) -> usize {
        self.refs[buf] += 1;
        buf
    }

    /// One holder of `buf` lets go; the last frees its bytes.
    pub fn release(&mut self, buf: usize) {
        self.refs[buf] -= 1;
        if self.refs[buf] == 0 {
            self.live = self.live.saturating_sub(self.bytes[buf]);
        }
    }

    /// A tensor that needs no gradient (features, labels, ids, norms).
    pub fn input(&mut self, rows: usize, cols: usize) -> Val {
        Val {
            buf: self.alloc(rows, cols),
            rows,
            cols,
            grad: false,
            node: None,
            leaf: None,
        }
    }

    /// An uploaded input that is a leaf of the autograd graph (`requires_grad_leaf`): live
    /// like an input; its first gradient is kept in `leaf_grads` (not resident: no bytes in
    /// `params`).
    pub fn leaf_input(&mut self, rows: usize, cols: usize) -> Val {
        let buf = self.alloc(rows, cols);
        self.params.push(0);
        self.leaf_grads.push(None);
        Val {
            buf,
            rows,
            cols,
            grad: true,
            node: None,
            leaf: Some(self.params.len() - 1),
        }
    }

    /// A parameter: resident, so its buffer adds nothing to `live`.
    pub fn param(&mut self, rows: usize, cols: usize) -> Val {
        self.params.push((self.round)(bytes_of(rows, cols)));
        self.leaf_grads.push(None);
        self.bytes.push(0);
        self.refs.push(1);
        Val {
            buf: self.bytes.len() - 1,
            rows,
            cols,
            grad: true,
            node: None,
            leaf: Some(self.params.len() - 1),
        }
    }

    /// `autograd::record`: a node if an input needs a gradient; otherwise the saved
    /// buffers go at once.
    fn record(
        &mut self,
        buf: usize,
        shape: (usize, usize),
        inputs: &[&Val],
        saved: Vec<usize>,
        rule: Rule,
    ) -> Val {
        let mut out = Val {
            buf,
            rows: shape.0,
            cols: shape.1,
            grad: false,
            node: None,
            leaf: None,
        };
        if self.no_grad || !inputs.iter().any(|v| v.grad) {
            for b in saved {
                self.release(b);
            }
            return out;
        }
        let parents = inputs
            .iter()
            .map(|v| match (v.grad, v.node, v.leaf) {
                (false, _, _) => Par::None,
                (true, Some(n), _) => Par::Node(n),
                (true, None, Some(p)) => Par::Leaf(p),
                (true, None, None) => Par::None,
            })
            .collect();
        self.nodes.push(SymNode {
            parents,
            saved,
            rule: Some(rule),
        });
        out.grad = true;
        out.node = Some(self.nodes.len() - 1);
        out
    }

    /// `slice(x, 0, 0, n)`: the first `n` rows as a new buffer; its rule allocates `[rows of x, c]`.
    pub fn slice_rows(&mut self, x: &Val, n: usize) -> Val {
        let out = self.alloc(n, x.cols);
        self.unary(x, out, (n, x.cols), vec![])
    }

    /// `matmul(a, b)`: keeps both; its rule allocates `ā` then `b̄` (for those that need them).
    pub fn matmul(&mut self, a: &Val, b: &Val) -> Val {
        self.binary_saving_inputs(a, b, (a.rows, b.cols))
    }

    /// An op of two inputs that keeps both and whose rule allocates each input's gradient
    /// (first input first), with an output of `shape`.
    fn binary_saving_inputs(&mut self, a: &Val, b: &Val, shape: (usize, usize)) -> Val {
        let out = self.alloc(shape.0, shape.1);
        let saved = vec![self.share(a.buf), self.share(b.buf)];
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            shape,
            &[a, b],
            saved,
            Box::new(move |r, _| {
                let ga = a2.grad.then(|| r.alloc(a2.rows, a2.cols));
                let gb = b2.grad.then(|| r.alloc(b2.rows, b2.cols));
                vec![ga, gb]
            }),
        )
    }

    /// `matmul_rows(a, rows, b)`: keeps `a` itself; its rule gives `a` the product's
    /// `[rows, k]` padded to `a`'s rows (a new buffer, then the product goes), then `b̄`.
    pub fn matmul_rows(&mut self, a: &Val, rows: usize, b: &Val) -> Val {
        let out = self.alloc(rows, b.cols);
        let saved = vec![self.share(a.buf), self.share(b.buf)];
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            (rows, b.cols),
            &[a, b],
            saved,
            Box::new(move |r, _| {
                let ga = a2.grad.then(|| {
                    let small = r.alloc(rows, a2.cols);
                    let full = r.alloc(a2.rows, a2.cols);
                    r.release(small);
                    full
                });
                let gb = b2.grad.then(|| r.alloc(b2.rows, b2.cols));
                vec![ga, gb]
            }),
        )
    }

    /// `add(a, b)`, `b` the same shape or a bias row: nothing saved; `ā` shares the gradient, `b̄` too or is `[c]`.
    pub fn add(&mut self, a: &Val, b: &Val) -> Val {
        let out = self.alloc(a.rows, a.cols);
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            (a.rows, a.cols),
            &[a, b],
            vec![],
            Box::new(move |r, g| {
                let ga = a2.grad.then(|| r.share(g));
                let same = (a2.rows, a2.cols) == (b2.rows, b2.cols);
                let gb = b2.grad.then(|| {
                    if same {
                        r.share(g)
                    } else {
                        r.alloc(b2.rows, b2.cols)
                    }
                });
                vec![ga, gb]
            }),
        )
    }

    /// `a ⊙ b`, `b` the same shape or a column.
    pub fn mul(&mut self, a: &Val, b: &Val) -> Val {
        let out = self.alloc(a.rows, a.cols);
        let mut saved = Vec::new();
        if b.grad {
            saved.push(self.share(a.buf));
        }
        if a.grad {
            saved.push(self.share(b.buf));
        }
        let (a2, b2) = (*a, *b);
        self.record(
            out,
            (a.rows, a.cols),
            &[a, b],
            saved,
            Box::new(move |r, _| {
                let ga = a2.grad.then(|| r.alloc(a2.rows, a2.cols));
                let gb = b2.grad.then(|| {
                    let full = r.alloc(a2.rows, a2.cols);
                    if (a2.rows, a2.cols) == (b2.rows, b2.cols) {
                        full
                    } else {
                        let red = r.alloc(b2.rows, b2.cols);
                        r.release(full);
                        red
                    }
                });
                vec![ga, gb]
            }),
        )
    }

    /// `segment_mean`/`segment_sum`, or `segment_max` (with its saved argmax).
    pub fn segment(&mut self, x: &Val, num_dst: usize, max: bool) -> Val {
        let out = self.alloc(num_dst, x.cols);
        let saved = if max {
            vec![self.alloc(num_dst, x.cols)]
        } else {
            vec![]
        };
        self.unary(x, out, (num_dst, x.cols), saved)
    }

    /// `reshape`: the same buffer under another shape; its rule reshapes the gradient.
    pub fn view(&mut self, x: &Val, rows: usize, cols: usize) -> Val {
        let out = self.share(x.buf);
        self.record(
            out,
            (rows, cols),
            &[x],
            vec![],
            Box::new(move |r, g| vec![Some(r.share(g))]),
        )
    }

    /// `sum_dim(x, 1)`: `[r, c]` to `[r]`; its rule expands the gradient to `[r, c]`.
    pub fn sum_rows(&mut self, x: &Val) -> Val {
        let out = self.alloc(x.rows, 1);
        self.unary(x, out, (x.rows, 1), vec![])
    }

    /// `index_select(x, idx)` (keeps `idx`); its rule scatters into `[rows of x, c]`.
    pub fn gather(&mut self, x: &Val, idx: &Val) -> Val {
        let out = self.alloc(idx.rows, x.cols);
        let saved = vec![self.share(idx.buf)];
        self.unary(x, out, (idx.rows, x.cols), saved)
    }

    /// `segment_softmax` over `[E, H]` scores (keeps its output).
    pub fn segment_softmax(&mut self, x: &Val) -> Val {
        self.unary_saving_output(x)
    }

    /// `segment_weighted_sum(x, a)`: keeps both; its rule allocates `x̄` then `ā`.
    pub fn segment_weighted_sum(&mut self, x: &Val, a: &Val, num_dst: usize) -> Val {
        self.binary_saving_inputs(x, a, (num_dst, x.cols))
    }

    /// [`crate::ops::lstm_aggregate`] over dense `(nodes, degree)` buckets, run as the packs
    /// of [`crate::ops::lstm_packs`]: the output, 5 saved values per (row, unit) (gates and
    /// cell state) and, per step of a pack, `h·W_hh` `[n_t, 4F]` and the next `h` `[n_t, F]`
    /// beside the previous one. Backward: `x̄g` `[rows, 4F]`, per step `z̄` `[n_t, 4F]` and
    /// `h̄` `[n_t, F]` beside the previous one, then `Hprev` `[rows, F]`; the saved values
    /// go before `W̄_hh = Hprevᵀ·x̄g`.
    pub fn lstm(
        &mut self,
        xg: &Val,
        w_hh: &Val,
        num_dst: usize,
        buckets: Vec<(usize, usize)>,
    ) -> Val {
        let f = w_hh.rows;
        let rows = xg.rows;
        let out = self.alloc(num_dst, f);
        let acts = self.alloc(rows, f.saturating_mul(4));
        let cs = self.alloc(rows, f);
        // The CPU arm runs the buckets as packed sequences: step t over the pack's n_t
        // nodes still running.
        let packs = crate::ops::lstm_packs(&buckets);
        for steps in &packs {
            let mut hb: Option<usize> = None;
            for &m in steps {
                let hw = hb.map(|_| self.alloc(m, f.saturating_mul(4)));
                let next = self.alloc(m, f);
                if let Some(prev) = hb.replace(next) {
                    self.release(prev);
                }
                if let Some(hw) = hw {
                    self.release(hw);
                }
            }
            if let Some(hb) = hb {
                self.release(hb);
            }
        }
        let w_grad = w_hh.grad;
        self.record(
            out,
            (num_dst, f),
            &[xg, w_hh],
            vec![],
            Box::new(move |r, _| {
                let dxg = r.alloc(rows, f.saturating_mul(4));
                for steps in &packs {
                    let mut dh: Option<usize> = None;
                    for (t, &m) in steps.iter().enumerate().rev() {
                        let dz = r.alloc(m, f.saturating_mul(4));
                        let next = (t > 0).then(|| r.alloc(m, f));
                        if t > 0 {
                            r.release(dz);
                        }
                        if let Some(prev) = dh {
                            r.release(prev);
                        }
                        if t == 0 {
                            r.release(dz);
                        }
                        dh = next;
                    }
                }
                let hprev = w_grad.then(|| r.alloc(rows, f));
                r.release(acts);
                r.release(cs);
                let dw = hprev.map(|hp| {
                    let dw = r.alloc(f, f.saturating_mul(4));
                    r.release(hp);
                    dw
                });
                vec![Some(dxg), dw]
            }),
        )
    }

    /// `out` (of `shape`) computed from `x` alone, its closure keeping `saved`; its rule
    /// allocates `x`'s gradient.
    fn unary(&mut self, x: &Val, out: usize, shape: (usize, usize), saved: Vec<usize>) -> Val {
        let (rows, cols) = (x.rows, x.cols);
        self.record(
            out,
            shape,
            &[x],
            saved,
            Box::new(move |r, _| vec![Some(r.alloc(rows, cols))]),
        )
    }

    /// A unary op whose rule reads its output (`relu`, `mul_scalar`).
    pub fn unary_saving_output(&mut self, x: &Val) -> Val {
        let out = self.alloc(x.rows, x.cols);
        let saved = vec![self.share(out)];
        self.unary(x, out, (x.rows, x.cols), saved)
    }

    /// `relu` (keeps its output).
    pub fn relu(&mut self, x: &Val) -> Val {
        self.unary_saving_output(x)
    }

    /// `mul_scalar` (keeps its output).
    pub fn mul_scalar(&mut self, x: &Val) -> Val {
        self.unary_saving_output(x)
    }

    /// `dropout(x)` with per-row ids `ids` (kept; the mask is recomputed in backward).
    pub fn dropout(&mut self, x: &Val, ids: &Val) -> Val {
        let out = self.alloc(x.rows, x.cols);
        let saved = vec![self.share(ids.buf)];
        self.unary(x, out, (x.rows, x.cols), saved)
    }

    /// `cross_entropy(logits, labels)`: `[n, 2]` scratch, `lse [n]` and the loss; keeps logits, `lse`, labels.
    pub fn cross_entropy(&mut self, logits: &Val, labels: &Val) -> Val {
        let n = logits.rows;
        let scratch = self.alloc(n, 2);
        let lse = self.alloc(n, 1);
        let loss = self.alloc(1, 1);
        self.release(scratch);
        let saved = vec![self.share(logits.buf), lse, self.share(labels.buf)];
        self.unary(logits, loss, (1, 1), saved)
    }

    /// Mirror of [`crate::autograd::backward`] from the scalar `root` (`seed: None`), or of
    /// [`crate::autograd::backward_with`] with the buffer `seed` as its gradient (shared
    /// for the pass, as the detached copy shares it).
    pub fn backward(&mut self, root: &Val, seed: Option<usize>) {
        let seed = match seed {
            Some(b) => self.share(b),
            None => self.alloc(1, 1),
        };
        let Some(root_node) = root.node else {
            self.release(seed);
            return;
        };
        let order = self.topological_order(root_node);
        let mut grads: HashMap<usize, usize> = HashMap::new();
        grads.insert(root_node, seed);
        for id in order {
            let Some(g) = grads.remove(&id) else { continue };
            let Some(rule) = self.nodes[id].rule.take() else {
                continue;
            };
            let outs = rule(self, g);
            for b in std::mem::take(&mut self.nodes[id].saved) {
                self.release(b);
            }
            self.release(g);
            let parents = std::mem::take(&mut self.nodes[id].parents);
            for (p, o) in parents.iter().zip(outs) {
                let Some(o) = o else { continue };
                match *p {
                    Par::None => self.release(o),
                    Par::Leaf(l) => match self.leaf_grads[l] {
                        None => self.leaf_grads[l] = Some(o),
                        // Accumulated in place.
                        Some(_) => self.release(o),
                    },
                    Par::Node(n) => {
                        let merged = match grads.remove(&n) {
                            Some(prev) => {
                                let m = self.alloc_like(prev);
                                self.release(prev);
                                self.release(o);
                                m
                            }
                            None => o,
                        };
                        grads.insert(n, merged);
                    }
                }
            }
        }
    }

    /// A new buffer of `buf`'s size.
    fn alloc_like(&mut self, buf: usize) -> usize {
        let b = self.bytes[buf];
        self.bytes.push(b);
        self.refs.push(1);
        self.live = self.live.saturating_add(b);
        self.peak = self.peak.max(self.live);
        self.bytes.len() - 1
    }

    /// The order of [`crate::autograd`]: iterative depth-first search over inputs in
    /// order, reversed post-order.
    fn topological_order(&self, root: usize) -> Vec<usize> {
        let mut seen = HashSet::from([root]);
        let mut post = Vec::new();
        let mut stack = vec![(root, 0usize)];
        while let Some((n, next)) = stack.pop() {
            if let Some(p) = self.nodes[n].parents.get(next) {
                stack.push((n, next + 1));
                if let Par::Node(pn) = *p {
                    if seen.insert(pn) {
                        stack.push((pn, 0));
                    }
                }
            } else {
                post.push(n);
            }
        }
        post.reverse();
        post
    }
}
