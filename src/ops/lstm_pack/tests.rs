//! Unit tests of the LSTM plan and its packs.

use super::*;
use crate::device::Device;
use crate::graph::{Block, Buckets};
use crate::ops::test_values::values;
use crate::ops::{lstm_aggregate, mul, sum_all};
use std::sync::Arc;

/// `(output, x̄g by (dst, step))` of the op over `plan`, the projected row of each
/// (dst, step) given by the pair: row `r` of the layout reads row `pair(r)` of `xw`.
fn run(block: &Block, plan: &LstmPlan, h: usize) -> (Vec<f32>, Vec<Vec<f32>>) {
    // Row of each (dst, step) in the plan's layout.
    let mut row = vec![Vec::new(); block.num_dst];
    for b in &plan.buckets {
        for (i, &d) in b.dst.iter().enumerate() {
            row[d as usize] = (0..b.degree).map(|t| b.offset + i * b.degree + t).collect();
        }
    }
    let mut idx = vec![0u32; plan.rows()];
    for (pair, &r) in row.iter().flatten().enumerate() {
        idx[r] = pair as u32;
    }
    let idx = Tensor::from_u32(idx, &[plan.rows()], Device::Cpu).unwrap();
    let xw = values(plan.rows() * 4 * h, 7);
    let xw = Tensor::from_f32(xw, &[plan.rows(), 4 * h], Device::Cpu)
        .unwrap()
        .requires_grad_leaf();
    let w = Tensor::from_f32(values(h * 4 * h, 3), &[h, 4 * h], Device::Cpu).unwrap();
    let out = lstm_aggregate(&xw, &idx, &w, &Arc::new(plan.clone())).unwrap();
    let g = Tensor::from_f32(
        values(block.num_dst * h, 5),
        &[block.num_dst, h],
        Device::Cpu,
    )
    .unwrap();
    sum_all(&mul(&out, &g).unwrap())
        .unwrap()
        .backward()
        .unwrap();
    let dxw = xw.grad().unwrap().to_vec_f32().unwrap();
    let grads = dxw.chunks(4 * h).map(<[f32]>::to_vec).collect();
    (out.to_vec_f32().unwrap(), grads)
}

#[test]
fn shared_packs_and_one_bucket_per_pack_give_the_same_bits() {
    // In-degrees 3, 1, 5, 0, 2, 3, 4, 1, 5 over 12 sources.
    let degrees = [3, 1, 5, 0, 2, 3, 4, 1, 5];
    let mut indptr = vec![0];
    let mut indices = Vec::new();
    for (d, &k) in degrees.iter().enumerate() {
        indices.extend((0..k).map(|t| ((d * 3 + t * 5) % 12) as u32));
        indptr.push(indices.len() as u32);
    }
    let block = Block::new(12, indptr, indices, (0..12).collect()).unwrap();
    let h = 3;
    let buckets = Buckets::new(&block, None);
    // Increasing degree: buckets share packs. Decreasing: every bucket a pack of its
    // own, the per-bucket order.
    let packed = LstmPlan::new(&block, &buckets).unwrap();
    let mut reversed = buckets.clone();
    reversed.buckets.reverse();
    let alone = LstmPlan::new(&block, &reversed).unwrap();
    let sizes =
        |p: &LstmPlan| -> Vec<_> { p.buckets.iter().map(|b| (b.dst.len(), b.degree)).collect() };
    assert_eq!(
        groups(&sizes(&packed)),
        vec![vec![4, 3], vec![2, 1], vec![0]]
    );
    assert_eq!(groups(&sizes(&alone)).len(), packed.buckets.len());
    assert_eq!(run(&block, &packed, h), run(&block, &alone, h));
}

#[test]
fn packs_stay_within_the_cap_and_run_the_longest_first() {
    // Plan order (increasing degree): (nodes, degree).
    let buckets = [(4, 1), (3, 2), (1, 3), (2, 5)];
    assert_eq!(groups(&buckets), vec![vec![3, 2], vec![1], vec![0]]);
    assert_eq!(
        lstm_packs(&buckets),
        vec![vec![3, 3, 3, 2, 2], vec![3, 3], vec![4]]
    );
    // Pieces of one degree go together up to the cap.
    assert_eq!(
        groups(&[(1, 1), (2, 4), (2, 4)]),
        vec![vec![2], vec![1], vec![0]]
    );
    assert_eq!(groups(&[(4, 1), (2, 4), (2, 4)]), vec![vec![2, 1], vec![0]]);
    // A degree above the previous one starts a new pack (a prefix must keep running).
    assert_eq!(groups(&[(1, 5), (1, 2)]), vec![vec![1], vec![0]]);
    assert!(lstm_packs(&[]).is_empty());
    // Long sequences: up to rows / 6 nodes (46 / 6 = 7) share a pack.
    assert_eq!(groups(&[(2, 1), (2, 10), (2, 12)]), vec![vec![2, 1, 0]]);
}
