//! Reshape: the same values under another shape (contiguous, so no copy).
//! Backward: the gradient reshaped back to the input's shape.

use crate::autograd::record;
use crate::error::Result;
use crate::tensor::Tensor;

/// `x` viewed as `shape` (same number of elements).
pub fn reshape(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let out = x.view(shape)?;
    let in_shape = x.shape().to_vec();
    Ok(record("reshape", out, &[x], move |g| {
        Ok(vec![Some(reshape(g, &in_shape)?)])
    }))
}
