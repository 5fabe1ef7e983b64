//! wgpu kernel throughput on adapter `wgpu:0`: matmul in FLOP/s (criterion's "elem/s" =
//! FLOP/s here, 2·m·n·k per product) and relu/add in bytes/s (each value read or written
//! once). Skipped with a printed reason when no adapter exists.
//!
//! Time is device time from timestamp queries when the adapter has `TIMESTAMP_QUERY`: an
//! empty compute pass writes a timestamp before the batch of ops and another after it, on
//! the same queue. Otherwise (lavapipe has no timestamps) it is wall time around the
//! submissions plus a wait for the queue. Either way it includes each op's output
//! allocation from the pool and its per-dispatch overhead, as training sees them.
//!
//! `tiny_op_overhead` is wall time per op on 64 values: the host's cost of one dispatch.
//!
//! `reductions` runs the ops whose kernels reduce across a workgroup through the prelude's
//! `wg_max64` / `wg_sum64` (log_softmax and cross_entropy over short rows, where the
//! reduction is most of the work): subgroup operations on an adapter with them, the
//! shared-memory tree with `ESPALIER_WGPU_SUBGROUPS=0`.
//!
//! `cargo bench --bench wgpu_ops -- --warm-up-time 1 --measurement-time 2` for a quick run.
//! With `ESPALIER_BENCH_LARGE=1` (for real GPUs) the sizes grow until launch overhead no
//! longer hides the kernels: 64 Mi values elementwise and a 4096³ matmul.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use espalier::device::wgpu::{context, Context};
use espalier::ops;
use espalier::rng::Rng;
use espalier::{Device, Result, Tensor};

fn randn(shape: &[usize], seed: u64, dev: Device) -> Tensor {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_f32((0..n).map(|_| rng.normal() as f32).collect(), shape, dev).unwrap()
}

/// The adapter's context, or `None` after printing why the benches are skipped.
fn adapter() -> Option<Arc<Context>> {
    match context(0) {
        Ok(ctx) => {
            let timing = if has_timestamps(&ctx) {
                "device time from timestamp queries"
            } else {
                "wall time around submit + sync (no TIMESTAMP_QUERY)"
            };
            println!(
                "wgpu:0 = {} ({:?}): {timing}",
                ctx.info.name, ctx.info.backend
            );
            Some(ctx)
        }
        Err(e) => {
            println!("skipping wgpu benches: {e}");
            None
        }
    }
}

fn has_timestamps(ctx: &Context) -> bool {
    ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY)
}

/// A compute pass with no dispatch that writes timestamp `index` of `set`.
fn stamp(ctx: &Context, set: &wgpu::QuerySet, index: u32) {
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    {
        let _pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("timestamp"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: set,
                beginning_of_pass_write_index: Some(index),
                end_of_pass_write_index: None,
            }),
        });
    }
    ctx.queue.submit([enc.finish()]);
}

/// Nanoseconds between timestamps 0 and 1 of `set`.
fn elapsed_ns(ctx: &Context, set: &wgpu::QuerySet) -> f64 {
    let size = 2 * wgpu::QUERY_SIZE as u64;
    let resolve = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("timestamps"),
        size,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("timestamps readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    enc.resolve_query_set(set, 0..2, &resolve, 0);
    enc.copy_buffer_to_buffer(&resolve, 0, &staging, 0, size);
    ctx.queue.submit([enc.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |r| r.expect("map timestamps"));
    ctx.sync().unwrap();
    let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&staging.get_mapped_range(..).unwrap());
    ticks[1].saturating_sub(ticks[0]) as f64 * ctx.queue.get_timestamp_period() as f64
}

/// Time of `iters` runs of `op`: device time when timestamps exist, else wall time.
fn time(ctx: &Context, iters: u64, op: &dyn Fn() -> Result<Tensor>) -> Duration {
    ctx.sync().unwrap();
    if has_timestamps(ctx) {
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("bench"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        stamp(ctx, &set, 0);
        for _ in 0..iters {
            black_box(op().unwrap());
        }
        // The ops are recorded: submit them before the closing timestamp.
        ctx.submit().unwrap();
        stamp(ctx, &set, 1);
        Duration::from_nanos(elapsed_ns(ctx, &set) as u64)
    } else {
        let start = Instant::now();
        for _ in 0..iters {
            black_box(op().unwrap());
        }
        ctx.sync().unwrap();
        start.elapsed()
    }
}

/// True when `ESPALIER_BENCH_LARGE` asks for GPU-sized inputs.
fn large() -> bool {
    std::env::var("ESPALIER_BENCH_LARGE").is_ok_and(|v| v == "1")
}

fn matmul(c: &mut Criterion) {
    let Some(ctx) = adapter() else { return };
    let dev = Device::Wgpu(ctx.index);
    let mut g = c.benchmark_group("wgpu/matmul_flop");
    let mut shapes = vec![(256, 256, 256), (512, 512, 512), (4096, 256, 64)];
    if large() {
        shapes = vec![(4096, 4096, 4096), (1 << 17, 256, 256)];
    }
    for (m, k, n) in shapes {
        let a = randn(&[m, k], 1, dev);
        let b = randn(&[k, n], 2, dev);
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        for (ta, tb) in [(false, false), (true, false)] {
            let a = if ta {
                randn(&[k, m], 3, dev)
            } else {
                a.clone()
            };
            let id = format!("{m}x{k}x{n}{}", if ta { "_ta" } else { "" });
            g.bench_function(BenchmarkId::from_parameter(id), |bench| {
                bench.iter_custom(|iters| time(&ctx, iters, &|| ops::matmul(&a, &b, ta, tb)))
            });
        }
    }
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    let Some(ctx) = adapter() else { return };
    let dev = Device::Wgpu(ctx.index);
    let mut g = c.benchmark_group("wgpu/elementwise");
    // 1 Mi values, 4 MiB per f32 tensor; 64 Mi values (256 MiB) when large.
    let (r, f) = if large() { (1 << 20, 64) } else { (16_384, 64) };
    let x = randn(&[r, f], 3, dev);
    let y = randn(&[r, f], 4, dev);
    let bytes = (r * f * 4) as u64;
    g.throughput(Throughput::Bytes(2 * bytes));
    g.bench_function(BenchmarkId::new("relu", format!("{r}x{f}")), |bench| {
        bench.iter_custom(|iters| time(&ctx, iters, &|| ops::relu(&x)))
    });
    g.throughput(Throughput::Bytes(3 * bytes));
    g.bench_function(BenchmarkId::new("add", format!("{r}x{f}")), |bench| {
        bench.iter_custom(|iters| time(&ctx, iters, &|| ops::add(&x, &y)))
    });
    g.finish();
}

/// Host cost per op where the kernel is negligible (64 values): recording (or, before
/// batching, creating and submitting) one dispatch, measured as wall time over many ops
/// and one final sync. This is the per-op floor every small op of a training step pays.
fn tiny(c: &mut Criterion) {
    let Some(ctx) = adapter() else { return };
    let dev = Device::Wgpu(ctx.index);
    let mut g = c.benchmark_group("wgpu/tiny_op_overhead");
    let x = randn(&[1, 64], 5, dev);
    let y = randn(&[1, 64], 6, dev);
    g.throughput(Throughput::Elements(1));
    let wall = |iters: u64, op: &dyn Fn() -> Result<Tensor>| {
        ctx.sync().unwrap();
        let start = Instant::now();
        for _ in 0..iters {
            black_box(op().unwrap());
        }
        ctx.sync().unwrap();
        start.elapsed()
    };
    g.bench_function("relu_64", |bench| {
        bench.iter_custom(|iters| wall(iters, &|| ops::relu(&x)))
    });
    g.bench_function("add_64", |bench| {
        bench.iter_custom(|iters| wall(iters, &|| ops::add(&x, &y)))
    });
    // The host's share alone: recording without the final wait (the recording is submitted
    // outside the timed region, or where the parameter ring fills).
    g.bench_function("relu_64_record_only", |bench| {
        bench.iter_custom(|iters| {
            ctx.sync().unwrap();
            let start = Instant::now();
            for _ in 0..iters {
                black_box(ops::relu(&x).unwrap());
            }
            let t = start.elapsed();
            ctx.sync().unwrap();
            t
        })
    });
    g.finish();
}

fn reductions(c: &mut Criterion) {
    let Some(ctx) = adapter() else { return };
    let dev = Device::Wgpu(ctx.index);
    let mut g = c.benchmark_group("wgpu/reductions");
    let r = if large() { 1 << 20 } else { 16_384 };
    for f in [64, 47] {
        let x = randn(&[r, f], 7, dev);
        let labels =
            Tensor::from_u32((0..r as u32).map(|i| i % f as u32).collect(), &[r], dev).unwrap();
        g.throughput(Throughput::Bytes((2 * r * f * 4) as u64));
        g.bench_function(
            BenchmarkId::new("log_softmax", format!("{r}x{f}")),
            |bench| bench.iter_custom(|iters| time(&ctx, iters, &|| ops::log_softmax(&x))),
        );
        g.throughput(Throughput::Bytes((r * f * 4 + r * 4) as u64));
        g.bench_function(
            BenchmarkId::new("cross_entropy", format!("{r}x{f}")),
            |bench| {
                bench.iter_custom(|iters| {
                    time(&ctx, iters, &|| ops::cross_entropy(&x, &labels, None))
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, matmul, elementwise, tiny, reductions);
criterion_main!(benches);
