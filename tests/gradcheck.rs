//! Central-difference gradient checks, in f64, for every op and for a two-layer MLP.

// `&[x.clone()]` reads better than `std::slice::from_ref(&x)` in a table of checks.
#![allow(clippy::cloned_ref_to_slice_refs)]

use espalier::gradcheck::check;
use espalier::ops;
use espalier::rng::Rng;
use espalier::{Result, Tensor};

const EPS: f64 = 1e-6;
const TOL: f64 = 1e-6;

fn rand(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_f64((0..n).map(|_| rng.uniform() * 2.0 - 1.0).collect(), shape).unwrap()
}

/// Values bounded away from zero (for log, div, and kinks of relu-like ops).
fn rand_away_from_zero(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    let v = (0..n)
        .map(|_| {
            let x = 0.2 + rng.uniform();
            if rng.uniform() < 0.5 {
                -x
            } else {
                x
            }
        })
        .collect();
    Tensor::from_f64(v, shape).unwrap()
}

fn positive(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_f64((0..n).map(|_| 0.5 + rng.uniform()).collect(), shape).unwrap()
}

fn ok(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    check(f, inputs, EPS, TOL).unwrap();
}

#[test]
fn binary_ops_with_every_broadcast() {
    let a = rand(&[5, 4], 1);
    for b in [
        rand(&[5, 4], 2),
        rand(&[4], 3),
        rand(&[1, 4], 4),
        rand(&[5, 1], 5),
        rand(&[1], 6),
    ] {
        ok(|x| ops::add(&x[0], &x[1]), &[a.clone(), b.clone()]);
        ok(|x| ops::sub(&x[0], &x[1]), &[a.clone(), b.clone()]);
        ok(|x| ops::mul(&x[0], &x[1]), &[a.clone(), b.clone()]);
    }
    for b in [
        positive(&[5, 4], 7),
        positive(&[4], 8),
        positive(&[5, 1], 9),
        positive(&[1], 10),
    ] {
        ok(|x| ops::div(&x[0], &x[1]), &[a.clone(), b.clone()]);
    }
}

#[test]
fn unary_ops() {
    let x = rand_away_from_zero(&[6, 3], 11);
    ok(|x| ops::neg(&x[0]), &[x.clone()]);
    ok(|x| ops::relu(&x[0]), &[x.clone()]);
    ok(|x| ops::leaky_relu(&x[0], 0.2), &[x.clone()]);
    ok(|x| ops::elu(&x[0], 1.0), &[x.clone()]);
    ok(|x| ops::sigmoid(&x[0]), &[x.clone()]);
    ok(|x| ops::tanh(&x[0]), &[x.clone()]);
    ok(|x| ops::exp(&x[0]), &[x.clone()]);
    ok(|x| ops::log(&x[0]), &[positive(&[6, 3], 12)]);
    ok(|x| ops::add_scalar(&x[0], 2.5), &[x.clone()]);
    ok(|x| ops::mul_scalar(&x[0], -1.5), &[x.clone()]);
}

#[test]
fn matmul_every_transpose() {
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a = if ta {
            rand(&[4, 3], 20)
        } else {
            rand(&[3, 4], 20)
        };
        let b = if tb {
            rand(&[5, 4], 21)
        } else {
            rand(&[4, 5], 21)
        };
        ok(|x| ops::matmul(&x[0], &x[1], ta, tb), &[a, b]);
    }
}

#[test]
fn reductions() {
    let x = rand(&[7, 3], 30);
    ok(|x| ops::sum_dim(&x[0], 0), &[x.clone()]);
    ok(|x| ops::sum_dim(&x[0], 1), &[x.clone()]);
    ok(|x| ops::mean_dim(&x[0], 0), &[x.clone()]);
    ok(|x| ops::mean_dim(&x[0], 1), &[x.clone()]);
    ok(|x| ops::sum_all(&x[0]), &[x.clone()]);
    ok(|x| ops::mean_all(&x[0]), &[x.clone()]);
    ok(|x| ops::expand_dim(&x[0], 0, 4), &[rand(&[3], 31)]);
    ok(|x| ops::expand_dim(&x[0], 1, 4), &[rand(&[5, 1], 32)]);
}

#[test]
fn reshape_and_reuse_of_one_input() {
    let x = rand(&[4, 6], 40);
    ok(|x| ops::reshape(&x[0], &[3, 8]), &[x.clone()]);
    // x used twice: gradients must accumulate.
    ok(|x| ops::mul(&x[0], &ops::tanh(&x[0])?), &[x.clone()]);
}

#[test]
fn a_wrong_backward_rule_is_caught() {
    // y = 2x with a backward that forgets the factor 2.
    let wrong = |x: &[Tensor]| -> Result<Tensor> {
        let y = ops::mul_scalar(&x[0].detach(), 2.0)?;
        Ok(espalier::autograd::record("wrong", y, &[&x[0]], |g| {
            Ok(vec![Some(g.clone())])
        }))
    };
    assert!(check(wrong, &[rand(&[3, 2], 50)], EPS, TOL).is_err());
}

/// `autograd::record_through`: an op that reads its first input through a step it never
/// builds (here the rows `x[idx]`, times `w`) gives the gradient of the step's output, and
/// the step's own rule (the scatter) turns it into `x`'s; `w`'s comes straight from the
/// op's rule.
#[test]
fn an_input_read_through_a_step_gets_its_gradient_from_the_steps_rule() {
    let f = |x: &[Tensor]| -> Result<Tensor> {
        let i = idx(&[2, 0, 2, 1]);
        let rows = ops::index_select(&x[0].detach(), &i)?;
        let y = ops::mul(&rows, &x[1].detach())?;
        let w = x[1].detach();
        let through = espalier::autograd::Through {
            op: "rows",
            from: &x[0],
            shape: vec![4, 3],
            backward: Box::new(move |g| Ok(vec![Some(ops::scatter_add(g, &i, 3)?)])),
        };
        Ok(espalier::autograd::record_through(
            "rows times w",
            y,
            through,
            &[&x[1]],
            move |g| Ok(vec![Some(ops::mul(g, &w)?), Some(ops::mul(g, &rows)?)]),
        ))
    };
    ok(f, &[rand(&[3, 3], 60), rand(&[4, 3], 61)]);
}

fn idx(v: &[u32]) -> Tensor {
    Tensor::from_u32(v.to_vec(), &[v.len()], espalier::Device::Cpu).unwrap()
}

#[test]
fn index_select_with_repeated_indices() {
    // Row 1 is gathered three times and row 3 never: its gradient must be exactly zero.
    let i = idx(&[1, 0, 1, 4, 1, 2]);
    ok(|x| ops::index_select(&x[0], &i), &[rand(&[5, 3], 60)]);
}

#[test]
fn scatter_add_with_collisions_and_empty_rows() {
    let i = idx(&[3, 0, 3, 3, 1]);
    ok(|x| ops::scatter_add(&x[0], &i, 6), &[rand(&[5, 4], 61)]);
}

#[test]
fn concat_three_inputs_on_both_dims() {
    let rows = [rand(&[2, 3], 70), rand(&[1, 3], 71), rand(&[4, 3], 72)];
    ok(|x| ops::concat(&[&x[0], &x[1], &x[2]], 0), &rows);
    let cols = [rand(&[3, 2], 73), rand(&[3, 1], 74), rand(&[3, 4], 75)];
    ok(|x| ops::concat(&[&x[0], &x[1], &x[2]], 1), &cols);
    // An input that needs no gradient sits between two that do.
    let fixed = rand(&[3, 5], 76);
    ok(
        |x| ops::concat(&[&x[0], &fixed, &x[1]], 1),
        &[cols[0].clone(), cols[2].clone()],
    );
}

#[test]
fn slice_both_dims() {
    let x = rand(&[5, 4], 80);
    ok(|x| ops::slice(&x[0], 0, 1, 3), &[x.clone()]);
    ok(|x| ops::slice(&x[0], 1, 2, 2), &[x.clone()]);
    ok(|x| ops::slice(&x[0], 1, 0, 4), &[x.clone()]);
}

#[test]
fn cross_entropy_with_and_without_weights() {
    let labels = idx(&[2, 0, 3, 3, 1]);
    let logits = rand(&[5, 4], 90);
    ok(
        |x| ops::cross_entropy(&x[0], &labels, None),
        &[logits.clone()],
    );
    // Weights get a gradient too (the loss is linear in them).
    ok(
        |x| ops::cross_entropy(&x[0], &labels, Some(&x[1])),
        &[logits.clone(), positive(&[5], 91)],
    );
    // Fixed weights, some zero: those rows contribute nothing.
    let w = Tensor::from_f64(vec![0.0, 2.0, 1.0, 0.0, 0.5], &[5]).unwrap();
    ok(
        |x| ops::cross_entropy(&x[0], &labels, Some(&w)),
        &[logits.clone()],
    );
    // Scaled-up logits: softmax nearly one-hot.
    ok(
        |x| ops::cross_entropy(&ops::mul_scalar(&x[0], 20.0)?, &labels, None),
        &[logits],
    );
}

#[test]
fn log_softmax_rows() {
    ok(|x| ops::log_softmax(&x[0]), &[rand(&[4, 5], 95)]);
    ok(|x| ops::log_softmax(&x[0]), &[rand(&[3, 1], 96)]);
}

#[test]
fn dropout_mask_is_fixed_by_key_and_row_ids() {
    // The mask depends on the key only, so central differences see a fixed linear map.
    let key = ops::dropout_key(7, 3, 1);
    ok(
        |x| ops::dropout(&x[0], 0.4, key, None),
        &[rand(&[6, 5], 100)],
    );
    let ids = idx(&[40, 2, 17, 3, 99, 5]);
    ok(
        |x| ops::dropout(&x[0], 0.4, key, Some(&ids)),
        &[rand(&[6, 5], 101)],
    );

    // Kept fraction near 1 - p on a large tensor (standard error ~0.001 here).
    let p = 0.3;
    let (r, c) = (512, 384);
    let ones = Tensor::from_f64(vec![1.0; r * c], &[r, c]).unwrap();
    let y = ops::dropout(&ones, p, key, None)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / (r * c) as f64;
    assert!((kept - (1.0 - p)).abs() < 0.01, "kept fraction {kept}");
    assert!(y
        .iter()
        .all(|&v| v == 0.0 || (v - 1.0 / (1.0 - p)).abs() < 1e-12));

    // A micro-batch holding rows 5, 6, 7 (by global id) drops what the full batch drops.
    let full_x = rand(&[10, 7], 102);
    let full = ops::dropout(&full_x, 0.5, key, None)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    let part_x = ops::slice(&full_x, 0, 5, 3).unwrap();
    let part = ops::dropout(&part_x, 0.5, key, Some(&idx(&[5, 6, 7])))
        .unwrap()
        .to_vec_f64()
        .unwrap();
    assert_eq!(part, full[5 * 7..8 * 7]);
    // ... and without the row ids it would not (rows 0..3 have other masks).
    let unlabelled = ops::dropout(&part_x, 0.5, key, None)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    assert_ne!(unlabelled, part);
}

/// A block with every awkward case: dst 1 has no in-edges, dst 0 has a self-loop, dst 2
/// has a duplicate edge (4 -> 2 twice) and a self-loop, and src 5 feeds nobody.
fn awkward_block() -> std::sync::Arc<espalier::graph::Block> {
    let indptr = vec![0, 3, 3, 8];
    let indices = vec![1, 3, 0, 4, 4, 2, 1, 3];
    let b = espalier::graph::Block::new(6, indptr, indices, vec![10, 11, 12, 13, 14, 15]);
    std::sync::Arc::new(b.unwrap())
}

#[test]
fn segment_sum_and_mean_on_an_awkward_block() {
    let b = awkward_block();
    ok(|x| ops::segment_sum(&x[0], &b), &[rand(&[6, 3], 110)]);
    ok(|x| ops::segment_mean(&x[0], &b), &[rand(&[6, 3], 111)]);
}

#[test]
fn segment_max_on_an_awkward_block() {
    let b = awkward_block();
    // Distinct values everywhere, so no two different sources tie within eps.
    let x = rand(&[6, 4], 112);
    let mut v = x.to_vec_f64().unwrap();
    v.sort_by(f64::total_cmp);
    assert!(v.windows(2).all(|w| w[1] - w[0] > 1e-4), "inputs too close");
    ok(|x| ops::segment_max(&x[0], &b), &[x.clone()]);
    // Composed with a nonlinearity and used twice (gradients through both paths add up).
    ok(
        |x| {
            ops::add(
                &ops::segment_max(&ops::tanh(&x[0])?, &b)?,
                &ops::segment_sum(&x[0], &b)?,
            )
        },
        &[x],
    );
}

#[test]
fn graph_ops_reject_a_wrong_row_count() {
    let b = awkward_block();
    let x = rand(&[5, 3], 113);
    for r in [
        ops::segment_sum(&x, &b),
        ops::segment_mean(&x, &b),
        ops::segment_max(&x, &b),
    ] {
        assert!(matches!(r, Err(espalier::Error::Shape { .. })), "{r:?}");
    }
}

#[test]
fn caller_mistakes_are_errors_of_the_right_variant() {
    use espalier::Error;
    let x = rand(&[3, 4], 120);
    // A label out of range names its row.
    match ops::cross_entropy(&x, &idx(&[0, 4, 1]), None) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("row 1"), "{m}"),
        r => panic!("bad label: {r:?}"),
    }
    // An index out of range names its position and value.
    match ops::index_select(&x, &idx(&[2, 0, 3])) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("position 2") && m.contains("index 3"), "{m}")
        }
        r => panic!("bad index: {r:?}"),
    }
    for p in [-0.5, 1.0, f64::NAN] {
        assert!(matches!(
            ops::dropout(&x, p, 1, None),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        ops::dropout(&x, 0.5, 1, Some(&idx(&[0, 1]))),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(ops::slice(&x, 1, 3, 2), Err(Error::Shape { .. })));
    assert!(matches!(
        ops::concat(&[&x, &rand(&[3, 5], 121)], 0),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        ops::log_softmax(&rand(&[2, 2, 2], 122)),
        Err(Error::Shape { .. })
    ));
}

/// The LSTM cell composed from simple ops: the reference the fused op must match.
fn composed_cell(z: &Tensor, c_prev: &Tensor) -> Result<Tensor> {
    let h = c_prev.shape()[1];
    let gate = |k: usize| ops::slice(z, 1, k * h, h);
    let i = ops::sigmoid(&gate(0)?)?;
    let f = ops::sigmoid(&gate(1)?)?;
    let g = ops::tanh(&gate(2)?)?;
    let o = ops::sigmoid(&gate(3)?)?;
    let c = ops::add(&ops::mul(&f, c_prev)?, &ops::mul(&i, &g)?)?;
    let hn = ops::mul(&o, &ops::tanh(&c)?)?;
    ops::concat(&[&hn, &c], 1)
}

#[test]
fn lstm_cell_matches_the_composed_cell_and_its_gradients() {
    let z = ops::mul_scalar(&rand(&[7, 12], 130), 3.0).unwrap();
    let c = rand(&[7, 3], 131);
    let fused = ops::lstm_cell(&z, &c).unwrap().to_vec_f64().unwrap();
    let composed = composed_cell(&z, &c).unwrap().to_vec_f64().unwrap();
    for (a, b) in fused.iter().zip(&composed) {
        assert!((a - b).abs() < 1e-14, "{a} vs {b}");
    }
    // Same gradients for the same upstream weights, through both halves of the output.
    let w = rand(&[7, 6], 132);
    let grads = |f: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>| {
        let (zl, cl) = (z.requires_grad_leaf(), c.requires_grad_leaf());
        ops::sum_all(&ops::mul(&f(&zl, &cl).unwrap(), &w).unwrap())
            .unwrap()
            .backward()
            .unwrap();
        let mut v = zl.grad().unwrap().to_vec_f64().unwrap();
        v.extend(cl.grad().unwrap().to_vec_f64().unwrap());
        v
    };
    let (gf, gc) = (grads(&|a, b| ops::lstm_cell(a, b)), grads(&composed_cell));
    for (a, b) in gf.iter().zip(&gc) {
        assert!((a - b).abs() < 1e-13, "{a} vs {b}");
    }
    ok(|x| ops::lstm_cell(&x[0], &x[1]), &[z.clone(), c.clone()]);
}

#[test]
fn lstm_cell_in_a_two_step_recurrence() {
    // h and c of step 1 both feed step 2: gradients flow through both halves of the packed
    // output, and through a matmul on h.
    let step = |x: &[Tensor]| -> Result<Tensor> {
        let hdim = 2;
        let s1 = ops::lstm_cell(&x[0], &x[1])?;
        let h1 = ops::slice(&s1, 1, 0, hdim)?;
        let c1 = ops::slice(&s1, 1, hdim, hdim)?;
        let z2 = ops::add(&x[2], &ops::matmul(&h1, &x[3], false, false)?)?;
        ops::lstm_cell(&z2, &c1)
    };
    ok(
        step,
        &[
            rand(&[4, 8], 140),
            rand(&[4, 2], 141),
            rand(&[4, 8], 142),
            rand(&[2, 8], 143),
        ],
    );
}

#[test]
fn segment_softmax_on_an_awkward_block() {
    let b = awkward_block();
    ok(|x| ops::segment_softmax(&x[0], &b), &[rand(&[8, 3], 150)]);
    // Large scores: the max subtraction keeps it finite and exact.
    ok(
        |x| ops::segment_softmax(&ops::mul_scalar(&x[0], 30.0)?, &b),
        &[rand(&[8, 1], 151)],
    );
}

#[test]
fn segment_weighted_sum_both_inputs() {
    let b = awkward_block();
    // Two heads of width 3: x [6, 6], a [8, 2].
    ok(
        |x| ops::segment_weighted_sum(&x[0], &x[1], &b),
        &[rand(&[6, 6], 160), rand(&[8, 2], 161)],
    );
    // One head, weights from a softmax (the GAT composition).
    ok(
        |x| ops::segment_weighted_sum(&x[0], &ops::segment_softmax(&x[1], &b)?, &b),
        &[rand(&[6, 4], 162), rand(&[8, 1], 163)],
    );
}

#[test]
fn lstm_aggregator_over_buckets_and_split_pieces() {
    use espalier::nn::LstmParams;
    let b = awkward_block();
    for split in [None, Some(1)] {
        let agg = |x: &[Tensor]| -> Result<Tensor> {
            let p = LstmParams {
                weight_ih: x[1].clone(),
                weight_hh: x[2].clone(),
                bias: x[3].clone(),
            };
            p.aggregate(&b, &x[0], split)
        };
        ok(
            agg,
            &[
                rand(&[6, 3], 170),
                rand(&[3, 12], 171),
                rand(&[3, 12], 172),
                rand(&[12], 173),
            ],
        );
    }
}

/// `W̄_hh` where a step runs more than the 1,024 nodes whose `h_{t-1}` the CPU's backward
/// holds at once (it sums `W̄_hh` a block of a step's rows at a time): 1,300 dst nodes of
/// in-degree 2, one bucket, so step 1 runs all of them (blocks of 1,024 and 276 rows).
#[test]
fn lstm_aggregator_w_hh_over_steps_of_more_than_a_block_of_nodes() {
    use espalier::graph::{Block, Buckets};
    use espalier::ops::LstmPlan;
    use std::sync::Arc;
    let (num_dst, h) = (1300, 2);
    let indptr = (0..=num_dst as u32).map(|d| 2 * d).collect();
    let indices = (0..2 * num_dst as u32)
        .map(|e| (e * 7 + 3) % num_dst as u32)
        .collect();
    let ids = (0..num_dst as u32).collect();
    let block = Block::new(num_dst, indptr, indices, ids).unwrap();
    let plan = Arc::new(LstmPlan::new(&block, &Buckets::new(&block, None)).unwrap());
    let idx = Tensor::from_u32(plan.src.clone(), &[plan.rows()], espalier::Device::Cpu).unwrap();
    let xw = rand(&[num_dst, 4 * h], 190);
    ok(
        |x| ops::lstm_aggregate(&xw, &idx, &x[0], &plan),
        &[rand(&[h, 4 * h], 191)],
    );
}

#[test]
fn gat_layer_with_heads_self_loops_and_attention_dropout() {
    use espalier::nn::gat::{AttnDropout, GatLayer};
    use espalier::nn::Linear;
    let b = awkward_block();
    for (self_loops, dropout) in [
        (true, None),
        (false, None),
        (
            true,
            Some(AttnDropout {
                p: 0.3,
                key: ops::dropout_key(1, 2, 3),
            }),
        ),
    ] {
        let layer = |x: &[Tensor]| -> Result<Tensor> {
            let g = GatLayer {
                fc: Linear {
                    weight: x[1].clone(),
                    bias: None,
                },
                attn_src: x[2].clone(),
                attn_dst: x[3].clone(),
                bias: x[4].clone(),
                heads: 2,
                self_loops,
            };
            g.forward(&b, &x[0], dropout)
        };
        // 2 heads of width 2 from 3 input features.
        ok(
            layer,
            &[
                rand(&[6, 3], 180),
                rand(&[3, 4], 181),
                rand(&[4], 182),
                rand(&[4], 183),
                rand(&[4], 184),
            ],
        );
    }
}
