//! Graph kernels on wgpu:0 (bytes/s, each value read or written counted once, indices
//! included): segment sum, mean and max forward, segment max with its backward, GAT's
//! segment softmax (forward and backward, 4 heads) and weighted sum (forward, and backward
//! for both inputs), index_select and scatter_add, on a power-law block (every in-edge of
//! 8,192 seeds of a scaled arxiv-like graph), at f = 64 (the vec4 kernels) and f = 47 (the
//! scalar ones). The CPU runs the same inputs for reference. Every iteration waits for the device, so a figure
//! is the kernel's time, not its submission's. Skipped, with the reason printed, without an
//! adapter.
//!
//! `cargo bench --bench wgpu_graph` (a few seconds per benchmark). With
//! `ESPALIER_BENCH_LARGE=1` (for real GPUs) the block is every in-edge of every second node
//! of a products-like graph at scale 0.1 (3.1M edges) with f = 128, as in `cuda_ops`, and
//! the CPU reference is skipped. A filter picks a width: `-- f=47`.
//!
//! With `ESPALIER_COUNT_ITERS=N` the binary times nothing: it runs each `wgpu:0` benchmark
//! (or those whose `name/size` contains the filter) twice to warm up, then N and 2N
//! iterations, each phase ended by a call to `count_mark`, and exits. Under
//! `valgrind --tool=callgrind --dump-before='*count_mark*'` every phase is one dump, so the
//! 2N dump less the N dump counts N iterations with setup, device creation and shader
//! compilation cancelled out: `scripts/count_ops.py` runs that for two builds and prints
//! instructions per iteration, row by row (docs/BENCHMARKS.md, issue 34).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use espalier::graph::synth::SynthSpec;
use espalier::graph::{sample_blocks, Block};
use espalier::ops;
use espalier::rng::Rng;
use espalier::{Device, Tensor};

/// True when `ESPALIER_BENCH_LARGE` asks for GPU-sized inputs.
fn large() -> bool {
    std::env::var("ESPALIER_BENCH_LARGE").is_ok_and(|v| v == "1")
}

fn adapter() -> Option<Device> {
    let dev = Device::Wgpu(0);
    match dev.memory() {
        Ok(_) => Some(dev),
        Err(e) => {
            println!("skipping the wgpu graph benchmarks: {e}");
            None
        }
    }
}

/// The input-layer block of 8,192 seeds with all their in-edges: in-degrees follow the
/// graph's power law (a few dst nodes with hundreds of edges, most with a handful).
fn power_law_block(f: usize) -> Arc<Block> {
    let (spec, step, take) = if large() {
        ("products-like,scale=0.1", 2, usize::MAX)
    } else {
        ("arxiv-like,scale=0.25", 5, 8192)
    };
    let data = SynthSpec::parse(spec).unwrap().generate().unwrap();
    let seeds: Vec<u32> = (0..data.graph.num_nodes as u32)
        .step_by(step)
        .take(take)
        .collect();
    let b = sample_blocks(&data.graph, &seeds, &[-1], 3)
        .unwrap()
        .remove(0);
    let max_in = (0..b.num_dst).map(|d| b.degree(d)).max().unwrap_or(0);
    println!(
        "block: {} src, {} dst, {} edges, max in-degree {max_in}, f = {f}",
        b.num_src,
        b.num_dst,
        b.num_edges()
    );
    Arc::new(b)
}

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

fn graph(c: &mut Criterion) {
    let Some(gpu) = adapter() else { return };
    let widths: &[usize] = if large() { &[128] } else { &[64, 47] };
    let b = power_law_block(widths[0]);
    let mut g = c.benchmark_group("wgpu_graph");
    for &f in widths {
        widths_of(&mut g, gpu, &b, f);
    }
    g.finish();
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Where the benchmarks go: criterion's group, or the instruction-count mode.
trait Rows {
    /// Benchmark `name`/`size` on `dev`, moving `bytes` an iteration; `run` is one iteration.
    fn row(&mut self, dev: Device, name: &str, size: &str, bytes: u64, run: &dyn Fn() -> Tensor);
    /// Whether the CPU reference runs too.
    fn cpu_too(&self) -> bool;
}

impl Rows for Group<'_> {
    fn row(&mut self, dev: Device, name: &str, size: &str, bytes: u64, run: &dyn Fn() -> Tensor) {
        self.throughput(Throughput::Bytes(bytes));
        self.bench_function(BenchmarkId::new(name, size), |bench| {
            bench.iter(|| timed(dev, run))
        });
    }

    fn cpu_too(&self) -> bool {
        !large()
    }
}

/// The instruction-count mode: a fixed number of iterations of each chosen benchmark.
struct Count {
    iters: usize,
    /// Only benchmarks whose `name/size` contains this run.
    filter: Option<String>,
}

impl Rows for Count {
    fn row(&mut self, dev: Device, name: &str, size: &str, _: u64, run: &dyn Fn() -> Tensor) {
        let id = format!("{name}/{size}");
        if self
            .filter
            .as_ref()
            .is_some_and(|f| !id.contains(f.as_str()))
        {
            return;
        }
        // Pipelines compiled and the buffer pool filled before the first phase.
        for _ in 0..2 {
            timed(dev, run);
        }
        count_mark(&id, "setup");
        for (phase, n) in [("n", self.iters), ("2n", 2 * self.iters)] {
            for _ in 0..n {
                timed(dev, run);
            }
            count_mark(&id, phase);
        }
    }

    fn cpu_too(&self) -> bool {
        false
    }
}

/// Ends a phase: callgrind (`--dump-before='*count_mark*'`) dumps the instructions counted
/// since the previous call, and the line printed says which phase the dump holds.
#[inline(never)]
fn count_mark(id: &str, phase: &str) {
    println!("count_mark {phase} {id}");
}

/// `ESPALIER_COUNT_ITERS`, when set: the count mode's N.
fn count_iters() -> Option<usize> {
    let v = std::env::var("ESPALIER_COUNT_ITERS").ok()?;
    match v.parse() {
        Ok(n) if n > 0 => Some(n),
        _ => {
            eprintln!("ESPALIER_COUNT_ITERS={v}: expected a positive whole number");
            std::process::exit(2)
        }
    }
}

/// The count mode: the `wgpu:0` benchmarks, `iters` and `2 * iters` iterations each.
fn count(iters: usize) {
    let Some(gpu) = adapter() else { return };
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let widths: &[usize] = if large() { &[128] } else { &[64, 47] };
    let b = power_law_block(widths[0]);
    let mut rows = Count { iters, filter };
    for &f in widths {
        widths_of(&mut rows, gpu, &b, f);
    }
}

/// The CPU inputs of every benchmark at feature width `f` over block `b`.
struct Inputs {
    f: usize,
    /// Source rows, `n_src` x `f`.
    x: Tensor,
    /// `m = E` random source row ids (gather and scatter).
    idx: Tensor,
    /// `m` x `f` rows to scatter.
    src: Tensor,
    /// GAT: per-edge scores of `HEADS` heads.
    scores: Tensor,
    /// Source rows and output gradients of `HEADS` heads of `f / HEADS` columns each.
    ws_x: Tensor,
    ws_g: Tensor,
}

/// GAT's heads in these benchmarks.
const HEADS: usize = 4;

impl Inputs {
    fn new(b: &Block, f: usize) -> Inputs {
        let (e, n_src, n_dst) = (b.num_edges(), b.num_src, b.num_dst);
        let x = randn(&[n_src, f], 1);
        let mut rng = Rng::new(2);
        let idx = Tensor::from_u32(
            (0..e).map(|_| rng.below(n_src as u64) as u32).collect(),
            &[e],
            Device::Cpu,
        )
        .unwrap();
        let src = randn(&[e, f], 3);
        // GAT: 4 heads of f / 4 columns each (rounded down: 11 at f = 47, a scalar width).
        let scores = randn(&[e, HEADS], 4);
        let ws_cols = f / HEADS * HEADS;
        let ws_x = randn(&[n_src, ws_cols], 5);
        let ws_g = randn(&[n_dst, ws_cols], 6);
        Inputs {
            f,
            x,
            idx,
            src,
            scores,
            ws_x,
            ws_g,
        }
    }
}

/// Runs `f` and waits for `dev` to finish it.
fn timed(dev: Device, f: &dyn Fn() -> Tensor) {
    drop(black_box(f()));
    dev.sync().unwrap();
}

/// `t` on `dev`.
fn on(t: &Tensor, dev: Device) -> Tensor {
    t.clone().to_device(dev).unwrap()
}

/// Every benchmark at feature width `f`, on the GPU and (unless large) the CPU.
fn widths_of(g: &mut dyn Rows, gpu: Device, b: &Arc<Block>, f: usize) {
    let inputs = Inputs::new(b, f);
    let devices = if g.cpu_too() {
        vec![gpu, Device::Cpu]
    } else {
        vec![gpu]
    };
    for dev in devices {
        segments(g, dev, b, &inputs);
        attention(g, dev, b, &inputs);
        gathers(g, dev, b, &inputs);
    }
}

/// Bytes a segment reduction moves: gathered rows read, output rows written, indptr and
/// indices read.
fn segment_bytes(b: &Block, f: usize) -> u64 {
    let (e, n_dst) = (b.num_edges(), b.num_dst);
    (e * f * 4 + n_dst * f * 4 + (n_dst + 1) * 4 + e * 4) as u64
}

/// segment_sum, segment_mean, segment_max and its backward.
fn segments(g: &mut dyn Rows, dev: Device, b: &Arc<Block>, inputs: &Inputs) {
    let (f, n_src, n_dst) = (inputs.f, b.num_src, b.num_dst);
    let x = on(&inputs.x, dev);
    let size = format!("{dev}/E={},f={f}", b.num_edges());
    let seg = segment_bytes(b, f);
    g.row(dev, "segment_sum", &size, seg, &|| {
        ops::segment_sum(&x, b).unwrap()
    });
    g.row(dev, "segment_mean", &size, seg, &|| {
        ops::segment_mean(&x, b).unwrap()
    });
    // Plus the argmax written.
    let max_bytes = seg + (n_dst * f * 4) as u64;
    g.row(dev, "segment_max", &size, max_bytes, &|| {
        ops::segment_max(&x, b).unwrap()
    });
    // The forward, then its backward (the argmax scatter over the transposed CSR, plus
    // the gradient of ones the loss seeds): gathered rows and gradient read twice.
    let fwd_bwd_bytes = 2 * seg + (n_src * f * 4) as u64;
    let xg = x.requires_grad_leaf();
    g.row(dev, "segment_max_fwd_bwd", &size, fwd_bwd_bytes, &|| {
        xg.zero_grad();
        let y = ops::segment_max(&xg, b).unwrap();
        ops::sum_all(&y).unwrap().backward().unwrap();
        xg.grad().unwrap()
    });
}

/// GAT's ops: segment_softmax and segment_weighted_sum, each with its backward.
fn attention(g: &mut dyn Rows, dev: Device, b: &Arc<Block>, inputs: &Inputs) {
    let (e, n_src, n_dst) = (b.num_edges(), b.num_src, b.num_dst);
    let (f, heads) = (inputs.f, HEADS);
    let ws_cols = f / heads * heads;
    // Scores read, written; indptr read (per head).
    let softmax_bytes = (2 * e * heads * 4 + (n_dst + 1) * 4) as u64;
    let scores = on(&inputs.scores, dev);
    let size_h = format!("{dev}/E={e},heads={heads},f={f}");
    g.row(dev, "segment_softmax", &size_h, softmax_bytes, &|| {
        ops::segment_softmax(&scores, b).unwrap()
    });
    let att = ops::segment_softmax(&scores, b).unwrap();
    g.row(
        dev,
        "segment_softmax_backward",
        &size_h,
        softmax_bytes,
        &|| ops::segment_softmax_backward(&att, &scores, b).unwrap(),
    );
    // Gathered rows and weights read, output rows written.
    let ws_x = on(&inputs.ws_x, dev);
    let ws_g = on(&inputs.ws_g, dev);
    let ws_bytes = (e * ws_cols * 4 + e * heads * 4 + n_dst * ws_cols * 4 + e * 4) as u64;
    g.row(dev, "segment_weighted_sum", &size_h, ws_bytes, &|| {
        ops::segment_weighted_sum(&ws_x, &att, b).unwrap()
    });
    let ws_bwd_bytes = (2 * e * ws_cols * 4 + 2 * e * heads * 4 + n_src * ws_cols * 4) as u64;
    g.row(
        dev,
        "segment_weighted_sum_backward",
        &size_h,
        ws_bwd_bytes,
        &|| {
            let (gx, ga) =
                ops::segment_weighted_sum_backward(&ws_x, &att, &ws_g, b, true, true).unwrap();
            drop(ga);
            gx.unwrap()
        },
    );
}

/// index_select and scatter_add of `m = E` rows.
fn gathers(g: &mut dyn Rows, dev: Device, b: &Arc<Block>, inputs: &Inputs) {
    let (m, n_src, f) = (b.num_edges(), b.num_src, inputs.f);
    let x = on(&inputs.x, dev);
    let idx = on(&inputs.idx, dev);
    let src = on(&inputs.src, dev);
    // Rows read and written, indices read.
    let size = format!("{dev}/m={m},f={f}");
    let select_bytes = (2 * m * f * 4 + m * 4) as u64;
    g.row(dev, "index_select", &size, select_bytes, &|| {
        ops::index_select(&x, &idx).unwrap()
    });
    // Same bytes plus the output rows; on a GPU this includes reading the indices back
    // and transposing them on the host, which is part of the op's cost.
    let scatter_bytes = (m * f * 4 + m * 4 + n_src * f * 4) as u64;
    g.row(dev, "scatter_add", &size, scatter_bytes, &|| {
        ops::scatter_add(&src, &idx, n_src).unwrap()
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = graph
}

/// criterion's `main` (as `criterion_main!` writes it), unless the count mode is asked for.
fn main() {
    match count_iters() {
        Some(iters) => count(iters),
        None => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
