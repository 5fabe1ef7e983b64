//! Gradients held across micro-batches: each micro-batch's backward writes fresh
//! gradients, which are added to the batch's so far only once the micro-batch has
//! succeeded (a micro-batch that runs out of memory is split and retried without double
//! counting). The micro-batch run and full-graph epochs both accumulate this way.

use crate::error::Result;
use crate::tensor::Tensor;

/// Runs `f` (a forward and backward) with the parameters' gradients so far taken out, and
/// adds its fresh gradients to them once it has succeeded; on an error the gradients so far
/// are put back untouched, so a failed run leaves no partial gradient behind.
pub(crate) fn with_held_grads<T>(params: &[Tensor], f: impl FnOnce() -> Result<T>) -> Result<T> {
    let held: Vec<Option<Tensor>> = params
        .iter()
        .map(|p| {
            let g = p.grad();
            p.set_grad(None);
            g
        })
        .collect();
    match f() {
        Ok(v) => {
            for (p, held) in params.iter().zip(held) {
                if let Some(acc) = held {
                    if let Some(fresh) = p.grad() {
                        crate::autograd::add_assign(&acc, &fresh)?;
                    }
                    p.set_grad(Some(acc));
                }
            }
            Ok(v)
        }
        Err(e) => {
            for (p, held) in params.iter().zip(held) {
                p.set_grad(held);
            }
            Err(e)
        }
    }
}
