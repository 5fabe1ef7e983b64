//! Reverse-mode automatic differentiation.
//!
//! Each op that has an input requiring grad records a [`Node`]: its parents (the nodes or
//! leaves of its inputs) and a backward closure that owns exactly the tensors the backward
//! rule reads. [`backward`] sorts the nodes topologically from a scalar, hands each node the
//! sum of the gradients flowing into it, and consumes its closure, so saved tensors are freed
//! as soon as their backward has run. Leaves (parameters, checked inputs) accumulate their
//! gradient across backward calls until [`Tensor::zero_grad`]; between micro-batches nothing
//! else survives. Gradients are computed with recording off (no higher-order gradients).
//!
//! Gradients are summed here ([`add_assign`], in place where nothing else holds a
//! gradient, and a new sum where both are shared)
//! with the device layer's element-wise addition (`crate::device::add`), not through the
//! ops: the ops record nodes, and autograd does not import them.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A backward rule: the gradient of the output in, one optional gradient per input out.
pub type BackwardFn = Box<dyn FnOnce(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// Where an input's gradient goes.
pub(crate) enum Parent {
    /// The input needs no gradient.
    None,
    /// The input was produced by an op.
    Node(Arc<Node>),
    /// The input is a leaf that accumulates its gradient.
    Leaf(Tensor),
}

/// One recorded op.
pub struct Node {
    id: u64,
    op: &'static str,
    parents: Vec<(Parent, Vec<usize>)>,
    backward: Mutex<Option<BackwardFn>>,
}

impl Node {
    /// The op that recorded this node.
    pub fn op(&self) -> &'static str {
        self.op
    }
}

static NEXT_NODE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// True while ops record the autograd graph on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Turns recording off on this thread until dropped (evaluation, optimizer updates).
pub struct NoGradGuard {
    prev: bool,
}

impl NoGradGuard {
    /// Starts a no-grad region.
    pub fn new() -> Self {
        let prev = GRAD_ENABLED.with(|g| g.replace(false));
        NoGradGuard { prev }
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        let prev = self.prev;
        GRAD_ENABLED.with(|g| g.set(prev));
    }
}

/// Runs `f` with recording off.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = NoGradGuard::new();
    f()
}

/// True if an op over `inputs` must record a node.
pub fn needs_grad(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// Attaches a backward rule to `output`, an op's freshly computed result over `inputs`.
/// If nothing requires grad (or recording is off) the rule is dropped at once, with the
/// tensors it captured.
pub fn record(
    op: &'static str,
    output: Tensor,
    inputs: &[&Tensor],
    backward: impl FnOnce(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Tensor {
    crate::work::op(inputs, &output);
    if !needs_grad(inputs) {
        return output;
    }
    let parents = inputs.iter().map(|t| parent_of(t)).collect();
    output.with_grad_fn(Arc::new(node(op, parents, Box::new(backward))))
}

/// An input that an op reads through a step it never builds (the LSTM aggregation reads
/// `x·W_ih + b` through an index, with no gathered copy): the tensor read, `from`; the
/// shape of the intermediate the op's rule gives a gradient for; and the rule, named
/// `op`, that turns that gradient into `from`'s.
pub struct Through<'a> {
    /// The step's name (as an op's).
    pub op: &'static str,
    /// The tensor the op reads through the step.
    pub from: &'a Tensor,
    /// The shape of the step's output, never built.
    pub shape: Vec<usize>,
    /// The step's backward rule: the intermediate's gradient in, `from`'s out.
    pub backward: BackwardFn,
}

/// [`record`] for an op whose first input it reads [`Through`] a step: the op's rule gives
/// its first gradient for the step's output, and that gradient goes to a node of the
/// step's own, whose rule runs after the op's rule has returned and the op's incoming
/// gradient and saved tensors are gone, as if the step had been an op of its own (the
/// memory a backward holds at once is the same as with the intermediate built).
pub fn record_through(
    op: &'static str,
    output: Tensor,
    through: Through,
    rest: &[&Tensor],
    backward: impl FnOnce(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Tensor {
    let inputs: Vec<&Tensor> = std::iter::once(through.from)
        .chain(rest.iter().copied())
        .collect();
    crate::work::op(&inputs, &output);
    if !needs_grad(&inputs) {
        return output;
    }
    let first = match through.from.requires_grad() {
        true => {
            let step = node(through.op, vec![parent_of(through.from)], through.backward);
            Parent::Node(Arc::new(step))
        }
        false => Parent::None,
    };
    let parents = std::iter::once((first, through.shape))
        .chain(rest.iter().map(|t| parent_of(t)))
        .collect();
    output.with_grad_fn(Arc::new(node(op, parents, Box::new(backward))))
}

/// Where the gradient of the input `t` goes, with its shape.
fn parent_of(t: &Tensor) -> (Parent, Vec<usize>) {
    let p = if !t.requires_grad() {
        Parent::None
    } else if let Some(n) = t.grad_fn() {
        Parent::Node(n.clone())
    } else {
        Parent::Leaf(t.clone())
    };
    (p, t.shape().to_vec())
}

/// A new node of `op` over `parents` with its rule.
fn node(op: &'static str, parents: Vec<(Parent, Vec<usize>)>, backward: BackwardFn) -> Node {
    Node {
        id: NEXT_NODE.fetch_add(1, Ordering::Relaxed),
        op,
        parents,
        backward: Mutex::new(Some(backward)),
    }
}

/// Backward from a one-element tensor: the gradient of every leaf it depends on is
/// accumulated into the leaf.
pub fn backward(root: &Tensor) -> Result<()> {
    if root.numel() != 1 {
        return Err(Error::Autograd(format!(
            "backward needs a scalar, got shape {:?}",
            root.shape()
        )));
    }
    if !root.requires_grad() {
        return Err(Error::Autograd(
            "backward from a tensor that does not require grad".into(),
        ));
    }
    let _guard = NoGradGuard::new();
    let seed = Tensor::full(root.shape(), 1.0, root.dtype(), root.device())?;
    run(root, seed)
}

/// Backward from a tensor of any shape with `grad` as its incoming gradient (the vector of
/// a vector-Jacobian product): the gradient of every leaf it depends on is accumulated into
/// the leaf. Full-graph training runs a layer's backward chunk by chunk this way, with the
/// chunk's rows of the next layer's input gradient.
pub fn backward_with(root: &Tensor, grad: &Tensor) -> Result<()> {
    if grad.shape() != root.shape() || grad.dtype() != root.dtype() {
        return Err(Error::Autograd(format!(
            "backward_with: a gradient of shape {:?} ({}) for a tensor of shape {:?} ({})",
            grad.shape(),
            grad.dtype().name(),
            root.shape(),
            root.dtype().name()
        )));
    }
    grad.same_device(root, "backward_with")?;
    if !root.requires_grad() {
        return Err(Error::Autograd(
            "backward from a tensor that does not require grad".into(),
        ));
    }
    let _guard = NoGradGuard::new();
    run(root, grad.detach())
}

/// The backward pass from `root` whose incoming gradient is `seed`.
fn run(root: &Tensor, seed: Tensor) -> Result<()> {
    let Some(root_node) = root.grad_fn().cloned() else {
        return accumulate(root, seed);
    };

    let order = topological_order(&root_node);
    let mut grads: HashMap<u64, Tensor> = HashMap::new();
    grads.insert(root_node.id, seed);
    for node in order {
        let Some(grad) = grads.remove(&node.id) else {
            continue;
        };
        let rule = node
            .backward
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                Error::Autograd(format!(
                    "backward through `{}` a second time: its saved tensors are already freed",
                    node.op
                ))
            })?;
        let shapes = node.parents.iter().map(|(_, s)| s.iter().product());
        let input_grads = crate::work::rule(&grad, shapes, || rule(&grad))?;
        drop(grad);
        if input_grads.len() != node.parents.len() {
            return Err(Error::Autograd(format!(
                "`{}` backward returned {} gradients for {} inputs",
                node.op,
                input_grads.len(),
                node.parents.len()
            )));
        }
        for ((parent, shape), g) in node.parents.iter().zip(input_grads) {
            let Some(g) = g else { continue };
            if g.shape() != shape.as_slice() {
                return Err(Error::Autograd(format!(
                    "`{}` backward gave a gradient of shape {:?} for an input of shape {:?}",
                    node.op,
                    g.shape(),
                    shape
                )));
            }
            match parent {
                Parent::None => {}
                Parent::Leaf(t) => accumulate(t, g)?,
                Parent::Node(n) => {
                    let merged = match grads.remove(&n.id) {
                        Some(prev) => merge(prev, g)?,
                        None => g,
                    };
                    grads.insert(n.id, merged);
                }
            }
        }
    }
    Ok(())
}

/// Adds `g` to the accumulated gradient of `leaf`: in place when nothing else holds that
/// gradient (the common case between micro-batches), else into a new tensor.
fn accumulate(leaf: &Tensor, g: Tensor) -> Result<()> {
    leaf.update_grad(|old| match old {
        None => Ok(g),
        Some(old) if old.storage_is_unique() && old.is_sole_handle() => {
            add_assign(&old, &g)?;
            Ok(old)
        }
        Some(old) => sum(&old, &g),
    })
}

/// Checks that `a` and `b` can be summed element for element: floats of one dtype, on one
/// device, of one shape.
fn check_sum(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    a.same_device(b, op)?;
    a.expect_float(op)?;
    if b.dtype() != a.dtype() {
        return Err(b.dtype_error(op, a.dtype().name()));
    }
    if a.shape() != b.shape() {
        return Err(Error::shape(
            op,
            format!("{:?} + {:?}", a.shape(), b.shape()),
        ));
    }
    Ok(())
}

/// `dst += src` in place, same shapes; not recorded (gradient accumulation: a leaf's
/// gradient across backward calls, a micro-batch's gradients onto those held so far).
pub fn add_assign(dst: &Tensor, src: &Tensor) -> Result<()> {
    check_sum("add_assign", dst, src)?;
    if dst.shares_storage(src) {
        return Err(Error::invalid(
            "add_assign: source and destination share storage",
        ));
    }
    let n = dst.numel();
    let src_guard = src.storage();
    let mut dst_guard = dst.storage_mut();
    if dst_guard.add_assign(&src_guard, n)? {
        Ok(())
    } else {
        Err(Error::DeviceMismatch {
            op: "add_assign",
            lhs: dst.device().to_string(),
            rhs: src.device().to_string(),
        })
    }
}

/// `a + b` as a new tensor, not recorded: the sum of two gradients of one node, or a
/// leaf's gradient plus a new one while something else still holds the old.
fn sum(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_sum("add", a, b)?;
    let n = a.numel();
    let Some(out) = a.storage().add(&b.storage(), n)? else {
        return Err(Error::DeviceMismatch {
            op: "add",
            lhs: a.device().to_string(),
            rhs: b.device().to_string(),
        });
    };
    Ok(Tensor::from_storage(
        out,
        a.shape().to_vec(),
        a.dtype(),
        a.device(),
    ))
}

/// `prev + g`, the two gradients flowing into one node: added in place into the one of
/// them that nothing else holds (the other goes), and into a new tensor only when both
/// are held elsewhere (two handles of one gradient, as `add`'s rule gives both of its
/// inputs). Float addition commutes bit for bit, so every way gives the same values; in
/// place it saves a buffer of the gradient's size and a pass writing it.
/// `meta`'s backward takes the same decision from its reference counts.
fn merge(prev: Tensor, g: Tensor) -> Result<Tensor> {
    let owned = |t: &Tensor| t.storage_is_unique() && t.is_sole_handle();
    if owned(&prev) {
        add_assign(&prev, &g)?;
        Ok(prev)
    } else if owned(&g) {
        add_assign(&g, &prev)?;
        Ok(g)
    } else {
        sum(&prev, &g)
    }
}

/// Nodes reachable from `root`, each after every node that consumes it.
fn topological_order(root: &Arc<Node>) -> Vec<Arc<Node>> {
    let mut seen: HashMap<u64, ()> = HashMap::new();
    let mut post: Vec<Arc<Node>> = Vec::new();
    // Iterative DFS: graphs of LSTM steps are deep enough to overflow a recursive one.
    let mut stack: Vec<(Arc<Node>, usize)> = vec![(root.clone(), 0)];
    seen.insert(root.id, ());
    while let Some((node, next)) = stack.pop() {
        if let Some((parent, _)) = node.parents.get(next) {
            stack.push((node.clone(), next + 1));
            if let Parent::Node(p) = parent {
                if seen.insert(p.id, ()).is_none() {
                    stack.push((p.clone(), 0));
                }
            }
        } else {
            post.push(node);
        }
    }
    post.reverse();
    post
}
