//! Op parity of the graph ops and the aggregators: segment sum, mean, max, softmax and
//! weighted sum over the blocks of [`super::zoo::blocks`] at widths that are and are not
//! multiples of 4, the row gather and scatter, the LSTM cell and aggregator; and, on wgpu,
//! every op again with its storage bindings capped so that it splits its work as past an
//! adapter's binding limit.

use std::sync::Arc;

use super::compare::Tol;
use super::parity::{compare_runs, run_op, OpCheck, OpFn};
use super::zoo::{self, rand_away_f32, rand_f32, rand_idx, rand_ints};
use super::{Ctx, Outcome};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{sample_blocks, synth::SynthSpec, Block};
use crate::nn::LstmParams;
use crate::ops;
use crate::tensor::Tensor;

/// Feature widths: one value, odd widths (scalar loads), a multiple of 4 (vec4 loads), and
/// past 256 (more columns than a row group has lanes).
fn widths(full: bool) -> &'static [usize] {
    if full {
        &[1, 3, 5, 64, 257]
    } else {
        &[3, 64]
    }
}

type SegmentOp = fn(&Tensor, &Arc<Block>) -> Result<Tensor>;

const SEGMENT_OPS: [(&str, SegmentOp); 3] = [
    ("segment_sum", ops::segment_sum),
    ("segment_mean", ops::segment_mean),
    ("segment_max", ops::segment_max),
];

fn on(t: &Tensor, dev: Device) -> Result<Tensor> {
    t.clone().to_device(dev)
}

/// Runs every graph-op record.
pub fn run(ctx: &mut Ctx<'_>) {
    let full = ctx.full();
    let blocks = match zoo::blocks(full) {
        Ok(b) => b,
        Err(e) => {
            ctx.check("graph op inputs", || Err(e));
            return;
        }
    };
    for (op, f) in SEGMENT_OPS {
        ctx.op(op, |c| {
            for (name, b) in &blocks {
                for &w in widths(full) {
                    let x = rand_f32(&[b.num_src, w], (b.num_edges() * 31 + w) as u64)?;
                    let b = b.clone();
                    let g = move |x: &[Tensor]| f(&x[0], &b);
                    c.parity(&format!("{name}, f={w}"), &g, &[x], Tol::F32)?;
                }
            }
            if op == "segment_max" {
                segment_max_edges(c, &blocks)?;
            }
            if full && op == "segment_sum" {
                past_65535_workgroups(c)?;
            }
            Ok(())
        });
    }
    ctx.op("segment_sum_transposed", |c| {
        for (name, b) in &blocks {
            for &w in widths(full) {
                let g = rand_f32(&[b.num_dst, w], (b.num_edges() * 37 + w) as u64)?;
                for mean in [false, true] {
                    let b = b.clone();
                    let f = move |g: &[Tensor]| ops::segment_sum_transposed(&g[0], &b, mean);
                    c.parity(
                        &format!("{name}, f={w}, mean={mean}"),
                        &f,
                        std::slice::from_ref(&g),
                        Tol::F32,
                    )?;
                }
            }
        }
        Ok(())
    });
    ctx.op("index_select", |c| gathers(c, full));
    ctx.op("scatter_add", |c| {
        for &w in widths(full) {
            // 4097 rows summed into 300, some of which nothing hits.
            let src = rand_f32(&[4097, w], 4 + w as u64)?;
            let idx = rand_idx(4097, 250, 5 + w as u64)?;
            let f = |t: &[Tensor]| ops::scatter_add(&t[0], &t[1], 300);
            c.parity(&format!("4097 into 300, f={w}"), &f, &[src, idx], Tol::F32)?;
        }
        let f = |t: &[Tensor]| ops::scatter_add(&t[0], &t[1], 4);
        c.parity(
            "empty",
            &f,
            &[rand_f32(&[0, 5], 8)?, rand_idx(0, 4, 9)?],
            Tol::F32,
        )
    });
    let dev = ctx.dev;
    ctx.check("index_select bad index is an error", || {
        let x = rand_f32(&[3, 2], 1)?.to_device(dev)?;
        let idx = Tensor::from_u32(vec![0, 3], &[2], dev)?;
        Ok(match ops::index_select(&x, &idx) {
            Err(Error::InvalidArgument(msg)) => {
                let ok = msg.contains("position 1") && msg.contains("index 3");
                Outcome::verdict(ok, format!("the device says: {msg}"))
            }
            Err(e) => Outcome::verdict(false, format!("another error than expected: {e}")),
            Ok(_) => Outcome::verdict(false, "index 3 of 3 rows was accepted"),
        })
    });
    aggregators(ctx, &blocks, full);
    splits(ctx, &blocks, full);
}

/// Ties (the max and its gradient go to the first edge) and NaN (propagates).
fn segment_max_edges(c: &mut OpCheck, blocks: &[(String, Arc<Block>)]) -> Result<()> {
    for (name, b) in blocks {
        for w in [63, 64] {
            let mut rng = crate::rng::Rng::new(b.num_src as u64);
            let v = (0..b.num_src * w)
                .map(|_| rng.below(3) as f32 - 1.0)
                .collect();
            let x = Tensor::from_f32(v, &[b.num_src, w], Device::Cpu)?;
            let b = b.clone();
            let f = move |x: &[Tensor]| ops::segment_max(&x[0], &b);
            c.parity(&format!("ties, {name}, f={w}"), &f, &[x], Tol::F32)?;
        }
    }
    // dst 0 <- {0, 1, 2}, dst 1 <- {2, 1}: a NaN anywhere in a column wins and stays.
    let b = zoo::block(3, &[&[0, 1, 2], &[2, 1]])?;
    let nan = f32::NAN;
    let x1 = Tensor::from_f32(vec![1.0, nan, 5.0], &[3, 1], Device::Cpu)?;
    #[rustfmt::skip]
    let x4 = Tensor::from_f32(
        vec![1.0, nan, 4.0, 1.0, nan, 2.0, 5.0, 2.0, 5.0, 3.0, nan, 3.0],
        &[3, 4],
        Device::Cpu,
    )?;
    for (label, x) in [("NaN, f=1", x1), ("NaN, f=4", x4)] {
        c.forward(label, &[x], |x| ops::segment_max(&x[0], &b), Tol::EXACT)?;
    }
    Ok(())
}

/// 65,600 rows of 256 values: more than 65,535 workgroups, so the grid goes 2-D.
fn past_65535_workgroups(c: &mut OpCheck) -> Result<()> {
    let rows = 65_600u32;
    let adj: Vec<[u32; 2]> = (0..rows).map(|d| [d, (d + 1) % rows]).collect();
    let adj: Vec<&[u32]> = adj.iter().map(|a| &a[..]).collect();
    let b = zoo::block(rows as usize, &adj)?;
    let x = rand_f32(&[rows as usize, 256], 12)?;
    c.forward(
        "65,600 rows (2-D grid)",
        &[x],
        |x| ops::segment_sum(&x[0], &b),
        Tol::F32,
    )
}

fn gathers(c: &mut OpCheck, full: bool) -> Result<()> {
    let f = |t: &[Tensor]| ops::index_select(&t[0], &t[1]);
    for &w in widths(full) {
        // 4097 output rows gathered from 1000 with repeats.
        let x = rand_f32(&[1000, w], w as u64)?;
        let idx = rand_idx(4097, 1000, 1 + w as u64)?;
        c.parity(&format!("4097 of 1000, f={w}"), &f, &[x, idx], Tol::F32)?;
    }
    c.parity(
        "empty",
        &f,
        &[rand_f32(&[3, 5], 6)?, rand_idx(0, 3, 7)?],
        Tol::F32,
    )?;
    // u32 labels, gathered exactly.
    let labels: Vec<u32> = (0..4097).map(|i| i * 7 % 13).collect();
    let t = Tensor::from_u32(labels, &[4097, 1], Device::Cpu)?;
    c.forward("u32 labels", &[t, rand_idx(5000, 4097, 10)?], f, Tol::EXACT)?;
    if full {
        let table = rand_f32(&[1000, 256], 14)?;
        let idx = rand_idx(65_600, 1000, 13)?;
        c.forward("65,600 rows (2-D grid)", &[table, idx], f, Tol::EXACT)?;
    }
    Ok(())
}

/// The aggregators' ops: each kernel (forward and its dedicated backward) on the same
/// inputs, and the composition through autograd.
fn aggregators(ctx: &mut Ctx<'_>, blocks: &[(String, Arc<Block>)], full: bool) {
    // The long rows of the star make the LSTM's recurrence 5,000 steps: sampled blocks
    // and the small ones suffice for it.
    let short: Vec<&(String, Arc<Block>)> =
        blocks.iter().filter(|(_, b)| b.num_src < 5000).collect();
    ctx.op("segment_softmax", |c| {
        for (name, b) in blocks {
            for heads in [1, 3] {
                let e = b.num_edges();
                let x = ops::mul_scalar(&rand_f32(&[e, heads], 5)?, 4.0)?;
                let g = rand_f32(&[e, heads], 6)?;
                let y = ops::segment_softmax(&x, b)?;
                let dx = ops::segment_softmax_backward(&y, &g, b)?;
                let label = format!("{name}, {heads} heads");
                let y2 = ops::segment_softmax(&on(&x, c.dev)?, b)?;
                c.tensors(&format!("{label} forward"), &y, &y2, Tol::F32)?;
                let dx2 = ops::segment_softmax_backward(&on(&y, c.dev)?, &on(&g, c.dev)?, b)?;
                c.tensors(&format!("{label} backward"), &dx, &dx2, Tol::F32)?;
                let bb = b.clone();
                let f = move |x: &[Tensor]| ops::segment_softmax(&x[0], &bb);
                c.parity(&format!("{label} autograd"), &f, &[x], Tol::F32)?;
            }
        }
        Ok(())
    });
    ctx.op("segment_weighted_sum", |c| {
        // Heads of 16 columns over the 5,000-edge star: 80,000 loop iterations when one
        // invocation of the weight-gradient kernel took a whole row, past llvmpipe's
        // 65,535 (docs/GPU.md); the quick check keeps them so that CI sees a return of it.
        let shapes: &[(usize, usize)] = if full {
            &[(1, 1), (2, 3), (4, 16)]
        } else {
            &[(1, 3), (4, 16)]
        };
        for (name, b) in blocks {
            for &(heads, d) in shapes {
                let (e, ns, nd) = (b.num_edges(), b.num_src, b.num_dst);
                let x = rand_f32(&[ns, heads * d], 7)?;
                let a = rand_f32(&[e, heads], 8)?;
                let g = rand_f32(&[nd, heads * d], 9)?;
                let label = format!("{name}, {heads} heads of {d}");
                let y = ops::segment_weighted_sum(&x, &a, b)?;
                let (dx, da) = ops::segment_weighted_sum_backward(&x, &a, &g, b, true, true)?;
                let (xd, ad, gd) = (on(&x, c.dev)?, on(&a, c.dev)?, on(&g, c.dev)?);
                let y2 = ops::segment_weighted_sum(&xd, &ad, b)?;
                c.tensors(&format!("{label} forward"), &y, &y2, Tol::F32)?;
                let (dx2, da2) = ops::segment_weighted_sum_backward(&xd, &ad, &gd, b, true, true)?;
                let pairs = [("x gradient", dx, dx2), ("a gradient", da, da2)];
                for (what, want, got) in pairs {
                    let (Some(want), Some(got)) = (want, got) else {
                        return Err(Error::invalid(format!("{label}: no {what}")));
                    };
                    c.tensors(&format!("{label} {what}"), &want, &got, Tol::F32)?;
                }
            }
        }
        Ok(())
    });
    ctx.op("lstm_cell", |c| {
        for (n, h) in [(1, 1), (63, 4), (257, 16), (4097, 1)] {
            let gates = ops::mul_scalar(&rand_away_f32(&[n, 4 * h], n as u64)?, 2.0)?;
            let cp = rand_f32(&[n, h], 2 * n as u64)?;
            let g = rand_f32(&[n, 2 * h], 3 * n as u64)?;
            let (out, acts) = ops::lstm_cell_forward(&gates, &cp)?;
            let (dz, dc) = ops::lstm_cell_backward(&acts, &cp, &g)?;
            let label = format!("n={n} H={h}");
            let (o, a) = ops::lstm_cell_forward(&on(&gates, c.dev)?, &on(&cp, c.dev)?)?;
            c.tensors(&format!("{label} output"), &out, &o, Tol::F32)?;
            c.tensors(&format!("{label} saved gates"), &acts, &a, Tol::F32)?;
            let (dz2, dc2) =
                ops::lstm_cell_backward(&on(&acts, c.dev)?, &on(&cp, c.dev)?, &on(&g, c.dev)?)?;
            c.tensors(&format!("{label} gate gradient"), &dz, &dz2, Tol::F32)?;
            c.tensors(&format!("{label} c gradient"), &dc, &dc2, Tol::F32)?;
        }
        let f = |x: &[Tensor]| ops::lstm_cell(&x[0], &x[1]);
        let inputs = [rand_f32(&[63, 16], 20)?, rand_f32(&[63, 4], 21)?];
        c.parity("autograd", &f, &inputs, Tol::F32)
    });
    ctx.op("lstm aggregator", |c| {
        for (name, b) in &short {
            for split in [None, Some(3)] {
                let bb = b.clone();
                let inputs = lstm_inputs(b.num_src, 25)?;
                c.parity(
                    &format!("{name}, explosion split {split:?}"),
                    &move |x| lstm(&bb, x, split),
                    &inputs,
                    Tol::F32,
                )?;
            }
        }
        Ok(())
    });
}

/// The input rows and weights of an LSTM aggregator over 5 features.
fn lstm_inputs(num_src: usize, seed: u64) -> Result<[Tensor; 4]> {
    Ok([
        rand_f32(&[num_src, 5], seed)?,
        ops::mul_scalar(&rand_f32(&[5, 20], seed + 1)?, 0.5)?,
        ops::mul_scalar(&rand_f32(&[5, 20], seed + 2)?, 0.5)?,
        rand_f32(&[20], seed + 3)?,
    ])
}

fn lstm(b: &Arc<Block>, x: &[Tensor], split: Option<usize>) -> Result<Tensor> {
    let p = LstmParams {
        weight_ih: x[1].clone(),
        weight_hh: x[2].clone(),
        bias: x[3].clone(),
    };
    p.aggregate(b, &x[0], split)
}

/// Caps every storage binding of a device with binding limits (wgpu) at some bytes until
/// dropped (also when a check panics); nothing on other devices.
struct BindingCap(Device);

impl BindingCap {
    fn new(dev: Device, bytes: u64) -> Result<BindingCap> {
        dev.set_binding_cap(Some(bytes))?;
        Ok(BindingCap(dev))
    }
}

impl Drop for BindingCap {
    fn drop(&mut self) {
        let _ = self.0.set_binding_cap(None);
    }
}

/// `f` on the device with every binding capped at `cap` bytes against the same op
/// uncapped (bit for bit when `exact`: the op keeps its order of additions) and the CPU.
fn split(
    c: &mut OpCheck,
    label: &str,
    f: &OpFn<'_>,
    inputs: &[Tensor],
    cap: u64,
    exact: bool,
) -> Result<()> {
    let want = run_op(f, inputs, Device::Cpu)?;
    let split = {
        let _cap = BindingCap::new(c.dev, cap)?;
        run_op(f, inputs, c.dev)?
    };
    let whole = run_op(f, inputs, c.dev)?;
    let tol = if exact { Tol::EXACT } else { Tol::F32 };
    c.add(
        &format!("{label}: split against whole"),
        compare_runs(&whole, &split, tol)?,
    );
    c.add(
        &format!("{label}: split against the cpu"),
        compare_runs(&want, &split, Tol::F32)?,
    );
    Ok(())
}

/// Every op again with its storage bindings capped (wgpu): what an adapter's binding
/// limit (often 128 MiB) does to a large tensor, on small ones.
fn splits(ctx: &mut Ctx<'_>, blocks: &[(String, Arc<Block>)], full: bool) {
    if !ctx.dev.has_binding_limit() {
        ctx.check("split bindings", || {
            Ok(Outcome::skip(
                "storage binding limits are wgpu's: this device has none to split at",
            ))
        });
        return;
    }
    ctx.op("split bindings: dense ops", |c| split_dense(c, full));
    ctx.op("split bindings: graph ops", |c| split_graph(c, blocks));
    ctx.op("split bindings: aggregators", |c| {
        split_aggregators(c, full)
    });
}

/// The dense ops at 1 MiB bindings: elementwise, broadcasts, reductions, row-wise ops,
/// slices, and matmul's row and k splits.
fn split_dense(c: &mut OpCheck, full: bool) -> Result<()> {
    const CAP: u64 = 1 << 20;
    let (r, w) = if full { (4615, 130) } else { (2100, 130) };
    let x = rand_away_f32(&[r, w], 200)?;
    let xi = rand_ints(&[r, w], 205)?;
    let one = std::slice::from_ref(&x);
    split(c, "relu", &|x| ops::relu(&x[0]), one, CAP, true)?;
    let same = rand_away_f32(&[r, w], 201)?;
    split(
        c,
        "mul",
        &|x| ops::mul(&x[0], &x[1]),
        &[x.clone(), same],
        CAP,
        true,
    )?;
    let col = rand_away_f32(&[r, 1], 203)?;
    split(
        c,
        "div col",
        &|x| ops::div(&x[0], &x[1]),
        &[x.clone(), col],
        CAP,
        true,
    )?;
    let ione = std::slice::from_ref(&xi);
    split(c, "sum_dim 0", &|x| ops::sum_dim(&x[0], 0), ione, CAP, true)?;
    split(c, "sum_dim 1", &|x| ops::sum_dim(&x[0], 1), ione, CAP, true)?;
    let logits = ops::mul_scalar(&x, 4.0)?;
    let lone = std::slice::from_ref(&logits);
    split(
        c,
        "log_softmax",
        &|x| ops::log_softmax(&x[0]),
        lone,
        CAP,
        true,
    )?;
    let y = rand_idx(r, w as u32, 216)?;
    let ce = |x: &[Tensor]| ops::cross_entropy(&x[0], &x[1], None);
    split(c, "cross_entropy", &ce, &[logits.clone(), y], CAP, true)?;
    let sl = |x: &[Tensor]| ops::slice(&x[0], 1, 7, 100);
    split(c, "slice", &sl, one, CAP, true)?;
    // Small integers keep every sum of the forward exact whatever the order (the
    // backward's random weights would not), so the split forward is the CPU's exactly.
    for (label, ta, b) in [
        ("matmul rows", false, rand_ints(&[w, 20], 206)?),
        ("matmul k", true, rand_ints(&[r, 20], 208)?),
    ] {
        let inputs = [xi.clone(), b];
        let f = |x: &[Tensor]| ops::matmul(&x[0], &x[1], ta, false);
        let _cap = BindingCap::new(c.dev, CAP)?;
        c.forward(label, &inputs, f, Tol::EXACT)?;
    }
    if full {
        let tall = rand_f32(&[300_000, 2], 219)?;
        let tall_col = rand_away_f32(&[300_000, 1], 220)?;
        let f = |x: &[Tensor]| ops::sub(&x[0], &x[1]);
        split(c, "tall sub col", &f, &[tall, tall_col], CAP, true)?;
    }
    Ok(())
}

/// The segment ops over each block, gather and scatter at 32 KiB bindings.
fn split_graph(c: &mut OpCheck, blocks: &[(String, Arc<Block>)]) -> Result<()> {
    const CAP: u64 = 32 << 10;
    for (name, b) in blocks {
        let x = rand_ints(&[b.num_src, 16], b.num_edges() as u64)?;
        for (op, f) in SEGMENT_OPS {
            let b = b.clone();
            let g = move |x: &[Tensor]| f(&x[0], &b);
            split(
                c,
                &format!("{op}, {name}"),
                &g,
                std::slice::from_ref(&x),
                CAP,
                true,
            )?;
        }
    }
    let gather = |t: &[Tensor]| ops::index_select(&t[0], &t[1]);
    let inputs = [rand_f32(&[5000, 16], 30)?, rand_idx(7000, 5000, 31)?];
    split(c, "index_select", &gather, &inputs, CAP, true)?;
    let scatter = |t: &[Tensor]| ops::scatter_add(&t[0], &t[1], 3000);
    let inputs = [rand_f32(&[7000, 16], 32)?, rand_idx(7000, 3000, 33)?];
    split(c, "scatter_add", &scatter, &inputs, CAP, true)
}

/// The attention and LSTM aggregators' ops over a cora-like block at 16 KiB bindings.
fn split_aggregators(c: &mut OpCheck, full: bool) -> Result<()> {
    const CAP: u64 = 16 << 10;
    let graph = SynthSpec::parse("cora-like")?
        .generate()?
        .graph
        .symmetrize();
    let seeds: Vec<u32> = if full {
        (0..graph.num_nodes as u32).collect()
    } else {
        (0..graph.num_nodes as u32).step_by(3).collect()
    };
    let b = sample_blocks(&graph, &seeds, &[-1], 3)?;
    let b = Arc::new(b.into_iter().next().ok_or(Error::invalid("no block"))?);
    let e = b.num_edges();
    let f = |x: &[Tensor]| ops::lstm_cell(&x[0], &x[1]);
    let inputs = [rand_f32(&[5000, 16], 40)?, rand_f32(&[5000, 4], 41)?];
    split(c, "lstm_cell", &f, &inputs, CAP, true)?;
    let bb = b.clone();
    let f = move |x: &[Tensor]| ops::segment_softmax(&x[0], &bb);
    split(
        c,
        "segment_softmax",
        &f,
        &[rand_f32(&[e, 2], 42)?],
        CAP,
        true,
    )?;
    let bb = b.clone();
    let f = move |x: &[Tensor]| ops::segment_weighted_sum(&x[0], &x[1], &bb);
    for (d, seed) in [(6, 43), (8, 49)] {
        let inputs = [
            rand_ints(&[b.num_src, d], seed)?,
            rand_ints(&[e, 2], seed + 1)?,
        ];
        split(
            c,
            &format!("segment_weighted_sum, 2 heads of {}", d / 2),
            &f,
            &inputs,
            CAP,
            true,
        )?;
    }
    // The LSTM's weight gradient adds k in chunks: split and whole agree within
    // tolerance, not bit for bit.
    let bb = b.clone();
    let split_at = if full {
        vec![None, Some(3)]
    } else {
        vec![Some(3)]
    };
    for s in split_at {
        let bb = bb.clone();
        let f = move |x: &[Tensor]| lstm(&bb, x, s);
        let inputs = lstm_inputs(b.num_src, 45)?;
        split(
            c,
            &format!("lstm aggregator, explosion split {s:?}"),
            &f,
            &inputs,
            CAP,
            false,
        )?;
    }
    Ok(())
}
