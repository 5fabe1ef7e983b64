//! Reshape: the same values under another shape (contiguous, so no copy).
//! Backward: the gradient reshaped back to the input's shape.

use crate::autograd::record;
use crate::error::Result;
use crate::meta::{Replay, Rule, Val};
use crate::tensor::Tensor;

/// `x` viewed as `shape` (same number of elements).
pub fn reshape(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let out = x.view(shape)?;
    let in_shape = x.shape().to_vec();
    Ok(record("reshape", out, &[x], move |g| {
        Ok(vec![Some(reshape(g, &in_shape)?)])
    }))
}

/// Meta arm of [`reshape`] ([`crate::meta`]): the same buffer under another shape; nothing
/// kept; its rule reshapes the gradient (a view of it).
pub fn meta_reshape(r: &mut Replay, x: &Val, rows: usize, cols: usize) -> Val {
    let out = r.share(x.buf);
    let rule: Rule = Box::new(move |r, g| vec![Some(r.share(g))]);
    r.record(out, (rows, cols), &[x], vec![], rule)
}
