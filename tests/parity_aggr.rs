//! Parity of the aggregator ops (LSTM cell, bucketed LSTM aggregation, segment softmax,
//! weighted segment sum) on every available GPU backend against the CPU backend.
//!
//! Two kinds of cases:
//! - **Kernel cases** call each op's forward and its dedicated backward kernel directly
//!   (`lstm_cell_backward`, `segment_softmax_backward`, `segment_weighted_sum_backward`)
//!   with the same inputs and upstream gradient on both devices. They need nothing but
//!   this module's own kernels, so they run wherever a GPU backend does.
//! - **Autograd cases** go through `common::parity`, which reduces the output with
//!   `sum_all` and runs `backward` through every op the layer uses.

mod common;

use std::sync::Arc;

use common::{
    assert_close, gpu_devices, parity, rand_f32, rand_ints, split_parity, wgpu_devices, ATOL, RTOL,
};
use espalier::graph::{sample_blocks, synth::SynthSpec, Block, Buckets};
use espalier::nn::LstmParams;
use espalier::{ops, Device, Tensor};

fn close(what: &str, cpu: &Tensor, gpu: &Tensor) {
    assert_eq!(cpu.shape(), gpu.shape(), "{what}: shapes differ");
    assert_close(
        what,
        &cpu.to_vec_f32().unwrap(),
        &gpu.to_vec_f32().unwrap(),
        RTOL,
        ATOL,
    );
}

fn on(t: &Tensor, dev: Device) -> Tensor {
    t.clone().to_device(dev).unwrap()
}

/// Blocks with awkward shapes: zero in-degree, self-loops, duplicates, a star, and sampled
/// power-law blocks (up to a few thousand edges).
fn blocks() -> Vec<(String, Arc<Block>)> {
    let mut v = vec![
        (
            "awkward".to_string(),
            Block::new(
                6,
                vec![0, 3, 3, 8],
                vec![1, 3, 0, 4, 4, 2, 1, 3],
                vec![10, 11, 12, 13, 14, 15],
            )
            .unwrap(),
        ),
        (
            "star".to_string(),
            Block::new(
                300,
                vec![0, 299, 299],
                (1..300).collect(),
                (0..300).collect(),
            )
            .unwrap(),
        ),
    ];
    let data = SynthSpec::parse("cora-like").unwrap().generate().unwrap();
    let seeds: Vec<u32> = data.split.train.iter().copied().take(257).collect();
    for (l, b) in sample_blocks(&data.graph, &seeds, &[5, 10], 1)
        .unwrap()
        .into_iter()
        .enumerate()
    {
        v.push((format!("power-law {l}"), b));
    }
    v.into_iter().map(|(n, b)| (n, Arc::new(b))).collect()
}

#[test]
fn lstm_cell_kernels() {
    for (n, h) in [(1, 1), (63, 4), (257, 16), (4097, 1)] {
        let gates = common::rand_away_f32(&[n, 4 * h], n as u64);
        let gates = ops::mul_scalar(&gates, 2.0).unwrap();
        let c = rand_f32(&[n, h], 2 * n as u64);
        let g = rand_f32(&[n, 2 * h], 3 * n as u64);
        let (out, acts) = ops::lstm_cell_forward(&gates, &c).unwrap();
        let (dz, dc) = ops::lstm_cell_backward(&acts, &c, &g).unwrap();
        for dev in gpu_devices() {
            let what = |s: &str| format!("lstm_cell {s} n={n} H={h} on {dev}");
            let (o, a) = ops::lstm_cell_forward(&on(&gates, dev), &on(&c, dev)).unwrap();
            close(&what("output"), &out, &o);
            close(&what("saved gates"), &acts, &a);
            let (dz2, dc2) =
                ops::lstm_cell_backward(&on(&acts, dev), &on(&c, dev), &on(&g, dev)).unwrap();
            close(&what("gate gradient"), &dz, &dz2);
            close(&what("c_prev gradient"), &dc, &dc2);
        }
    }
}

#[test]
fn segment_softmax_kernels() {
    for (name, b) in blocks() {
        for heads in [1, 3] {
            let e = b.num_edges();
            let x = ops::mul_scalar(&rand_f32(&[e, heads], 5), 4.0).unwrap();
            let g = rand_f32(&[e, heads], 6);
            let y = ops::segment_softmax(&x, &b).unwrap();
            let dx = ops::segment_softmax_backward(&y, &g, &b).unwrap();
            for dev in gpu_devices() {
                let what = |s: &str| format!("segment_softmax {s} {name} H={heads} on {dev}");
                let y2 = ops::segment_softmax(&on(&x, dev), &b).unwrap();
                close(&what("forward"), &y, &y2);
                let dx2 = ops::segment_softmax_backward(&on(&y, dev), &on(&g, dev), &b).unwrap();
                close(&what("backward"), &dx, &dx2);
            }
        }
    }
}

#[test]
fn segment_weighted_sum_kernels() {
    for (name, b) in blocks() {
        for (heads, d) in [(1, 1), (2, 3), (4, 16)] {
            let (e, ns, nd) = (b.num_edges(), b.num_src, b.num_dst);
            let x = rand_f32(&[ns, heads * d], 7);
            let a = rand_f32(&[e, heads], 8);
            let g = rand_f32(&[nd, heads * d], 9);
            let y = ops::segment_weighted_sum(&x, &a, &b).unwrap();
            let (dx, da) = ops::segment_weighted_sum_backward(&x, &a, &g, &b, true, true).unwrap();
            for dev in gpu_devices() {
                let what =
                    |s: &str| format!("segment_weighted_sum {s} {name} H={heads} D={d} on {dev}");
                let (xd, ad, gd) = (on(&x, dev), on(&a, dev), on(&g, dev));
                close(
                    &what("forward"),
                    &y,
                    &ops::segment_weighted_sum(&xd, &ad, &b).unwrap(),
                );
                let (dx2, da2) =
                    ops::segment_weighted_sum_backward(&xd, &ad, &gd, &b, true, true).unwrap();
                close(
                    &what("x gradient"),
                    dx.as_ref().unwrap(),
                    dx2.as_ref().unwrap(),
                );
                close(
                    &what("a gradient"),
                    da.as_ref().unwrap(),
                    da2.as_ref().unwrap(),
                );
            }
        }
    }
}

#[test]
fn lstm_aggregate_forward_without_recurrence() {
    // Every dst node has at most one in-edge: one step each, so no h·W_hh matmul runs and
    // the forward kernel is exercised on its own (zero-degree rows included).
    let b = Arc::new(Block::new(5, vec![0, 1, 1, 2, 3], vec![4, 0, 3], (0..5).collect()).unwrap());
    let plan = Arc::new(ops::LstmPlan::new(&b, &Buckets::new(&b, None)).unwrap());
    let h = 8;
    let xw = rand_f32(&[b.num_src, 4 * h], 10);
    let w = rand_f32(&[h, 4 * h], 11);
    let idx = |dev| Tensor::from_u32(plan.src.clone(), &[plan.rows()], dev).unwrap();
    let want = ops::lstm_aggregate(&xw, &idx(Device::Cpu), &w, &plan).unwrap();
    for dev in gpu_devices() {
        let got = ops::lstm_aggregate(&on(&xw, dev), &idx(dev), &on(&w, dev), &plan).unwrap();
        close(
            &format!("lstm_aggregate one-step forward on {dev}"),
            &want,
            &got,
        );
    }
}

#[test]
fn autograd_parity_of_every_new_op() {
    let (n, h) = (63, 4);
    parity(
        "lstm_cell",
        &|x| ops::lstm_cell(&x[0], &x[1]),
        &[rand_f32(&[n, 4 * h], 20), rand_f32(&[n, h], 21)],
    );
    for (name, b) in blocks() {
        let e = b.num_edges();
        let bb = b.clone();
        parity(
            &format!("segment_softmax {name}"),
            &move |x| ops::segment_softmax(&x[0], &bb),
            &[rand_f32(&[e, 2], 22)],
        );
        let bb = b.clone();
        parity(
            &format!("segment_weighted_sum {name}"),
            &move |x| ops::segment_weighted_sum(&x[0], &x[1], &bb),
            &[rand_f32(&[b.num_src, 6], 23), rand_f32(&[e, 2], 24)],
        );
        for split in [None, Some(3)] {
            let bb = b.clone();
            parity(
                &format!("lstm aggregator {name} split {split:?}"),
                &move |x| {
                    let p = LstmParams {
                        weight_ih: x[1].clone(),
                        weight_hh: x[2].clone(),
                        bias: x[3].clone(),
                    };
                    p.aggregate(&bb, &x[0], split)
                },
                &[
                    rand_f32(&[b.num_src, 5], 25),
                    ops::mul_scalar(&rand_f32(&[5, 20], 26), 0.5).unwrap(),
                    ops::mul_scalar(&rand_f32(&[5, 20], 27), 0.5).unwrap(),
                    rand_f32(&[20], 28),
                ],
            );
        }
    }
}

/// The aggregator ops, forward and backward, with every storage binding capped at 16 KiB
/// (4,096 values) against the same ops unsplit and the CPU, on a block of about 10,000
/// edges: the cells' rows, the edge ranges, the tensors read at arbitrary rows and the
/// LSTM's per-bucket buffers each take several bindings. Integer inputs keep the weighted
/// sum exact whatever order its tiles add in. All capped checks of this binary live here,
/// and all that set segment_softmax's long rows: the cap and that switch are shared by its
/// threads.
#[test]
fn split_aggregator_ops_match_unsplit() {
    if wgpu_devices().is_empty() {
        common::skip_backend("wgpu", "split parity: no wgpu device");
        return;
    }
    const CAP: u64 = 16 << 10;
    let (n, h) = (5000, 4);
    split_parity(
        "split lstm_cell",
        &|x| ops::lstm_cell(&x[0], &x[1]),
        &[rand_f32(&[n, 4 * h], 40), rand_f32(&[n, h], 41)],
        CAP,
        true,
    );
    let graph = SynthSpec::parse("cora-like")
        .unwrap()
        .generate()
        .unwrap()
        .graph
        .symmetrize();
    let seeds: Vec<u32> = (0..graph.num_nodes as u32).collect();
    let b = sample_blocks(&graph, &seeds, &[-1], 3).unwrap();
    let b = Arc::new(b.into_iter().next().unwrap());
    let e = b.num_edges();
    println!(
        "split block: {} src, {} dst, {e} edges",
        b.num_src, b.num_dst
    );
    // segment_softmax with rows of 64 edges or more on one invocation each (a software
    // adapter's default), then on a workgroup each (a hardware adapter's): a switch of the
    // context, so it lives here too, and each pass runs split and whole alike.
    let ctxs: Vec<_> = wgpu_devices()
        .into_iter()
        .map(|dev| match dev {
            Device::Wgpu(i) => espalier::device::wgpu::context(i).unwrap(),
            _ => unreachable!("wgpu_devices gives wgpu devices"),
        })
        .collect();
    let defaults: Vec<u32> = ctxs.iter().map(|c| c.long_row()).collect();
    let max_degree = (0..b.num_dst).map(|d| b.degree(d)).max().unwrap_or(0);
    assert!(max_degree >= 64, "no long row: max in-degree {max_degree}");
    for long_row in [u32::MAX, 64] {
        ctxs.iter().for_each(|c| c.set_long_row(long_row));
        let bb = b.clone();
        split_parity(
            &format!("split segment_softmax, long rows from {long_row} edges"),
            &move |x| ops::segment_softmax(&x[0], &bb),
            &[rand_f32(&[e, 2], 42)],
            CAP,
            true,
        );
    }
    ctxs.iter()
        .zip(defaults)
        .for_each(|(c, d)| c.set_long_row(d));
    let bb = b.clone();
    split_parity(
        "split segment_weighted_sum",
        &move |x| ops::segment_weighted_sum(&x[0], &x[1], &bb),
        &[rand_ints(&[b.num_src, 6], 43), rand_ints(&[e, 2], 44)],
        CAP,
        true,
    );
    // Heads of 4 columns: the vec4 kernels, split likewise.
    let bb = b.clone();
    split_parity(
        "split segment_weighted_sum, D = 4 (vec4)",
        &move |x| ops::segment_weighted_sum(&x[0], &x[1], &bb),
        &[rand_ints(&[b.num_src, 8], 49), rand_ints(&[e, 2], 50)],
        CAP,
        true,
    );
    // The LSTM aggregator also runs its gathers and matmuls split; the weight gradient's
    // matmul adds k in chunks, so split and unsplit agree within tolerance.
    for split in [None, Some(3)] {
        let bb = b.clone();
        split_parity(
            &format!("split lstm aggregator, explosion split {split:?}"),
            &move |x| {
                let p = LstmParams {
                    weight_ih: x[1].clone(),
                    weight_hh: x[2].clone(),
                    bias: x[3].clone(),
                };
                p.aggregate(&bb, &x[0], split)
            },
            &[
                rand_f32(&[b.num_src, 5], 45),
                ops::mul_scalar(&rand_f32(&[5, 20], 46), 0.5).unwrap(),
                ops::mul_scalar(&rand_f32(&[5, 20], 47), 0.5).unwrap(),
                rand_f32(&[20], 48),
            ],
            CAP,
            false,
        );
    }
}
