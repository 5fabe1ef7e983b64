use super::*;
use crate::device::size_class;

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
    let mut r = Replay::gpu();
    // No gradient: the ops record no rule, so only the caller holds the block.
    let x = r.input(100, 8);
    let b = r.block(&s);
    let before = r.live;
    let out = size_class(10 * 8 * 4);
    let y = r.segment(&x, &b, false);
    assert_eq!(r.live, before + arrays() + out);
    // segment_max: its output, and its argmax, which no rule keeps.
    let z = r.segment(&x, &b, true);
    assert_eq!(r.live, before + arrays() + 2 * out, "uploaded again");
    r.drop_block(&b);
    assert_eq!(r.live, before + 2 * out);
    for v in [y, z] {
        r.release(v.buf);
    }
}

#[test]
fn a_block_kept_by_a_backward_rule_outlives_its_owner_until_the_rule_has_run() {
    let s = sizes();
    let mut r = Replay::gpu();
    let x = r.leaf_input(100, 8);
    let b = r.block(&s);
    let y = r.segment(&x, &b, false);
    r.drop_block(&b);
    let with_block = size_class(100 * 8 * 4) + arrays() + size_class(10 * 8 * 4);
    assert_eq!(r.live, with_block, "the rule keeps the block");
    let loss = r.sum_rows(&y);
    r.release(y.buf);
    r.backward(&loss, None);
    r.release(loss.buf);
    let grad = r.leaf_grads[x.leaf.unwrap()].unwrap();
    r.release(grad);
    r.release(x.buf);
    assert_eq!(r.live, 0, "the rule let go of the block");
    assert!(r.peak >= with_block);
}

#[test]
fn the_cpu_uploads_nothing() {
    let s = sizes();
    let mut r = Replay::new(|b| b);
    let x = r.input(100, 8);
    let b = r.block(&s);
    let before = r.live;
    let y = r.segment(&x, &b, false);
    assert_eq!(r.live, before + 10 * 8 * 4);
    r.release(y.buf);
    r.drop_block(&b);
    assert_eq!(r.live, before);
}
