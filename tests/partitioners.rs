//! The micro-batch partitioners' contract (disjoint, covering, exactly K non-empty lists,
//! deterministic, typed errors), Betty's REG against a brute-force AᵀA, GREM on a planted
//! partition, and redundancy of METIS-with-weights against random.

use std::collections::BTreeSet;
use std::sync::Arc;

use espalier::graph::{sample_blocks, Block, BlockSizes, Csr, Slicer};
use espalier::partition::betty::{betty, betty_memory_aware, redundancy_graph, BettyOptions};
use espalier::partition::buffalo::{buffalo, buffalo_memory_aware, buffalo_plan, BuffaloOptions};
use espalier::partition::cherry::{Cherry, CherryOptions, FlowHops, NonSeeds};
use espalier::partition::grem::{grem_partition, grem_seeds, GremOptions};
use espalier::partition::kway::{edge_cut, metis_graph_partition, metis_seeds};
use espalier::rng::Rng;
use espalier::{Error, Result};

/// An undirected Chung-Lu graph: endpoints drawn with weight `(i + 1)^(-1 / (gamma - 1))`,
/// both directions stored, so degrees follow a power law. Low ids are hubs.
fn power_law(n: usize, m: usize, seed: u64) -> Csr {
    let mut cdf = Vec::with_capacity(n);
    let mut acc = 0.0;
    for i in 0..n {
        acc += ((i + 1) as f64).powf(-1.0 / 1.1);
        cdf.push(acc);
    }
    let mut rng = Rng::new(seed);
    let mut draw = || {
        let x = rng.uniform() * acc;
        cdf.partition_point(|&c| c <= x).min(n - 1) as u32
    };
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for _ in 0..m {
        let (a, b) = (draw(), draw());
        src.push(a);
        dst.push(b);
    }
    Csr::from_edges(n, &src, &dst).unwrap().symmetrize()
}

/// Every `stride`-th node, shuffled.
fn seeds_of(n: usize, stride: usize, seed: u64) -> Vec<u32> {
    let mut s: Vec<u32> = (0..n as u32).step_by(stride).collect();
    let mut rng = Rng::new(seed);
    for i in (1..s.len()).rev() {
        s.swap(i, rng.below(i as u64 + 1) as usize);
    }
    s
}

struct Batch {
    graph: Csr,
    seeds: Vec<u32>,
    blocks: Vec<Arc<Block>>,
}

fn batch(n: usize, m: usize, stride: usize) -> Batch {
    let graph = power_law(n, m, 3);
    let seeds = seeds_of(n, stride, 4);
    let blocks = sample_blocks(&graph, &seeds, &[5, 10], 5)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    Batch {
        graph,
        seeds,
        blocks,
    }
}

/// Bytes ~ input nodes x 16 features + edges.
fn estimator(blocks: &[Arc<Block>]) -> impl Fn(&[u32]) -> u64 {
    let slicer = Slicer::new(blocks).unwrap();
    move |s: &[u32]| size_bytes(&slicer.sizes(s).unwrap())
}

/// Input nodes of the micro-batch of `seeds` (src nodes of its input block).
fn input_nodes(blocks: &[Arc<Block>], seeds: &[u32]) -> Result<usize> {
    Ok(Slicer::new(blocks)?.sizes(seeds)?[0].num_src)
}

/// `Σ_k input nodes_k / input nodes of the full batch`.
fn redundancy(blocks: &[Arc<Block>], parts: &[Vec<u32>]) -> Result<f64> {
    let slicer = Slicer::new(blocks)?;
    let mut total = 0;
    for p in parts {
        total += slicer.sizes(p)?[0].num_src;
    }
    Ok(total as f64 / slicer.full_sizes()[0].num_src as f64)
}

/// [`estimator`]'s bytes, from block sizes.
fn size_bytes(sizes: &[BlockSizes]) -> u64 {
    64 * sizes[0].num_src as u64 + 8 * sizes.iter().map(|s| s.num_edges as u64).sum::<u64>()
}

type Partitioner<'a> = Box<dyn Fn(&Batch, usize, u64) -> Result<Vec<Vec<u32>>> + Send + Sync + 'a>;

fn partitioners<'a>() -> Vec<(&'static str, Partitioner<'a>)> {
    let cherry = |hops, non_seeds| -> Partitioner<'a> {
        Box::new(move |b: &Batch, k, seed| {
            let c = Cherry::new(
                b.blocks.len(),
                CherryOptions {
                    hops,
                    non_seeds,
                    ..CherryOptions::default()
                },
            )?;
            c.partition(&b.seeds, &b.blocks, &b.graph, k, seed)
        })
    };
    vec![
        (
            "metis",
            Box::new(|b: &Batch, k, seed| metis_seeds(&b.seeds, &b.blocks, &b.graph, k, seed)),
        ),
        (
            "betty",
            Box::new(|b: &Batch, k, seed| {
                betty(
                    &b.seeds,
                    &b.blocks,
                    &b.graph,
                    k,
                    seed,
                    &BettyOptions::default(),
                )
            }),
        ),
        (
            "betty-exact",
            Box::new(|b: &Batch, k, seed| {
                betty(
                    &b.seeds,
                    &b.blocks,
                    &b.graph,
                    k,
                    seed,
                    &BettyOptions::exact(),
                )
            }),
        ),
        ("cherry-keep", cherry(FlowHops::One, NonSeeds::Keep)),
        ("cherry-remove", cherry(FlowHops::One, NonSeeds::Remove)),
        ("cherry-layers", cherry(FlowHops::Layers, NonSeeds::Keep)),
        ("cherry-auto", cherry(FlowHops::Auto, NonSeeds::Keep)),
        (
            "buffalo",
            Box::new(|b: &Batch, k, seed| {
                let slicer = Slicer::new(&b.blocks)?;
                buffalo(
                    &b.seeds,
                    &slicer,
                    k,
                    seed,
                    &size_bytes,
                    &BuffaloOptions::default(),
                )
            }),
        ),
        (
            "grem",
            Box::new(|b: &Batch, k, seed| {
                grem_seeds(
                    &b.seeds,
                    &b.blocks,
                    &b.graph,
                    k,
                    seed,
                    &GremOptions::default(),
                )
            }),
        ),
    ]
}

fn assert_partition(name: &str, seeds: &[u32], parts: &[Vec<u32>], k: usize) {
    assert_eq!(parts.len(), k, "{name}: K = {k}");
    assert!(
        parts.iter().all(|p| !p.is_empty()),
        "{name}: empty part, K = {k}"
    );
    let mut all: Vec<u32> = parts.iter().flatten().copied().collect();
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "{name}: a seed in two parts");
    let want: BTreeSet<u32> = seeds.iter().copied().collect();
    assert_eq!(all, want.into_iter().collect::<Vec<_>>(), "{name}: cover");
}

#[test]
fn every_partitioner_makes_k_disjoint_covering_parts() {
    let b = batch(2000, 12000, 5);
    for (name, p) in partitioners() {
        for k in [1usize, 2, 4, 7, 8] {
            let parts = p(&b, k, 11).unwrap();
            assert_partition(name, &b.seeds, &parts, k);
        }
    }
}

#[test]
fn k_equal_to_the_seed_count_gives_singletons() {
    let b = batch(300, 1500, 30);
    let k = b.seeds.len();
    for (name, p) in partitioners() {
        let parts = p(&b, k, 1).unwrap();
        assert_partition(name, &b.seeds, &parts, k);
    }
}

#[test]
fn partitions_are_deterministic_for_any_thread_count() {
    let b = batch(2000, 12000, 5);
    let pool = |t| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build()
            .unwrap()
    };
    let (one, two) = (pool(1), pool(2));
    for (name, p) in partitioners() {
        let a = one.install(|| p(&b, 4, 9).unwrap());
        let c = two.install(|| p(&b, 4, 9).unwrap());
        let again = two.install(|| p(&b, 4, 9).unwrap());
        assert_eq!(a, c, "{name}: 1 vs 2 threads");
        assert_eq!(c, again, "{name}: repeat");
    }
    let reg = |t: &rayon::ThreadPool| {
        t.install(|| redundancy_graph(&b.blocks, 9, &BettyOptions::default()).unwrap())
    };
    assert_eq!(reg(&one), reg(&two));
}

#[test]
fn bad_k_is_an_error() {
    let b = batch(300, 1500, 10);
    for (name, p) in partitioners() {
        for k in [0, b.seeds.len() + 1] {
            match p(&b, k, 0) {
                Err(Error::InvalidArgument(_)) => {}
                other => panic!("{name}: K = {k} gave {other:?}"),
            }
        }
    }
    assert!(grem_partition(&b.graph, 0, &GremOptions::default()).is_err());
    assert!(metis_graph_partition(&b.graph, b.graph.num_nodes + 1, 0).is_err());
    // Seeds that are not the output block's dst nodes.
    let mut wrong = b.seeds.clone();
    wrong.swap(0, 1);
    assert!(betty(&wrong, &b.blocks, &b.graph, 2, 0, &BettyOptions::default()).is_err());
}

#[test]
fn reg_weights_equal_brute_force_ata() {
    let b = batch(200, 800, 7);
    let out = b.blocks.last().unwrap();
    for self_inputs in [false, true] {
        let opts = BettyOptions {
            self_inputs,
            ..BettyOptions::exact()
        };
        let reg = redundancy_graph(&b.blocks, 0, &opts).unwrap();
        // A[s][d] = 1 when s feeds d (or s == d with self inputs).
        let n = out.num_dst;
        let mut a = vec![vec![0u32; n]; out.num_src];
        for (d, &s) in (0..n).flat_map(|d| out.neighbors(d).iter().map(move |s| (d, s))) {
            a[s as usize][d] = 1;
        }
        if self_inputs {
            (0..n).for_each(|d| a[d][d] = 1);
        }
        let w = reg.adjwgt.as_ref().unwrap();
        for x in 0..n {
            let mut want = Vec::new();
            for y in 0..n {
                let ata: u32 = (0..out.num_src).map(|s| a[s][x] * a[s][y]).sum();
                if x != y && ata > 0 {
                    want.push((y as i32, ata as i32));
                }
            }
            let (lo, hi) = (reg.xadj[x] as usize, reg.xadj[x + 1] as usize);
            let got: Vec<(i32, i32)> = (lo..hi).map(|e| (reg.adjncy[e], w[e])).collect();
            assert_eq!(got, want, "row {x}, self_inputs {self_inputs}");
        }
    }
}

#[test]
fn hub_bound_keeps_the_reg_symmetric_and_small() {
    let b = batch(2000, 20000, 3);
    let opts = BettyOptions {
        hub_degree: 4,
        hub_ring: 1,
        ..BettyOptions::default()
    };
    let bounded = redundancy_graph(&b.blocks, 2, &opts).unwrap();
    let exact = redundancy_graph(&b.blocks, 2, &BettyOptions::exact()).unwrap();
    assert!(bounded.num_entries() < exact.num_entries());
    let w = bounded.adjwgt.as_ref().unwrap();
    let weight = |x: usize, y: i32| {
        (bounded.xadj[x] as usize..bounded.xadj[x + 1] as usize)
            .find(|&e| bounded.adjncy[e] == y)
            .map(|e| w[e])
    };
    for x in 0..bounded.num_nodes() {
        let (lo, hi) = (bounded.xadj[x] as usize, bounded.xadj[x + 1] as usize);
        for (&y, &wy) in bounded.adjncy[lo..hi].iter().zip(&w[lo..hi]) {
            assert_eq!(weight(y as usize, x as i32), Some(wy), "{x} - {y}");
        }
    }
}

#[test]
fn weighted_metis_beats_random_on_redundancy() {
    let b = batch(3000, 24000, 4);
    let k = 8;
    let reg = betty(
        &b.seeds,
        &b.blocks,
        &b.graph,
        k,
        0,
        &BettyOptions::default(),
    )
    .unwrap();
    let mut rng = Rng::new(1);
    let mut shuffled = b.seeds.clone();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let n = shuffled.len();
    let random: Vec<Vec<u32>> = (0..k)
        .map(|j| shuffled[j * n / k..(j + 1) * n / k].to_vec())
        .collect();
    let (r_betty, r_random) = (
        redundancy(&b.blocks, &reg).unwrap(),
        redundancy(&b.blocks, &random).unwrap(),
    );
    eprintln!("redundancy: betty {r_betty:.3}, random {r_random:.3}");
    assert!(
        r_betty < 0.9 * r_random,
        "betty {r_betty:.3} vs random {r_random:.3}"
    );
    let one = redundancy(&b.blocks, std::slice::from_ref(&b.seeds)).unwrap();
    assert!((one - 1.0).abs() < 1e-12);
}

#[test]
fn input_nodes_match_a_set_walk() {
    let b = batch(500, 3000, 5);
    let part: Vec<u32> = b.seeds.iter().copied().step_by(3).collect();
    // Brute force over global ids: each layer adds the sampled sources of its dst set.
    let mut set: BTreeSet<u32> = part.iter().copied().collect();
    for block in b.blocks.iter().rev() {
        let mut next = set.clone();
        for d in 0..block.num_dst {
            if set.contains(&block.src_nodes[d]) {
                for &s in block.neighbors(d) {
                    next.insert(block.src_nodes[s as usize]);
                }
            }
        }
        set = next;
    }
    assert_eq!(input_nodes(&b.blocks, &part).unwrap(), set.len());
    assert_eq!(
        input_nodes(&b.blocks, &b.seeds).unwrap(),
        b.blocks[0].num_src
    );
}

#[test]
fn memory_aware_loops_fit_the_budget() {
    let b = batch(2000, 12000, 5);
    let est = estimator(&b.blocks);
    let whole = est(&b.seeds);
    let budget = whole / 3;
    let plan = betty_memory_aware(
        &b.seeds,
        &b.blocks,
        &b.graph,
        0,
        budget,
        &est,
        &BettyOptions::default(),
    )
    .unwrap();
    assert!(plan.parts.len() >= 3);
    assert!(plan.peak_bytes.iter().all(|&x| x <= budget));
    assert_partition("betty-memory", &b.seeds, &plan.parts, plan.parts.len());
    let slicer = Slicer::new(&b.blocks).unwrap();
    let plan = buffalo_memory_aware(
        &b.seeds,
        &slicer,
        0,
        budget,
        &size_bytes,
        &BuffaloOptions::default(),
    )
    .unwrap();
    assert!(plan.peak_bytes.iter().all(|&x| x <= budget));
    assert_partition("buffalo-memory", &b.seeds, &plan.parts, plan.parts.len());
    assert!(betty_memory_aware(
        &b.seeds,
        &b.blocks,
        &b.graph,
        0,
        1,
        &est,
        &BettyOptions::default()
    )
    .is_err());
}

#[test]
fn cherry_cuts_once_and_reuses_the_cut() {
    let b = batch(2000, 12000, 5);
    let c = Cherry::new(2, CherryOptions::default()).unwrap();
    assert!(c.seed_lists().is_none());
    let first = c.partition(&b.seeds, &b.blocks, &b.graph, 4, 1).unwrap();
    // Another epoch: a new sample and a new seed order, same seed set.
    let mut reordered = b.seeds.clone();
    reordered.reverse();
    let blocks: Vec<Arc<Block>> = sample_blocks(&b.graph, &reordered, &[5, 10], 99)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    let second = c.partition(&reordered, &blocks, &b.graph, 4, 2).unwrap();
    assert_eq!(c.cuts(), 1);
    let as_sets = |p: &[Vec<u32>]| {
        let mut s: Vec<BTreeSet<u32>> = p.iter().map(|x| x.iter().copied().collect()).collect();
        s.sort();
        s
    };
    assert_eq!(as_sets(&first), as_sets(&second));
    assert_eq!(as_sets(&c.seed_lists().unwrap()), as_sets(&first));
    c.partition(&b.seeds[1..], &b.blocks, &b.graph, 4, 1)
        .unwrap();
    assert_eq!(c.cuts(), 2);
}

/// Two dense communities of 60 nodes (ids interleaved at random) joined by 3 edges.
fn planted() -> (Csr, Vec<u32>) {
    let n = 120;
    let mut rng = Rng::new(8);
    let mut ids: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let community = |i: usize| (i >= n / 2) as u32;
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for i in 0..n {
        for j in i + 1..n {
            if community(i) == community(j) && rng.uniform() < 0.3 {
                src.push(ids[i]);
                dst.push(ids[j]);
            }
        }
    }
    for (i, j) in [(0, 60), (10, 70), (20, 80)] {
        src.push(ids[i]);
        dst.push(ids[j]);
    }
    let g = Csr::from_edges(n, &src, &dst).unwrap().symmetrize();
    let mut truth = vec![0u32; n];
    for (i, &v) in ids.iter().enumerate() {
        truth[v as usize] = community(i);
    }
    (g, truth)
}

#[test]
fn grem_finds_the_planted_cut() {
    let (g, truth) = planted();
    assert_eq!(edge_cut(&g, &truth).unwrap(), 3);
    for seed in 0..3 {
        let opts = GremOptions {
            seed,
            ..GremOptions::default()
        };
        let labels = grem_partition(&g, 2, &opts).unwrap();
        assert_eq!(edge_cut(&g, &labels).unwrap(), 3, "seed {seed}: {labels:?}");
    }
    let labels = metis_graph_partition(&g, 2, 0).unwrap();
    assert_eq!(edge_cut(&g, &labels).unwrap(), 3);
}

#[test]
fn grem_is_within_a_quarter_of_metis_on_a_power_law_graph() {
    let g = power_law(3000, 20000, 6);
    let grem = grem_partition(&g, 8, &GremOptions::default()).unwrap();
    let metis = metis_graph_partition(&g, 8, 0).unwrap();
    let (a, b) = (edge_cut(&g, &grem).unwrap(), edge_cut(&g, &metis).unwrap());
    let mut rng = Rng::new(0);
    let random: Vec<u32> = (0..g.num_nodes).map(|_| rng.below(8) as u32).collect();
    let r = edge_cut(&g, &random).unwrap();
    eprintln!("edge cut: grem {a}, metis {b}, random {r}");
    assert!(a < r && b < r, "grem {a}, metis {b}, random {r}");
    assert!(a as f64 <= 1.25 * b as f64, "grem {a} vs metis {b}");
    for labels in [&grem, &metis] {
        let mut sizes = [0usize; 8];
        for &l in labels.iter() {
            sizes[l as usize] += 1;
        }
        assert!(
            sizes.iter().all(|&s| s > 0 && s <= 3000 / 8 * 11 / 10),
            "{sizes:?}"
        );
    }
}

/// A ring of `n` nodes with `extra` random chords: most nodes have two neighbours.
fn low_degree(n: usize, extra: usize, seed: u64) -> Csr {
    let mut rng = Rng::new(seed);
    let (mut src, mut dst): (Vec<u32>, Vec<u32>) =
        (0..n as u32).map(|v| (v, (v + 1) % n as u32)).unzip();
    for _ in 0..extra {
        src.push(rng.below(n as u64) as u32);
        dst.push(rng.below(n as u64) as u32);
    }
    Csr::from_edges(n, &src, &dst).unwrap().symmetrize()
}

#[test]
fn buffalo_balances_a_low_degree_batch_and_its_model_tracks_the_estimate() {
    let graph = low_degree(6000, 1500, 2);
    let seeds = seeds_of(6000, 3, 4);
    let blocks: Vec<Arc<Block>> = sample_blocks(&graph, &seeds, &[5, 10], 5)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    let slicer = Slicer::new(&blocks).unwrap();
    for locality in [true, false] {
        let opts = BuffaloOptions {
            locality,
            ..BuffaloOptions::default()
        };
        let plan = buffalo_plan(&seeds, &slicer, 8, 1, &size_bytes, &opts).unwrap();
        assert_partition("buffalo", &seeds, &plan.parts, 8);
        let max = *plan.bytes.iter().max().unwrap() as f64;
        let mean = plan.bytes.iter().sum::<u64>() as f64 / 8.0;
        eprintln!(
            "locality {locality}: max/mean {:.3}, model error {:.3}, {} moves",
            max / mean,
            plan.model_error,
            plan.moves
        );
        assert!(max / mean <= 1.10, "locality {locality}: {:?}", plan.bytes);
        assert!(plan.model_error < 0.10, "{}", plan.model_error);
    }
}

#[test]
fn betty_with_memory_weights_keeps_peaks_within_a_quarter() {
    let low = low_degree(6000, 1500, 2);
    let cases = [(batch(3000, 24000, 4).graph, 4usize), (low, 3)];
    for (graph, stride) in cases {
        let seeds = seeds_of(graph.num_nodes, stride, 4);
        let blocks: Vec<Arc<Block>> = sample_blocks(&graph, &seeds, &[5, 10], 5)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let est = estimator(&blocks);
        let spread = |memory_weights| {
            let opts = BettyOptions {
                memory_weights,
                ..BettyOptions::default()
            };
            let parts = betty(&seeds, &blocks, &graph, 8, 0, &opts).unwrap();
            let peaks: Vec<u64> = parts.iter().map(|p| est(p)).collect();
            *peaks.iter().max().unwrap() as f64 / *peaks.iter().min().unwrap() as f64
        };
        let (weighted, unit) = (spread(true), spread(false));
        eprintln!("largest/smallest: memory weights {weighted:.3}, unit {unit:.3}");
        assert!(weighted <= 1.25, "{weighted}");
    }
}
