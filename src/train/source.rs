//! Where the micro-batch run ([`crate::train::micro`]) gets each batch: a [`MicroSource`].
//!
//! Two exist. [`local::Local`] samples the batch in this process, cuts it into
//! micro-batches (the planner, with the memory budget's K search) and hands over their
//! seeds, which the run prepares (slice or sample, gather) one micro-batch ahead of the one
//! computing. [`crate::train::feed::Feed`], on a trainer rank with sampler ranks, receives
//! each batch's micro-batches already prepared. The run takes a `&mut dyn MicroSource` and
//! does not know which one it has: it runs a [`SourcedBatch`]'s micro-batches in order,
//! sums over the ranks and steps.

pub(crate) mod local;

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::{Block, Csr, Dataset, Prepared, Slicer};
use crate::partition::PartitionStats;
use crate::rng::mix64;
use crate::train::config::Loader;
use crate::train::features::FeatureStore;
use crate::train::state::State;
use crate::train::stats::Phases;

/// What the micro-batch run does with each micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Forward, backward, then one optimizer step for the batch.
    Train,
    /// Forward and backward (measured peaks), no step; gradients are dropped.
    Measure,
    /// Partition and estimate only.
    Plan,
}

/// Hands the micro-batch run one batch at a time.
pub(crate) trait MicroSource: Send {
    /// Batch `b` of `epoch` (its seeds `seeds`) for `pass`: its micro-batches in the
    /// order they run (this rank's share of them with several ranks), with the batch's
    /// figures so far.
    fn next_batch(
        &mut self,
        tr: &mut State<'_>,
        epoch: usize,
        b: usize,
        seeds: &[u32],
        pass: Pass,
    ) -> Result<SourcedBatch>;

    /// The run has had its last batch (tells sampler ranks to stop; nothing for a local
    /// source).
    fn release(self: Box<Self>, tr: &State<'_>) -> Result<()>;
}

/// One batch as a source hands it to the run.
pub(crate) struct SourcedBatch {
    /// The batch's partition statistics before any micro-batch ran: where it is in the
    /// run, its K, the partitioner and its seconds.
    pub stats: PartitionStats,
    /// Seconds spent so far: sampling and partitioning here, or waiting for the feed.
    pub phases: Phases,
    /// Input nodes of the full batch's sample (0 when none was taken): the redundancy's
    /// denominator.
    pub full_inputs: usize,
    /// The batch's K as made elsewhere (by a sampler rank), which the ranks together must
    /// have run; `None` when this rank made the plan itself.
    pub made: Option<usize>,
    /// The micro-batches.
    pub micro: MicroBatches,
}

/// A batch's micro-batches, in the order they run.
pub(crate) enum MicroBatches {
    /// Seeds to prepare here, one micro-batch ahead of the run; `prep` also prepares the
    /// halves of a micro-batch that runs out of memory. `whole`: the one micro-batch is
    /// the whole batch (it runs on the full sample itself).
    Seeds {
        prep: Preparer,
        parts: Vec<Vec<u32>>,
        whole: bool,
    },
    /// Prepared elsewhere (by a sampler rank); they cannot be split here.
    Prepared(Vec<Prepared>),
}

impl MicroBatches {
    /// The batch's sample and its micro-batches' seeds, when it was sampled here.
    pub fn planned(&self) -> Option<(&Slicer, &[Vec<u32>])> {
        match self {
            MicroBatches::Seeds { prep, parts, .. } => Some((prep.slicer.as_ref()?, parts)),
            MicroBatches::Prepared(_) => None,
        }
    }

    /// Whether each micro-batch samples its own seeds (no one full sample holds all
    /// their input nodes).
    pub fn samples_own_seeds(&self) -> bool {
        matches!(self, MicroBatches::Seeds { prep, .. } if prep.sampler.is_some())
    }

    /// Calls `each` on every micro-batch in order, with the preparer of their halves when
    /// they are prepared here. Seeds are prepared on a helper thread while `each` runs the
    /// ones before: `ahead` at a time, in parallel, handed over one by one in order through
    /// a rendezvous channel (with `ahead` 1: exactly one ahead). It makes host vectors only,
    /// so the device's memory tracker sees nothing of it; the host holds at most `ahead + 1`
    /// prepared micro-batches (a group waiting to be handed over, and the one running). `features` is `None` when the
    /// matrix lives on the device (gathered there by id).
    pub fn for_each(
        self,
        data: &Dataset,
        features: Option<&FeatureStore>,
        ahead: usize,
        mut each: impl FnMut(Prepared, Option<&Preparer>) -> Result<()>,
    ) -> Result<()> {
        let (prep, parts, whole) = match self {
            MicroBatches::Prepared(parts) => {
                return parts.into_iter().try_for_each(|p| each(p, None));
            }
            MicroBatches::Seeds { prep, parts, whole } => (prep, parts, whole),
        };
        let prep = &prep;
        let ahead = ahead.max(1);
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = sync_channel::<Result<Prepared>>(0);
            scope.spawn(move || {
                let mut parts = parts.into_iter();
                loop {
                    let group: Vec<Vec<u32>> = parts.by_ref().take(ahead).collect();
                    let ready: Vec<Result<Prepared>> = match group.len() {
                        0 => break,
                        1 => group
                            .into_iter()
                            .map(|part| prep.prepare(data, features, part, whole))
                            .collect(),
                        _ => group
                            .into_par_iter()
                            .map(|part| prep.prepare(data, features, part, whole))
                            .collect(),
                    };
                    for p in ready {
                        let failed = p.is_err();
                        if tx.send(p).is_err() || failed {
                            return;
                        }
                    }
                }
            });
            loop {
                let t = Instant::now();
                let Ok(p) = rx.recv() else { break };
                let mut p = p?;
                p.wait_s = t.elapsed().as_secs_f64();
                each(p, Some(prep))?;
            }
            Ok(())
        })
    }
}

/// Prepares a batch's micro-batches on the host: blocks sliced from the full batch's
/// sample, or (`--loader per-micro-batch`) sampled from their own seeds; input rows
/// gathered.
pub(crate) struct Preparer {
    /// The full batch's sample; `None` when it was skipped (every micro-batch samples).
    slicer: Option<Slicer>,
    sampler: Option<MicroSampler>,
}

/// Samples a micro-batch's blocks from its own seeds (Loader::PerMicroBatch).
struct MicroSampler {
    graph: Arc<Csr>,
    fanouts: Vec<i64>,
    /// The batch's sampling key; each micro-batch mixes in its seeds.
    key: u64,
}

impl MicroSampler {
    fn sample(&self, seeds: &[u32]) -> Result<Vec<Arc<Block>>> {
        let first = seeds.first().copied().unwrap_or(0) as u64;
        let key = mix64(self.key ^ mix64(((seeds.len() as u64) << 32) | first));
        let blocks = crate::graph::sample_blocks(&self.graph, seeds, &self.fanouts, key)?;
        Ok(blocks.into_iter().map(Arc::new).collect())
    }
}

impl Preparer {
    /// The preparer of batch `key`'s micro-batches: slices of `slicer`'s sample, or fresh
    /// samples of their own seeds (`--loader per-micro-batch`).
    pub fn new(tr: &State<'_>, slicer: Option<Slicer>, key: u64) -> Preparer {
        Preparer {
            slicer,
            sampler: (tr.config.micro.loader == Loader::PerMicroBatch).then(|| MicroSampler {
                graph: tr.graph.clone(),
                fanouts: tr.config.fanouts.clone(),
                key: mix64(tr.config.seed ^ key ^ 0x6c6f_6164_6572),
            }),
        }
    }

    /// One micro-batch, ready to upload: sliced or sampled (unless it is the whole batch),
    /// gathered (unless `features` is `None`: the matrix lives on the device).
    pub fn prepare(
        &self,
        data: &Dataset,
        features: Option<&FeatureStore>,
        seeds: Vec<u32>,
        whole: bool,
    ) -> Result<Prepared> {
        let t = Instant::now();
        let blocks = match (&self.sampler, &self.slicer) {
            (_, Some(slicer)) if whole => slicer.blocks().to_vec(),
            (Some(s), _) => s.sample(&seeds)?,
            (None, Some(slicer)) => slicer.slice(&seeds)?.into_iter().map(Arc::new).collect(),
            (None, None) => {
                return Err(Error::invalid(
                    "a micro-batch has neither the full batch's sample nor a sampler",
                ))
            }
        };
        let slice_s = if whole {
            0.0
        } else {
            t.elapsed().as_secs_f64()
        };
        let t = Instant::now();
        let features = features
            .map(|f| f.gather(data.feat_dim, &blocks[0].src_nodes))
            .transpose()?;
        let labels = seeds.iter().map(|&s| data.labels[s as usize]).collect();
        Ok(Prepared {
            seeds,
            blocks,
            features,
            labels,
            slice_s,
            gather_s: t.elapsed().as_secs_f64(),
            wait_s: 0.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::local::Local;
    use super::*;
    use crate::graph::HostRows;
    use crate::graph::{self, LoadOptions};
    use crate::nn::Module;
    use crate::train::config::{BatchSize, MicroConfig, TrainConfig};
    use crate::train::micro::run_batch;

    /// Hands over the local source's micro-batches prepared, as a sampler rank's feed
    /// does, with the K they were cut into as made elsewhere.
    struct Relay(Local);

    impl MicroSource for Relay {
        fn next_batch(
            &mut self,
            tr: &mut State<'_>,
            epoch: usize,
            b: usize,
            seeds: &[u32],
            pass: Pass,
        ) -> Result<SourcedBatch> {
            let mut batch = self.0.next_batch(tr, epoch, b, seeds, pass)?;
            let micro = std::mem::replace(&mut batch.micro, MicroBatches::Prepared(Vec::new()));
            let MicroBatches::Seeds { prep, parts, whole } = micro else {
                return Err(Error::invalid(
                    "the local source handed over prepared batches",
                ));
            };
            let prepared = parts
                .into_iter()
                .map(|p| prep.prepare(tr.data, tr.host_features(), p, whole))
                .collect::<Result<Vec<_>>>()?;
            batch.micro = MicroBatches::Prepared(prepared);
            batch.made = Some(batch.stats.k);
            Ok(batch)
        }

        fn release(self: Box<Self>, _: &State<'_>) -> Result<()> {
            Ok(())
        }
    }

    /// Each batch's loss sum over two epochs of batches from `source`, and the parameters
    /// after them.
    fn train(
        data: &Dataset,
        graph: Arc<Csr>,
        source: &mut dyn MicroSource,
    ) -> (Vec<f64>, Vec<Vec<f32>>) {
        let config = TrainConfig {
            fanouts: vec![5, 5],
            batch_size: BatchSize::Seeds(40),
            epochs: 2,
            seed: 11,
            eval_every: 0,
            micro: MicroConfig {
                micro_batches: 3,
                ..MicroConfig::default()
            },
            ..Default::default()
        };
        let mut tr = State::new(data, graph, config).unwrap();
        let mut losses = Vec::new();
        for epoch in 0..2 {
            for (b, seeds) in tr.batches(epoch).iter().enumerate() {
                let batch = run_batch(&mut tr, source, epoch, b, seeds, Pass::Train).unwrap();
                assert_eq!(batch.stats.k, 3.min(seeds.len()));
                losses.push(batch.loss_sum);
            }
        }
        let params = tr.model.parameters();
        (
            losses,
            params.iter().map(|p| p.to_vec_f32().unwrap()).collect(),
        )
    }

    /// Micro-batches prepared several at a time (as on a GPU) arrive in their order and
    /// equal those prepared one at a time: seeds, blocks, gathered rows and labels.
    #[test]
    fn micro_batches_prepared_several_at_once_arrive_in_order_and_equal_one_at_a_time() {
        let data = graph::load(
            "synthetic:products-like,scale=0.0005,seed=3",
            &LoadOptions::default(),
        )
        .unwrap();
        let g = Arc::new(data.graph.symmetrize());
        let config = TrainConfig {
            fanouts: vec![5, 5],
            seed: 11,
            micro: MicroConfig {
                micro_batches: 7,
                ..MicroConfig::default()
            },
            ..Default::default()
        };
        let mut tr = State::new(&data, g, config).unwrap();
        let seeds = tr.batches(0)[0].clone();
        type Seen = (Vec<u32>, Vec<Vec<u32>>, Vec<f32>, Vec<u32>);
        let mut run = |ahead: usize| -> Vec<Seen> {
            let batch = Local
                .next_batch(&mut tr, 0, 0, &seeds, Pass::Train)
                .unwrap();
            let mut seen = Vec::new();
            batch
                .micro
                .for_each(tr.data, tr.host_features(), ahead, |p, _| {
                    let rows = match p.features {
                        Some(HostRows::F32(v)) => v,
                        _ => panic!("f32 rows gathered on the host expected"),
                    };
                    let blocks = p.blocks.iter().map(|b| b.src_nodes.to_vec()).collect();
                    seen.push((p.seeds, blocks, rows, p.labels));
                    Ok(())
                })
                .unwrap();
            seen
        };
        let one = run(1);
        assert_eq!(one.len(), 7);
        for ahead in [2, 3, 7, 9] {
            assert!(run(ahead) == one, "ahead {ahead}");
        }
    }

    #[test]
    fn micro_batches_handed_over_prepared_train_exactly_as_the_local_source() {
        let data = graph::load(
            "synthetic:products-like,scale=0.0005,seed=3",
            &LoadOptions::default(),
        )
        .unwrap();
        let g = Arc::new(data.graph.symmetrize());
        let local = train(&data, g.clone(), &mut Local);
        assert!(local.0.len() > 1, "more than one batch");
        assert_eq!(train(&data, g, &mut Relay(Local)), local);
    }
}
