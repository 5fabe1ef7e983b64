//! What data-parallel training needs from the ranks ([`Collective`]) and the one-process
//! collective ([`Single`]). The MPI world and NCCL implement the trait; `dist/mod.rs` picks
//! one, so the implementations depend on this file and not on the module that chooses.

use crate::error::{Error, Result};

/// The collective operations data-parallel training needs. Every rank must call the same
/// operations in the same order with the same lengths (MPI's rule).
pub trait Collective: Send + Sync {
    /// This process's rank, `0..size`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Element-wise sum over the ranks, in place on every rank.
    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()>;
    /// Element-wise sum over the ranks, in place on every rank (losses and counts).
    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()>;
    /// Copies `root`'s bytes into `buf` on every rank (`buf` has the same length everywhere).
    fn broadcast_bytes(&self, root: usize, buf: &mut [u8]) -> Result<()>;
    /// What the launcher is, for messages (`"single process"`, `"MPI: Open MPI v4.1.4"`).
    fn describe(&self) -> String;
    /// Ends every rank's process after this one failed (MPI_Abort), so the others do not
    /// wait for it in a collective for ever. One process: nothing to do.
    fn abort(&self, _code: i32) {}
    /// Makes the last `samplers` ranks of the world sampler ranks (a collective call on
    /// every rank): from then on [`Collective::rank`], [`Collective::size`] and the
    /// collectives are those of this rank's group (the trainers, or the samplers), while
    /// point-to-point messages address ranks of the whole world.
    fn split_samplers(&self, samplers: usize) -> Result<()> {
        Err(Error::flag(
            "--sampler-ranks",
            format!(
                "--sampler-ranks {samplers} needs several MPI ranks (`mpirun -np N`, with \
             espalier built with `--features mpi`)"
            ),
        ))
    }
    /// The number of sampler ranks ([`Collective::split_samplers`]; 0 without).
    fn samplers(&self) -> usize {
        0
    }
    /// This process's rank in the whole world (trainers first, then samplers).
    fn world_rank(&self) -> usize {
        self.rank()
    }
    /// The number of ranks in the whole world.
    fn world_size(&self) -> usize {
        self.size()
    }
    /// Sends `buf` to world rank `dest` with `tag` (blocking until it can be reused).
    fn send_bytes(&self, dest: usize, _tag: i32, _buf: &[u8]) -> Result<()> {
        Err(Error::invalid(format!(
            "no rank {dest} to send to in {}",
            self.describe()
        )))
    }
    /// Receives the next message from world rank `src` with `tag`.
    fn recv_bytes(&self, src: usize, _tag: i32) -> Result<Vec<u8>> {
        Err(Error::invalid(format!(
            "no rank {src} to receive from in {}",
            self.describe()
        )))
    }
}

/// One process: every collective is the identity.
#[derive(Clone, Copy, Debug, Default)]
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum_f32(&self, _buf: &mut [f32]) -> Result<()> {
        Ok(())
    }
    fn all_reduce_sum_f64(&self, _buf: &mut [f64]) -> Result<()> {
        Ok(())
    }
    fn broadcast_bytes(&self, root: usize, _buf: &mut [u8]) -> Result<()> {
        if root != 0 {
            return Err(Error::invalid(format!(
                "broadcast from rank {root} in a single process"
            )));
        }
        Ok(())
    }
    fn describe(&self) -> String {
        "single process".into()
    }
}

/// Whether this process is one of the sampler ranks (the world's last
/// [`Collective::samplers`]), which serve trainers instead of training.
pub fn is_sampler(c: &dyn Collective) -> bool {
    c.samplers() > 0 && c.world_rank() >= c.world_size() - c.samplers()
}
