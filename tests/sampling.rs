//! Neighbour sampling and degree buckets over the graph zoo: empty edge set, zero in-degree,
//! self-loops, duplicate edges, a star, and a power-law graph.

use espalier::graph::{degree_histogram, full_blocks, sample_blocks, Block, Buckets, Csr, Sampler};
use espalier::rng::Rng;
use espalier::Error;

/// A directed Chung-Lu graph: endpoints drawn with weight `(i + 1)^(-1 / (gamma - 1))`, so
/// in- and out-degrees follow a power law with exponent about `gamma`. Low ids are hubs.
fn chung_lu(n: usize, m: usize, gamma: f64, seed: u64) -> Csr {
    let mut cdf = Vec::with_capacity(n);
    let mut acc = 0.0;
    for i in 0..n {
        acc += ((i + 1) as f64).powf(-1.0 / (gamma - 1.0));
        cdf.push(acc);
    }
    let mut rng = Rng::new(seed);
    let draw = |rng: &mut Rng| {
        let x = rng.uniform() * acc;
        cdf.partition_point(|&c| c <= x).min(n - 1) as u32
    };
    let (mut src, mut dst) = (Vec::with_capacity(m), Vec::with_capacity(m));
    for _ in 0..m {
        src.push(draw(&mut rng));
        dst.push(draw(&mut rng));
    }
    Csr::from_edges(n, &src, &dst).unwrap()
}

/// A star: node 0 has in-edges from every leaf, each leaf has one in-edge from node 0.
fn star(leaves: u32) -> Csr {
    let src: Vec<u32> = (1..=leaves)
        .chain(std::iter::repeat_n(0, leaves as usize))
        .collect();
    let dst: Vec<u32> = std::iter::repeat_n(0, leaves as usize)
        .chain(1..=leaves)
        .collect();
    Csr::from_edges(leaves as usize + 1, &src, &dst).unwrap()
}

/// Every `stride`-th node, in a shuffled order (so seeds order is not id order).
fn seeds_of(n: usize, stride: usize, seed: u64) -> Vec<u32> {
    let mut s: Vec<u32> = (0..n as u32).step_by(stride).collect();
    let mut rng = Rng::new(seed);
    for i in (1..s.len()).rev() {
        s.swap(i, rng.below(i as u64 + 1) as usize);
    }
    s
}

/// Checks every structural promise of `sample_blocks` and returns nothing on success.
fn check_blocks(g: &Csr, seeds: &[u32], fanouts: &[i64], blocks: &[Block]) {
    assert_eq!(blocks.len(), fanouts.len());
    assert_eq!(blocks.last().unwrap().dst_nodes(), seeds, "seeds order");
    for (l, b) in blocks.iter().enumerate() {
        // Chain: the src nodes of layer l + 1 are the dst nodes of layer l.
        if l + 1 < blocks.len() {
            assert_eq!(
                b.dst_nodes(),
                &blocks[l + 1].src_nodes[..],
                "chain at layer {l}"
            );
        }
        // Src nodes are distinct (so the dst nodes are a true prefix).
        let mut sorted = b.src_nodes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), b.num_src, "layer {l}: repeated src node");
        let fanout = if fanouts[l] < 0 {
            usize::MAX
        } else {
            fanouts[l] as usize
        };
        let mut next_new = b.num_dst as u32;
        for d in 0..b.num_dst {
            let v = b.src_nodes[d];
            let row = g.neighbors(v);
            assert_eq!(
                b.degree(d),
                row.len().min(fanout),
                "layer {l}: degree of node {v}"
            );
            // The sampled sources are a subsequence of the CSR row (distinct positions, CSR
            // order), and new sources are numbered in order of first appearance.
            let mut pos = 0;
            for &s in b.neighbors(d) {
                let gs = b.src_nodes[s as usize];
                while pos < row.len() && row[pos] != gs {
                    pos += 1;
                }
                assert!(pos < row.len(), "layer {l}: {gs} -> {v} not in CSR order");
                pos += 1;
                assert!(
                    s <= next_new,
                    "layer {l}: src {s} numbered before first use"
                );
                if s == next_new {
                    next_new += 1;
                }
            }
        }
        assert_eq!(next_new as usize, b.num_src, "layer {l}: unused src node");
    }
}

#[test]
fn power_law_blocks_keep_every_invariant() {
    let g = chung_lu(3000, 40_000, 2.1, 1);
    let seeds = seeds_of(3000, 10, 2);
    for fanouts in [vec![10i64, 25], vec![3, 5, 2], vec![-1, 4], vec![1]] {
        let blocks = sample_blocks(&g, &seeds, &fanouts, 7).unwrap();
        check_blocks(&g, &seeds, &fanouts, &blocks);
    }
}

#[test]
fn no_duplicate_neighbours_without_duplicate_edges() {
    let g = chung_lu(2000, 60_000, 2.1, 3).dedup();
    let seeds = seeds_of(2000, 3, 4);
    let blocks = sample_blocks(&g, &seeds, &[5, 40, 8], 11).unwrap();
    check_blocks(&g, &seeds, &[5, 40, 8], &blocks);
    for b in &blocks {
        for d in 0..b.num_dst {
            let mut n = b.neighbors(d).to_vec();
            n.sort_unstable();
            n.dedup();
            assert_eq!(n.len(), b.degree(d), "duplicate neighbour of dst {d}");
        }
    }
}

#[test]
fn thread_count_does_not_change_the_result() {
    let g = chung_lu(5000, 80_000, 2.1, 5);
    let seeds = seeds_of(5000, 4, 6);
    let fanouts = [10i64, 25, 40];
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| sample_blocks(&g, &seeds, &fanouts, 123).unwrap())
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(5));
    // A different seed gives a different sample (the check above can fail).
    let other = sample_blocks(&g, &seeds, &fanouts, 124).unwrap();
    assert_ne!(one, other);
}

#[test]
fn a_node_gets_the_same_neighbours_wherever_it_sits() {
    let g = star(500);
    let (a, b) = (
        sample_blocks(&g, &[0, 3, 9], &[10], 8).unwrap(),
        sample_blocks(&g, &[9, 3, 0], &[10], 8).unwrap(),
    );
    let globals = |blk: &Block, d: usize| -> Vec<u32> {
        blk.neighbors(d)
            .iter()
            .map(|&s| blk.src_nodes[s as usize])
            .collect()
    };
    assert_eq!(globals(&a[0], 0), globals(&b[0], 2));
    assert_eq!(globals(&a[0], 0).len(), 10);
}

#[test]
fn full_blocks_are_the_in_edges() {
    // Duplicates and self-loops included: -1 must copy rows verbatim.
    let base = chung_lu(800, 6000, 2.1, 9);
    let g = Csr::from_edges(
        base.num_nodes,
        &[base.indices.to_vec(), vec![5, 5, 7]].concat(),
        &[
            (0..base.num_nodes as u32)
                .flat_map(|v| std::iter::repeat_n(v, base.neighbors(v).len()))
                .collect::<Vec<_>>(),
            vec![5, 5, 2],
        ]
        .concat(),
    )
    .unwrap();
    let seeds = seeds_of(800, 7, 10);
    let blocks = full_blocks(&g, &seeds, 3).unwrap();
    check_blocks(&g, &seeds, &[-1, -1, -1], &blocks);
    for b in &blocks {
        for d in 0..b.num_dst {
            let got: Vec<u32> = b
                .neighbors(d)
                .iter()
                .map(|&s| b.src_nodes[s as usize])
                .collect();
            assert_eq!(got, g.neighbors(b.src_nodes[d]));
        }
    }
    assert_eq!(
        blocks,
        sample_blocks(&g, &seeds, &[-1, -1, -1], 99).unwrap()
    );
    assert!(full_blocks(&g, &seeds, 0).is_err());
}

#[test]
fn empty_edge_set_gives_edgeless_blocks() {
    let g = Csr::from_edges(6, &[], &[]).unwrap();
    let blocks = sample_blocks(&g, &[4, 1], &[3, -1], 0).unwrap();
    check_blocks(&g, &[4, 1], &[3, -1], &blocks);
    for b in &blocks {
        assert_eq!(b.num_edges(), 0);
        assert_eq!(b.src_nodes, vec![4, 1]);
    }
    let none = sample_blocks(&g, &[], &[2], 0).unwrap();
    assert_eq!((none[0].num_src, none[0].num_edges()), (0, 0));
}

#[test]
fn zero_degree_self_loops_and_duplicate_edges() {
    // 0 <- {0, 1, 1, 2, 2, 2}, 1 <- {1}, 2 has no in-edge, 3 <- {0, 2}.
    let g = Csr::from_edges(
        4,
        &[0, 1, 1, 2, 2, 2, 1, 0, 2],
        &[0, 0, 0, 0, 0, 0, 1, 3, 3],
    )
    .unwrap();
    for seed in 0..50 {
        let seeds = [3, 2, 1, 0];
        let blocks = sample_blocks(&g, &seeds, &[2, 4], seed).unwrap();
        check_blocks(&g, &seeds, &[2, 4], &blocks);
        let out = &blocks[1];
        assert_eq!(out.degree(1), 0, "zero in-degree node");
        // The self-loop of node 1 points at its own dst slot.
        assert_eq!(out.neighbors(2), &[2]);
        assert_eq!(out.num_src, 4, "no new source: every source is a seed");
    }
}

#[test]
fn star_hub_is_capped_and_leaves_are_kept() {
    let g = star(20_000);
    let seeds = [0u32, 17, 19_999];
    let blocks = sample_blocks(&g, &seeds, &[5, 64], 3).unwrap();
    check_blocks(&g, &seeds, &[5, 64], &blocks);
    let out = &blocks[1];
    assert_eq!(out.degree(0), 64);
    assert_eq!((out.degree(1), out.degree(2)), (1, 1));
    // 64 hub neighbours; two of them may be seeds already.
    assert!(out.num_src >= 3 + 62 && out.num_src <= 3 + 64);
    // The input layer: every leaf keeps its only in-edge (from the hub, local id 0).
    let inp = &blocks[0];
    assert!((1..inp.num_dst).all(|d| inp.neighbors(d) == [0]));
    assert_eq!(inp.degree(0), 5);
}

/// Frequency with which each of the hub's `degree` neighbours is picked over `trials`
/// seeds; each should be near `trials * fanout / degree`.
fn hub_frequencies(degree: u32, fanout: i64, trials: u64) -> Vec<u64> {
    let g = star(degree);
    let mut sampler = Sampler::new(&g);
    let mut counts = vec![0u64; degree as usize + 1];
    for t in 0..trials {
        let b = sampler.sample(&[0], &[fanout], t).unwrap().remove(0);
        assert_eq!(b.num_edges(), fanout as usize);
        for &s in b.neighbors(0) {
            counts[b.src_nodes[s as usize] as usize] += 1;
        }
    }
    assert_eq!(counts[0], 0, "the hub has no self-loop");
    counts.remove(0);
    counts
}

fn assert_near_uniform(counts: &[u64], fanout: i64, trials: u64) {
    let p = fanout as f64 / counts.len() as f64;
    let mean = trials as f64 * p;
    let sd = (trials as f64 * p * (1.0 - p)).sqrt();
    let mut chi2 = 0.0;
    for (i, &c) in counts.iter().enumerate() {
        assert!(
            (c as f64 - mean).abs() < 5.0 * sd,
            "neighbour {i}: picked {c} times, expected {mean:.0} +- {sd:.1}"
        );
        chi2 += (c as f64 - mean).powi(2) / (sd * sd);
    }
    // chi2 has about `degree` degrees of freedom; far above means a biased sampler.
    let k = counts.len() as f64;
    assert!(
        chi2 < k + 6.0 * (2.0 * k).sqrt(),
        "chi2 {chi2:.0} for {k} cells"
    );
}

#[test]
fn small_fanouts_pick_uniformly() {
    let counts = hub_frequencies(200, 10, 4000);
    assert_near_uniform(&counts, 10, 4000);
}

#[test]
fn large_fanouts_pick_uniformly() {
    let counts = hub_frequencies(300, 100, 1500);
    assert_near_uniform(&counts, 100, 1500);
}

#[test]
fn bad_arguments_are_errors() {
    let g = star(10);
    let invalid = |r: Result<Vec<Block>, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(sample_blocks(&g, &[0], &[], 0)));
    assert!(invalid(sample_blocks(&g, &[0], &[0], 0)));
    assert!(invalid(sample_blocks(&g, &[0], &[5, -2], 0)));
    assert!(invalid(sample_blocks(&g, &[11], &[5], 0)));
    assert!(invalid(sample_blocks(&g, &[3, 4, 3], &[5], 0)));
    assert!(sample_blocks(&g, &[10], &[5], 0).is_ok());
}

#[test]
fn buckets_cover_every_dst_once() {
    let g = chung_lu(3000, 50_000, 2.1, 12);
    let seeds = seeds_of(3000, 5, 13);
    let fanouts = [6i64, 15];
    let blocks = sample_blocks(&g, &seeds, &fanouts, 14).unwrap();
    for (b, &f) in blocks.iter().zip(&fanouts) {
        let f = f as usize;
        let bs = Buckets::new(b, Some(f));
        let mut seen = vec![0u32; b.num_dst];
        for &d in &bs.zero_degree {
            assert_eq!(b.degree(d as usize), 0);
            seen[d as usize] += 1;
        }
        assert!(bs.buckets.windows(2).all(|w| w[0].degree < w[1].degree));
        for bucket in &bs.buckets {
            assert!(bucket.dst.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(bucket.explosion, bucket.degree == f);
            for &d in &bucket.dst {
                assert_eq!(b.degree(d as usize), bucket.degree);
                seen[d as usize] += 1;
            }
            let idx = bucket.src_indices(b).unwrap();
            let want: Vec<u32> = bucket
                .dst
                .iter()
                .flat_map(|&d| b.neighbors(d as usize).to_vec())
                .collect();
            assert_eq!(idx, want);
        }
        assert!(seen.iter().all(|&c| c == 1), "a dst missing or repeated");
        // Sampling caps degrees at the fanout, and the hubs fill the explosion bucket.
        let hist = degree_histogram(b);
        assert_eq!(hist.len(), f + 1);
        assert_eq!(bs.explosion().map(|x| x.dst.len()).sum::<usize>(), hist[f]);
        assert_eq!(hist.iter().sum::<usize>(), b.num_dst);

        let split = bs.split_explosion(7).unwrap();
        assert_eq!(split.num_dst(), b.num_dst);
        for bucket in &split.buckets {
            if bucket.explosion {
                assert!(bucket.dst.len() <= 7);
            }
        }
        let pieces: Vec<u32> = split.explosion().flat_map(|x| x.dst.clone()).collect();
        assert_eq!(pieces, bs.explosion().next().unwrap().dst);
        assert_eq!(split.explosion().count(), hist[f].div_ceil(7));
        assert!(bs.split(0).is_err());
    }
}
