//! Parity of the graph ops: segment sum, mean and max over a zoo of blocks, and the row
//! gather and scatter-add, forward and backward on every available GPU backend against the
//! CPU backend. A missing backend is skipped with a printed reason.
//!
//! The zoo covers what breaks segment kernels: no edges at all, dst nodes without
//! in-edges, self-loops, duplicate edges (the max must credit only the first copy), a star
//! (one dst with 5,000 in-edges), a hub (one src feeding 5,000 dst nodes: one long row of
//! the transposed CSR), and power-law blocks sampled from a Cora-sized synthetic graph.

mod common;

use std::sync::Arc;

use common::{
    assert_close, gpu_devices, parity, rand_f32, rand_idx, rand_ints, split_parity, wgpu_devices,
    BindingCap,
};
use espalier::graph::synth::SynthSpec;
use espalier::graph::{sample_blocks, Block};
use espalier::rng::Rng;
use espalier::{ops, Device, Error, Tensor};

/// Feature widths: one value, odd widths (scalar loads), a multiple of 4 (vec4 loads), and
/// just past 256 (more columns than a 64-thread row group has lanes).
const WIDTHS: [usize; 5] = [1, 3, 5, 64, 257];

fn block(num_src: usize, adj: &[&[u32]]) -> Arc<Block> {
    let mut indptr = vec![0u32];
    let mut indices = Vec::new();
    for nbrs in adj {
        indices.extend_from_slice(nbrs);
        indptr.push(indices.len() as u32);
    }
    Arc::new(Block::new(num_src, indptr, indices, (0..num_src as u32).collect()).unwrap())
}

fn zoo() -> Vec<(String, Arc<Block>)> {
    let mut z = vec![
        ("empty".to_string(), block(5, &[&[], &[], &[]])),
        (
            "zero-in-degree".to_string(),
            block(6, &[&[3, 4], &[], &[0], &[], &[5, 1, 2]]),
        ),
        (
            "self-loops".to_string(),
            block(5, &[&[0], &[1, 4], &[2, 2, 0], &[3, 1]]),
        ),
        (
            "duplicates".to_string(),
            block(4, &[&[2, 2, 2, 1], &[0, 3, 0, 3], &[1, 1]]),
        ),
    ];
    let star: Vec<u32> = (1..=5000).collect();
    z.push(("star".to_string(), block(5001, &[&star])));
    let hub: Vec<&[u32]> = vec![&[5000]; 5000];
    z.push(("hub".to_string(), block(5001, &hub)));
    let graph = SynthSpec::parse("cora-like")
        .unwrap()
        .generate()
        .unwrap()
        .graph
        .symmetrize();
    let seeds: Vec<u32> = (0..graph.num_nodes as u32).step_by(2).collect();
    for (what, fanouts) in [("full", vec![-1i64]), ("fanout-10", vec![10, 10])] {
        let blocks = sample_blocks(&graph, &seeds, &fanouts, 11).unwrap();
        let b = blocks.into_iter().next().unwrap();
        let max_in = (0..b.num_dst).map(|d| b.degree(d)).max().unwrap_or(0);
        let max_out = b
            .t_indptr
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0);
        println!(
            "power-law/{what}: {} src, {} dst, {} edges, max in-degree {max_in}, max out-degree {max_out}",
            b.num_src,
            b.num_dst,
            b.num_edges()
        );
        z.push((format!("power-law/{what}"), Arc::new(b)));
    }
    z
}

type SegmentOp = fn(&Tensor, &Arc<Block>) -> espalier::Result<Tensor>;

const SEGMENT_OPS: [(&str, SegmentOp); 3] = [
    ("segment_sum", ops::segment_sum),
    ("segment_mean", ops::segment_mean),
    ("segment_max", ops::segment_max),
];

#[test]
fn segment_ops_over_the_zoo() {
    for (name, b) in zoo() {
        for &f in &WIDTHS {
            let x = rand_f32(&[b.num_src, f], (b.num_edges() * 31 + f) as u64);
            for (op, run) in SEGMENT_OPS {
                let b = b.clone();
                parity(
                    &format!("{op}/{name}/f={f}"),
                    &move |x| run(&x[0], &b),
                    std::slice::from_ref(&x),
                );
            }
        }
    }
}

/// The sum adds each output value in the CPU's edge order (one invocation per value, in
/// any row-group shape, scalar or vec4 loads), forward and backward, so it matches bit for
/// bit; no division is involved, so this holds on any conforming adapter.
#[test]
fn segment_sum_equals_the_cpu_exactly() {
    let devs = wgpu_devices();
    if devs.is_empty() {
        common::skip_backend("wgpu", "exact segment_sum: no wgpu device");
        return;
    }
    for (name, b) in zoo() {
        for &f in &WIDTHS {
            let x = rand_f32(&[b.num_src, f], (b.num_edges() * 7 + f) as u64);
            let b = b.clone();
            let op = move |x: &[Tensor]| ops::segment_sum(&x[0], &b);
            let (out, grads) = common::run(&op, std::slice::from_ref(&x), Device::Cpu);
            for &dev in &devs {
                let what = format!("exact segment_sum/{name}/f={f} on {dev}");
                let (o, g) = common::run(&op, std::slice::from_ref(&x), dev);
                assert_close(&format!("{what} forward"), &out, &o, 0.0, 0.0);
                let (want, got) = (grads[0].as_ref().unwrap(), g[0].as_ref().unwrap());
                assert_close(&format!("{what} backward"), want, got, 0.0, 0.0);
            }
        }
    }
}

/// The aggregations' transposes (full-graph training's hybrid mode runs them on their
/// own), from a gradient of the dst rows to the src rows.
#[test]
fn segment_sum_transposed_over_the_zoo() {
    for (name, b) in zoo() {
        for &f in &WIDTHS {
            let g = rand_f32(&[b.num_dst, f], (b.num_edges() * 37 + f) as u64);
            for mean in [false, true] {
                let b = b.clone();
                parity(
                    &format!("segment_sum_transposed mean={mean}/{name}/f={f}"),
                    &move |g| ops::segment_sum_transposed(&g[0], &b, mean),
                    std::slice::from_ref(&g),
                );
            }
        }
    }
}

#[test]
fn segment_max_ties_go_to_the_first_edge() {
    // Values in {-1, 0, 1}: most comparisons are ties, so the argmax (hence the gradient)
    // shows whether the device scans edges in the CPU's order.
    for (name, b) in zoo() {
        // Scalar and vec4 loads.
        for f in [63, 64] {
            let mut rng = Rng::new(b.num_src as u64);
            let v = (0..b.num_src * f)
                .map(|_| rng.below(3) as f32 - 1.0)
                .collect();
            let x = Tensor::from_f32(v, &[b.num_src, f], Device::Cpu).unwrap();
            let b = b.clone();
            parity(
                &format!("segment_max/ties/{name}/f={f}"),
                &move |x| ops::segment_max(&x[0], &b),
                &[x],
            );
        }
    }
}

#[test]
fn segment_max_propagates_nan() {
    // dst 0 <- {0, 1, 2}: a NaN in the middle must win and stay.
    let b = block(3, &[&[0, 1, 2], &[2, 1]]);
    let x = vec![1.0, f32::NAN, 5.0];
    let expected = ops::segment_max(
        &Tensor::from_f32(x.clone(), &[3, 1], Device::Cpu).unwrap(),
        &b,
    )
    .unwrap()
    .to_vec_f32()
    .unwrap();
    assert!(expected[0].is_nan() && expected[1].is_nan());
    // Four features (the vec4 path): the NaN in each column at another edge, or none.
    let x4 = vec![
        1.0,
        f32::NAN,
        4.0,
        1.0,
        f32::NAN,
        2.0,
        5.0,
        2.0,
        5.0,
        3.0,
        f32::NAN,
        3.0,
    ];
    let cpu4 = Tensor::from_f32(x4.clone(), &[3, 4], Device::Cpu).unwrap();
    let expected4 = ops::segment_max(&cpu4, &b).unwrap().to_vec_f32().unwrap();
    assert!(expected4[..3].iter().all(|v| v.is_nan()) && expected4[3] == 3.0);
    for dev in gpu_devices() {
        for (x, f, want) in [(&x, 1, &expected), (&x4, 4, &expected4)] {
            let x = Tensor::from_f32(x.clone(), &[3, f], dev).unwrap();
            let got = ops::segment_max(&x, &b).unwrap().to_vec_f32().unwrap();
            assert_close(
                &format!("segment_max NaN, f = {f}, on {dev}"),
                want,
                &got,
                0.0,
                0.0,
            );
        }
    }
}

#[test]
fn index_select_and_scatter_add_with_repeated_indices() {
    for &f in &WIDTHS {
        // 4097 output rows gathered from 1000 with repeats.
        let x = rand_f32(&[1000, f], f as u64);
        let idx = rand_idx(4097, 1000, 1 + f as u64);
        parity(
            &format!("index_select/4097-of-1000/f={f}"),
            &|t| ops::index_select(&t[0], &t[1]),
            &[x, idx],
        );
        // From a table of 4097 rows, every row hit several times.
        let x = rand_f32(&[4097, f], 2 + f as u64);
        let idx = rand_idx(3 * 4097, 4097, 3 + f as u64);
        parity(
            &format!("index_select/of-4097/f={f}"),
            &|t| ops::index_select(&t[0], &t[1]),
            &[x, idx],
        );
        // 4097 rows summed into 300, some of which nothing hits.
        let src = rand_f32(&[4097, f], 4 + f as u64);
        let idx = rand_idx(4097, 250, 5 + f as u64);
        parity(
            &format!("scatter_add/4097-into-300/f={f}"),
            &|t| ops::scatter_add(&t[0], &t[1], 300),
            &[src, idx],
        );
    }
    // Empty index and empty table.
    parity(
        "index_select/empty",
        &|t| ops::index_select(&t[0], &t[1]),
        &[rand_f32(&[3, 5], 6), rand_idx(0, 3, 7)],
    );
    parity(
        "scatter_add/empty",
        &|t| ops::scatter_add(&t[0], &t[1], 4),
        &[rand_f32(&[0, 5], 8), rand_idx(0, 4, 9)],
    );
}

#[test]
fn index_select_gathers_u32_labels() {
    let labels: Vec<u32> = (0..4097).map(|i| i * 7 % 13).collect();
    let idx = rand_idx(5000, 4097, 10);
    let cpu = Tensor::from_u32(labels.clone(), &[4097, 1], Device::Cpu).unwrap();
    let expected = ops::index_select(&cpu, &idx).unwrap().to_vec_u32().unwrap();
    for dev in gpu_devices() {
        let t = Tensor::from_u32(labels.clone(), &[4097, 1], dev).unwrap();
        let i = idx.clone().to_device(dev).unwrap();
        let got = ops::index_select(&t, &i).unwrap().to_vec_u32().unwrap();
        assert_eq!(expected, got, "u32 gather on {dev}");
    }
}

#[test]
fn bad_indices_are_errors_on_devices() {
    for dev in gpu_devices() {
        let x = rand_f32(&[3, 2], 1).to_device(dev).unwrap();
        let idx = Tensor::from_u32(vec![0, 3], &[2], dev).unwrap();
        match ops::index_select(&x, &idx) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(
                    msg.contains("position 1") && msg.contains("index 3"),
                    "{msg}"
                )
            }
            other => panic!("expected InvalidArgument on {dev}, got {other:?}"),
        }
        let src = rand_f32(&[2, 2], 2).to_device(dev).unwrap();
        assert!(matches!(
            ops::scatter_add(&src, &idx, 3),
            Err(Error::InvalidArgument(_))
        ));
        let fidx = rand_f32(&[2], 3).to_device(dev).unwrap();
        assert!(matches!(
            ops::index_select(&x, &fidx),
            Err(Error::DType { .. })
        ));
        let cpu_idx = Tensor::from_u32(vec![0, 1], &[2], Device::Cpu).unwrap();
        assert!(matches!(
            ops::index_select(&x, &cpu_idx),
            Err(Error::DeviceMismatch { .. })
        ));
    }
}

#[test]
fn dispatches_past_65535_workgroups() {
    // 65,600 rows of 256 values: more than 65,535 workgroups of 256, so the grid goes 2-D.
    let (rows, f) = (65_600, 256);
    let adj: Vec<[u32; 2]> = (0..rows as u32)
        .map(|d| [d, (d + 1) % rows as u32])
        .collect();
    let adj: Vec<&[u32]> = adj.iter().map(|a| &a[..]).collect();
    let b = block(rows, &adj);
    let x = rand_f32(&[rows, f], 12);
    let idx = rand_idx(rows, 1000, 13);
    let table = rand_f32(&[1000, f], 14);
    let sum = ops::segment_sum(&x, &b).unwrap().to_vec_f32().unwrap();
    let gathered = ops::index_select(&table, &idx)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    for dev in gpu_devices() {
        let xd = x.clone().to_device(dev).unwrap();
        let got = ops::segment_sum(&xd, &b).unwrap().to_vec_f32().unwrap();
        assert_close(
            &format!("segment_sum 2-D grid on {dev}"),
            &sum,
            &got,
            0.0,
            0.0,
        );
        let t = table.clone().to_device(dev).unwrap();
        let i = idx.clone().to_device(dev).unwrap();
        let got = ops::index_select(&t, &i).unwrap().to_vec_f32().unwrap();
        assert_close(
            &format!("index_select 2-D grid on {dev}"),
            &gathered,
            &got,
            0.0,
            0.0,
        );
    }
}

/// Every graph op, forward and backward, with every storage binding capped at 32 KiB (8,192
/// values): features, offsets, edge ranges, index arrays and outputs each take several
/// bindings, and the rows read at arbitrary rows several tiles. Integer features keep the
/// forward sums exact whatever order the tiles add them in, so split and unsplit agree bit
/// for bit. All capped checks of this binary live here: the cap is shared by its threads.
#[test]
fn split_graph_ops_match_unsplit() {
    let devs = wgpu_devices();
    if devs.is_empty() {
        common::skip_backend("wgpu", "split parity: no wgpu device");
        return;
    }
    const CAP: u64 = 32 << 10;
    for (name, b) in zoo() {
        let x = rand_ints(&[b.num_src, 16], b.num_edges() as u64);
        for (op, run) in SEGMENT_OPS {
            let b = b.clone();
            split_parity(
                &format!("split {op}/{name}"),
                &move |x| run(&x[0], &b),
                std::slice::from_ref(&x),
                CAP,
                true,
            );
        }
    }
    // A table of 5,000 rows of 16 (ten tiles) gathered into 7,000 rows, whose backward is
    // the scatter-add; and 7,000 rows summed into 3,000.
    let x = rand_f32(&[5000, 16], 30);
    let idx = rand_idx(7000, 5000, 31);
    let gather = |t: &[Tensor]| ops::index_select(&t[0], &t[1]);
    split_parity("split index_select", &gather, &[x, idx], CAP, true);
    let src = rand_f32(&[7000, 16], 32);
    let idx = rand_idx(7000, 3000, 33);
    let scatter = |t: &[Tensor]| ops::scatter_add(&t[0], &t[1], 3000);
    split_parity("split scatter_add", &scatter, &[src, idx], CAP, true);
    // u32 labels: 40,000 rows of one value, gathered by 20,000 ids.
    let labels: Vec<u32> = (0..40_000).map(|i| i * 7 % 13).collect();
    let idx = rand_idx(20_000, 40_000, 34);
    let cpu = Tensor::from_u32(labels.clone(), &[40_000, 1], Device::Cpu).unwrap();
    let want = ops::index_select(&cpu, &idx).unwrap().to_vec_u32().unwrap();
    let star: Vec<u32> = (1..=9000).collect();
    let star = block(9001, &[&star]);
    for dev in devs {
        let _cap = BindingCap::new(dev, CAP);
        let t = Tensor::from_u32(labels.clone(), &[40_000, 1], dev).unwrap();
        let got = ops::index_select(&t, &idx.clone().to_device(dev).unwrap()).unwrap();
        assert_eq!(want, got.to_vec_u32().unwrap(), "split u32 gather on {dev}");
        // One dst whose 9,000 in-edges alone pass the cap: an error naming it.
        let x = rand_f32(&[9001, 1], 35).to_device(dev).unwrap();
        match ops::segment_sum(&x, &star) {
            Err(Error::Backend { msg, .. }) => assert!(msg.contains("row 0 alone"), "{msg}"),
            other => panic!("expected a Backend error on {dev}, got {other:?}"),
        }
    }
}
