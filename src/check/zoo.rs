//! Seeded inputs of the checks: random tensors and the blocks that break segment kernels.

use std::sync::Arc;

use crate::device::Device;
use crate::error::Result;
use crate::graph::synth::SynthSpec;
use crate::graph::{sample_blocks, Block};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// Uniform values in [-1, 1) as an f32 CPU tensor.
pub fn rand_f32(shape: &[usize], seed: u64) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_f32(
        (0..n).map(|_| (rng.uniform() * 2.0 - 1.0) as f32).collect(),
        shape,
        Device::Cpu,
    )
}

/// Values in ±[0.5, 1.5): bounded away from zero (divisors, logs of |x|, kinks).
pub fn rand_away_f32(shape: &[usize], seed: u64) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    let v = (0..n)
        .map(|_| {
            let x = (0.5 + rng.uniform()) as f32;
            if rng.uniform() < 0.5 {
                -x
            } else {
                x
            }
        })
        .collect();
    Tensor::from_f32(v, shape, Device::Cpu)
}

/// Integer values in [-2, 2] as an f32 CPU tensor: every sum of them is exact whatever its
/// order, so ops that split a sum differently agree bit for bit.
pub fn rand_ints(shape: &[usize], seed: u64) -> Result<Tensor> {
    let v = rand_f32(shape, seed)?.to_vec_f32()?;
    Tensor::from_f32(
        v.iter().map(|x| (x * 2.4).round()).collect(),
        shape,
        Device::Cpu,
    )
}

/// Random u32 indices below `n`.
pub fn rand_idx(len: usize, n: u32, seed: u64) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    Tensor::from_u32(
        (0..len).map(|_| rng.below(n as u64) as u32).collect(),
        &[len],
        Device::Cpu,
    )
}

/// A block of `num_src` src nodes whose dst node `d` reads the src rows `adj[d]`.
pub fn block(num_src: usize, adj: &[&[u32]]) -> Result<Arc<Block>> {
    let mut indptr = vec![0u32];
    let mut indices = Vec::new();
    for nbrs in adj {
        indices.extend_from_slice(nbrs);
        indptr.push(indices.len() as u32);
    }
    Ok(Arc::new(Block::new(
        num_src,
        indptr,
        indices,
        (0..num_src as u32).collect(),
    )?))
}

/// Blocks that break segment kernels, by name: no edges at all, dst nodes without
/// in-edges, one-edge rows, self-loops and duplicates, a star (one row of 5,000 edges:
/// longer than any workgroup or block), a hub (one src feeding 5,000 dst nodes: one long
/// row of the transposed CSR), and a power-law block sampled from a Cora-sized graph.
/// `full` adds the whole-neighbourhood power-law block.
pub fn blocks(full: bool) -> Result<Vec<(String, Arc<Block>)>> {
    let mut z = vec![
        ("empty".to_string(), block(5, &[&[], &[], &[]])?),
        (
            "zero-in-degree".to_string(),
            block(6, &[&[3, 4], &[], &[0], &[], &[5, 1, 2]])?,
        ),
        ("one-edge rows".to_string(), block(4, &[&[3], &[0], &[2]])?),
        (
            "self-loops, duplicates".to_string(),
            block(5, &[&[0], &[1, 4], &[2, 2, 0], &[3, 1], &[2, 2, 2, 1]])?,
        ),
    ];
    let star: Vec<u32> = (1..=5000).collect();
    z.push(("star".to_string(), block(5001, &[&star])?));
    let hub: Vec<&[u32]> = vec![&[5000]; 5000];
    z.push(("hub".to_string(), block(5001, &hub)?));
    let graph = SynthSpec::parse("cora-like")?
        .generate()?
        .graph
        .symmetrize();
    let seeds: Vec<u32> = (0..graph.num_nodes as u32).step_by(2).collect();
    let mut sampled = vec![("power-law", vec![10i64, 10])];
    if full {
        sampled.push(("power-law, every neighbour", vec![-1]));
    }
    for (what, fanouts) in sampled {
        let b = sample_blocks(&graph, &seeds, &fanouts, 11)?;
        if let Some(b) = b.into_iter().next() {
            z.push((what.to_string(), Arc::new(b)));
        }
    }
    Ok(z)
}
