//! [`Collective`] over `MPI_COMM_WORLD` (rsmpi). MPI is initialised with
//! `MPI_THREAD_FUNNELED`: only the thread that initialised it calls MPI (the trainer's main
//! thread; rayon's workers and the micro-batch preparation thread never do), and every
//! call checks that, so that a misuse is an error rather than undefined behaviour.
//! Dropping the world finalises MPI.

use std::sync::OnceLock;
use std::thread::ThreadId;

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::environment::Universe;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::Threading;

use crate::dist::Collective;
use crate::error::{Error, Result};

/// The MPI world this process belongs to.
pub struct MpiWorld {
    /// The trainers' or the samplers' communicator once split (freed before MPI ends:
    /// fields drop in order).
    group: OnceLock<Group>,
    /// Finalises MPI when dropped.
    _universe: Universe,
    rank: usize,
    size: usize,
    thread: ThreadId,
    library: String,
}

/// This rank's group after [`Collective::split_samplers`].
struct Group {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    samplers: usize,
}

// SAFETY: the communicator is only used through `MpiWorld::comm`, which refuses every
// thread but the one that initialised MPI (MPI_THREAD_FUNNELED).
unsafe impl Send for Group {}
unsafe impl Sync for Group {}

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
            group: OnceLock::new(),
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

    /// The communicator collectives run over: this rank's group once split, else the
    /// world (on the MPI thread only).
    fn comm<T>(&self, op: &str, f: impl FnOnce(&SimpleCommunicator) -> T) -> Result<T> {
        let world = self.world(op)?;
        Ok(match self.group.get() {
            Some(g) => f(&g.comm),
            None => f(&world),
        })
    }

    /// Checks a world rank for a point-to-point message and its length for MPI's counts.
    fn peer(&self, rank: usize, len: usize) -> Result<i32> {
        if rank >= self.size || rank == self.rank {
            return Err(Error::invalid(format!(
                "no peer rank {rank} for rank {} in a world of {}",
                self.rank, self.size
            )));
        }
        if len > i32::MAX as usize {
            return Err(Error::invalid(format!(
                "a message of {len} bytes is past MPI's 2^31 - 1 element count"
            )));
        }
        Ok(rank as i32)
    }
}

impl Collective for MpiWorld {
    fn rank(&self) -> usize {
        self.group.get().map_or(self.rank, |g| g.rank)
    }

    fn size(&self) -> usize {
        self.group.get().map_or(self.size, |g| g.size)
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        // MPI_Allreduce may not alias its buffers (rsmpi has no MPI_IN_PLACE): send a copy.
        let send = buf.to_vec();
        self.comm("all-reduce", |c| {
            c.all_reduce_into(&send[..], buf, SystemOperation::sum())
        })
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        let send = buf.to_vec();
        self.comm("all-reduce", |c| {
            c.all_reduce_into(&send[..], buf, SystemOperation::sum())
        })
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut [u8]) -> Result<()> {
        let size = self.size();
        if root >= size {
            return Err(Error::invalid(format!(
                "broadcast from rank {root} in a group of {size} ranks"
            )));
        }
        self.comm("broadcast", |c| {
            c.process_at_rank(root as i32).broadcast_into(buf)
        })
    }

    fn split_samplers(&self, samplers: usize) -> Result<()> {
        let world = self.world("split")?;
        if samplers == 0 || samplers >= self.size {
            return Err(Error::flag(
                "--sampler-ranks",
                format!(
                    "--sampler-ranks {samplers}: expected 1 to {} in a world of {} ranks (at \
                 least one rank must train)",
                    self.size - 1,
                    self.size
                ),
            ));
        }
        if self.group.get().is_some() {
            return Err(Error::invalid("the sampler ranks were already split off"));
        }
        let trainers = self.size - samplers;
        let color = i32::from(self.rank >= trainers);
        let comm = world
            .split_by_color_with_key(Color::with_value(color), self.rank as i32)
            .ok_or_else(|| Error::invalid("MPI_Comm_split gave this rank no communicator"))?;
        let group = Group {
            rank: comm.rank() as usize,
            size: comm.size() as usize,
            comm,
            samplers,
        };
        self.group
            .set(group)
            .map_err(|_| Error::invalid("the sampler ranks were already split off"))
    }

    fn samplers(&self) -> usize {
        self.group.get().map_or(0, |g| g.samplers)
    }

    fn world_rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn send_bytes(&self, dest: usize, tag: i32, buf: &[u8]) -> Result<()> {
        let dest = self.peer(dest, buf.len())?;
        let world = self.world("send")?;
        world.process_at_rank(dest).send_with_tag(buf, tag);
        Ok(())
    }

    fn recv_bytes(&self, src: usize, tag: i32) -> Result<Vec<u8>> {
        let src = self.peer(src, 0)?;
        let world = self.world("receive")?;
        let (buf, _status) = world.process_at_rank(src).receive_vec_with_tag::<u8>(tag);
        Ok(buf)
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
