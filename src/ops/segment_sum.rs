//! Sum and mean aggregation over a block's in-edges: one output row per dst node.
//!
//! For `x[num_src, f]` and a [`Block`] with in-edges `N(d)` (edge order, duplicates and
//! self-loops included):
//! - `segment_sum(x)[d, :] = Σ_{u ∈ N(d)} x[u, :]`;
//! - `segment_mean(x)[d, :] = segment_sum(x)[d, :] / |N(d)|`, and 0 when `|N(d)| = 0`.
//!
//! Backward, over the transposed CSR (the out-edges `(d, e)` of each src `u`):
//! `x̄[u, :] = Σ_{(d, e) out of u} ḡ[d, :]` (times `1/|N(d)|` for the mean).
//!
//! Both directions give one task one output row (dst rows forward, src rows backward), so
//! neither needs float atomics, and each row is summed in edge order: deterministic and
//! independent of thread count. Blocks are passed as `&Arc<Block>` so that the backward
//! rule keeps the graph without copying it.
//!
//! On wgpu (`shaders/segment_sum.wgsl`) a group of threads owns an output row (dst rows
//! forward, src rows backward) and walks its edges together, lanes over features; one
//! invocation owns each output value (four, with `vec4` loads, when `f % 4 == 0`) and sums
//! in the same edge order as the CPU, so the sum matches it bit for bit; the block's index
//! arrays are uploaded once per block ([`BlockBuffers`]). Past
//! the storage-binding limit it runs over ranges of output rows, times tiles of the input
//! rows it reads at arbitrary rows (see `src/device/wgpu/split.rs`). Backward, the
//! out-edges of a src row list their dst rows in increasing order, so the sums keep their
//! order across tiles and splitting does not change them; forward, the in-edges of a dst
//! row are summed tile by tile, which may round differently from one pass.
//! On CUDA (`kernels/segment_sum.cu`) a warp owns an output row, lanes over its features,
//! in the same edge order.

use std::sync::Arc;

use crate::autograd::record;
use crate::device::cpu::{CpuBuffer, CpuData, CpuElem};
use crate::device::kernels::segment_sum::{SegmentPass, SegmentSumKernels};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::graph::Block;
use crate::meta::{Replay, SymBlock, Val};
use crate::ops::cpu_output;
use crate::ops::gpu::GpuTensors;
use crate::ops::rows::{dims2, fill_rows, rows_from_fn, u32_count};
use crate::prefetch;
use crate::tensor::{Storage, Tensor};

/// Per dst node, the sum of its in-neighbours' rows of `x` (`[num_src, f]` to `[num_dst, f]`).
pub fn segment_sum(x: &Tensor, block: &Arc<Block>) -> Result<Tensor> {
    segment(x, block, false)
}

/// Per dst node, the mean of its in-neighbours' rows of `x`; zero for a node without any.
pub fn segment_mean(x: &Tensor, block: &Arc<Block>) -> Result<Tensor> {
    segment(x, block, true)
}

fn segment(x: &Tensor, block: &Arc<Block>, mean: bool) -> Result<Tensor> {
    let op = if mean { "segment_mean" } else { "segment_sum" };
    x.expect_float(op)?;
    let f = check_input(op, x, block)?;
    let shape = vec![block.num_dst, f];
    let out = match &*x.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(op, &b.data, v => cpu_forward(v, block, f, mean)?);
            cpu_output(buf, shape, x)
        }
        s => on_gpu!(s, |D, b| gpu_pass::<D>(op, true, b, x, block, f, mean)?),
    };
    let block = block.clone();
    Ok(record(op, out, &[x], move |g| {
        // The mean's scaling goes into the gradient autograd hands the rule, where nothing
        // else holds it: once per dst row rather than once per edge.
        let scaled = mean && cpu_scale_in_place(g, &block, f)?;
        Ok(vec![Some(transposed(op, g, &block, f, mean && !scaled)?)])
    }))
}

/// The backward of [`segment_sum`] (`mean`: of [`segment_mean`]) as an op of its own:
/// from `g[num_dst, f]`, `x̄[num_src, f]` with `x̄[u, :] = Σ_{(d, e) out of u} g[d, :]`
/// (times `1/|N(d)|` for the mean). The aggregation's gradient without its input, which
/// full-graph training's hybrid mode needs (it caches the aggregation, not the input).
/// Not recorded for autograd.
pub fn segment_sum_transposed(g: &Tensor, block: &Arc<Block>, mean: bool) -> Result<Tensor> {
    let op = if mean {
        "segment_mean_transposed"
    } else {
        "segment_sum_transposed"
    };
    g.expect_float(op)?;
    let (rows, f) = dims2(op, "g", g)?;
    if rows != block.num_dst {
        return Err(Error::shape(
            op,
            format!(
                "g has {rows} rows (shape {:?}) but the block has {} dst nodes",
                g.shape(),
                block.num_dst
            ),
        ));
    }
    transposed(op, g, block, f, mean)
}

/// `x̄[num_src, f]` from `g[num_dst, f]` over the block's transposed CSR.
fn transposed(
    op: &'static str,
    g: &Tensor,
    block: &Arc<Block>,
    f: usize,
    mean: bool,
) -> Result<Tensor> {
    let shape = vec![block.num_src, f];
    Ok(match &*g.storage() {
        Storage::Cpu(b) => {
            let buf = float_cpu!(op, &b.data, v => cpu_backward(v, block, f, mean)?);
            cpu_output(buf, shape, g)
        }
        s => on_gpu!(s, |D, b| gpu_pass::<D>(op, false, b, g, block, f, mean)?),
    })
}

/// The forward (`forward`) or backward pass on a GPU backend, from `input` (the buffer of
/// `like`, shaped `[rows_in, f]`) to `[rows_out, f]`.
fn gpu_pass<D: GpuTensors + SegmentSumKernels>(
    op: &'static str,
    forward: bool,
    input: &D::Buffer,
    like: &Tensor,
    block: &Block,
    f: usize,
    mean: bool,
) -> Result<Tensor> {
    let (rows_in, rows_out, n) = pass_rows(op, forward, block, f)?;
    let pass = SegmentPass {
        forward,
        mean,
        f,
        rows_in,
        rows_out,
        n,
    };
    let out = D::context_of(input).segment_sum(op, block, pass, input)?;
    Ok(D::output(out, vec![rows_out, f], like))
}

/// Input and output rows of the forward (src to dst rows) or backward (dst to src) pass, and
/// its output values as the u32 the kernels count with; errors if either side passes u32.
fn pass_rows(
    op: &'static str,
    forward: bool,
    block: &Block,
    f: usize,
) -> Result<(usize, usize, u32)> {
    let (rows_in, rows_out) = if forward {
        (block.num_src, block.num_dst)
    } else {
        (block.num_dst, block.num_src)
    };
    u32_count(op, "the input", rows_in * f)?;
    Ok((
        rows_in,
        rows_out,
        u32_count(op, "the output", rows_out * f)?,
    ))
}

/// Checks that `x` is `[num_src, f]` (a [`Block`] is well formed by construction); returns
/// `f`.
pub(crate) fn check_input(op: &'static str, x: &Tensor, block: &Block) -> Result<usize> {
    let (rows, f) = dims2(op, "x", x)?;
    if rows != block.num_src {
        return Err(Error::shape(
            op,
            format!(
                "x has {rows} rows (shape {:?}) but the block has {} src nodes",
                x.shape(),
                block.num_src
            ),
        ));
    }
    Ok(f)
}

fn cpu_forward<T: Float + CpuElem>(x: &[T], b: &Block, f: usize, mean: bool) -> Result<CpuBuffer> {
    let work = (b.num_edges() + b.num_dst) * f;
    rows_from_fn(b.num_dst, f, work, |d, row: &mut [T]| {
        let (s, e) = (b.indptr[d] as usize, b.indptr[d + 1] as usize);
        for p in s..e {
            prefetch::row_at(x, &b.indices, p + prefetch::DISTANCE, f);
            let u = b.indices[p] as usize;
            let xu = &x[u * f..(u + 1) * f];
            row.iter_mut().zip(xu).for_each(|(o, &v)| *o += v);
        }
        if mean && e > s {
            let deg = T::from_f64((e - s) as f64);
            row.iter_mut().for_each(|o| *o = *o / deg);
        }
    })
}

/// Divides each row `d` of `g` (`[num_dst, f]`, on the CPU, held by nothing else) by
/// `|N(d)|` in place (rows without in-edges, which no src row reads, stay): the values
/// [`cpu_backward`]'s mean computes per edge, `g[d, j] / |N(d)|`, computed once each, so
/// the sum over `g`'s scaled rows has the bits of the mean's. False (nothing done) on a
/// GPU, where `g` is held elsewhere, or in another dtype.
fn cpu_scale_in_place(g: &Tensor, b: &Block, f: usize) -> Result<bool> {
    fn go<T: Float>(g: &mut [T], b: &Block, f: usize) {
        let work = 2 * g.len();
        fill_rows(g, f, work, |d, row: &mut [T]| {
            let deg = b.degree(d);
            if deg > 0 {
                let deg = T::from_f64(deg as f64);
                row.iter_mut().for_each(|v| *v = *v / deg);
            }
        });
    }
    if g.device() != Device::Cpu || !(g.storage_is_unique() && g.is_sole_handle()) {
        return Ok(false);
    }
    let mut gs = g.storage_mut();
    let Storage::Cpu(buf) = &mut *gs else {
        return Ok(false);
    };
    match &mut buf.data {
        CpuData::F32(v) => go(v, b, f),
        CpuData::F64(v) => go(v, b, f),
        _ => return Ok(false),
    }
    Ok(true)
}

fn cpu_backward<T: Float + CpuElem>(g: &[T], b: &Block, f: usize, mean: bool) -> Result<CpuBuffer> {
    let work = (b.num_edges() + b.num_src) * f;
    rows_from_fn(b.num_src, f, work, |u, row: &mut [T]| {
        let (s, e) = (b.t_indptr[u] as usize, b.t_indptr[u + 1] as usize);
        for p in s..e {
            prefetch::row_at(g, &b.t_dst, p + prefetch::DISTANCE, f);
            let d = b.t_dst[p] as usize;
            let gd = &g[d * f..(d + 1) * f];
            if mean {
                let deg = T::from_f64(b.degree(d) as f64);
                row.iter_mut().zip(gd).for_each(|(o, &v)| *o += v / deg);
            } else {
                row.iter_mut().zip(gd).for_each(|(o, &v)| *o += v);
            }
        }
    })
}

/// Meta arm of [`segment_sum`] and [`segment_mean`] ([`crate::meta`]): the block's arrays
/// uploaded first (on a GPU, by the first op that reads the block), then `[num_dst, c]`;
/// keeps the block; its rule allocates `[num_src, c]`.
pub fn meta_segment_sum(r: &mut Replay, x: &Val, block: &SymBlock) -> Val {
    let num_dst = block.sizes.num_dst;
    r.block_upload(block);
    let out = r.alloc(num_dst, x.cols);
    let saved = vec![r.share(block.buf)];
    r.unary(x, out, (num_dst, x.cols), saved, false)
}

/// Meta arm of [`segment_sum_transposed`] (not recorded): the block's arrays, then
/// `[num_src, c]`.
pub fn meta_segment_sum_transposed(r: &mut Replay, g: &Val, block: &SymBlock) -> Val {
    r.block_upload(block);
    r.input(block.sizes.num_src, g.cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    fn block() -> Arc<Block> {
        // dst 0 <- {1, 0}, dst 1 <- {} ; src 2 feeds nobody.
        Arc::new(Block::new(3, vec![0, 2, 2], vec![1, 0], vec![0, 1, 2]).unwrap())
    }

    #[test]
    fn sums_and_means() {
        let x = Tensor::from_f32(vec![1., 2., 3., 4., 5., 6.], &[3, 2], Device::Cpu).unwrap();
        let s = segment_sum(&x, &block()).unwrap();
        assert_eq!(s.shape(), &[2, 2]);
        assert_eq!(s.to_vec_f32().unwrap(), vec![4., 6., 0., 0.]);
        let m = segment_mean(&x, &block()).unwrap();
        assert_eq!(m.to_vec_f32().unwrap(), vec![2., 3., 0., 0.]);
    }

    #[test]
    fn wrong_rows_are_a_shape_error() {
        let x = Tensor::from_f32(vec![0.; 4], &[2, 2], Device::Cpu).unwrap();
        assert!(matches!(
            segment_sum(&x, &block()),
            Err(Error::Shape { .. })
        ));
    }

    #[test]
    fn results_do_not_depend_on_thread_count() {
        use crate::ops::{segment_max, sum_all};
        // Big enough for the parallel paths (work > PAR_MIN), with repeated sources.
        let (num_src, num_dst, deg, f) = (3000, 1000, 6, 8);
        let mut rng = crate::rng::Rng::new(5);
        let indptr: Vec<u32> = (0..=num_dst).map(|d| (d * deg) as u32).collect();
        let indices: Vec<u32> = (0..num_dst * deg)
            .map(|_| rng.below(num_src as u64) as u32)
            .collect();
        let b =
            Arc::new(Block::new(num_src, indptr, indices, (0..num_src as u32).collect()).unwrap());
        let xv: Vec<f32> = (0..num_src * f).map(|_| rng.normal() as f32).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut outs = Vec::new();
                for op in [segment_sum, segment_mean, segment_max] {
                    let x = Tensor::from_f32(xv.clone(), &[num_src, f], Device::Cpu)
                        .unwrap()
                        .requires_grad_leaf();
                    let y = op(&x, &b).unwrap();
                    sum_all(&crate::ops::mul(&y, &y).unwrap())
                        .unwrap()
                        .backward()
                        .unwrap();
                    outs.push((
                        y.to_vec_f32().unwrap(),
                        x.grad().unwrap().to_vec_f32().unwrap(),
                    ));
                }
                outs
            })
        };
        let one = run(1);
        assert_eq!(one, run(2));
        assert_eq!(one, run(3));
    }
}

/// A block's index arrays on a GPU, through the segment ops' meta arms: uploaded by the
/// first op that reads the block, once, and freed with the block's last holder.
#[cfg(test)]
mod meta_tests {
    use crate::device::{size_class, AllocPolicy};
    use crate::graph::BlockSizes;
    use crate::meta::Replay;
    use crate::ops::{meta_segment_max, meta_segment_sum, meta_sum_rows};

    /// A GPU's allocation rules (pool size classes, uploads of index arrays).
    const GPU: AllocPolicy = AllocPolicy {
        gpu: true,
        lstm_rows_in_kernel: false,
        mean_scratch: false,
    };
    /// The CPU's: exact bytes, no uploads.
    const CPU: AllocPolicy = AllocPolicy { gpu: false, ..GPU };

    fn sizes() -> BlockSizes {
        BlockSizes {
            num_src: 100,
            num_dst: 10,
            num_edges: 300,
            degree_hist: Vec::new(),
            self_loops: 0,
        }
    }

    /// indptr `[11]`, indices, t_dst and t_edges `[300]`, t_indptr `[101]`, each rounded.
    fn arrays() -> u64 {
        size_class(44) + 3 * size_class(1200) + size_class(404)
    }

    #[test]
    fn a_block_is_uploaded_by_its_first_segment_op_once_and_freed_with_its_last_holder() {
        let s = sizes();
        let mut r = Replay::of(GPU);
        // No gradient: the ops record no rule, so only the caller holds the block.
        let x = r.input(100, 8);
        let b = r.block(&s);
        let before = r.live();
        let out = size_class(10 * 8 * 4);
        let y = meta_segment_sum(&mut r, &x, &b);
        assert_eq!(r.live(), before + arrays() + out);
        // segment_max: its output, and its argmax, which no rule keeps.
        let z = meta_segment_max(&mut r, &x, &b);
        assert_eq!(r.live(), before + arrays() + 2 * out, "uploaded again");
        r.drop_block(&b);
        assert_eq!(r.live(), before + 2 * out);
        for v in [y, z] {
            r.release(v.buf);
        }
    }

    #[test]
    fn a_block_kept_by_a_backward_rule_outlives_its_owner_until_the_rule_has_run() {
        let s = sizes();
        let mut r = Replay::of(GPU);
        let x = r.leaf_input(100, 8);
        let b = r.block(&s);
        let y = meta_segment_sum(&mut r, &x, &b);
        r.drop_block(&b);
        let with_block = size_class(100 * 8 * 4) + arrays() + size_class(10 * 8 * 4);
        assert_eq!(r.live(), with_block, "the rule keeps the block");
        let loss = meta_sum_rows(&mut r, &y);
        r.release(y.buf);
        r.backward(&loss, None);
        r.release(loss.buf);
        let grad = r.leaf_grads[x.leaf.unwrap()].unwrap();
        r.release(grad);
        r.release(x.buf);
        assert_eq!(r.live(), 0, "the rule let go of the block");
        assert!(r.peak() >= with_block);
    }

    #[test]
    fn the_cpu_uploads_nothing() {
        let s = sizes();
        let mut r = Replay::of(CPU);
        let x = r.input(100, 8);
        let b = r.block(&s);
        let before = r.live();
        let y = meta_segment_sum(&mut r, &x, &b);
        assert_eq!(r.live(), before + 10 * 8 * 4);
        r.release(y.buf);
        r.drop_block(&b);
        assert_eq!(r.live(), before);
    }
}
