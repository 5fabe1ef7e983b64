//! Data-parallel training over several processes (ranks).
//!
//! Every rank loads the same graph, samples the same full batch from the same seed and
//! runs the same partitioner, so all ranks hold the same K micro-batches without
//! exchanging them. The micro-batches are then dealt to the ranks by estimated cost
//! ([`deal`], greedy longest-first onto the least-loaded rank), each rank runs and
//! accumulates its own (their losses are scaled by `|seeds_k| / |seeds|` as in one process),
//! and one all-reduce (sum) of the flattened gradients per batch gives every rank the
//! batch's gradient; the optimizer steps are then identical everywhere. A rank dealt no
//! micro-batch (more ranks than micro-batches) still joins the all-reduce, with zeros.
//!
//! Communication sits behind [`Collective`]: [`Single`] is one process (the trainer's code
//! path is the same with and without MPI), and with the `mpi` cargo feature `MpiWorld`
//! is `MPI_COMM_WORLD` through rsmpi. [`from_env`] picks one from the launcher's
//! environment (`mpirun`/`mpiexec`/`srun` set the world size in it).
//!
//! On CUDA with several ranks, the gradients are summed on the devices by NCCL where every
//! rank finds it ([`nccl`], with the `mpi` feature; not yet run on a GPU); elsewhere they
//! cross the host for an MPI all-reduce.
//!
//! Only rank 0 prints the run, writes `--json` and checkpoints; evaluation is replicated on
//! every rank (same parameters, same result).
//!
//! With `--sampler-ranks S` the last S ranks only sample, partition, slice and gather, and
//! send each trainer its micro-batches (`crate::train::feed`, over [`wire`]); the collectives
//! then run among the trainers.

mod collective;
#[cfg(feature = "mpi")]
mod mpi_world;
#[cfg(feature = "mpi")]
pub mod nccl;
#[cfg(feature = "mpi")]
pub mod nccl_lib;
pub mod sim;
pub mod wire;

use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};

use crate::graph::{BlockSizes, Slicer};
use crate::nn::ModelConfig;
use crate::tensor::Tensor;

pub use collective::{is_sampler, Collective, Single};
#[cfg(feature = "mpi")]
pub use mpi_world::MpiWorld;

/// Environment variables in which launchers give the world size: Open MPI's `mpirun`,
/// then MPICH's and Intel MPI's Hydra and Slurm's PMI (`PMI_SIZE`).
const SIZE_VARS: &[&str] = &["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"];

/// The world size the launcher announced in the environment, if any (`None`: not launched
/// by an MPI launcher).
pub fn launched_size() -> Result<Option<usize>> {
    size_from(|v| std::env::var(v).ok())
}

fn size_from(get: impl Fn(&str) -> Option<String>) -> Result<Option<usize>> {
    for var in SIZE_VARS {
        if let Some(v) = get(var) {
            return match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(Error::invalid(format!(
                    "{var}={v}: expected a positive world size from the MPI launcher"
                ))),
            };
        }
    }
    Ok(None)
}

/// This rank's index among the ranks of its machine, if the launcher says (Open MPI,
/// MPICH's Hydra, Slurm): ranks sharing a machine spread over its GPUs by it.
pub fn local_rank() -> Result<Option<usize>> {
    for var in [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
    ] {
        if let Ok(v) = std::env::var(var) {
            return v.trim().parse().map(Some).map_err(|_| {
                Error::invalid(format!(
                    "{var}={v}: expected a local rank from the MPI launcher"
                ))
            });
        }
    }
    Ok(None)
}

/// The collective for this process: MPI when an MPI launcher started more than one rank
/// (and the `mpi` feature is built in), else [`Single`]. Launched with several ranks but
/// built without the feature is an error: N copies would each train alone and write the
/// same files.
pub fn from_env() -> Result<Arc<dyn Collective>> {
    match launched_size()? {
        Some(n) if n > 1 => mpi_world(n),
        _ => Ok(Arc::new(Single)),
    }
}

#[cfg(feature = "mpi")]
fn mpi_world(_n: usize) -> Result<Arc<dyn Collective>> {
    Ok(Arc::new(MpiWorld::init()?))
}

#[cfg(not(feature = "mpi"))]
fn mpi_world(n: usize) -> Result<Arc<dyn Collective>> {
    Err(Error::invalid(format!(
        "launched as one of {n} MPI ranks, but this espalier was built without MPI support: \
         rebuild with `cargo build --release --features mpi` (needs an MPI implementation \
         such as Open MPI or MPICH, and libclang), or run a single process"
    )))
}

/// Deals micro-batches to `ranks` ranks by estimated cost: longest first, each onto the
/// rank with the least cost so far (ties: the lower rank; equal costs: the earlier
/// micro-batch first), so the slowest rank's share is within the largest micro-batch of
/// the mean. Returns each micro-batch's rank. Deterministic: every rank computes the same
/// deal from the same costs.
pub fn deal(costs: &[f64], ranks: usize) -> Vec<usize> {
    let ranks = ranks.max(1);
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|&a, &b| costs[b].total_cmp(&costs[a]).then(a.cmp(&b)));
    let mut load = vec![0.0f64; ranks];
    let mut owner = vec![0usize; costs.len()];
    for i in order {
        let r = (0..ranks)
            .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
            .unwrap_or(0);
        owner[i] = r;
        load[r] += costs[i].max(0.0);
    }
    owner
}

/// A micro-batch's estimated compute: the multiply-adds of its forward pass from its block
/// sizes and the model's widths (aggregation over the edges, the dense transforms of the
/// dst rows; an LSTM aggregator's four gates per edge). A proxy to balance ranks with,
/// not a time model: backward is taken as proportional to forward.
pub fn micro_cost(sizes: &[BlockSizes], model: &ModelConfig) -> f64 {
    sizes
        .iter()
        .zip(model.layer_specs())
        .enumerate()
        .map(|(l, (s, spec))| {
            let (i, o) = model.widths(l);
            let (i, o) = (i as f64, o as f64);
            let (edges, dst) = (s.num_edges as f64, s.num_dst as f64);
            // Gathering the input rows is memory traffic proportional to the first layer's
            // sources.
            let gather = if l == 0 { s.num_src as f64 * i } else { 0.0 };
            edges * spec.multiply_adds_per_edge() + 2.0 * dst * i * o + gather
        })
        .sum()
}

/// The estimated compute ([`micro_cost`]) of each of a batch's micro-batches `parts`,
/// sliced from `slicer`'s sample: what they are dealt to the ranks by.
pub fn part_costs(slicer: &Slicer, parts: &[Vec<u32>], model: &ModelConfig) -> Result<Vec<f64>> {
    Ok(slicer
        .sizes_all(parts)?
        .iter()
        .map(|s| micro_cost(s, model))
        .collect())
}

/// The trainer's view of the ranks: the collective, and how gradients are summed.
pub struct Dist {
    /// The ranks' collective ([`Single`] for one process).
    pub collective: Arc<dyn Collective>,
    /// NCCL on the training device, when every rank trains on CUDA and has NCCL.
    #[cfg(feature = "mpi")]
    nccl: Option<nccl::Nccl>,
    /// Why the gradients cross the host (several ranks, not NCCL), for the run's header.
    host_reason: Option<String>,
}

/// This machine's name, to tell ranks on different machines apart.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Default for Dist {
    fn default() -> Self {
        Dist::new(Arc::new(Single))
    }
}

impl Dist {
    /// Wraps a collective; gradients are summed on the host.
    pub fn new(collective: Arc<dyn Collective>) -> Dist {
        Dist {
            collective,
            #[cfg(feature = "mpi")]
            nccl: None,
            host_reason: None,
        }
    }

    /// Wraps a collective for training on `device` (a collective call on every rank): with
    /// several ranks on CUDA and NCCL found by every rank, gradients are summed by NCCL on
    /// the devices; otherwise on the host.
    pub fn for_device(collective: Arc<dyn Collective>, device: Device) -> Result<Dist> {
        let mut d = Dist::new(collective);
        if d.size() == 1 {
            return Ok(d);
        }
        d.host_reason = match device {
            Device::Cuda(index) => match d.shared_gpu(index)? {
                Some(why) => Some(why),
                None => d.try_nccl(index)?,
            },
            _ => Some(format!("{device} has no device collective")),
        };
        Ok(d)
    }

    /// Why the ranks cannot sum on their GPUs if two of them train on the same one (ranks
    /// outnumbering a machine's GPUs share them): NCCL refuses two ranks on one device. A
    /// collective call; every rank reaches the same answer.
    fn shared_gpu(&self, index: u32) -> Result<Option<String>> {
        // Each rank's (host, device UUID) as a 48-bit key (exact in an f64), gathered by
        // one sum over slots that only their rank writes.
        let ctx = crate::device::cuda::context(index)?;
        let host_device = [hostname().as_bytes(), &ctx.uuid()?].concat();
        let mine = (crate::checksum::hash_bytes(&host_device) & ((1 << 48) - 1)) as f64 + 1.0;
        let mut keys = vec![0.0f64; self.size()];
        keys[self.rank()] = mine;
        self.collective.all_reduce_sum_f64(&mut keys)?;
        for (r, a) in keys.iter().enumerate() {
            if let Some(s) = keys[r + 1..].iter().position(|b| b == a) {
                return Ok(Some(format!(
                    "ranks {r} and {} share one GPU, on which NCCL cannot run two ranks; \
                     give each rank its own GPU for NCCL",
                    r + 1 + s
                )));
            }
        }
        Ok(None)
    }

    #[cfg(feature = "mpi")]
    fn try_nccl(&mut self, index: u32) -> Result<Option<String>> {
        let missing = nccl::unavailable(index);
        if self.any(missing.is_some())? {
            return Ok(Some(
                missing.unwrap_or_else(|| "another rank has no NCCL".into()),
            ));
        }
        self.nccl = Some(nccl::Nccl::new(&*self.collective, index)?);
        Ok(None)
    }

    #[cfg(not(feature = "mpi"))]
    fn try_nccl(&mut self, _index: u32) -> Result<Option<String>> {
        Ok(Some("built without the mpi feature (no NCCL)".into()))
    }

    /// How gradients are summed, for the run's header.
    pub fn gradient_path(&self) -> String {
        if self.size() == 1 {
            return "one process".into();
        }
        #[cfg(feature = "mpi")]
        if let Some(n) = &self.nccl {
            return format!("NCCL on cuda:{}", n.device());
        }
        match &self.host_reason {
            Some(why) => format!("through the host ({why})"),
            None => "through the host".into(),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.collective.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.collective.size()
    }

    /// Whether this rank prints, writes the JSON and checkpoints (rank 0).
    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// Whether any rank's `local` is true (one all-reduce when there are several ranks):
    /// a stop request seen by one rank stops all of them at the same batch.
    pub fn any(&self, local: bool) -> Result<bool> {
        if self.size() == 1 {
            return Ok(local);
        }
        let mut v = [f64::from(u8::from(local))];
        self.collective.all_reduce_sum_f64(&mut v)?;
        Ok(v[0] > 0.0)
    }

    /// Keeps this rank's share of `parts` (dealt by `costs`), in their original order. With
    /// more ranks than micro-batches some ranks get none (and join the all-reduce with
    /// zeros).
    pub fn my_parts(&self, parts: Vec<Vec<u32>>, costs: &[f64]) -> Vec<Vec<u32>> {
        let (size, rank) = (self.size(), self.rank());
        if size == 1 {
            return parts;
        }
        let owner = deal(costs, size);
        parts
            .into_iter()
            .zip(owner)
            .filter(|&(_, r)| r == rank)
            .map(|(p, _)| p)
            .collect()
    }

    /// Sums the parameters' gradients over the ranks (one all-reduce of the flattened
    /// gradients, plus one per-parameter flag so that a parameter no rank gave a gradient
    /// keeps none, as in one process) and the batch's loss sum, correct predictions, seeds
    /// and micro-batch count (`stats`, summed in place). Returns the bytes this rank sent
    /// into the all-reduce.
    pub fn all_reduce_batch(&self, params: &[Tensor], stats: &mut [f64]) -> Result<u64> {
        #[cfg(feature = "mpi")]
        if let Some(n) = &self.nccl {
            return self.all_reduce_nccl(n, params, stats);
        }
        let total: usize = params.iter().map(Tensor::numel).sum();
        let mut flat = Vec::with_capacity(total + params.len());
        let mut has = Vec::with_capacity(params.len());
        for p in params {
            match p.grad() {
                Some(g) => {
                    flat.extend_from_slice(&g.to_vec_f32()?);
                    has.push(1.0f32);
                }
                None => {
                    flat.resize(flat.len() + p.numel(), 0.0);
                    has.push(0.0);
                }
            }
        }
        flat.extend_from_slice(&has);
        self.collective.all_reduce_sum_f32(&mut flat)?;
        self.collective.all_reduce_sum_f64(stats)?;
        let mut at = 0;
        for (i, p) in params.iter().enumerate() {
            let n = p.numel();
            if flat[total + i] > 0.0 {
                let g = Tensor::from_f32(flat[at..at + n].to_vec(), p.shape(), p.device())?;
                p.set_grad(Some(g));
            } else {
                p.set_grad(None);
            }
            at += n;
        }
        Ok((flat.len() * 4 + stats.len() * 8) as u64)
    }

    /// [`Dist::all_reduce_batch`] with the gradients summed on the devices: the figures
    /// and the has-gradient flags go over MPI (a few bytes), the gradients through NCCL.
    #[cfg(feature = "mpi")]
    fn all_reduce_nccl(&self, n: &nccl::Nccl, params: &[Tensor], stats: &mut [f64]) -> Result<u64> {
        let mut small: Vec<f64> = stats.to_vec();
        small.extend(
            params
                .iter()
                .map(|p| f64::from(u8::from(p.grad().is_some()))),
        );
        self.collective.all_reduce_sum_f64(&mut small)?;
        stats.copy_from_slice(&small[..stats.len()]);
        let mut grads = Vec::new();
        for (p, &flag) in params.iter().zip(&small[stats.len()..]) {
            if flag > 0.0 {
                let g = match p.grad() {
                    Some(g) => g,
                    None => {
                        let z = Tensor::zeros(p.shape(), crate::tensor::DType::F32, p.device())?;
                        p.set_grad(Some(z.clone()));
                        z
                    }
                };
                grads.push(g);
            }
        }
        n.all_reduce_sum(&grads)?;
        let floats: usize = grads.iter().map(Tensor::numel).sum();
        Ok((floats * 4 + small.len() * 8) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deal_balances_cost_not_count() {
        // One heavy micro-batch and three light ones: the heavy one alone on one rank.
        let owner = deal(&[1.0, 10.0, 1.0, 1.0], 2);
        assert_eq!(owner, vec![1, 0, 1, 1]);
    }

    #[test]
    fn deal_gives_idle_ranks_nothing_when_ranks_outnumber_micro_batches() {
        let owner = deal(&[3.0, 5.0], 4);
        assert_eq!(owner, vec![1, 0]);
    }

    #[test]
    fn deal_of_equal_costs_is_round_robin_in_order() {
        assert_eq!(deal(&[2.0; 5], 2), vec![0, 1, 0, 1, 0]);
        assert_eq!(deal(&[], 3), Vec::<usize>::new());
    }

    #[test]
    fn deal_keeps_the_largest_share_within_one_micro_batch_of_the_mean() {
        let costs: Vec<f64> = (0..37).map(|i| ((i * 7919) % 101) as f64 + 1.0).collect();
        for ranks in 1..=8 {
            let owner = deal(&costs, ranks);
            let mut load = vec![0.0; ranks];
            for (c, r) in costs.iter().zip(&owner) {
                load[*r] += c;
            }
            let mean = costs.iter().sum::<f64>() / ranks as f64;
            let max = load.iter().cloned().fold(0.0, f64::max);
            let biggest = costs.iter().cloned().fold(0.0, f64::max);
            assert!(max <= mean + biggest, "ranks {ranks}: {load:?}");
        }
    }

    #[test]
    fn single_process_collectives_leave_buffers_unchanged() {
        let s = Single;
        let mut f = [1.5f32, -2.0];
        s.all_reduce_sum_f32(&mut f).unwrap();
        assert_eq!(f, [1.5, -2.0]);
        let mut b = [7u8, 8];
        s.broadcast_bytes(0, &mut b).unwrap();
        assert_eq!(b, [7, 8]);
        assert!(s.broadcast_bytes(1, &mut b).is_err());
        let d = Dist::default();
        assert!(d.any(true).unwrap() && !d.any(false).unwrap());
    }

    #[test]
    fn world_size_comes_from_the_launchers_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(size_from(env(&[])).unwrap(), None);
        assert_eq!(
            size_from(env(&[("OMPI_COMM_WORLD_SIZE", "3")])).unwrap(),
            Some(3)
        );
        assert_eq!(size_from(env(&[("PMI_SIZE", " 2 ")])).unwrap(), Some(2));
        let e = size_from(env(&[("PMI_SIZE", "two")])).unwrap_err();
        assert!(e.to_string().contains("PMI_SIZE=two"), "{e}");
        assert!(size_from(env(&[("OMPI_COMM_WORLD_SIZE", "0")])).is_err());
    }
}
