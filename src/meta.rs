//! The meta device: the engine's allocations replayed on symbolic buffers (sizes and
//! reference counts, no data), with a symbolic autograd graph, as PyTorch's meta tensors
//! carry shape and bytes but no values. Each op's meta arm lives in its op file, beside its
//! CPU and GPU arms (`ops::meta_<op>`); this module is what they share: the buffers
//! ([`Replay::alloc`], [`Replay::share`], [`Replay::release`]), the record of a node
//! ([`Replay::record`]) with the common shapes of a rule ([`Replay::unary`],
//! [`Replay::binary_saving_inputs`]), the blocks and their
//! uploads on a GPU ([`SymBlock`], [`Replay::block_upload`], [`Replay::of`]), and the
//! backward pass (`meta/backward.rs`). The layers' forwards and the trainer's steps,
//! written once over `nn::exec::Exec`, run on these buffers; the memory estimator
//! (`train::MemoryEstimator`) reads the highest live total.
//!
//! A buffer is freed when its last holder drops it; holders are the caller's variables
//! and the backward closures, which keep exactly what their rule reads. How the replay
//! follows autograd and the GPU's pools, and where it equals the measured peak:
//! `docs/guide/memory-estimate.md`.

use std::collections::HashSet;

use crate::device::AllocPolicy;
use crate::graph::BlockSizes;

mod backward;

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
    /// `[rows, cols]` in `buf`, outside the autograd graph.
    pub(crate) fn plain(buf: usize, rows: usize, cols: usize) -> Val {
        Val {
            buf,
            rows,
            cols,
            grad: false,
            node: None,
            leaf: None,
        }
    }
}

/// Where a node's input gradient goes.
pub(crate) enum Par {
    None,
    Node(usize),
    Leaf(usize),
}

pub(crate) type Rule = Box<dyn FnOnce(&mut Replay, usize) -> Vec<Option<usize>>>;

struct SymNode {
    parents: Vec<Par>,
    saved: Vec<usize>,
    rule: Option<Rule>,
}

/// Symbolic buffers with reference counts, and a symbolic autograd graph.
pub struct Replay {
    /// How the device allocates: on a GPU ([`AllocPolicy::gpu`]) every buffer rounds to
    /// its pool's size class and ops upload the index arrays they read
    /// ([`Replay::block_upload`]); the LSTM's and the cross-entropy's device-specific
    /// buffers follow its other flags.
    pub(crate) policy: AllocPolicy,
    /// Rounded bytes and holders of each buffer.
    bytes: Vec<u64>,
    refs: Vec<u32>,
    live: u64,
    pub(crate) peak: u64,
    nodes: Vec<SymNode>,
    /// The gradient buffer each leaf (parameter or leaf input) keeps.
    pub(crate) leaf_grads: Vec<Option<usize>>,
    /// Recording is off (`autograd::no_grad`): ops record no node.
    pub no_grad: bool,
    /// The blocks whose index arrays are on the device.
    uploaded: HashSet<usize>,
}

/// A block as the replay sees it: its sizes, and a buffer for its index arrays on a GPU,
/// which has no bytes until an op uploads them ([`Replay::block_upload`]). Its holders are
/// the block's owner and the backward rules that keep the block, as the `Arc<Block>`s of
/// the engine: the arrays go with the last of them.
#[derive(Clone, Copy, Debug)]
pub struct SymBlock<'a> {
    /// The block's sizes.
    pub sizes: &'a BlockSizes,
    /// Its edges: `sizes.num_edges`, or more for a block with self-loops added
    /// (`nn::exec::Exec::self_looped`).
    pub edges: usize,
    pub(crate) buf: usize,
}

impl Replay {
    /// A replay with the allocation rules of a device
    /// ([`crate::device::Device::alloc_policy`]).
    pub fn of(policy: AllocPolicy) -> Self {
        Replay {
            policy,
            bytes: Vec::new(),
            refs: Vec::new(),
            live: 0,
            peak: 0,
            nodes: Vec::new(),
            leaf_grads: Vec::new(),
            no_grad: false,
            uploaded: HashSet::new(),
        }
    }

    /// `bytes` as one allocation takes them: its pool's size class on a GPU
    /// ([`crate::device::size_class`]), exact on the CPU.
    pub fn round(&self, bytes: u64) -> u64 {
        match self.policy.gpu {
            true => crate::device::size_class(bytes),
            false => bytes,
        }
    }

    /// A block of `sizes` held by its caller, nothing on the device yet.
    pub fn block<'a>(&mut self, sizes: &'a BlockSizes) -> SymBlock<'a> {
        SymBlock {
            sizes,
            edges: sizes.num_edges,
            buf: self.alloc_bytes(0),
        }
    }

    /// The caller lets go of `block`; its index arrays go with its last holder.
    pub fn drop_block(&mut self, block: &SymBlock) {
        self.release(block.buf);
    }

    /// [`crate::device::block::DeviceBlock::of`]: on a GPU the first op that reads `block`'s
    /// CSR on the device uploads its five u32 arrays (`indptr [nd + 1]`, `indices [E]`,
    /// `t_indptr [ns + 1]`, `t_dst [E]`, `t_edges [E]`), each rounded to its size class, and
    /// they live as long as the block; later ops upload nothing, nor does the CPU.
    pub fn block_upload(&mut self, block: &SymBlock) {
        if !self.policy.gpu || !self.uploaded.insert(block.buf) {
            return;
        }
        let (s, e) = (block.sizes, block.edges);
        let words = [s.num_dst + 1, e, s.num_src + 1, e, e];
        let b = words
            .iter()
            .fold(0u64, |a, &n| a.saturating_add(self.round(bytes_of(n, 1))));
        self.bytes[block.buf] = b;
        if self.refs[block.buf] > 0 {
            self.live = self.live.saturating_add(b);
            self.peak = self.peak.max(self.live);
        }
    }

    /// A transient upload of `words` u32 values on a GPU (freed by the caller), `None` on the
    /// CPU.
    pub(crate) fn gpu_upload(&mut self, words: usize) -> Option<usize> {
        self.policy.gpu.then(|| self.alloc(words, 1))
    }

    /// Bytes live now.
    pub fn live(&self) -> u64 {
        self.live
    }

    /// The highest live bytes since the start or the last [`Replay::reset_peak`].
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Starts the peak again from the live bytes (as [`crate::device::MemoryTracker`]'s).
    pub fn reset_peak(&mut self) {
        self.peak = self.live;
    }

    /// A new buffer of `[rows, cols]` 4-byte values with one holder.
    pub fn alloc(&mut self, rows: usize, cols: usize) -> usize {
        self.alloc_bytes(self.round(bytes_of(rows, cols)))
    }

    /// A new buffer of `bytes` already rounded (or a sum of rounded buffers) with one holder.
    pub fn alloc_bytes(&mut self, bytes: u64) -> usize {
        self.bytes.push(bytes);
        self.refs.push(1);
        self.live = self.live.saturating_add(bytes);
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
        Val::plain(self.alloc(rows, cols), rows, cols)
    }

    /// An uploaded input that is a leaf of the autograd graph ([`Replay::make_leaf`]).
    pub fn leaf_input(&mut self, rows: usize, cols: usize) -> Val {
        let x = self.input(rows, cols);
        self.make_leaf(x)
    }

    /// `x` as a leaf of the autograd graph (`requires_grad_leaf`): its first gradient is
    /// kept in `leaf_grads`.
    pub fn make_leaf(&mut self, x: Val) -> Val {
        self.leaf_grads.push(None);
        Val {
            grad: true,
            node: None,
            leaf: Some(self.leaf_grads.len() - 1),
            ..x
        }
    }

    /// A parameter: resident, so its buffer adds nothing to `live`.
    pub fn param(&mut self, rows: usize, cols: usize) -> Val {
        let buf = self.alloc_bytes(0);
        self.make_leaf(Val::plain(buf, rows, cols))
    }

    /// `autograd::record`: a node if an input needs a gradient; otherwise the saved
    /// buffers go at once.
    pub(crate) fn record(
        &mut self,
        buf: usize,
        shape: (usize, usize),
        inputs: &[&Val],
        saved: Vec<usize>,
        rule: Rule,
    ) -> Val {
        let mut out = Val::plain(buf, shape.0, shape.1);
        if self.no_grad || !inputs.iter().any(|v| v.grad) {
            for b in saved {
                self.release(b);
            }
            return out;
        }
        let parents = inputs
            .iter()
            .map(|v| match (v.grad, v.node, v.leaf) {
                (true, Some(n), _) => Par::Node(n),
                (true, None, Some(p)) => Par::Leaf(p),
                _ => Par::None,
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

    /// An op of two inputs into the buffer `out` (of `shape`) that keeps both, and `also`;
    /// its rule allocates each input's gradient (first input first).
    pub(crate) fn binary_saving_inputs(
        &mut self,
        out: usize,
        a: &Val,
        b: &Val,
        shape: (usize, usize),
        also: Vec<usize>,
    ) -> Val {
        let mut saved = vec![self.share(a.buf), self.share(b.buf)];
        saved.extend(also);
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

    /// `out` (of `shape`) computed from `x` alone, its closure keeping `saved`; its rule
    /// allocates `x`'s gradient, or, for an elementwise op (`over`), takes
    /// [`Replay::over_gradient`]'s.
    pub(crate) fn unary(
        &mut self,
        x: &Val,
        out: usize,
        shape: (usize, usize),
        saved: Vec<usize>,
        over: bool,
    ) -> Val {
        let (rows, cols) = (x.rows, x.cols);
        let rule: Rule = Box::new(move |r, g| match over {
            true => vec![Some(r.over_gradient(g, rows, cols))],
            false => vec![Some(r.alloc(rows, cols))],
        });
        self.record(out, shape, &[x], saved, rule)
    }

    /// The gradient of an elementwise rule that the CPU writes over its incoming gradient
    /// `g` when nothing else holds `g` (one holder: the pass's): `g` itself, shared; a new
    /// `[rows, cols]` buffer otherwise, and always on a GPU.
    pub(crate) fn over_gradient(&mut self, g: usize, rows: usize, cols: usize) -> usize {
        if !self.policy.gpu && self.refs[g] == 1 {
            self.share(g)
        } else {
            self.alloc(rows, cols)
        }
    }
}
