//! A block's index arrays are uploaded to a GPU once, whatever number of segment ops and
//! clones of the block read them, and freed with the last clone. Alone in its test binary: it reads the device's live
//! bytes, which concurrent tests would change.

mod common;

use std::sync::Arc;

use espalier::graph::Block;
use espalier::{ops, Device, Tensor};

#[test]
fn block_buffers_are_uploaded_once_shared_by_clones_and_freed_with_the_last() {
    let dev = Device::Wgpu(0);
    let mem = match dev.memory() {
        Ok(m) => m,
        Err(e) => {
            common::skip_backend("wgpu", e);
            return;
        }
    };
    let (num_src, num_dst, deg, f) = (3000, 1000, 7, 16);
    let indptr: Vec<u32> = (0..=num_dst).map(|d| (d * deg) as u32).collect();
    let indices: Vec<u32> = (0..num_dst * deg)
        .map(|e| (e * 13 % num_src) as u32)
        .collect();
    let x = Tensor::from_f32(vec![0.5; num_src * f], &[num_src, f], dev)
        .unwrap()
        .requires_grad_leaf();
    let block =
        Arc::new(Block::new(num_src, indptr, indices, (0..num_src as u32).collect()).unwrap());
    let before = mem.stats().live;
    let step = |x: &Tensor| {
        let y = ops::segment_sum(x, &block).unwrap();
        let z = ops::segment_max(x, &block).unwrap();
        let w = ops::segment_mean(x, &block).unwrap();
        drop((y, z, w));
    };
    step(&x);
    let with_block = mem.stats().live;
    // indptr + indices + t_indptr + t_dst + t_edges, each rounded up to its size class.
    let arrays = 4 * (num_dst + num_src + 2 + 3 * num_dst * deg) as u64;
    assert!(
        with_block >= before + arrays && with_block <= before + arrays * 5 / 4 + 5 * 256,
        "live bytes went from {before} to {with_block}; the block's arrays are {arrays} bytes"
    );
    for _ in 0..3 {
        step(&x);
    }
    assert_eq!(
        mem.stats().live,
        with_block,
        "a second upload of the same block"
    );
    // A block never changes, so its clones share the upload.
    let clone = Arc::new((*block).clone());
    drop(ops::segment_sum(&x, &clone).unwrap());
    assert_eq!(mem.stats().live, with_block, "a clone uploaded again");
    drop(block);
    assert_eq!(
        mem.stats().live,
        with_block,
        "the buffers went with one clone"
    );
    drop(clone);
    assert_eq!(mem.stats().live, before, "the block's buffers outlive it");
}
