//! Microbenchmarks: each op's throughput on the device in GB/s (GFLOP/s too for GEMM),
//! with the share of the device's peak bandwidth where the device reports one (CUDA), and
//! the time of one launch of the op on a tiny input (the dispatch or launch overhead).
//!
//! Bytes are counted by a model, the least an op must move: every input element read once,
//! every output element written once, and for the segment ops one source row read per edge
//! (a gather: rows shared by several edges count each time) plus the CSR arrays. A figure
//! near the peak means the kernel streams memory as fast as the device can.
//!
//! Times are wall-clock: the op is run until a time floor passes, then the device is
//! synchronised; the first runs (compilation, pool growth) are not counted. On a software
//! device (lavapipe, the emulated CUDA device) the sizes are small and the figures say
//! nothing of a GPU's; they only show that the benchmark runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::zoo::{rand_f32, rand_idx};
use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::Result;
use crate::graph::Block;
use crate::ops;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// How large the benchmark's inputs are and how long each op runs.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    /// Elements of the elementwise ops.
    pub elems: usize,
    /// Dst rows of the segment ops' block (16 edges each, from 4× as many src rows).
    pub dst: usize,
    /// Feature width of the segment ops and the gather.
    pub width: usize,
    /// GEMM side (square).
    pub gemm: usize,
    /// Least time an op runs for its figure.
    pub floor: Duration,
}

impl Scale {
    /// The sizes for a device: small on a software device, larger with `full`.
    pub fn of(software: bool, full: bool) -> Scale {
        match (software, full) {
            (true, _) => Scale {
                elems: 1 << 18,
                dst: 2048,
                width: 64,
                gemm: 128,
                floor: Duration::from_millis(100),
            },
            (false, false) => Scale {
                elems: 1 << 24,
                dst: 1 << 16,
                width: 128,
                gemm: 2048,
                floor: Duration::from_millis(200),
            },
            (false, true) => Scale {
                elems: 1 << 26,
                dst: 1 << 18,
                width: 128,
                gemm: 4096,
                floor: Duration::from_millis(800),
            },
        }
    }
}

/// Seconds per call of `f` on `dev`: two untimed calls, then calls until `floor` has
/// passed (at least two), synchronised at the end.
pub fn time_per_call(dev: Device, floor: Duration, f: &dyn Fn() -> Result<Tensor>) -> Result<f64> {
    for _ in 0..2 {
        drop(f()?);
    }
    dev.sync()?;
    let start = Instant::now();
    let mut calls = 0u32;
    while calls < 2 || start.elapsed() < floor {
        drop(f()?);
        calls += 1;
        if calls % 8 == 0 {
            dev.sync()?;
        }
    }
    dev.sync()?;
    Ok(start.elapsed().as_secs_f64() / calls as f64)
}

/// `x` to about three significant digits (`1234`, `12.3`, `0.0123`), so that the slow
/// figures of a software device do not print as 0.
fn sig3(x: f64) -> String {
    let decimals = if x >= 100.0 || x == 0.0 || !x.is_finite() {
        0
    } else {
        (2.0 - x.log10().floor()).clamp(0.0, 6.0) as usize
    };
    format!("{x:.decimals$}")
}

/// A block of `dst` rows of 16 in-edges each, from `4·dst` src rows chosen at random.
pub fn random_block(dst: usize) -> Result<Arc<Block>> {
    let src = 4 * dst;
    let mut rng = Rng::new(17);
    let indptr: Vec<u32> = (0..=dst as u32).map(|d| d * 16).collect();
    let indices: Vec<u32> = (0..dst * 16)
        .map(|_| rng.below(src as u64) as u32)
        .collect();
    Ok(Arc::new(Block::new(
        src,
        indptr,
        indices,
        (0..src as u32).collect(),
    )?))
}

/// One benchmarked op: its name, the bytes (and flops) one call moves, and the call.
struct Bench<'a> {
    name: String,
    bytes: f64,
    flops: f64,
    call: Box<dyn Fn() -> Result<Tensor> + 'a>,
    /// The same op on a tiny input: its time is the launch overhead.
    tiny: Box<dyn Fn() -> Result<Tensor> + 'a>,
}

/// Runs the speed records.
pub fn run(ctx: &mut Ctx<'_>) {
    let dev = ctx.dev;
    let s = Scale::of(ctx.info.software, ctx.full());
    let peak = ctx.info.peak_bandwidth;
    let note = if ctx.info.software {
        " (a software device: not a GPU's speed)"
    } else {
        ""
    };
    let inputs = match Inputs::new(dev, s) {
        Ok(i) => i,
        Err(e) => {
            ctx.check("speed inputs", || Err(e));
            return;
        }
    };
    for b in inputs.benches() {
        ctx.check(b.name.clone(), || {
            let t = time_per_call(dev, s.floor, &*b.call)?;
            let tiny = time_per_call(dev, s.floor / 4, &*b.tiny)?;
            let gbs = b.bytes / t / 1e9;
            let mut detail = format!("{} GB/s", sig3(gbs));
            let mut o = Outcome::info(String::new())
                .figure("seconds_per_call", t)
                .figure("bytes_per_call", b.bytes)
                .figure("gb_per_s", gbs)
                .figure("tiny_call_us", tiny * 1e6);
            if let Some(p) = peak {
                let share = b.bytes / t / p;
                detail.push_str(&format!(" ({}% of peak)", sig3(share * 100.0)));
                o = o.figure("share_of_peak_bandwidth", share);
            }
            if b.flops > 0.0 {
                let g = b.flops / t / 1e9;
                detail.push_str(&format!(", {} GFLOP/s", sig3(g)));
                o = o.figure("gflop_per_s", g);
            }
            detail.push_str(&format!(
                ", {:.3} ms per call; a tiny call {:.1} µs{note}",
                t * 1e3,
                tiny * 1e6
            ));
            o.detail = detail;
            Ok(o)
        });
    }
    ctx.check("launch overhead: 256 one-value adds", || {
        let a = Tensor::from_f32(vec![1.0], &[1], dev)?;
        let b = Tensor::from_f32(vec![2.0], &[1], dev)?;
        dev.sync()?;
        let start = Instant::now();
        for _ in 0..256 {
            drop(ops::add(&a, &b)?);
        }
        dev.sync()?;
        let us = start.elapsed().as_secs_f64() / 256.0 * 1e6;
        Ok(Outcome::info(format!("{us:.1} µs per op{note}")).figure("us_per_op", us))
    });
}

/// The benchmark's inputs, on the device.
struct Inputs {
    s: Scale,
    a: Tensor,
    b: Tensor,
    x: Tensor,
    block: Arc<Block>,
    scores: Tensor,
    table: Tensor,
    idx: Tensor,
    m: Tensor,
    g: Tensor,
    scatter_idx: Tensor,
    logits: Tensor,
    tiny: Tensor,
    tiny_rows: Tensor,
    tiny_scores: Tensor,
    tiny_block: Arc<Block>,
    tiny_idx: Tensor,
    tiny_g: Tensor,
    tiny_scatter_idx: Tensor,
}

impl Inputs {
    fn new(dev: Device, s: Scale) -> Result<Inputs> {
        let on = |t: Tensor| t.to_device(dev);
        let block = random_block(s.dst)?;
        let heads = 4;
        Ok(Inputs {
            s,
            a: on(rand_f32(&[s.elems], 1)?)?,
            b: on(rand_f32(&[s.elems], 2)?)?,
            x: on(rand_f32(&[block.num_src, s.width], 3)?)?,
            scores: on(rand_f32(&[block.num_edges(), heads], 4)?)?,
            table: on(rand_f32(&[block.num_src, s.width], 5)?)?,
            idx: on(rand_idx(block.num_edges(), block.num_src as u32, 6)?)?,
            m: on(rand_f32(&[s.gemm, s.gemm], 7)?)?,
            g: on(rand_f32(&[block.num_dst, s.width], 12)?)?,
            scatter_idx: on(rand_idx(block.num_src, block.num_dst as u32, 13)?)?,
            logits: on(rand_f32(&[s.elems / 64, 64], 14)?)?,
            tiny: on(rand_f32(&[4], 8)?)?,
            tiny_rows: on(rand_f32(&[8, 4], 9)?)?,
            tiny_scores: on(rand_f32(&[32, 4], 11)?)?,
            tiny_block: random_block(2)?,
            tiny_idx: on(rand_idx(4, 8, 10)?)?,
            tiny_g: on(rand_f32(&[2, 4], 15)?)?,
            tiny_scatter_idx: on(rand_idx(8, 2, 16)?)?,
            block,
        })
    }

    fn benches(&self) -> Vec<Bench<'_>> {
        let s = self.s;
        let f = 4.0; // bytes per f32
        let n = s.elems as f64;
        let b = &self.block;
        let (e, dst, w) = (b.num_edges() as f64, b.num_dst as f64, s.width as f64);
        let csr = (e + dst + 1.0) * 4.0;
        let heads = 4.0;
        let g = s.gemm as f64;
        let mut v: Vec<Bench<'_>> = vec![
            Bench {
                name: format!("add, {} values", s.elems),
                bytes: 3.0 * n * f,
                flops: 0.0,
                call: Box::new(|| ops::add(&self.a, &self.b)),
                tiny: Box::new(|| ops::add(&self.tiny, &self.tiny)),
            },
            Bench {
                name: format!("relu, {} values", s.elems),
                bytes: 2.0 * n * f,
                flops: 0.0,
                call: Box::new(|| ops::relu(&self.a)),
                tiny: Box::new(|| ops::relu(&self.tiny)),
            },
            Bench {
                name: format!("index_select, {} rows of {}", b.num_edges(), s.width),
                bytes: 2.0 * e * w * f + e * 4.0,
                flops: 0.0,
                call: Box::new(|| ops::index_select(&self.table, &self.idx)),
                tiny: Box::new(|| ops::index_select(&self.tiny_rows, &self.tiny_idx)),
            },
        ];
        type Seg = fn(&Tensor, &Arc<Block>) -> Result<Tensor>;
        let segs: [(&str, Seg); 3] = [
            ("segment_sum", ops::segment_sum),
            ("segment_mean", ops::segment_mean),
            ("segment_max", ops::segment_max),
        ];
        for (name, op) in segs {
            v.push(Bench {
                name: format!("{name}, {} edges of {}", b.num_edges(), s.width),
                bytes: e * w * f + dst * w * f + csr,
                flops: 0.0,
                call: Box::new(move || op(&self.x, &self.block)),
                tiny: Box::new(move || op(&self.tiny_rows, &self.tiny_block)),
            });
        }
        v.push(Bench {
            name: format!(
                "segment_sum_transposed, {} edges of {}",
                b.num_edges(),
                s.width
            ),
            // The backward of segment_sum: a dst row read per edge, every src row written.
            bytes: e * w * f + b.num_src as f64 * w * f + csr,
            flops: 0.0,
            call: Box::new(|| ops::segment_sum_transposed(&self.g, &self.block, false)),
            tiny: Box::new(|| ops::segment_sum_transposed(&self.tiny_g, &self.tiny_block, false)),
        });
        v.push(Bench {
            name: format!(
                "scatter_add, {} rows of {} into {}",
                b.num_src, s.width, b.num_dst
            ),
            bytes: b.num_src as f64 * (w * f + 4.0) + dst * w * f,
            flops: 0.0,
            call: Box::new(|| ops::scatter_add(&self.x, &self.scatter_idx, b.num_dst)),
            tiny: Box::new(|| ops::scatter_add(&self.tiny_rows, &self.tiny_scatter_idx, 2)),
        });
        v.push(Bench {
            name: format!("log_softmax, {} rows of 64", s.elems / 64),
            bytes: 2.0 * n * f,
            flops: 0.0,
            call: Box::new(|| ops::log_softmax(&self.logits)),
            tiny: Box::new(|| ops::log_softmax(&self.tiny_rows)),
        });
        v.push(Bench {
            name: format!("segment_softmax, {} edges of 4 heads", b.num_edges()),
            bytes: 2.0 * e * heads * f + csr,
            flops: 0.0,
            call: Box::new(|| ops::segment_softmax(&self.scores, &self.block)),
            tiny: Box::new(|| ops::segment_softmax(&self.tiny_scores, &self.tiny_block)),
        });
        v.push(Bench {
            name: format!(
                "segment_weighted_sum, {} edges, 4 heads of {}",
                b.num_edges(),
                s.width / 4
            ),
            bytes: e * (w + heads) * f + dst * w * f + csr,
            flops: 0.0,
            call: Box::new(|| ops::segment_weighted_sum(&self.x, &self.scores, &self.block)),
            tiny: Box::new(|| {
                ops::segment_weighted_sum(&self.tiny_rows, &self.tiny_scores, &self.tiny_block)
            }),
        });
        v.push(Bench {
            name: format!("matmul, {0}x{0}x{0}", s.gemm),
            bytes: 3.0 * g * g * f,
            flops: 2.0 * g * g * g,
            call: Box::new(|| ops::matmul(&self.m, &self.m, false, false)),
            tiny: Box::new(|| ops::matmul(&self.tiny_rows, &self.tiny_rows, true, false)),
        });
        v
    }
}
