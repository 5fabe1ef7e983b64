//! CPU kernel throughput: matmul in FLOP/s (criterion's "elem/s" = FLOP/s here), and the
//! memory-bound ops in bytes/s, counting each value read or written once (indices included).
//!
//! `cargo bench --bench cpu_ops -- --warm-up-time 1 --measurement-time 2` for a quick run.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use espalier::graph::Block;
use espalier::ops;
use espalier::rng::Rng;
use espalier::{Device, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_f32(
        (0..n).map(|_| rng.normal() as f32).collect(),
        shape,
        Device::Cpu,
    )
    .unwrap()
}

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu/matmul_flop");
    for (m, k, n) in [(256, 256, 256), (1024, 1024, 256), (4096, 256, 256)] {
        let a = randn(&[m, k], 1);
        let b = randn(&[k, n], 2);
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{m}x{k}x{n}")),
            &(),
            |bench, _| {
                bench.iter(|| ops::matmul(black_box(&a), black_box(&b), false, false).unwrap())
            },
        );
    }
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu/elementwise");
    let (r, f) = (16_384, 64); // 1 Mi values, 4 MiB per f32 tensor
    let x = randn(&[r, f], 3);
    let y = randn(&[r, f], 4);
    let bytes = (r * f * 4) as u64;
    g.throughput(Throughput::Bytes(2 * bytes));
    g.bench_function(BenchmarkId::new("relu", format!("{r}x{f}")), |bench| {
        bench.iter(|| ops::relu(black_box(&x)).unwrap())
    });
    g.throughput(Throughput::Bytes(3 * bytes));
    g.bench_function(BenchmarkId::new("add", format!("{r}x{f}")), |bench| {
        bench.iter(|| ops::add(black_box(&x), black_box(&y)).unwrap())
    });
    g.finish();
}

/// A sampled-looking block: `num_dst` dst nodes with `fanout` random in-neighbours each
/// among `num_src` sources.
fn block(num_src: usize, num_dst: usize, fanout: usize) -> Arc<Block> {
    let mut rng = Rng::new(5);
    let indptr = (0..=num_dst).map(|d| (d * fanout) as u32).collect();
    let indices = (0..num_dst * fanout)
        .map(|_| rng.below(num_src as u64) as u32)
        .collect();
    Arc::new(Block::new(num_src, indptr, indices, (0..num_src as u32).collect()).unwrap())
}

fn graph(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu/graph");
    let (num_src, num_dst, fanout, f) = (100_000, 20_000, 10, 64);
    let b = block(num_src, num_dst, fanout);
    let x = randn(&[num_src, f], 6);
    let e = b.num_edges();
    // Gathered rows read, output rows written, indptr and indices read.
    let seg_bytes = (e * f * 4 + num_dst * f * 4 + (num_dst + 1) * 4 + e * 4) as u64;
    g.throughput(Throughput::Bytes(seg_bytes));
    g.bench_function(
        BenchmarkId::new("segment_sum", format!("E={e},f={f}")),
        |bench| bench.iter(|| ops::segment_sum(black_box(&x), &b).unwrap()),
    );
    let mut rng = Rng::new(7);
    let m = e;
    let idx = Tensor::from_u32(
        (0..m).map(|_| rng.below(num_src as u64) as u32).collect(),
        &[m],
        Device::Cpu,
    )
    .unwrap();
    g.throughput(Throughput::Bytes((2 * m * f * 4 + m * 4) as u64));
    g.bench_function(
        BenchmarkId::new("index_select", format!("m={m},f={f}")),
        |bench| bench.iter(|| ops::index_select(black_box(&x), &idx).unwrap()),
    );
    g.finish();
}

criterion_group! {
    name = benches;
    // Small samples: every benchmark stays within a few seconds on a 2-core machine.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = matmul, elementwise, graph
}
criterion_main!(benches);
