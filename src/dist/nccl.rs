//! Gradients summed on NVIDIA GPUs by NCCL (through cudarc, `libnccl` loaded at run time
//! like the other CUDA libraries), so that they do not cross the host. Rank 0 makes the
//! NCCL unique id and MPI broadcasts it ([`Collective::broadcast_bytes`]); each rank then
//! joins the NCCL communicator on its device's stream, the stream every espalier kernel
//! runs on, so the all-reduce is ordered after the last backward and before the optimizer
//! step without a host wait. The per-parameter all-reduces are one NCCL group (one launch).
//!
//! Not yet done (issue 20 item 3): a separate stream overlapping the all-reduce of early
//! buckets with the next micro-batch's backward. Not yet run: nothing here has executed on
//! a GPU (the session that wrote it had none); `tests/mpi.rs` runs world size 1 where a
//! CUDA device and NCCL exist and prints why it skips elsewhere.

use std::sync::Arc;

use cudarc::nccl::safe::{group_end, group_start, Comm, Id, ReduceOp};

use crate::device::cuda::{context, Context};
use crate::dist::Collective;
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};

/// Why NCCL cannot be used for `cuda:index`, if it cannot.
pub fn unavailable(index: u32) -> Option<String> {
    if let Err(e) = crate::device::cuda::probe() {
        return Some(format!("no CUDA device: {e}"));
    }
    // SAFETY: only tries to dlopen the library names cudarc would use.
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Some("no NCCL library (libnccl.so.2) found".into());
    }
    if let Err(e) = context(index) {
        return Some(e.to_string());
    }
    None
}

fn nccl_err(what: &str, e: cudarc::nccl::result::NcclError) -> Error {
    Error::Backend {
        backend: "nccl",
        msg: format!("{what}: {e:?}"),
    }
}

/// One rank's NCCL communicator on its CUDA device.
pub struct Nccl {
    comm: Comm,
    ctx: Arc<Context>,
}

// SAFETY: an NCCL communicator may be used from any thread as long as one thread at a time
// does (NCCL's rule); `Nccl` is not `Sync`, so shared use across threads cannot compile.
unsafe impl Send for Nccl {}

impl Nccl {
    /// Joins the communicator of every rank of `world` on `cuda:index` (a collective: every
    /// rank calls it). Check [`unavailable`] first, on every rank.
    pub fn new(world: &dyn Collective, index: u32) -> Result<Nccl> {
        let ctx = context(index)?;
        let mut id = [0u8; 128];
        if world.rank() == 0 {
            let fresh = Id::new().map_err(|e| nccl_err("ncclGetUniqueId", e))?;
            for (b, c) in id.iter_mut().zip(fresh.internal()) {
                *b = *c as u8;
            }
        }
        world.broadcast_bytes(0, &mut id)?;
        let id = Id::uninit(id.map(|b| b as core::ffi::c_char));
        let comm = Comm::from_rank(ctx.stream.clone(), world.rank(), world.size(), id)
            .map_err(|e| nccl_err("ncclCommInitRank", e))?;
        Ok(Nccl { comm, ctx })
    }

    /// The device's index (`cuda:N`).
    pub fn device(&self) -> u32 {
        self.ctx.index
    }

    /// Sums each tensor over the ranks, in place, on the device (one NCCL group). Every
    /// rank passes tensors of the same shapes in the same order.
    pub fn all_reduce_sum(&self, tensors: &[Tensor]) -> Result<()> {
        group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
        let mut result = Ok(());
        for t in tensors {
            let n = t.numel();
            let mut storage = t.storage_mut();
            let Storage::Cuda(buf) = &mut *storage else {
                result = Err(Error::invalid("NCCL all-reduce of a tensor not on CUDA"));
                break;
            };
            // SAFETY: the buffer holds the tensor's `n` f32 values as 32-bit words.
            let view = unsafe { buf.slice_mut().transmute_mut::<f32>(n) };
            let Some(mut view) = view else {
                result = Err(Error::invalid(
                    "NCCL all-reduce: buffer shorter than tensor",
                ));
                break;
            };
            if let Err(e) = self.comm.all_reduce_in_place(&mut view, &ReduceOp::Sum) {
                result = Err(nccl_err("ncclAllReduce", e));
                break;
            }
        }
        // The group is closed whatever happened inside it.
        let end = group_end().map_err(|e| nccl_err("ncclGroupEnd", e));
        result.and(end.map(|_| ()))
    }
}
