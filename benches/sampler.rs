//! Neighbour sampling throughput: sampled edges per second for 2-layer fanouts 10,25 over
//! 10% of a seeded power-law graph (200k nodes, 4M edges), as in the PyG peer's runs.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use espalier::graph::{sample_blocks, Csr, Sampler};
use espalier::rng::Rng;

const NODES: usize = 200_000;
const EDGES: usize = 4_000_000;
const FANOUTS: [i64; 2] = [10, 25];

/// Directed Chung-Lu graph with degree exponent about 2.1 (low ids are hubs).
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
    let (mut src, mut dst) = (Vec::with_capacity(m), Vec::with_capacity(m));
    for _ in 0..m {
        src.push(draw());
        dst.push(draw());
    }
    Csr::from_edges(n, &src, &dst).expect("generated ids are in range")
}

fn bench(c: &mut Criterion) {
    let graph = power_law(NODES, EDGES, 0);
    // Every 10th node, shuffled: seeds carry no locality, like a random training split.
    let mut rng = Rng::new(1);
    let mut seeds: Vec<u32> = (0..NODES as u32).step_by(10).collect();
    for i in (1..seeds.len()).rev() {
        seeds.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let blocks = sample_blocks(&graph, &seeds, &FANOUTS, 0).expect("valid arguments");
    let edges: usize = blocks.iter().map(|b| b.num_edges()).sum();
    eprintln!(
        "sampler bench: {} seeds, blocks {} -> {} ({} edges), {} -> {} ({} edges)",
        seeds.len(),
        blocks[0].num_src,
        blocks[0].num_dst,
        blocks[0].num_edges(),
        blocks[1].num_src,
        blocks[1].num_dst,
        blocks[1].num_edges()
    );

    let mut group = c.benchmark_group("sampler/power_law_200k_4M/fanouts_10_25");
    group.sample_size(10);
    group.throughput(Throughput::Elements(edges as u64));
    group.bench_function("sample_blocks", |b| {
        b.iter(|| sample_blocks(&graph, black_box(&seeds), &FANOUTS, 0).expect("valid arguments"))
    });
    let mut sampler = Sampler::new(&graph);
    group.bench_function("sampler_reused", |b| {
        b.iter(|| {
            sampler
                .sample(black_box(&seeds), &FANOUTS, 0)
                .expect("valid arguments")
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
