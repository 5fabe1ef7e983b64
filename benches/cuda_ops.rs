//! CUDA kernel throughput on `cuda:0`, in device time from CUDA events around a batch of
//! launches (criterion's `iter_custom`), so figures are the kernels' time, including each
//! op's output allocation from the pool, as training sees them.
//!
//! Bytes/s count each value read or written once (indices included): the least traffic
//! the op needs, to compare with the device's memory bandwidth (printed at the start:
//! the theoretical peak from the memory clock and bus width). matmul is in FLOP/s
//! (criterion's "elem/s" = 2·m·n·k per product). Graph kernels run on a power-law block:
//! every in-edge of every second node of a products-like graph at scale 0.1.
//! Skipped, with the reason printed, without a CUDA device.
//!
//! `cargo bench --bench cuda_ops` (about a minute on an H100).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use cudarc::driver::sys::CUevent_flags;
use espalier::device::cuda::{context, Context};
use espalier::graph::synth::SynthSpec;
use espalier::graph::{sample_blocks, Block};
use espalier::ops;
use espalier::rng::Rng;
use espalier::{Device, Tensor};

const DEV: Device = Device::Cuda(0);
/// Feature width of the graph kernels.
const F: usize = 128;

fn cuda() -> Option<Arc<Context>> {
    match context(0) {
        Ok(ctx) => {
            println!(
                "cuda:0 = {} (sm_{}{}, {} SMs), peak memory bandwidth {:.0} GB/s",
                ctx.name,
                ctx.compute_capability.0,
                ctx.compute_capability.1,
                ctx.sm_count,
                ctx.peak_bandwidth / 1e9
            );
            Some(ctx)
        }
        Err(e) => {
            println!("skipping the CUDA benches: {e}");
            None
        }
    }
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_f32((0..n).map(|_| rng.normal() as f32).collect(), shape, DEV).unwrap()
}

/// Device seconds of `iters` runs of `f`, from events recorded on the device's stream.
fn timed(ctx: &Context, iters: u64, f: &dyn Fn() -> Tensor) -> Duration {
    // Warm: module compile and pool buffers stay out of the figure.
    drop(f());
    ctx.sync().unwrap();
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = ctx.stream.record_event(flags).unwrap();
    for _ in 0..iters {
        drop(black_box(f()));
    }
    let end = ctx.stream.record_event(flags).unwrap();
    end.synchronize().unwrap();
    Duration::from_secs_f64(start.elapsed_ms(&end).unwrap() as f64 / 1e3)
}

fn dense(c: &mut Criterion) {
    let Some(ctx) = cuda() else { return };
    let mut g = c.benchmark_group("cuda_dense");
    let n = 1 << 26;
    let (a, b) = (randn(&[n], 1), randn(&[n], 2));
    g.throughput(Throughput::Bytes((3 * n * 4) as u64));
    g.bench_function(BenchmarkId::new("add", n), |bench| {
        bench.iter_custom(|it| timed(&ctx, it, &|| ops::add(&a, &b).unwrap()))
    });
    g.throughput(Throughput::Bytes((2 * n * 4) as u64));
    g.bench_function(BenchmarkId::new("relu", n), |bench| {
        bench.iter_custom(|it| timed(&ctx, it, &|| ops::relu(&a).unwrap()))
    });
    let h: Vec<half::f16> = (0..n)
        .map(|i| half::f16::from_f32(i as f32 * 1e-4))
        .collect();
    let h = Tensor::from_f16(h, &[n], DEV).unwrap();
    g.throughput(Throughput::Bytes((n * 2 + n * 4) as u64));
    g.bench_function(BenchmarkId::new("widen_f16", n), |bench| {
        bench.iter_custom(|it| timed(&ctx, it, &|| ops::widen(&h).unwrap()))
    });
    let (rows, cols) = (1 << 16, 1 << 10);
    let x = randn(&[rows, cols], 3);
    g.throughput(Throughput::Bytes((rows * cols * 4 + cols * 4) as u64));
    g.bench_function(
        BenchmarkId::new("sum_dim0", format!("{rows}x{cols}")),
        |bench| bench.iter_custom(|it| timed(&ctx, it, &|| ops::sum_dim(&x, 0).unwrap())),
    );
    g.throughput(Throughput::Bytes((rows * cols * 4 + rows * 4) as u64));
    g.bench_function(
        BenchmarkId::new("sum_dim1", format!("{rows}x{cols}")),
        |bench| bench.iter_custom(|it| timed(&ctx, it, &|| ops::sum_dim(&x, 1).unwrap())),
    );
    let logits = randn(&[1 << 20, 48], 4);
    g.throughput(Throughput::Bytes((2 * (1 << 20) * 48 * 4) as u64));
    g.bench_function(BenchmarkId::new("log_softmax", "1048576x48"), |bench| {
        bench.iter_custom(|it| timed(&ctx, it, &|| ops::log_softmax(&logits).unwrap()))
    });
    for (m, k, nn) in [(4096, 4096, 4096), (1 << 17, 256, 256)] {
        let (x, w) = (randn(&[m, k], 5), randn(&[k, nn], 6));
        g.throughput(Throughput::Elements((2 * m * k * nn) as u64));
        for kernel in [false, true] {
            ctx.force_gemm_kernel(kernel);
            let name = if kernel {
                "matmul_kernel"
            } else {
                "matmul_cublas"
            };
            g.bench_function(BenchmarkId::new(name, format!("{m}x{k}x{nn}")), |bench| {
                bench.iter_custom(|it| {
                    timed(&ctx, it, &|| ops::matmul(&x, &w, false, false).unwrap())
                })
            });
        }
        ctx.force_gemm_kernel(false);
    }
    g.finish();
}

/// Every in-edge of every second node of a products-like graph (scale 0.1).
fn power_law_block() -> Arc<Block> {
    let data = SynthSpec::parse("products-like,scale=0.1")
        .unwrap()
        .generate()
        .unwrap();
    let seeds: Vec<u32> = (0..data.graph.num_nodes as u32).step_by(2).collect();
    let b = sample_blocks(&data.graph, &seeds, &[-1], 3)
        .unwrap()
        .remove(0);
    let max_in = (0..b.num_dst).map(|d| b.degree(d)).max().unwrap_or(0);
    println!(
        "block: {} src, {} dst, {} edges, max in-degree {max_in}, f = {F}",
        b.num_src,
        b.num_dst,
        b.num_edges()
    );
    Arc::new(b)
}

fn graph(c: &mut Criterion) {
    let Some(ctx) = cuda() else { return };
    let b = power_law_block();
    let (e, n_src, n_dst) = (b.num_edges(), b.num_src, b.num_dst);
    let x = randn(&[n_src, F], 7);
    let mut rng = Rng::new(9);
    let m = e;
    let idx = Tensor::from_u32(
        (0..m).map(|_| rng.below(n_src as u64) as u32).collect(),
        &[m],
        DEV,
    )
    .unwrap();
    // Warm the block's upload.
    drop(ops::segment_sum(&x, &b).unwrap());

    let mut g = c.benchmark_group("cuda_graph");
    let size = format!("E={e},f={F}");
    // Gathered rows read, output rows written, indptr and indices read.
    let seg = (e * F * 4 + n_dst * F * 4 + (n_dst + 1) * 4 + e * 4) as u64;
    g.throughput(Throughput::Bytes(seg));
    g.bench_function(BenchmarkId::new("segment_sum", &size), |bench| {
        bench.iter_custom(|it| timed(&ctx, it, &|| ops::segment_sum(&x, &b).unwrap()))
    });
    g.bench_function(BenchmarkId::new("segment_mean", &size), |bench| {
        bench.iter_custom(|it| timed(&ctx, it, &|| ops::segment_mean(&x, &b).unwrap()))
    });
    // Plus the argmax written.
    g.throughput(Throughput::Bytes(seg + (n_dst * F * 4) as u64));
    g.bench_function(BenchmarkId::new("segment_max", &size), |bench| {
        bench.iter_custom(|it| timed(&ctx, it, &|| ops::segment_max(&x, &b).unwrap()))
    });
    // Rows read and written, indices read.
    g.throughput(Throughput::Bytes((2 * m * F * 4 + m * 4) as u64));
    g.bench_function(
        BenchmarkId::new("index_select", format!("m={m},f={F}")),
        |bench| bench.iter_custom(|it| timed(&ctx, it, &|| ops::index_select(&x, &idx).unwrap())),
    );
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = dense, graph
}
criterion_main!(benches);
