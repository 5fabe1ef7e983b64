//! Gradients summed on NVIDIA GPUs by NCCL (`libnccl` loaded at run time, see
//! [`super::nccl_lib`]), so that they do not cross the host. Rank 0 makes the
//! NCCL unique id and MPI broadcasts it ([`Collective::broadcast_bytes`]); each rank then
//! joins the NCCL communicator on its device's stream, the stream every espalier kernel
//! runs on, so the all-reduce is ordered after the last backward and before the optimizer
//! step without a host wait. The per-parameter all-reduces are one NCCL group (one launch).
//!
//! Not yet done (issue 20 item 3): a separate stream overlapping the all-reduce of early
//! buckets with the next micro-batch's backward. Not yet run: nothing here has executed on
//! a GPU (the emulated CUDA device has no NCCL); `tests/mpi.rs` runs world size 1 where a
//! CUDA device and NCCL exist, prints why it skips elsewhere, and fails under
//! `REQUIRE_GPU=cuda` when NCCL is missing.

use std::sync::Arc;

use crate::device::cuda::{context, Context};
use crate::dist::nccl_lib::{self, Comm, UniqueId};
use crate::dist::Collective;
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};

/// Why NCCL cannot be used for `cuda:index`, if it cannot.
pub fn unavailable(index: u32) -> Option<String> {
    if let Err(e) = crate::device::cuda::probe() {
        return Some(format!("no CUDA device: {e}"));
    }
    if let Err(e) = nccl_lib::nccl() {
        return Some(e);
    }
    if let Err(e) = context(index) {
        return Some(e.to_string());
    }
    None
}

fn check(what: &str, code: i32) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let msg = match nccl_lib::nccl() {
        Ok(n) => n.error(code),
        Err(_) => format!("NCCL error {code}"),
    };
    Err(Error::Backend {
        backend: "nccl",
        msg: format!("{what}: {msg}"),
    })
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
    /// rank calls it). Check [`unavailable`] first, on every rank, and that no two ranks
    /// share a device (NCCL refuses that; see [`crate::dist::Dist::for_device`]).
    pub fn new(world: &dyn Collective, index: u32) -> Result<Nccl> {
        let lib = nccl_lib::nccl().map_err(|e| Error::Backend {
            backend: "nccl",
            msg: e,
        })?;
        let ctx = context(index)?;
        let mut id = UniqueId { internal: [0; 128] };
        if world.rank() == 0 {
            // SAFETY: the out-pointer is a valid ncclUniqueId.
            check("ncclGetUniqueId", unsafe { (lib.get_unique_id)(&mut id) })?;
        }
        let mut bytes = id.internal.map(|c| c as u8);
        world.broadcast_bytes(0, &mut bytes)?;
        id.internal = bytes.map(|b| b as std::ffi::c_char);
        // NCCL puts the communicator on the calling thread's current device: the context of
        // cuda:index must be current here, whatever the thread did before.
        ctx.bind()?;
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the id is the one every rank received; rank and size
        // are the world's.
        check("ncclCommInitRank", unsafe {
            (lib.comm_init_rank)(&mut comm, world.size() as i32, id, world.rank() as i32)
        })?;
        Ok(Nccl { comm, ctx })
    }

    /// The device's index (`cuda:N`).
    pub fn device(&self) -> u32 {
        self.ctx.index
    }

    /// Sums each tensor over the ranks, in place, on the device (one NCCL group, on the
    /// device's stream, ordered after the backward that made the gradients). Every rank
    /// passes tensors of the same shapes in the same order.
    pub fn all_reduce_sum(&self, tensors: &[Tensor]) -> Result<()> {
        let lib = nccl_lib::nccl().map_err(|e| Error::Backend {
            backend: "nccl",
            msg: e,
        })?;
        self.ctx.bind()?;
        let stream = self.ctx.stream.cu_stream() as *mut std::ffi::c_void;
        // SAFETY: no arguments.
        check("ncclGroupStart", unsafe { (lib.group_start)() })?;
        let mut result = Ok(());
        for t in tensors {
            let n = t.numel();
            let mut storage = t.storage_mut();
            let Storage::Cuda(buf) = &mut *storage else {
                result = Err(Error::invalid("NCCL all-reduce of a tensor not on CUDA"));
                break;
            };
            if (buf.len as usize) < n * 4 {
                result = Err(Error::invalid(
                    "NCCL all-reduce: buffer shorter than tensor",
                ));
                break;
            }
            let ptr = buf.device_ptr() as *mut std::ffi::c_void;
            // SAFETY: `ptr` holds the tensor's `n` f32 values on this rank's device; the
            // stream is the device's; in place: send and receive buffers are the same.
            let code = unsafe {
                (lib.all_reduce)(
                    ptr,
                    ptr,
                    n,
                    nccl_lib::FLOAT32,
                    nccl_lib::SUM,
                    self.comm,
                    stream,
                )
            };
            if let Err(e) = check("ncclAllReduce", code) {
                result = Err(e);
                break;
            }
        }
        // The group is closed whatever happened inside it.
        // SAFETY: no arguments.
        let end = check("ncclGroupEnd", unsafe { (lib.group_end)() });
        result.and(end)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        if let Ok(lib) = nccl_lib::nccl() {
            let _ = self.ctx.bind();
            // SAFETY: the communicator was made by ncclCommInitRank and is destroyed once.
            unsafe { (lib.comm_destroy)(self.comm) };
        }
    }
}
