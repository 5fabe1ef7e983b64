//! The LSTM and attention aggregators against brute-force references: per dst node, plain
//! loops over f64 vectors, no ops. Both the layers and the models' single-layer outputs
//! are checked on a zoo of blocks: no edges, zero in-degree, self-loops, duplicate edges,
//! a star, bipartite, and power-law blocks sampled from the `cora-like` synthetic graph.

use std::sync::Arc;

use espalier::graph::synth::SynthSpec;
use espalier::graph::{sample_blocks, Block};
use espalier::nn::gat::{GatLayer, NEGATIVE_SLOPE};
use espalier::nn::{
    Aggregator, Forward, GatConfig, GcnConfig, Gnn, KindConfig, Linear, LstmParams, ModelConfig,
    ModelKind, ModelShape, Module, SageConfig,
};
use espalier::rng::Rng;
use espalier::{Device, Tensor};

type Mat = Vec<Vec<f64>>;

fn rand_mat(rows: usize, cols: usize, rng: &mut Rng) -> Mat {
    (0..rows)
        .map(|_| (0..cols).map(|_| rng.uniform() * 2.0 - 1.0).collect())
        .collect()
}

fn tensor(m: &Mat) -> Tensor {
    let cols = m.first().map_or(0, Vec::len);
    Tensor::from_f64(m.concat(), &[m.len(), cols]).unwrap()
}

fn rows_of(t: &Tensor) -> Mat {
    let cols = t.shape()[1];
    let v = t.to_vec_f64().unwrap();
    if cols == 0 {
        return vec![Vec::new(); t.shape()[0]];
    }
    v.chunks(cols).map(<[f64]>::to_vec).collect()
}

/// `x · W` for a row `x` and `W` stored `[in, out]`.
fn vec_mat(x: &[f64], w: &Mat) -> Vec<f64> {
    let mut out = vec![0.0; w[0].len()];
    for (xi, row) in x.iter().zip(w) {
        for (o, wv) in out.iter_mut().zip(row) {
            *o += xi * wv;
        }
    }
    out
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// DGL's LSTM reducer for one node: `degree` steps from zero states, neighbours in edge
/// order; the last hidden state (zeros without neighbours).
fn lstm_reference(block: &Block, x: &Mat, w_ih: &Mat, w_hh: &Mat, bias: &[f64]) -> Mat {
    let f = w_hh.len();
    (0..block.num_dst)
        .map(|d| {
            let (mut h, mut c) = (vec![0.0; f], vec![0.0; f]);
            for &u in block.neighbors(d) {
                let zx = vec_mat(&x[u as usize], w_ih);
                let zh = vec_mat(&h, w_hh);
                for j in 0..f {
                    let z = |q: usize| zx[q * f + j] + zh[q * f + j] + bias[q * f + j];
                    let (i, fg, g, o) = (sigmoid(z(0)), sigmoid(z(1)), z(2).tanh(), sigmoid(z(3)));
                    c[j] = fg * c[j] + i * g;
                    h[j] = o * c[j].tanh();
                }
            }
            h
        })
        .collect()
}

/// PyG's GATConv for one layer, per dst node and head, self-loops added where missing.
#[allow(clippy::too_many_arguments)]
fn gat_reference(
    block: &Block,
    x: &Mat,
    w: &Mat,
    att_src: &[f64],
    att_dst: &[f64],
    bias: &[f64],
    heads: usize,
    self_loops: bool,
) -> Mat {
    let z: Mat = x.iter().map(|r| vec_mat(r, w)).collect();
    let d_head = w[0].len() / heads;
    let dot = |v: &[f64], a: &[f64], k: usize| -> f64 {
        (0..d_head)
            .map(|j| v[k * d_head + j] * a[k * d_head + j])
            .sum()
    };
    (0..block.num_dst)
        .map(|d| {
            let mut nbrs: Vec<usize> = block.neighbors(d).iter().map(|&u| u as usize).collect();
            if self_loops && !nbrs.contains(&d) {
                nbrs.push(d);
            }
            let mut out = bias.to_vec();
            for k in 0..heads {
                let scores: Vec<f64> = nbrs
                    .iter()
                    .map(|&u| {
                        let s = dot(&z[u], att_src, k) + dot(&z[d], att_dst, k);
                        if s > 0.0 {
                            s
                        } else {
                            NEGATIVE_SLOPE * s
                        }
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for (&u, s) in nbrs.iter().zip(&scores) {
                    let a = (s - m).exp() / sum;
                    for j in 0..d_head {
                        out[k * d_head + j] += a * z[u][k * d_head + j];
                    }
                }
            }
            out
        })
        .collect()
}

fn assert_close(what: &str, want: &Mat, got: &Mat, tol: f64) {
    assert_eq!(want.len(), got.len(), "{what}: row counts differ");
    for (r, (a, b)) in want.iter().zip(got).enumerate() {
        assert_eq!(a.len(), b.len(), "{what}: row {r} widths differ");
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + x.abs()),
                "{what}: row {r} col {j}: reference {x} vs {y}"
            );
        }
    }
}

/// The zoo: (name, block).
fn zoo() -> Vec<(String, Arc<Block>)> {
    let mut v: Vec<(String, Block)> = vec![
        // No edges at all.
        (
            "empty".into(),
            Block::new(3, vec![0, 0, 0], vec![], vec![4, 5, 6]).unwrap(),
        ),
        // dst 1 has no in-edges; dst 0 a self-loop; dst 2 a duplicate edge and a self-loop.
        (
            "awkward".into(),
            Block::new(
                6,
                vec![0, 3, 3, 8],
                vec![1, 3, 0, 4, 4, 2, 1, 3],
                vec![10, 11, 12, 13, 14, 15],
            )
            .unwrap(),
        ),
        // Only duplicates: dst 0 <- {2, 2, 2}, dst 1 <- {0, 0}.
        (
            "duplicates".into(),
            Block::new(3, vec![0, 3, 5], vec![2, 2, 2, 0, 0], vec![0, 1, 2]).unwrap(),
        ),
    ];
    // A star: dst 0 hears from 150 sources, dst 1..4 from one each.
    let n = 155;
    let mut indptr = vec![0u32, 150];
    let mut indices: Vec<u32> = (5..155).collect();
    for d in 1..5u32 {
        indices.push(5 + d);
        indptr.push(indices.len() as u32);
    }
    v.push((
        "star".into(),
        Block::new(n, indptr, indices, (0..n as u32).collect()).unwrap(),
    ));
    // Bipartite: 2 dst nodes, 40 sources they do not contain as edges to themselves.
    let indices: Vec<u32> = (2..40).chain(3..20).collect();
    v.push((
        "bipartite".into(),
        Block::new(40, vec![0, 38, 55], indices, (100..140).collect()).unwrap(),
    ));
    // Power-law blocks sampled from the synthetic Cora-like graph.
    let data = SynthSpec::parse("cora-like").unwrap().generate().unwrap();
    let seeds: Vec<u32> = data.split.train.iter().copied().take(24).collect();
    for (l, b) in sample_blocks(&data.graph, &seeds, &[4, 8], 3)
        .unwrap()
        .into_iter()
        .enumerate()
    {
        v.push((format!("power-law layer {l}"), b));
    }
    v.into_iter().map(|(n, b)| (n, Arc::new(b))).collect()
}

#[test]
fn lstm_aggregator_matches_the_reference_on_the_zoo() {
    let f = 3;
    let mut rng = Rng::new(1);
    let (w_ih, w_hh) = (rand_mat(f, 4 * f, &mut rng), rand_mat(f, 4 * f, &mut rng));
    let bias = rand_mat(1, 4 * f, &mut rng).remove(0);
    let params = LstmParams {
        weight_ih: tensor(&w_ih),
        weight_hh: tensor(&w_hh),
        bias: Tensor::from_f64(bias.clone(), &[4 * f]).unwrap(),
    };
    for (name, block) in zoo() {
        let x = rand_mat(block.num_src, f, &mut rng);
        let want = lstm_reference(&block, &x, &w_ih, &w_hh, &bias);
        for split in [None, Some(1), Some(7)] {
            let got = params.aggregate(&block, &tensor(&x), split).unwrap();
            assert_close(
                &format!("lstm {name} split {split:?}"),
                &want,
                &rows_of(&got),
                1e-12,
            );
        }
    }
}

#[test]
fn gat_layer_matches_the_reference_on_the_zoo() {
    let (fin, heads, d) = (4, 3, 2);
    let mut rng = Rng::new(2);
    let w = rand_mat(fin, heads * d, &mut rng);
    let (att_src, att_dst, bias) = (
        rand_mat(1, heads * d, &mut rng).remove(0),
        rand_mat(1, heads * d, &mut rng).remove(0),
        rand_mat(1, heads * d, &mut rng).remove(0),
    );
    let vec_t = |v: &[f64]| Tensor::from_f64(v.to_vec(), &[v.len()]).unwrap();
    for self_loops in [true, false] {
        let layer = GatLayer {
            fc: Linear {
                weight: tensor(&w),
                bias: None,
            },
            attn_src: vec_t(&att_src),
            attn_dst: vec_t(&att_dst),
            bias: vec_t(&bias),
            heads,
            self_loops,
        };
        for (name, block) in zoo() {
            let x = rand_mat(block.num_src, fin, &mut rng);
            let want = gat_reference(&block, &x, &w, &att_src, &att_dst, &bias, heads, self_loops);
            let got = layer.forward(&block, &tensor(&x), None).unwrap();
            assert_close(
                &format!("gat {name} self-loops {self_loops}"),
                &want,
                &rows_of(&got),
                1e-12,
            );
        }
    }
}

/// A parameter of a model as an f64 matrix (`[n]` vectors become one row).
fn param(model: &Gnn, name: &str) -> Mat {
    let (_, t) = model
        .named_parameters("")
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no parameter {name}"));
    let v = t.to_vec_f64().unwrap();
    match t.shape() {
        [_] => vec![v],
        [_, c] => v.chunks(*c).map(<[f64]>::to_vec).collect(),
        s => panic!("{name}: shape {s:?}"),
    }
}

fn config(kind: ModelKind, aggr: Aggregator, in_dim: usize, out_dim: usize) -> ModelConfig {
    let settings: Arc<dyn KindConfig> = match kind {
        ModelKind::Sage => Arc::new(SageConfig { aggr }),
        ModelKind::Gcn => Arc::new(GcnConfig),
        ModelKind::Gat => Arc::new(GatConfig::default()),
    };
    let shape = ModelShape {
        in_dim,
        hidden: 8,
        out_dim,
        layers: 1,
        dropout: 0.0,
    };
    ModelConfig::with_settings(shape, settings)
}

#[test]
fn single_layer_models_match_the_reference() {
    let (fin, classes) = (5, 3);
    let mut rng = Rng::new(3);
    let sage = Gnn::new(
        config(ModelKind::Sage, Aggregator::Lstm, fin, classes),
        None,
        7,
        Device::Cpu,
    )
    .unwrap();
    let gat = Gnn::new(
        config(ModelKind::Gat, Aggregator::Mean, fin, classes),
        None,
        8,
        Device::Cpu,
    )
    .unwrap();
    let names: Vec<String> = sage.named_parameters("").into_iter().map(|p| p.0).collect();
    assert!(
        names.contains(&"layers.0.lstm.weight_hh".to_string()),
        "{names:?}"
    );
    for (name, block) in zoo() {
        let x = rand_mat(block.num_src, fin, &mut rng);
        let xt = Tensor::from_f32(
            x.concat().iter().map(|&v| v as f32).collect(),
            &[block.num_src, fin],
            Device::Cpu,
        )
        .unwrap();
        // f32 inputs as the model sees them.
        let x: Mat = rows_of(&xt);
        let blocks = [block.clone()];

        let agg = lstm_reference(
            &block,
            &x,
            &param(&sage, "layers.0.lstm.weight_ih"),
            &param(&sage, "layers.0.lstm.weight_hh"),
            &param(&sage, "layers.0.lstm.bias")[0],
        );
        let (w_self, w_neigh) = (
            param(&sage, "layers.0.fc_self.weight"),
            param(&sage, "layers.0.fc_neigh.weight"),
        );
        let b = &param(&sage, "layers.0.bias")[0];
        let want: Mat = (0..block.num_dst)
            .map(|d| {
                let (s, n) = (vec_mat(&x[d], &w_self), vec_mat(&agg[d], &w_neigh));
                (0..classes).map(|j| s[j] + n[j] + b[j]).collect()
            })
            .collect();
        let got = sage.forward(&blocks, &xt, &Forward::default()).unwrap();
        assert_close(
            &format!("sage-lstm model {name}"),
            &want,
            &rows_of(&got),
            1e-4,
        );

        let want = gat_reference(
            &block,
            &x,
            &param(&gat, "layers.0.fc.weight"),
            &param(&gat, "layers.0.attn_src")[0],
            &param(&gat, "layers.0.attn_dst")[0],
            &param(&gat, "layers.0.bias")[0],
            1,
            true,
        );
        let got = gat.forward(&blocks, &xt, &Forward::default()).unwrap();
        assert_close(&format!("gat model {name}"), &want, &rows_of(&got), 1e-4);
    }
}

#[test]
fn attention_dropout_is_the_same_in_a_micro_batch() {
    // A two-layer GAT in training mode: the logits of a subset of seeds computed from their
    // own sample equal the full batch's rows, because every mask is keyed by global ids.
    let data = SynthSpec::parse("cora-like").unwrap().generate().unwrap();
    let cfg = ModelConfig::new(GatConfig {
        attn_dropout: 0.5,
        ..GatConfig::default()
    })
    .in_dim(data.feat_dim)
    .hidden(8)
    .out_dim(data.num_classes)
    .dropout(0.5);
    let model = Gnn::new(cfg, None, 4, Device::Cpu).unwrap();
    let seeds: Vec<u32> = data.split.train.iter().copied().take(12).collect();
    let f = Forward {
        training: true,
        seed: 9,
        epoch: 2,
    };
    let run = |seeds: &[u32]| {
        // Full neighbourhoods: the micro-batch keeps every in-edge of its dst nodes.
        let blocks: Vec<Arc<Block>> = sample_blocks(&data.graph, seeds, &[-1, -1], 0)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let x = espalier::train::trainer::gather_rows(
            &data.features,
            data.feat_dim,
            &blocks[0].src_nodes,
            Device::Cpu,
        )
        .unwrap();
        rows_of(&model.forward(&blocks, &x, &f).unwrap())
    };
    let full = run(&seeds);
    let part = run(&seeds[5..9]);
    assert_close("micro-batch logits", &full[5..9].to_vec(), &part, 1e-5);
    // And the masks do bite: evaluation mode gives other logits.
    let blocks: Vec<Arc<Block>> = sample_blocks(&data.graph, &seeds, &[-1, -1], 0)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    let x = espalier::train::trainer::gather_rows(
        &data.features,
        data.feat_dim,
        &blocks[0].src_nodes,
        Device::Cpu,
    )
    .unwrap();
    let eval = rows_of(&model.forward(&blocks, &x, &Forward::default()).unwrap());
    assert_ne!(eval, full);
}
