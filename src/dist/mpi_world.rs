//! [`Collective`] over `MPI_COMM_WORLD` (rsmpi). MPI is initialised with
//! `MPI_THREAD_FUNNELED`: only the thread that initialised it calls MPI (the trainer's main
//! thread; rayon's workers and the micro-batch preparation thread never do), and every
//! call checks that, so that a misuse is an error rather than undefined behaviour.
//! Dropping the world finalises MPI.

use std::thread::ThreadId;

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;

use crate::dist::Collective;
use crate::error::{Error, Result};

/// The MPI world this process belongs to.
pub struct MpiWorld {
    /// Finalises MPI when dropped.
    _universe: Universe,
    rank: usize,
    size: usize,
    thread: ThreadId,
    library: String,
}

impl MpiWorld {
    /// Initialises MPI (once per process).
    pub fn init() -> Result<MpiWorld> {
        let (universe, provided) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| Error::invalid("MPI was already initialised in this process"))?;
        if provided < Threading::Funneled {
            return Err(Error::invalid(format!(
                "the MPI library provides thread level {provided:?}; espalier needs Funneled \
                 (MPI called from the main thread while worker threads compute)"
            )));
        }
        let world = universe.world();
        let library = mpi::environment::library_version()
            // "Open MPI v4.1.4, package: ...": the name and version.
            .map(|v| v.split([',', '\n']).next().unwrap_or("").trim().to_string())
            .unwrap_or_else(|_| "unknown MPI library".into());
        Ok(MpiWorld {
            rank: world.rank() as usize,
            size: world.size() as usize,
            _universe: universe,
            thread: std::thread::current().id(),
            library,
        })
    }

    /// `MPI_COMM_WORLD`, on the thread that initialised MPI only.
    fn world(&self, op: &str) -> Result<SimpleCommunicator> {
        if std::thread::current().id() != self.thread {
            return Err(Error::invalid(format!(
                "MPI {op} called from a thread other than the one that initialised MPI"
            )));
        }
        Ok(SimpleCommunicator::world())
    }
}

impl Collective for MpiWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        let world = self.world("all-reduce")?;
        // MPI_Allreduce may not alias its buffers (rsmpi has no MPI_IN_PLACE): send a copy.
        let send = buf.to_vec();
        world.all_reduce_into(&send[..], buf, SystemOperation::sum());
        Ok(())
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        let world = self.world("all-reduce")?;
        let send = buf.to_vec();
        world.all_reduce_into(&send[..], buf, SystemOperation::sum());
        Ok(())
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut [u8]) -> Result<()> {
        let world = self.world("broadcast")?;
        if root >= self.size {
            return Err(Error::invalid(format!(
                "broadcast from rank {root} in a world of {} ranks",
                self.size
            )));
        }
        world.process_at_rank(root as i32).broadcast_into(buf);
        Ok(())
    }

    fn describe(&self) -> String {
        format!("MPI: {}", self.library)
    }

    fn abort(&self, code: i32) {
        if let Ok(world) = self.world("abort") {
            world.abort(code);
        }
    }
}
