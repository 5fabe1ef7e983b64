//! Aggregator throughput: the LSTM aggregator per degree-bucket shape (criterion's
//! "elem/s" = (node, step) pairs per second, F = 64), and GAT attention aggregation
//! (segment softmax + weighted segment sum, 4 heads of 32) on a sampled power-law block
//! ("elem/s" = edge·head·feature multiply-adds per second). CPU always; wgpu:0 when an
//! adapter is present (skipped with the reason otherwise, and for the LSTM until matmul
//! has a wgpu kernel).
//!
//! `cargo bench --bench aggregators -- --warm-up-time 1 --measurement-time 2` for a quick run.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use espalier::graph::{sample_blocks, synth::SynthSpec, Block, Buckets};
use espalier::rng::Rng;
use espalier::{ops, Device, Tensor};

const F: usize = 64;

fn randn(shape: &[usize], seed: u64, dev: Device) -> Tensor {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_f32(
        (0..n).map(|_| (rng.normal() * 0.5) as f32).collect(),
        shape,
        dev,
    )
    .unwrap()
}

/// The devices to run on: the CPU, and wgpu:0 when it is present.
fn devices() -> Vec<Device> {
    let mut v = vec![Device::Cpu];
    match Device::Wgpu(0).memory() {
        Ok(_) => v.push(Device::Wgpu(0)),
        Err(e) => println!("skipping wgpu benches: {e}"),
    }
    v
}

/// Waits for queued GPU work (a no-op on the CPU).
fn sync(dev: Device) {
    if let Device::Wgpu(i) = dev {
        espalier::device::wgpu::context(i).unwrap().sync().unwrap();
    }
}

/// One bucket: `m` dst nodes of in-degree `k` over `4m` random sources.
fn bucket_block(m: usize, k: usize) -> Arc<Block> {
    let mut rng = Rng::new(3);
    let ns = 4 * m;
    let indptr = (0..=m).map(|d| (d * k) as u32).collect();
    let indices = (0..m * k).map(|_| rng.below(ns as u64) as u32).collect();
    Arc::new(Block::new(ns, indptr, indices, (0..ns as u32).collect()).unwrap())
}

fn lstm_buckets(c: &mut Criterion) {
    for dev in devices() {
        let mut g = c.benchmark_group(format!("{}/lstm_bucket", dev.backend()));
        for (m, k) in [(4096, 1), (2048, 4), (512, 10), (256, 25)] {
            let b = bucket_block(m, k);
            let plan = Arc::new(ops::LstmPlan::new(&b, &Buckets::new(&b, Some(k))).unwrap());
            let xw = randn(&[b.num_src, 4 * F], 1, dev);
            let idx = Tensor::from_u32(plan.src.clone(), &[plan.rows()], dev).unwrap();
            let w = randn(&[F, 4 * F], 2, dev);
            if let Err(e) = ops::lstm_aggregate(&xw, &idx, &w, &plan) {
                println!("skipping {dev} lstm_bucket m={m} k={k}: {e}");
                continue;
            }
            g.throughput(Throughput::Elements((m * k) as u64));
            let id = format!("m={m},k={k},F={F}");
            g.bench_function(BenchmarkId::new("forward", &id), |bench| {
                bench.iter(|| {
                    let y = ops::lstm_aggregate(black_box(&xw), &idx, &w, &plan).unwrap();
                    sync(dev);
                    y
                })
            });
            if dev == Device::Cpu {
                let (xl, wl) = (xw.requires_grad_leaf(), w.requires_grad_leaf());
                g.bench_function(BenchmarkId::new("forward+backward", &id), |bench| {
                    bench.iter(|| {
                        let y = ops::lstm_aggregate(&xl, &idx, &wl, &plan).unwrap();
                        ops::sum_all(&y).unwrap().backward().unwrap();
                        xl.zero_grad();
                        wl.zero_grad();
                    })
                });
            }
        }
        g.finish();
    }
}

fn gat(c: &mut Criterion) {
    // A sampled power-law block: 4,000 seeds of the arxiv-like graph at 1/10 scale,
    // fanout 25, self-loops added as a GAT layer does.
    let data = SynthSpec::parse("arxiv-like,scale=0.1")
        .unwrap()
        .generate()
        .unwrap();
    let seeds: Vec<u32> = data.split.train.iter().copied().take(4000).collect();
    let block = sample_blocks(&data.graph.symmetrize(), &seeds, &[25], 1)
        .unwrap()
        .remove(0);
    let b = Arc::new(block.with_self_loops().unwrap());
    let (heads, d) = (4, 32);
    let (e, ns, nd) = (b.num_edges(), b.num_src, b.num_dst);
    for dev in devices() {
        let mut g = c.benchmark_group(format!("{}/gat_aggregation", dev.backend()));
        let s = randn(&[e, heads], 4, dev);
        let z = randn(&[ns, heads * d], 5, dev);
        let go = randn(&[nd, heads * d], 6, dev);
        g.throughput(Throughput::Elements((e * heads * d) as u64));
        let id = format!("E={e},H={heads},D={d}");
        g.bench_function(BenchmarkId::new("forward", &id), |bench| {
            bench.iter(|| {
                let a = ops::segment_softmax(black_box(&s), &b).unwrap();
                let y = ops::segment_weighted_sum(&z, &a, &b).unwrap();
                sync(dev);
                y
            })
        });
        let a = ops::segment_softmax(&s, &b).unwrap();
        g.bench_function(BenchmarkId::new("backward_kernels", &id), |bench| {
            bench.iter(|| {
                let (dz, da) =
                    ops::segment_weighted_sum_backward(&z, &a, black_box(&go), &b, true, true)
                        .unwrap();
                let ds = ops::segment_softmax_backward(&a, da.as_ref().unwrap(), &b).unwrap();
                sync(dev);
                (dz, ds)
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    // Small samples: every benchmark stays within a few seconds on a 2-core machine.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = lstm_buckets, gat
}
criterion_main!(benches);
